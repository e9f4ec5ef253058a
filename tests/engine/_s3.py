"""What the S3 tests (test_object_storage.py, and test_ray.py's Ray workers on S3) compare: an output read back
from object storage against a local run's."""

import pyarrow.parquet as pq
import pytest

from adherence.data._storage import Remote


def same_scores(got, want):
    assert got.select(["conversation_id", "turn_index", "status"]).equals(
        want.select(["conversation_id", "turn_index", "status"])
    )
    assert got.column("score").to_pylist() == pytest.approx(want.column("score").to_pylist(), abs=1e-6)


def read_remote(uri):
    obj = Remote(uri)
    return pq.read_table(obj.path, filesystem=obj.fs)

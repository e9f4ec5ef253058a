"""What the platform tests (Ray Data: test_platforms.py; Spark: test_spark.py) compare: a platform's rows
against the engine's, by key."""

import os
import shutil
import sys

import pyarrow as pa
import pytest

from adherence.judges import JudgeConfig


def by_key(t: pa.Table) -> dict:
    return {(r["conversation_id"], r["turn_index"]): r for r in t.to_pylist()}


def assert_same_scores(got: pa.Table, ref: pa.Table) -> None:
    a, b = by_key(got), by_key(ref)
    assert a.keys() == b.keys()
    for k, want in b.items():
        assert a[k]["status"] == want["status"] and a[k]["prediction"] == want["prediction"], k
        if want["score"] is None:
            assert a[k]["score"] is None
        else:
            assert a[k]["score"] == pytest.approx(want["score"], abs=1e-6), k


def judge_config(tiny_llama_dir):
    return JudgeConfig(model=str(tiny_llama_dir), backend_options={"device": "cpu", "progress": False})


def spark_session(master: str, name: str, shuffle_partitions: int):
    """A local Spark session whose Python workers run this interpreter (skips without pyspark or Java)."""
    pytest.importorskip("pyspark")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java")
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(master).appName(name).config("spark.ui.enabled", "false")
    return builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions)).getOrCreate()

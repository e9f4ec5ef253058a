import json

import pyarrow.parquet as pq
import pytest

from adherence.bench.engine import write_synthetic_parquet
from adherence.cli.main import main


def test_synthetic_parquet_streams_in_batches(tmp_path):
    path = write_synthetic_parquet(tmp_path / "s.parquet", 2_500, batch=1_000)
    f = pq.ParquetFile(path)
    assert f.metadata.num_rows == 2_500 and f.metadata.num_row_groups == 3
    t = f.read()
    assert t.column("turn_index").to_pylist()[:5] == [0, 1, 2, 3, 0]


@pytest.mark.slow
def test_engine_bench_checks_correctness_then_reports(tmp_path, capsys):
    out = tmp_path / "e.json"
    assert (
        main(
            [
                "bench",
                "engine",
                "--turns",
                "3000",
                "--small",
                "1000",
                "--method",
                "kl",
                "--shard-size",
                "1000",
                "--executors",
                "local",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert res["correctness"]["passed"] and res["correctness"]["max_abs_score_difference_vs_one_pass"] <= 1e-5
    runs = res["runs"]["local"]
    assert runs["n=3000"]["turns"] == 3000 and runs["n=3000"]["shards"] == 3
    assert runs["n=1000"]["peak_rss_mb_driver"] > 0 and "local_rss_growth" in res

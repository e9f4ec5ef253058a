"""A shard worker: loads its models once, scores shards, writes each output atomically."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..role import Resources, RoleConfig, get_method, score_turns

__all__ = ["ShardWorker", "error_rows"]


def error_rows(table: pa.Table, method: str, message: str) -> pa.Table:
    """Every row of a shard that failed as a whole, kept with ``status=error``."""
    n = table.num_rows
    return (table.append_column("method", pa.array([method] * n, pa.string()))
            .append_column("score", pa.nulls(n, pa.float64()))
            .append_column("prediction", pa.nulls(n, pa.int8()))
            .append_column("status", pa.array(["error"] * n, pa.string()))
            .append_column("error", pa.array([message] * n, pa.string())))


class ShardWorker:
    """Scores shards with one set of loaded models (one per process or Ray actor)."""

    def __init__(self, config: RoleConfig) -> None:
        self.config = config
        self.resources = Resources(config)
        # Models load once per worker; configuration errors surface here and stop the job.
        get_method(config.method).prepare(config, self.resources)
        self.pid = os.getpid()

    def ping(self) -> int:
        return self.pid

    def run(self, task: dict) -> dict:
        start = time.perf_counter()
        with pa.ipc.open_stream(task["input"]) as reader:
            table = reader.read_all()
        try:
            scores = score_turns(table, self.config.method, config=self.config, resources=self.resources)
        except Exception as exc:  # noqa: BLE001 - a failing shard must not take the job down or lose rows
            scores = error_rows(table, self.config.method, f"shard {task['shard_id']} failed: {type(exc).__name__}: {exc}")
        out = Path(task["output"])
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        pq.write_table(scores, tmp)
        os.replace(tmp, out)
        status = scores.column("status").to_pylist()
        return {
            "shard_id": task["shard_id"], "rows": table.num_rows, "ok": status.count("ok"),
            "error": status.count("error"), "unscored": status.count("unscored"),
            "seconds": time.perf_counter() - start, "pid": self.pid, "models": self.resources.describe(),
        }

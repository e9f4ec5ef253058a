"""A shard worker: loads its models once, scores shards, writes each output atomically."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..role import Resources, RoleConfig, get_method, score_turns
from ._plan import content_digest, temp_path

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
        """Score one shard into its Parquet output (written atomically) and return its summary.

        A shard whose scoring raised is kept as ``status=error`` rows and flagged ``failed``,
        so the job exits non-zero and ``--resume`` scores it again. The summary carries the
        output's content digest, which a resumed job checks before trusting the file.
        """
        start = time.perf_counter()
        try:
            with pa.ipc.open_stream(task["input"]) as reader:
                table = reader.read_all()
        except (OSError, pa.ArrowInvalid) as exc:
            raise RuntimeError(f"shard {task['shard_id']}: cannot read its input {task['input']}: {exc}") from None
        failed = None
        before = self.resources.usage()
        try:
            scores = score_turns(table, self.config.method, config=self.config, resources=self.resources)
        except Exception as exc:  # noqa: BLE001 - a failing shard must not take the job down or lose rows
            failed = f"shard {task['shard_id']} failed: {type(exc).__name__}: {exc}"
            scores = error_rows(table, self.config.method, failed)
        out = Path(task["output"])
        tmp = temp_path(out)
        try:
            pq.write_table(scores, tmp)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                tmp.unlink()
        status = scores.column("status").to_pylist()
        return {
            "shard_id": task["shard_id"], "rows": table.num_rows, "ok": status.count("ok"),
            "error": status.count("error"), "unscored": status.count("unscored"), "failed": failed,
            "digest": content_digest(out), "seconds": time.perf_counter() - start, "pid": self.pid,
            "models": self.resources.describe(),
            "judge_usage": {k: v - before.get(k, 0) for k, v in self.resources.usage().items()},
        }

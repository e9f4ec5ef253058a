"""The scheduler: a job's shards to its executor (local or Ray), the finished ones of an earlier run kept, each
result fetched, checked and recorded as it arrives, progress on one bar."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Optional

from .._atomic import write_json_atomic
from .._errors import EngineError
from ..data import Remote, write_json
from ..role import RoleConfig
from ._executors import Executor, LocalExecutor, RayExecutor, check_reachable, get_executor
from ._messages import ShardResult, ShardTask
from ._options import EngineOptions
from ._plan import content_digest
from ._progress import JobProgress
from ._sink import say

__all__ = ["Scheduler"]


class Scheduler:
    """Runs a plan's shards on the executor the options name; owns that executor from its start to ``close``."""

    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.executor: Optional[Executor] = None

    @property
    def stats(self) -> Optional[dict]:
        """The executor's counts (retried shards, lost workers, each worker), when it keeps them."""
        return getattr(self.executor, "stats", None) or None

    def start_early(self, config: RoleConfig, work: Path, remote_work: Optional[Remote], load: bool) -> int:
        """With Ray: the workers, checked able to reach the work directory, start (and, with ``load``, load their
        models) while the input is planned. Returns how many there are (1 in process)."""
        if self.options.executor != "ray":
            return 1
        executor = self.executor = get_executor(self.options)
        workers = 1
        if isinstance(executor, RayExecutor):
            check_reachable(executor.ray, str(remote_work) if remote_work else work)
            workers = executor.num_workers
        if load:
            executor.start(config)
        return workers

    def run(self, plan, work: Path, remote_work: Optional[Remote], config: RoleConfig) -> dict[int, ShardResult]:
        """Every shard of ``plan`` scored (or kept from an earlier run): shard id -> its result."""
        out_dir = work / "out"
        out_dir.mkdir(exist_ok=True)
        for stale in out_dir.glob(".*.tmp"):
            stale.unlink()  # leftovers of a killed run
        rw = remote_work
        every = self.options.checkpoint_every
        checkpoints = (rw if rw is not None else work) / "checkpoints"
        if every > 0 and isinstance(checkpoints, Path):
            checkpoints.mkdir(exist_ok=True)
        results: dict[int, ShardResult] = {}
        tasks: list[ShardTask] = []
        for s in plan.shards:
            output = out_dir / f"shard-{s.shard_id:05d}.parquet"
            earlier = finished(out_dir / f"shard-{s.shard_id:05d}.done.json", output)
            if earlier is not None:
                results[s.shard_id] = earlier
                continue
            where = str(checkpoints) if every > 0 else None
            if rw is not None:  # the workers read and write on object storage; this run's shard goes up first
                (rw / "shards" / Path(s.path).name).upload(Path(s.path))
                tasks.append(
                    ShardTask(
                        s.shard_id, str(rw / "shards" / Path(s.path).name), str(rw / "out" / output.name), where, every
                    )  # fmt: skip
                )
            else:
                tasks.append(ShardTask(s.shard_id, s.path, str(output), where, every))
        if tasks and self.executor is None:
            self.executor = get_executor(self.options)
        show = self.options.progress
        if tasks and isinstance(self.executor, LocalExecutor) and show:
            # Models load before the job's progress starts, on a line of their own.
            t0 = time.perf_counter()
            say(f"loading models ({config.method}) ...")
            self.executor.start(config)
            say(f"models ready in {time.perf_counter() - t0:.1f} s")
        progress = JobProgress(
            f"scoring ({config.method})",
            total=plan.total_rows,
            shards=len(plan.shards),
            reused_rows=sum(r.rows for r in results.values()),
            reused_shards=len(results),
            enabled=show,
            every=self.options.progress_every,
        )

        def on_result(res: ShardResult) -> None:
            name = f"shard-{res.shard_id:05d}"
            if rw is not None:
                # Fetched and checked against the digest the worker computed before it counts as done.
                (rw / "out" / f"{name}.parquet").download(out_dir / f"{name}.parquet")
                if content_digest(out_dir / f"{name}.parquet") != res.digest:
                    raise EngineError(
                        f"shard output {rw / 'out' / name}.parquet changed after its worker wrote it; "
                        "nothing was published (rerun with --resume)"
                    )
                write_json(rw / "out" / f"{name}.done.json", res.to_json())
            write_json_atomic(out_dir / f"{name}.done.json", res.to_json())
            results[res.shard_id] = res
            progress.shard_done(res.shard_id, res.rows, res.reused)

        try:
            if tasks:
                assert self.executor is not None
                self.executor.run(tasks, config, on_result, progress.within)
        finally:
            progress.close()
        return results

    def close(self) -> None:
        if self.executor is not None:
            self.executor.close()
            self.executor = None


def finished(done: Path, output: Path) -> Optional[ShardResult]:
    """A shard's earlier result, if its output is complete, not failed, and hashes to what was recorded."""
    if not (done.exists() and output.exists()):
        return None
    try:
        res = ShardResult.from_json(json.loads(done.read_text()))
    except ValueError:
        return None
    if res is None or res.failed or content_digest(output) != res.digest:
        return None
    return dataclasses.replace(res, resumed=True)

"""A shard worker: loads its models once, scores shards, writes each output atomically."""

from __future__ import annotations

import os
import socket
import threading
import time

import pyarrow as pa

from .._errors import JobError
from ..data._storage import digest, read_arrow_stream, write_parquet
from ..role import Resources, RoleConfig, get_method, score_turns
from ._messages import ShardResult, ShardTask

__all__ = ["ShardWorker", "WorkerSetupError", "error_rows", "verify_gpu", "verify_replica_gpus"]


class WorkerSetupError(JobError):
    """A worker could not get ready to score (its models did not load, or CUDA cannot see the GPU it was
    given): the same on every try, so the job stops at once instead of retrying."""


def verify_gpu(gpu_ids=()) -> dict:
    """Prove that CUDA sees the GPU this worker was given (a context is made on it) before any shard;
    ``{"device", "gpu", "gpu_ids"}`` for the run metadata, or ``WorkerSetupError`` in one line."""
    import torch

    where = f"node {socket.gethostname()}, pid {os.getpid()}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise WorkerSetupError(
            f"worker on {where} was given GPU {list(gpu_ids)} but CUDA sees none (torch {torch.__version__}, "
            f"CUDA_VISIBLE_DEVICES={visible!r}); no shard was scored there"
        )
    try:
        torch.zeros(1, device="cuda")
    except RuntimeError as exc:
        raise WorkerSetupError(
            f"worker on {where}: CUDA cannot use GPU {list(gpu_ids)}: {exc}".splitlines()[0]
        ) from None
    return {"device": "cuda", "gpu": torch.cuda.get_device_name(0), "gpu_ids": list(gpu_ids)}


def _probe_gpu() -> dict:
    import ray

    return verify_gpu(ray.get_gpu_ids())


def verify_replica_gpus(n: int) -> dict:
    """A tensor-parallel replica's GPUs: one zero-CPU probe per GPU bundle of this actor's placement group
    (where vLLM's own workers will run) proves CUDA sees each; one ``WorkerSetupError`` line otherwise."""
    import ray
    from ray.exceptions import RayTaskError
    from ray.util import get_current_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    where = f"node {socket.gethostname()}, pid {os.getpid()}"
    pg = get_current_placement_group()
    if pg is None:
        raise WorkerSetupError(f"tensor-parallel worker on {where} is not in a placement group")
    probe = ray.remote(num_cpus=0, num_gpus=1, max_retries=0)(_probe_gpu)
    refs = [
        probe.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)).remote()
        for i in range(n)
    ]
    found = []
    for i, ref in enumerate(refs):
        try:
            found.append(ray.get(ref))
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None) or exc
            raise WorkerSetupError(
                f"tensor-parallel replica (placement group {pg.id.hex()[:12]}, GPU bundle {i} of "
                f"{n}): {str(cause).splitlines()[0]}"
            ) from None
    return {
        "device": "cuda",
        "gpu": found[0]["gpu"],
        "gpu_ids": [g for f in found for g in f["gpu_ids"]],
        "tensor_parallel": n,
        "placement_group": pg.id.hex(),
    }


def error_rows(table: pa.Table, method: str, message: str) -> pa.Table:
    """Every row of a shard that failed as a whole, kept with ``status=error``."""
    n = table.num_rows
    return (
        table.append_column("method", pa.array([method] * n, pa.string()))
        .append_column("score", pa.nulls(n, pa.float64()))
        .append_column("prediction", pa.nulls(n, pa.int8()))
        .append_column("status", pa.array(["error"] * n, pa.string()))
        .append_column("error", pa.array([message] * n, pa.string()))
    )


class ShardWorker:
    """Scores shards with one set of loaded models (one per process or Ray actor)."""

    def __init__(
        self,
        config: RoleConfig,
        *,
        prepare: bool = True,
        expect_gpu: bool = False,
        remote: bool = False,
        tensor_parallel: int = 1,
    ) -> None:
        self.config = config
        self.remote = remote  # a Ray actor: setup errors travel to the driver as one WorkerSetupError line
        self.resources = Resources(config)
        self.pid = os.getpid()
        self.expect_gpu = expect_gpu
        self.tensor_parallel = tensor_parallel  # > 1: this actor drives a replica over its placement group's GPUs
        self.info: dict = {"host": socket.gethostname(), "pid": self.pid}
        self._lock = threading.Lock()  # a Ray actor answers pings from a second thread while it scores
        self._ready = False
        if prepare:
            self.prepare()

    def prepare(self) -> dict:
        """Load the models once (and, for a GPU worker, prove CUDA sees its GPU); this worker's description.

        Raises ``WorkerSetupError`` (never retried) when it cannot get ready."""
        with self._lock:
            if not self._ready:
                if self.expect_gpu and self.tensor_parallel > 1:
                    self.info.update(verify_replica_gpus(self.tensor_parallel))
                elif self.expect_gpu:
                    import ray

                    self.info.update(verify_gpu(ray.get_gpu_ids()))
                else:
                    self.info["device"] = str(self.config.device or "auto")
                try:
                    # Models load once per worker; configuration errors surface here and stop the job.
                    get_method(self.config.method).prepare(self.config, self.resources)
                except Exception as exc:  # noqa: BLE001 - one line to the driver, not a retried crash
                    if not self.remote:
                        raise
                    raise WorkerSetupError(
                        f"worker on {self.info['host']} could not load its models: "
                        f"{type(exc).__name__}: {exc}".splitlines()[0]
                    ) from None
                self._ready = True
            return dict(self.info)

    def ping(self) -> int:
        return self.pid

    def run(self, task: ShardTask) -> ShardResult:
        """Score one shard into its Parquet output (written atomically) and return its summary.

        A shard whose scoring raised is kept as ``status=error`` rows and flagged ``failed``,
        so the job exits non-zero and ``--resume`` scores it again. The summary carries the
        output's content digest, which a resumed job checks before trusting the file.
        """
        self.prepare()
        with self._lock:
            return self._run(task)

    def _run(self, task: ShardTask) -> ShardResult:
        start = time.perf_counter()
        try:
            table = read_arrow_stream(task.input)
        except (OSError, pa.ArrowInvalid) as exc:
            raise JobError(f"shard {task.shard_id}: cannot read its input {task.input}: {exc}") from None
        failed = None
        before = self.resources.usage()
        try:
            scores = score_turns(table, self.config.method, config=self.config, resources=self.resources)
        except JobError:
            raise  # the job cannot go on (a judge fleet with nothing up): stop, keep the finished shards
        except Exception as exc:  # noqa: BLE001 - a failing shard must not take the job down or lose rows
            failed = f"shard {task.shard_id} failed: {type(exc).__name__}: {exc}"
            scores = error_rows(table, self.config.method, failed)
        write_parquet(scores, task.output)  # atomic: a temporary renamed locally, one upload on object storage
        status = scores.column("status").to_pylist()
        return ShardResult(
            shard_id=task.shard_id,
            rows=table.num_rows,
            ok=status.count("ok"),
            error=status.count("error"),
            unscored=status.count("unscored"),
            failed=failed,
            digest=digest(task.output),
            seconds=time.perf_counter() - start,
            pid=self.pid,
            worker=dict(self.info),
            models=self.resources.describe(),
            judge_usage={k: v - before.get(k, 0) for k, v in self.resources.usage().items()},
        )

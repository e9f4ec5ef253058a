"""A shard worker: loads its models once, scores shards, writes each output atomically."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._errors import JobError
from ..data import digest, exists, read_arrow_stream, read_json, read_parquet, remove, write_json, write_parquet
from ..models import quiet_loading
from ..role import Resources, RoleConfig, get_method, score_turns
from ._messages import CheckpointRecord, ShardProgress, ShardResult, ShardTask

__all__ = ["Checkpoints", "ShardWorker", "WorkerSetupError", "error_rows", "verify_gpu", "verify_replica_gpus"]

#: rows of a shard's first checkpoint, before its scoring rate is known
FIRST_CHECKPOINT_ROWS = 64
#: Seconds of scoring per part of a shard between progress reports (checkpoints are every checkpoint_every)
PART_SECONDS = 10.0


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


class Checkpoints:
    """A shard's scored conversations, committed as the worker goes: ``<shard>-<k>.parquet`` holds the scores
    of conversations ``[start, stop)`` (in order of first appearance in the shard) and ``<shard>-<k>.json``,
    written after it, its row count, content digest and the digest of the shard input it came from.

    ``load`` trusts the unbroken run of checkpoints from the first whose records, digests and input match;
    anything after a gap is scored again. On a local disk each file is a temporary renamed into place; on
    object storage one upload.
    """

    def __init__(self, folder: str, shard_id: int, input_digest: str) -> None:
        sep = "/" if "://" in folder else os.sep
        self.prefix = f"{folder.rstrip(sep)}{sep}shard-{shard_id:05d}-"
        self.input_digest = input_digest
        self.count = 0

    def _names(self, k: int) -> tuple[str, str]:
        return f"{self.prefix}{k:05d}.parquet", f"{self.prefix}{k:05d}.json"

    def load(self) -> tuple[list[pa.Table], int]:
        """The trusted checkpoints' tables and the number of conversations they cover."""
        tables: list[pa.Table] = []
        covered = 0
        k = 0
        while True:
            data, record = self._names(k)
            if not (exists(record) and exists(data)):
                break
            try:
                rec = CheckpointRecord.from_json(read_json(record))
                ok = (
                    rec is not None
                    and rec.input == self.input_digest
                    and rec.start == covered
                    and rec.stop > covered
                    and digest(data) == rec.digest
                )
                table = read_parquet(data) if ok else None
            except (OSError, ValueError, pa.ArrowInvalid):
                table = None
            if table is None or rec is None or table.num_rows != rec.rows:
                break
            tables.append(table)
            covered = rec.stop
            k += 1
        self.count = k
        return tables, covered

    def save(self, table: pa.Table, start: int, stop: int) -> None:
        data, record = self._names(self.count)
        write_parquet(table, data)
        rec = CheckpointRecord(self.input_digest, start, stop, table.num_rows, digest(data), time.time())
        write_json(record, rec.to_json())
        self.count += 1

    def remove(self) -> None:
        """After the shard's output is written: its checkpoints are no longer needed."""
        for k in range(self.count):
            for name in self._names(k)[::-1]:  # the record first: a data file without one is never trusted
                remove(name)
        self.count = 0


def _conversation_order(table: pa.Table) -> tuple[np.ndarray, int]:
    """Each row's conversation as its rank of first appearance in the shard, and how many there are."""
    if table.num_rows == 0 or "conversation_id" not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.int64), int(table.num_rows > 0)
    codes = pc.dictionary_encode(table.column("conversation_id")).combine_chunks()
    idx = codes.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    # null ids are one group of their own (their rows are errors, and never split a checkpoint)
    idx = np.where(idx < 0, len(codes.dictionary), idx)
    _, first, inverse = np.unique(idx, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse], len(first)


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
        #: (shard id, rows done, rows of them reused from checkpoints) of the shard being scored; read by pings
        #: from another thread
        self.progress: Optional[ShardProgress] = None
        #: called in this process with the same after each checkpoint (the local executor's progress)
        self.on_progress: Optional[Callable[[ShardProgress], None]] = None
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
                    # Models load once per worker; configuration errors surface here and stop the job. The job's
                    # own line says models are loading: transformers' per-tensor bar would overwrite the job's.
                    with quiet_loading():
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

    def ping(self) -> tuple[int, Optional[ShardProgress]]:
        """This worker's pid and its progress within the shard it holds (answered while it scores)."""
        return self.pid, self.progress

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
        start, cpu = time.perf_counter(), time.thread_time()
        phases = {"input_s": 0.0, "score_s": 0.0, "write_s": 0.0}
        try:
            table = read_arrow_stream(task.input)
            input_digest = digest(task.input) if task.checkpoints else ""
        except (OSError, pa.ArrowInvalid) as exc:
            raise JobError(f"shard {task.shard_id}: cannot read its input {task.input}: {exc}") from None
        phases["input_s"] = time.thread_time() - cpu
        conv, n_conv = _conversation_order(table)
        # rows of each conversation rank, in the shard's order
        by_conv = np.argsort(conv, kind="stable")
        bounds = np.searchsorted(conv[by_conv], np.arange(n_conv + 1))
        checkpoints = Checkpoints(task.checkpoints, task.shard_id, input_digest) if task.checkpoints else None
        pieces, covered = checkpoints.load() if checkpoints is not None else ([], 0)
        reused = done = int(bounds[covered])
        self._report(task.shard_id, done, reused)
        failed = None
        before = self.resources.usage()
        checkpointing = checkpoints is not None and task.checkpoint_every > 0
        rows_wanted = FIRST_CHECKPOINT_ROWS if checkpointing else table.num_rows
        # parts of about PART_SECONDS each, so progress moves between checkpoints; a checkpoint every
        # checkpoint_every seconds holds the parts scored since the one before (the first part is one at once)
        part_seconds = min(task.checkpoint_every, PART_SECONDS) if checkpointing else task.checkpoint_every
        pending: list = []
        saved_to, saved_at = covered, float("-inf")

        def save(stop: int) -> None:
            nonlocal pending, saved_to, saved_at
            if checkpoints is None or not pending:
                return
            part = pending[0] if len(pending) == 1 else pa.concat_tables(pending, promote_options="permissive")
            checkpoints.save(part, saved_to, stop)
            pending, saved_to, saved_at = [], stop, time.perf_counter()

        while covered < n_conv:
            # whole conversations, at least one, about rows_wanted rows
            stop = int(np.searchsorted(bounds, bounds[covered] + max(1, rows_wanted), side="left"))
            stop = min(n_conv, max(covered + 1, stop))
            rows = by_conv[bounds[covered] : bounds[stop]]
            part = table if stop - covered == n_conv else table.take(pa.array(np.sort(rows)))
            t0, cpu = time.perf_counter(), time.thread_time()
            try:
                scores = score_turns(part, self.config.method, config=self.config, resources=self.resources)
            except JobError:
                raise  # the job cannot go on (a judge fleet with nothing up): stop, keep what is committed
            except Exception as exc:  # noqa: BLE001 - a failing shard must not take the job down or lose rows
                failed = f"shard {task.shard_id} failed: {type(exc).__name__}: {exc}"
                save(covered)  # what was scored before the failure is kept for --resume
                rest = by_conv[bounds[covered] :]
                pieces.append(error_rows(table.take(pa.array(np.sort(rest))), self.config.method, failed))
                break
            phases["score_s"] += time.thread_time() - cpu
            pieces.append(scores)
            pending.append(scores)
            if stop < n_conv and time.perf_counter() - saved_at >= task.checkpoint_every:
                save(stop)
            seconds = max(time.perf_counter() - t0, 1e-6)
            # the next part after about part_seconds at the rate just seen (at most 4x larger)
            rows_wanted = int(min(4 * len(rows), len(rows) / seconds * part_seconds)) or 1
            covered = stop
            done = int(bounds[covered])
            self._report(task.shard_id, done, reused)
        scores = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces, promote_options="permissive")
        if len(pieces) > 1 and "_row" in scores.column_names:
            scores = scores.take(pc.sort_indices(scores, [("_row", "ascending")]))  # the shard's own row order
        cpu = time.thread_time()
        write_parquet(scores, task.output)  # atomic: a temporary renamed locally, one upload on object storage
        phases["write_s"] = time.thread_time() - cpu
        if checkpoints is not None and failed is None:
            checkpoints.remove()
        self.progress = None
        status = scores.column("status").to_pylist()
        return ShardResult(
            shard_id=task.shard_id,
            rows=table.num_rows,
            ok=status.count("ok"),
            error=status.count("error"),
            unscored=status.count("unscored"),
            skipped=status.count("skipped"),
            failed=failed,
            digest=digest(task.output),
            seconds=time.perf_counter() - start,
            pid=self.pid,
            worker=dict(self.info),
            models=self.resources.describe(),
            judge_usage={k: v - before.get(k, 0) for k, v in self.resources.usage().items()},
            phases=phases,
            reused=reused,
        )

    def _report(self, shard_id: int, rows: int, reused: int) -> None:
        self.progress = ShardProgress(shard_id, rows, reused)
        if self.on_progress is not None:
            self.on_progress(self.progress)

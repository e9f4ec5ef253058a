"""Executors: run shard tasks in-process (``local``) or on Ray actors that Ray places and restarts (``ray``)."""

from __future__ import annotations

import collections
import os
import time
import uuid
import warnings
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Optional, Union

from .._errors import EngineError, OptionError
from .._optional import require
from ..role import RoleConfig, get_method
from ._messages import ShardProgress, ShardResult, ShardTask
from ._options import EXECUTORS, EngineOptions
from ._worker import ShardWorker, WorkerSetupError

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "EngineError", "check_reachable", "get_executor"]


class Executor(ABC):
    name = ""

    def start(self, config: RoleConfig, n_tasks: Optional[int] = None) -> None:
        """Start workers ahead of the tasks (model loading overlaps the job's planning)."""

    @abstractmethod
    def run(
        self,
        tasks: list[ShardTask],
        config: RoleConfig,
        on_result: Callable[[ShardResult], None],
        on_progress: Optional[Callable[[ShardProgress], None]] = None,
    ) -> None:
        """Run every task, calling ``on_result`` with each shard's summary as it finishes and ``on_progress``
        with ``(shard id, rows done, rows reused from checkpoints)`` as a worker gets on within a shard."""

    def close(self) -> None:
        pass


class LocalExecutor(Executor):
    """In-process, one worker, shards in order."""

    name = "local"

    def __init__(self, options: Optional[EngineOptions] = None) -> None:
        self._worker: Optional[ShardWorker] = None

    def start(self, config, n_tasks=None):
        if self._worker is None or self._worker.config != config:
            self._worker = ShardWorker(config)

    def run(self, tasks, config, on_result, on_progress=None):
        self.start(config)
        assert self._worker is not None
        self._worker.on_progress = on_progress
        try:
            for task in tasks:
                on_result(self._worker.run(task))
        finally:
            self._worker.on_progress = None


class RayExecutor(Executor):
    """Ray actors, each loading its models once, placed and restarted by Ray.

    Each actor declares its resources (``cpus_per_worker``, ``gpus_per_worker``) and holds one shard at
    a time (backpressure). Ray restarts an actor whose process or node died wherever the resources
    exist (``max_restarts=-1``); the shard it held is queued again (at most ``max_retries`` times for
    one shard, then ``EngineError`` naming it). Actors are pinged from a second thread: one that
    has not answered for ``stall_timeout`` seconds (its node is gone and nothing else can host it, or
    it never could be placed) is given up and its shard goes to the others; when no actor is left the
    job fails with one line naming the resources it waited for, its work dir kept for ``--resume``.

    ``num_workers`` defaults to one per ``gpus_per_worker`` GPUs of the cluster (GPU workers) or 1;
    more CPU workers than the cluster's CPUs hold run as fewer, with a warning. A GPU worker proves
    that CUDA sees its GPU before its first shard; a worker that cannot get ready (no CUDA, models
    that do not load) stops the job at once, without retries.
    """

    name = "ray"

    def __init__(
        self,
        options: Optional[EngineOptions] = None,
        *,
        cpus_per_worker: float = 1.0,
        ping_interval: float = 2.0,
        init_kwargs: Optional[dict] = None,
    ) -> None:
        """``options``: the job's (``num_workers``, ``ray_address``, ``gpus_per_worker``, ``tensor_parallel``,
        ``max_retries``, ``stall_timeout``; validated there); the defaults when None."""
        o = options if options is not None else EngineOptions(executor="ray")
        self.ray = require("ray", "ray", "the ray executor")
        tensor_parallel, gpus_per_worker, num_workers = o.tensor_parallel, o.gpus_per_worker, o.num_workers
        if tensor_parallel > 1:
            if gpus_per_worker not in (0, tensor_parallel):
                raise OptionError(
                    f"--judge-tensor-parallel {tensor_parallel} gives each replica {tensor_parallel} GPUs; "
                    f"drop --gpus-per-worker or set it to {tensor_parallel}"
                )
            gpus_per_worker = float(tensor_parallel)
        self.tensor_parallel = tensor_parallel
        self.max_retries, self.stall_timeout, self.ping_interval = o.max_retries, o.stall_timeout, ping_interval
        self.gpus_per_worker, self.cpus_per_worker = gpus_per_worker, cpus_per_worker
        address = o.ray_address
        if not self.ray.is_initialized():
            kwargs = dict(init_kwargs or {})
            if address:
                kwargs["address"] = address
            elif not os.environ.get("RAY_ADDRESS"):
                # A cluster of this machine alone, on loopback -- never a cluster someone else started here
                # (ray.init() with no address would join the latest `ray start` on this machine).
                kwargs.setdefault("address", "local")
                kwargs.setdefault("num_cpus", max(2, int((num_workers or 1) * cpus_per_worker)))
                kwargs.setdefault("_node_ip_address", "127.0.0.1")
            kwargs.setdefault("include_dashboard", False)
            kwargs.setdefault("log_to_driver", False)
            self.ray.init(**kwargs)
        self.num_workers = self._fit(num_workers, self.ray.cluster_resources())
        # Threads: one shard at a time (a lock in the worker), the model loading started ahead, and a ping
        # that answers while either runs.
        # A tensor-parallel replica's actor holds no GPU itself: its placement group's GPU bundles are left to the
        # engine's own workers (vLLM's Ray executor places them there, captured as child tasks).
        self._actor_cls = self.ray.remote(
            num_cpus=cpus_per_worker,
            num_gpus=0 if tensor_parallel > 1 else gpus_per_worker,
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=4,
        )(ShardWorker)
        self.actors: list = []
        self._pgs: list = []
        self._prepares: dict = {}
        self._actor_config: Optional[RoleConfig] = None
        self.stats: dict[str, Any] = {"retried_shards": 0, "workers_lost": 0, "workers": {}}

    def _fit(self, num_workers: Optional[int], total: dict) -> int:
        """How many workers to start on a cluster with ``total`` resources (one line when none fits)."""
        cpus, gpus = float(total.get("CPU", 0)), float(total.get("GPU", 0))
        g, c = self.gpus_per_worker, self.cpus_per_worker
        if g > 0:  # actors that can never be placed would wait forever at 0%
            if num_workers is None:
                num_workers = max(1, int(gpus // g))
            if gpus < g * num_workers:
                raise OptionError(
                    f"{num_workers} Ray worker(s) x {g:g} GPU = {g * num_workers:g} GPUs requested, but "
                    f"the Ray cluster has {gpus:g}; lower --num-workers / --gpus-per-worker "
                    "(0 runs on CPUs)"
                )
        num_workers = num_workers or 1
        if c > 0 and c * num_workers > cpus:
            fit = int(cpus // c)
            if fit < 1:
                raise OptionError(f"a Ray worker needs {c:g} CPU but the Ray cluster has {cpus:g}")
            warnings.warn(
                f"{num_workers} Ray workers x {c:g} CPU do not fit the cluster's {cpus:g} CPUs; "
                f"running {fit} worker(s)",
                stacklevel=2,
            )
            num_workers = fit
        return num_workers

    def _new_actor(self, config):
        if self.tensor_parallel == 1:
            return self._actor_cls.remote(config, prepare=False, expect_gpu=self.gpus_per_worker > 0, remote=True)
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        # One placement group per replica, all its GPUs on one node (tensor parallelism wants NVLink, not the
        # network); Ray reschedules the group, and restarts the actor in it, when its node is lost.
        first = {"GPU": 1.0, **({"CPU": float(self.cpus_per_worker)} if self.cpus_per_worker else {})}
        pg = placement_group([first] + [{"GPU": 1.0}] * (self.tensor_parallel - 1), strategy="STRICT_PACK")
        self._pgs.append(pg)
        strategy = PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=True
        )
        return self._actor_cls.options(scheduling_strategy=strategy).remote(
            config, prepare=False, expect_gpu=True, remote=True, tensor_parallel=self.tensor_parallel
        )

    def start(self, config, n_tasks=None):
        if self.actors and self._actor_config == config:
            return
        self.close()
        n = self.num_workers if n_tasks is None else min(self.num_workers, max(1, n_tasks))
        # A job-wide limit (the judge's --max-qps) is shared out: each of the n workers gets its part.
        worker_config = get_method(config.method).per_worker_config(config, n)
        self.actors = [self._new_actor(worker_config) for _ in range(n)]
        # models load (and GPUs are checked) while the job is planned; run() reads the outcome
        self._prepares = {a.prepare.remote(): a for a in self.actors}
        self._actor_config = config

    def _waiting_for(self) -> str:
        need = f"{self.cpus_per_worker:g} CPU" + (f" + {self.gpus_per_worker:g} GPU" if self.gpus_per_worker else "")
        if self.tensor_parallel > 1:
            need += f" in one placement group of {self.tensor_parallel} GPUs on a single node"
        total, free = self.ray.cluster_resources(), self.ray.available_resources()
        nodes = sum(1 for n in self.ray.nodes() if n.get("Alive"))
        have = ", ".join(f"{free.get(k, 0):g} of {total.get(k, 0):g} {k}" for k in ("CPU", "GPU") if total.get(k))
        return f"each worker needs {need}; the cluster has {have or 'no CPU or GPU'} free on {nodes} live node(s)"

    def run(self, tasks, config, on_result, on_progress=None):
        ray = self.ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

        self.start(config, len(tasks))
        now = time.monotonic()
        seen = {a: now for a in self.actors}  # when each actor last answered
        pings: dict = {}  # ping ref -> actor
        queue = collections.deque((t, 0) for t in tasks)
        idle = list(self.actors)
        suspect: set = set()  # died or restarting: no shard until a ping answers
        pending: dict = {}  # run ref -> (task, actor, attempt)
        last_ping = 0.0
        while queue or pending:
            idle.sort(key=lambda a: seen[a])
            while queue and idle:
                task, attempt = queue.popleft()
                actor = idle.pop()  # the one heard from last
                pending[actor.run.remote(task)] = (task, actor, attempt)
            now = time.monotonic()
            if now - last_ping >= self.ping_interval:
                last_ping = now
                for a in self.actors:
                    if a not in pings.values():
                        pings[a.ping.remote()] = a
            done, _ = ray.wait(
                list(pending) + list(pings) + list(self._prepares), num_returns=1, timeout=self.ping_interval
            )
            for ref in done:
                if ref in self._prepares:
                    actor = self._prepares.pop(ref)
                    try:
                        info = ray.get(ref)
                    except RayActorError:
                        continue  # died while loading: Ray restarts it, its first shard prepares again
                    except RayTaskError as exc:
                        raise EngineError(_setup_error(exc)) from None
                    seen[actor] = time.monotonic()
                    self.stats["workers"][f"{info.get('host')}:{info.get('pid')}"] = info
                    continue
                if ref in pings:
                    actor = pings.pop(ref)
                    try:
                        _, progress = ray.get(ref, timeout=0)
                    except (RayActorError, GetTimeoutError):
                        continue  # dead or restarting: the next ping tells
                    seen[actor] = time.monotonic()
                    if progress is not None and on_progress is not None:
                        on_progress(progress)
                    if actor in suspect:  # back (restarted where there was room): give it shards again
                        suspect.discard(actor)
                        idle.append(actor)
                    continue
                task, actor, attempt = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except RayActorError as exc:  # its process or node died: Ray restarts it where it can
                    # No shard goes to it again until it answers a ping. A worker that died while holding the
                    # shard counts an attempt (a shard that kills every worker must end the job); one that
                    # was restarting and never ran it does not.
                    suspect.add(actor)
                    tried = attempt if isinstance(exc, ActorUnavailableError) else attempt + 1
                    if tried > self.max_retries:
                        raise EngineError(
                            f"{task} failed {tried} times: its worker died ({str(exc).splitlines()[0]})"
                        ) from None
                    self.stats["retried_shards"] += 1
                    queue.appendleft((task, tried))
                    continue
                except RayTaskError as exc:
                    raise EngineError(_setup_error(exc) or f"{task} failed: {_last_line(exc)}") from None
                seen[actor] = time.monotonic()
                self.stats["workers"][f"{result.worker.get('host')}:{result.pid}"] = result.worker
                idle.append(actor)
                on_result(result)
            self._drop_silent(seen, idle, suspect, pending, queue, pings)

    def _drop_silent(self, seen, idle, suspect, pending, queue, pings) -> None:
        """Give up actors not heard from for ``stall_timeout`` s; fail when none is left."""
        now = time.monotonic()
        for actor in [a for a in self.actors if now - seen[a] > self.stall_timeout]:
            self.actors.remove(actor)
            self.stats["workers_lost"] += 1
            suspect.discard(actor)
            if actor in idle:
                idle.remove(actor)
            for ref in [r for r, v in pending.items() if v[1] is actor]:
                task, _, attempt = pending.pop(ref)
                self.stats["retried_shards"] += 1
                queue.appendleft((task, attempt))  # not the shard's fault: no attempt counted
            for ref in [r for r, a in pings.items() if a is actor]:
                pings.pop(ref)
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if not self.actors:
            raise EngineError(
                f"no Ray worker could run for {self.stall_timeout:g} s ({self._waiting_for()}); "
                "the work dir is kept: rerun with --resume when the cluster has room"
            )

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors = []
        self._prepares = {}
        if self._pgs:
            from ray.util import remove_placement_group

            for pg in self._pgs:
                try:
                    remove_placement_group(pg)
                except Exception:  # noqa: BLE001 - already gone with its cluster
                    pass
            self._pgs = []


def _cause(exc: BaseException) -> BaseException:
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _setup_error(exc: BaseException) -> str:
    """The one line of a worker that could not get ready ('' for any other task error)."""
    cause = _cause(exc)
    return str(cause).splitlines()[0] if isinstance(cause, WorkerSetupError) else ""


def _last_line(exc: BaseException) -> str:
    lines = [ln for ln in str(_cause(exc)).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def _probe(path: str, token: str) -> bool:
    from ..data import Remote, is_uri

    try:
        if is_uri(path):  # object storage: this node's credentials and endpoint must reach it too
            return Remote(path).read_bytes().decode("utf-8") == token
        with open(path, encoding="utf-8") as f:
            return f.read() == token
    except (OSError, ValueError):
        return False


def check_reachable(ray, work: Union[str, Path], timeout: float = 60.0) -> None:
    """Prove that every live node of the Ray cluster sees ``work`` (the driver writes a token there and a
    zero-CPU task on each node reads it back) before any work; one line naming the nodes that do not."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ..data import Remote, is_uri

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    token = uuid.uuid4().hex
    remote = is_uri(str(work))
    marker: Union[Path, Remote] = (Remote(str(work)) if remote else Path(work)) / f".reachable-{token}"
    if isinstance(marker, Remote):
        marker.write_bytes(token.encode("utf-8"))
    else:
        marker.write_text(token, encoding="utf-8")
    try:
        probe = ray.remote(num_cpus=0, max_retries=0)(_probe)
        refs = {
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                str(marker), token
            ): n
            for n in nodes
        }
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        bad = [refs[r] for r in late]
        for r in ready:
            try:
                ok = ray.get(r)
            except Exception:  # noqa: BLE001 - a node that cannot run the probe cannot run shards either
                ok = False
            if not ok:
                bad.append(refs[r])
    finally:
        if isinstance(marker, Remote):
            marker.delete()
        else:
            marker.unlink(missing_ok=True)
    if bad:
        names = ", ".join(f"{n.get('NodeManagerAddress')} ({n.get('NodeManagerHostname', '?')})" for n in bad)
        if remote:
            raise OptionError(
                f"the work dir {work} cannot be read from Ray node(s) {names}: every node needs "
                "credentials and a route to it (AWS_* / GOOGLE_* environment on each node)"
            )
        raise OptionError(
            f"the work dir {work} cannot be read from Ray node(s) {names}: it must be on storage every "
            "node reaches at the same path (a shared filesystem or an s3:// / gs:// URI); "
            "put --work-dir and -o there"
        )


def get_executor(options: EngineOptions) -> Executor:
    """The executor ``options.executor`` names (``EXECUTORS``), set up from the job's options."""
    return EXECUTORS.create(options.executor, options)

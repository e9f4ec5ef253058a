"""Executors: run shard tasks in-process (``local``) or on long-lived Ray actors (``ray``)."""

from __future__ import annotations

import collections
from abc import ABC, abstractmethod
from typing import Callable, Optional

from .._optional import require
from ..role import RoleConfig
from ._worker import ShardWorker

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "EngineError", "get_executor"]


class EngineError(RuntimeError):
    """A job could not finish (e.g. a shard kept failing); the message names the shard."""


class Executor(ABC):
    name = ""

    def start(self, config: RoleConfig, n_tasks: Optional[int] = None) -> None:
        """Start workers ahead of the tasks (model loading overlaps the job's planning)."""

    @abstractmethod
    def run(self, tasks: list[dict], config: RoleConfig, on_result: Callable[[dict], None]) -> None:
        """Run every task, calling ``on_result`` with each shard's summary as it finishes."""

    def close(self) -> None:
        pass


class LocalExecutor(Executor):
    """In-process, one worker, shards in order."""

    name = "local"

    def __init__(self, **_) -> None:
        self._worker: Optional[ShardWorker] = None

    def run(self, tasks, config, on_result):
        if self._worker is None or self._worker.config != config:
            self._worker = ShardWorker(config)
        for task in tasks:
            on_result(self._worker.run(task))


class RayExecutor(Executor):
    """Long-lived Ray actors, each loading its models once.

    One actor per GPU when ``gpus_per_worker`` > 0, else ``num_workers`` CPU actors.
    Each actor holds one shard at a time (backpressure). A shard whose actor dies
    is retried on a fresh actor up to ``max_retries`` times; then the job fails
    with an :class:`EngineError` naming the shard.
    """

    name = "ray"

    def __init__(self, *, num_workers: int = 1, address: Optional[str] = None, gpus_per_worker: float = 0.0,
                 cpus_per_worker: float = 1.0, max_retries: int = 2, init_kwargs: Optional[dict] = None) -> None:
        self.ray = require("ray", "ray", "the ray executor")
        if num_workers < 1:
            raise ValueError(f"`num_workers` must be >= 1, got {num_workers}")
        self.num_workers, self.max_retries = num_workers, max_retries
        self.gpus_per_worker, self.cpus_per_worker = gpus_per_worker, cpus_per_worker
        if not self.ray.is_initialized():
            kwargs = dict(init_kwargs or {})
            if address:
                kwargs["address"] = address
            else:
                kwargs.setdefault("num_cpus", max(2, int(num_workers * cpus_per_worker)))
            kwargs.setdefault("include_dashboard", False)
            kwargs.setdefault("log_to_driver", False)
            self.ray.init(**kwargs)
        if gpus_per_worker > 0:  # actors that can never be placed would wait forever at 0%
            have = float(self.ray.cluster_resources().get("GPU", 0))
            need = gpus_per_worker * num_workers
            if have < need:
                raise ValueError(f"{num_workers} Ray worker(s) x {gpus_per_worker} GPU = {need:g} GPUs requested, but "
                                 f"the Ray cluster has {have:g}; lower --num-workers / --gpus-per-worker "
                                 "(0 runs on CPUs)")
        self._actor_cls = self.ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=0)(ShardWorker)
        self.actors: list = []
        self._actor_config: Optional[RoleConfig] = None

    def _new_actor(self, config):
        return self._actor_cls.remote(config)

    def start(self, config, n_tasks=None):
        if self.actors and self._actor_config == config:
            return
        self.close()
        n = self.num_workers if n_tasks is None else min(self.num_workers, max(1, n_tasks))
        self.actors = [self._new_actor(config) for _ in range(n)]  # __init__ (model loading) runs in the background
        self._actor_config = config

    def run(self, tasks, config, on_result):
        ray = self.ray
        from ray.exceptions import RayActorError, RayTaskError

        self.start(config, len(tasks))
        queue = collections.deque((t, 0) for t in tasks)
        idle = list(self.actors)
        pending: dict = {}
        while queue or pending:
            while queue and idle:
                task, attempt = queue.popleft()
                actor = idle.pop()
                pending[actor.run.remote(task)] = (task, actor, attempt)
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            task, actor, attempt = pending.pop(ref)
            try:
                result = ray.get(ref)
            except RayActorError as exc:
                self.actors.remove(actor)
                replacement = self._new_actor(config)
                self.actors.append(replacement)
                idle.append(replacement)
                if attempt >= self.max_retries:
                    raise EngineError(
                        f"shard {task['shard_id']} ({task['input']}) failed {attempt + 1} times: its worker died ({exc})"
                    ) from None
                queue.appendleft((task, attempt + 1))
                continue
            except RayTaskError as exc:
                raise EngineError(f"shard {task['shard_id']} ({task['input']}) failed: {exc}") from None
            idle.append(actor)
            on_result(result)

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors = []


def get_executor(name: str, **kwargs) -> Executor:
    if name == "local":
        return LocalExecutor(**kwargs)
    if name == "ray":
        return RayExecutor(**kwargs)
    raise ValueError(f"unknown executor {name!r}; available: local, ray")

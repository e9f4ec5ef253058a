"""The engine: plan (shard by conversation), execute (local or Ray), resume, merge."""

from ._engine import Engine, JobResult, score
from ._executors import EngineError, LocalExecutor, RayExecutor, get_executor
from ._plan import Plan, ShardInfo, plan_job
from ._worker import ShardWorker

__all__ = [
    "Engine",
    "EngineError",
    "JobResult",
    "LocalExecutor",
    "Plan",
    "RayExecutor",
    "ShardInfo",
    "ShardWorker",
    "get_executor",
    "plan_job",
    "score",
]

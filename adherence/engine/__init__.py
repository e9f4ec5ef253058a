"""The engine: plan (shard by conversation), execute (local or Ray), resume, merge."""

from .._errors import EngineError
from ._engine import Engine, JobResult, score
from ._executors import LocalExecutor, RayExecutor, get_executor
from ._messages import ShardResult, ShardTask
from ._options import EngineOptions
from ._plan import Plan, ShardInfo, plan_job
from ._worker import ShardWorker

__all__ = [
    "Engine",
    "EngineError",
    "EngineOptions",
    "JobResult",
    "LocalExecutor",
    "Plan",
    "RayExecutor",
    "ShardInfo",
    "ShardResult",
    "ShardTask",
    "ShardWorker",
    "get_executor",
    "plan_job",
    "score",
]

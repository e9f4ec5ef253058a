"""The engine: plan (shard by conversation), execute (local or Ray), resume, merge."""

from .._errors import EngineError
from ._area import Job, JobArea
from ._commit import store_of
from ._engine import Engine, JobResult, score
from ._executors import LocalExecutor, RayExecutor, get_executor
from ._files import (
    check_key_types,
    check_score_types,
    check_writable,
    first_line,
    inspect_output,
    open_scores,
    write_owned,
)
from ._messages import ShardResult, ShardTask
from ._options import EXECUTORS, EngineOptions
from ._plan import Plan, ShardInfo, conversation_hash, plan_job
from ._safety import output_format, reserved_columns
from ._sink import TableSink, say, spill
from ._worker import ShardWorker

__all__ = [
    "EXECUTORS",
    "Engine",
    "EngineError",
    "EngineOptions",
    "Job",
    "JobArea",
    "JobResult",
    "LocalExecutor",
    "Plan",
    "RayExecutor",
    "ShardInfo",
    "ShardResult",
    "ShardTask",
    "ShardWorker",
    "TableSink",
    "check_key_types",
    "check_score_types",
    "check_writable",
    "conversation_hash",
    "first_line",
    "get_executor",
    "inspect_output",
    "open_scores",
    "output_format",
    "plan_job",
    "reserved_columns",
    "say",
    "score",
    "spill",
    "store_of",
    "write_owned",
]

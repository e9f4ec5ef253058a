"""adherence: offline, GPU-batched scoring of conversational AI.

The top level exports only the façades; the rooms are ``adherence.data``,
``adherence.models``, ``adherence.kernels``, ``adherence.judges``, ``adherence.role``,
``adherence.engine``, ``adherence.index``, ``adherence.persona``, ``adherence.stats``,
``adherence.report`` and ``adherence.cli``. Importing this
package imports no heavy optional dependency (torch, vllm, ray, faiss, triton).
"""

from ._version import __version__
from .data import DataError, example_path, read_table, read_turns, write_table
from .engine import Engine, JobResult, score
from .index import LateInteractionIndex
from .persona import PersonaConfig, evaluate_persona
from .role import RoleConfig, aggregate_sessions, score_turns
from .stats import evaluate_table

__all__ = [
    "DataError",
    "Engine",
    "JobResult",
    "LateInteractionIndex",
    "PersonaConfig",
    "__version__",
    "evaluate_persona",
    "evaluate_table",
    "example_path",
    "read_table",
    "read_turns",
    "RoleConfig",
    "aggregate_sessions",
    "score",
    "score_turns",
    "write_table",
]

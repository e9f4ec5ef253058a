"""adherence: offline, GPU-batched scoring of conversational AI.

The top level exports only the façades; the rooms are ``adherence.data``,
``adherence.models``, ``adherence.kernels``, ``adherence.judges``, ``adherence.role``,
``adherence.engine``, ``adherence.index``, ``adherence.persona``, ``adherence.stats``,
``adherence.report`` and ``adherence.cli``. Importing this
package imports no heavy optional dependency (torch, vllm, ray, faiss, triton).
"""

from ._version import __version__

# The façades load on first use: `import adherence` (and the command line's start) stays a few milliseconds,
# so a signal in a job's first second meets the command line's handlers, not a half-done import.
_EXPORTS = {
    "DataError": "data",
    "example_path": "data",
    "read_table": "data",
    "read_turns": "data",
    "write_table": "data",
    "Engine": "engine",
    "JobResult": "engine",
    "score": "engine",
    "LateInteractionIndex": "index",
    "PersonaConfig": "persona",
    "evaluate_persona": "persona",
    "RoleConfig": "role",
    "aggregate_sessions": "role",
    "score_turns": "role",
    "evaluate_table": "stats",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'adherence' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


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

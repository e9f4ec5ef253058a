"""Options declared once: a dataclass field says its flag, help, whether it names a file, and whether it decides
scores; the command line, job files, the Python API and the resume fingerprint are derived from that.

    @dataclass
    class EngineOptions:
        shard_size: int = option(100_000, help="turns per shard", affects_scores=False)

    add_arguments(parser, EngineOptions)            # --shard-size, with its help and type
    EngineOptions(**values(EngineOptions, args))    # back from the parsed flags

A flag whose value names a file has ``type=file_path`` (a model: ``type=model_name``), wherever it is declared:
job files resolve such values beside themselves, and nothing keeps a second list of them.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from ._fingerprint import COSMETIC

__all__ = [
    "add_arguments",
    "comma_ints",
    "comma_words",
    "file_path",
    "is_file_option",
    "is_model_option",
    "model_name",
    "option",
    "values",
]

_MISSING: Any = dataclasses.MISSING


def file_path(value: str) -> str:
    """The argparse type of an option that names a file or directory (a local path or a URI)."""
    return value


def model_name(value: str) -> str:
    """The argparse type of an option that names a model: a local path, a bundled name or a hub id."""
    return value


def comma_words(value: Any) -> tuple:
    """The argparse type of a comma-separated list: ``"a, b"`` (or a job file's list) -> ``("a", "b")``."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return tuple(str(x).strip() for x in items if str(x).strip())


def comma_ints(value: Any) -> tuple:
    """The argparse type of a comma-separated list of integers: ``"1,2"`` (or a list) -> ``(1, 2)``."""
    try:
        return tuple(int(x) for x in comma_words(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None


def is_file_option(action: argparse.Action) -> bool:
    return action.type is file_path


def is_model_option(action: argparse.Action) -> bool:
    return action.type is model_name


def option(
    default: Any = _MISSING,
    *,
    help: str,
    flag: Optional[str] = None,
    short: Optional[str] = None,
    type: Optional[Callable] = None,
    choices: Optional[Union[Sequence, Mapping]] = None,
    metavar: Optional[str] = None,
    nargs: Optional[str] = None,
    negate: bool = False,
    dest: Optional[str] = None,
    aliases: Sequence[str] = (),
    affects_scores: bool = True,
    default_factory: Any = _MISSING,
) -> Any:
    """A dataclass field that is also a command-line option.

    Args:
        default, default_factory: the field's default (as ``dataclasses.field``).
        help: the option's help text.
        flag: the long flag (default ``--<field-name>`` with dashes); ``short`` a one-letter alias.
        type: the value's type for argparse (default: the default's type; ``file_path`` / ``model_name``
            for options naming a file or a model).
        choices, metavar, nargs: as argparse's (``choices`` a registry: its names when the parser is built).
        negate: a boolean that defaults to True, given on the command line as ``--no-...`` (which sets it
            to False).
        dest: the parsed argument's name when it is not the field's (two fields of one name on one command).
        aliases: earlier spellings of the flag, still accepted (on the command line and as job-file keys) but
            not shown in the help: an option has one name.
        affects_scores: False for options that never change a score (progress, placement, speed): a
            resumed job may change them and keep its finished work.
    """
    cli = {
        "help": help,
        "flag": flag,
        "short": short,
        "type": type,
        # a registry (a mapping) is kept as it is: a name registered later is a choice too
        "choices": None if choices is None else choices if isinstance(choices, Mapping) else tuple(choices),
        "metavar": metavar,
        "nargs": nargs,
        "negate": negate,
        "dest": dest,
        "aliases": tuple(aliases),
    }
    metadata = {"cli": cli, **({} if affects_scores else COSMETIC)}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _cli_fields(cls: Any, names: Optional[Sequence[str]]) -> list:
    fields = {f.name: f for f in dataclasses.fields(cls) if "cli" in f.metadata}
    if names is None:
        return list(fields.values())
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise KeyError(f"{cls.__name__} declares no command-line option {unknown[0]!r}")
    return [fields[n] for n in names]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def add_arguments(parser: Any, cls: Any, names: Optional[Sequence[str]] = None) -> None:
    """Add the options ``cls`` declares (all, or ``names`` in that order) to ``parser`` (or an argument group)."""
    for f in _cli_fields(cls, names):
        cli = f.metadata["cli"]
        flags = [cli["flag"] or "--" + f.name.replace("_", "-")] + ([cli["short"]] if cli["short"] else [])
        default = _default(f)
        kw: dict = {"dest": cli["dest"] or f.name, "help": cli["help"]}
        if isinstance(default, bool) and cli["type"] is None:
            kw["action"] = "store_false" if cli["negate"] else "store_true"
            kw["default"] = default
        else:
            kw["default"] = default
            kw["type"] = cli["type"] or (type(default) if default is not None else str)
            for k in ("choices", "metavar", "nargs"):
                if cli[k] is not None:
                    kw[k] = list(cli[k]) if k == "choices" else cli[k]
            if cli["metavar"] is None and cli["choices"] is None:
                kw["metavar"] = flags[0].lstrip("-").replace("-", "_").upper()  # the flag's name, as argparse shows it
        action = parser.add_argument(*flags, **kw)
        action.field_name = f.name  # what a job file may also call it (``_jobfile``)
        for alias in cli["aliases"]:  # the same option under an earlier name, hidden from the help
            hidden = dict(kw, help=argparse.SUPPRESS, default=argparse.SUPPRESS)
            parser.add_argument(alias, **hidden).field_name = f.name


def values(cls: Any, args: argparse.Namespace, names: Optional[Sequence[str]] = None) -> dict:
    """The options ``cls`` declares, as parsed into ``args`` (lists given with ``nargs`` become tuples)."""
    out = {}
    for f in _cli_fields(cls, names):
        dest = f.metadata["cli"]["dest"] or f.name
        if hasattr(args, dest):
            v = getattr(args, dest)
            out[f.name] = tuple(v) if isinstance(v, list) else v
    return out

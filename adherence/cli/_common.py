"""One grammar for every command: judge options, output flags, progress and quiet, help that shows defaults."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Iterator, Optional

from .._errors import OptionError

__all__ = [
    "add_json_flag",
    "HelpFormatter",
    "comma_ints",
    "add_judge_args",
    "judge_backend_options",
    "make_backend",
    "leaf_parsers",
    "add_common_flags",
    "quiet_output",
    "json_text",
    "table_bytes",
    "write_result",
]


class HelpFormatter(argparse.HelpFormatter):
    """Help lines end with the default when there is one and the text does not already name it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            action.option_strings
            and text
            and "default" not in text
            and default not in (None, False, [], "")
            and default is not argparse.SUPPRESS
        ):
            text += " (default: %(default)s)"
        return text


def comma_ints(text: str, what: str) -> list:
    """``"1,2, 3"`` -> ``[1, 2, 3]`` (``adherence._options.comma_ints``); an OptionError naming the option ``what``
    otherwise."""
    from .._options import comma_ints as parse

    try:
        return list(parse(text))
    except argparse.ArgumentTypeError:
        raise OptionError(f"{what} must be comma-separated integers, got {text!r}") from None


def leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every sub-parser below it that has no sub-commands of its own."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    parser.formatter_class = HelpFormatter
    if not subs:
        yield parser
    for a in subs:
        for p in a.choices.values():
            yield from leaf_parsers(p)


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``, ``-q/--quiet`` and ``--debug`` on every runnable (sub)command."""
    for p in leaf_parsers(parser):
        have = {s for a in p._actions for s in a.option_strings}
        if "--no-progress" not in have:
            p.add_argument("--no-progress", action="store_true", help="hide progress bars (ours, and model loading's)")
        if "--quiet" not in have:
            p.add_argument(
                "-q",
                "--quiet",
                action="store_true",
                help="stderr shows errors only (no progress bars, warnings or notes); results still go to "
                "stdout and files",
            )
        if "--debug" not in have:
            p.add_argument(
                "--debug",
                action="store_true",
                help="an unexpected error (a bug, not bad input) shows its full traceback instead of one line",
            )


class quiet_output:
    """Context: progress bars off (tqdm everywhere, Hugging Face, transformers) and, when quiet, warnings off."""

    def __init__(self, no_progress: bool, quiet: bool) -> None:
        self.no_progress, self.quiet = no_progress or quiet, quiet
        self._env: dict = {}

    def __enter__(self):
        import warnings

        if self.no_progress:
            for k in ("TQDM_DISABLE",):  # every tqdm bar, the libraries' (model loading, GGUF) included
                self._env[k] = os.environ.get(k)
                os.environ[k] = "1"
            if "transformers" in sys.modules:
                from transformers.utils import logging as tlog

                tlog.disable_progress_bar()
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        if self.quiet:
            warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        self._warnings.__exit__(*exc)
        for k, v in self._env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if self.no_progress and "transformers" in sys.modules:
            from transformers.utils import logging as tlog

            tlog.enable_progress_bar()
        return False


def add_input(p: argparse.ArgumentParser, what: str, nargs: Optional[str] = None) -> None:
    """The command's input file (positional ``input``; ``what`` says what it holds)."""
    from .._options import file_path

    p.add_argument("input", type=file_path, help=what, nargs=nargs)


def add_json_flag(p: argparse.ArgumentParser, what: str = "one JSON object instead of the table") -> None:
    """``--json``: the command prints ``what`` (its result as JSON) on standard output."""
    p.add_argument("--json", action="store_true", help=f"print {what}")


def add_result_outputs(p: argparse.ArgumentParser, *, page: str) -> None:
    """The outputs of a command whose result is one JSON object: ``--json`` (stdout instead of the table),
    ``-o/--output`` (the JSON to a file as well) and ``--html`` (the page, described by ``page``)."""
    from .._options import file_path

    add_json_flag(p)
    p.add_argument("-o", "--output", type=file_path, help="also write the results as JSON here")
    p.add_argument("--html", type=file_path, metavar="OUT", help=f"write an HTML page with {page}")


def add_judge_args(p: argparse.ArgumentParser, *, device: bool = True) -> argparse._ArgumentGroup:
    """The options of every command that runs a judge, with the same names and meanings everywhere."""
    from .._options import add_arguments
    from ..judges import JudgeConfig, ServerOptions, TransformersOptions, VLLMOptions

    j = p.add_argument_group("judge")
    add_arguments(j, JudgeConfig, ["model", "backend"])
    j.add_argument(
        "--base-url",
        action="append",
        metavar="URL",
        help="openai backend: server URL, e.g. http://127.0.0.1:8000/v1; repeat it (or give @FILE, one "
        "URL a line) for a fleet serving the same model: requests spread over the endpoints that are "
        "up, a failing one is backed off and its requests retried on the others",
    )
    add_arguments(j, ServerOptions)
    if device:
        j.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
    add_arguments(j, TransformersOptions)
    add_arguments(j, VLLMOptions)
    j.add_argument(
        "--vllm-engine-args",
        metavar="JSON",
        help="vllm backend: more vllm.LLM keyword arguments as a JSON object (a mapping in --config)",
    )
    return j


def judge_backend_options(args: argparse.Namespace, *, progress: bool = True, **extra) -> dict:
    """Constructor options of the chosen backend from the shared judge flags (each backend's options class reads its
    own: ``BACKEND_OPTIONS[name].from_args``)."""
    from .._registry import unknown_name
    from ..judges import BACKEND_OPTIONS

    cls = BACKEND_OPTIONS.get(args.backend)
    if cls is None:
        raise OptionError(unknown_name("judge backend", args.backend, BACKEND_OPTIONS))
    return cls.from_args(args, progress=progress, **extra)


def make_backend(args: argparse.Namespace, *, progress: bool = True):
    """The judge backend of the shared flags (the bundled smoke-test judge warns)."""
    import warnings

    from ..judges import SMOKE_TEST_WARNING, capabilities, get_backend, is_bundled_judge

    if capabilities(args.backend).bundled_judge and is_bundled_judge(args.judge_model):
        warnings.warn(SMOKE_TEST_WARNING, stacklevel=2)
    return get_backend(args.backend, model=args.judge_model, **judge_backend_options(args, progress=progress))


def json_text(obj, *, indent: Optional[int] = 2) -> str:
    """``obj`` as strict JSON (NaN and infinities as null: the text always parses)."""
    import json

    from ..data import json_safe

    return json.dumps(json_safe(obj), indent=indent, allow_nan=False, ensure_ascii=False, default=str)


def write_result(path, content, *, inputs, what: str = "the JSON output") -> None:
    """A command's file (``-o``, ``--json`` files, artifact files): a dict as strict JSON, or text / bytes as they
    are, through the one owner-checked atomic writer (never onto an input, never over a file adherence did not
    write); says where it went on stderr."""
    from ..engine import write_owned

    data = json_text(content) + "\n" if isinstance(content, (dict, list)) else content
    print(f"wrote {write_owned(path, data, what=what, inputs=[i for i in inputs if i is not None])}", file=sys.stderr)


def table_bytes(table, path) -> bytes:
    """``table`` serialised as ``path``'s extension says (Parquet, JSONL or CSV), for ``write_result``."""
    import tempfile
    from pathlib import Path

    from ..data import write_table

    name = Path(str(path)).name
    with tempfile.TemporaryDirectory(prefix="adherence-table-") as d:
        tmp = Path(d) / name
        write_table(table, tmp)
        return tmp.read_bytes()

"""``adherence`` entry point: argparse subcommands, each imported only when run."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from .._registry import Registry
from .._version import __version__
from ._common import add_common_flags, add_input, quiet_output
from ._jobfile import apply_job_file, job_file_argument

# name -> ("module:Class", one-line help). Modules load lazily so `adherence --help` is instant.
COMMANDS = Registry(
    "command",
    {
        "score": ("adherence.cli.score:ScoreCommand", "score assistant turns for role adherence"),
        "evaluate": ("adherence.cli.evaluate:EvaluateCommand", "how well a score column separates labels"),
        "calibrate": (
            "adherence.cli.calibrate:CalibrateCommand",
            "fit a threshold and a probability map on labelled scores, checked on held-out rows",
        ),
        "estimate": (
            "adherence.cli.estimate:EstimateCommand",
            "the adherent share from a labelled sample and the judge's scores on every row (PPI++), with an interval",
        ),
        "cascade": (
            "adherence.cli.cascade:CascadeCommand",
            "judge cascades: accept a cheap judge's verdict only where it is confident enough, with a guarantee",
        ),
        "classifier": (
            "adherence.cli.classifier:ClassifierCommand",
            "train a classifier on your labels over the bundled encoder (then score --method classifier)",
        ),
        "compare": (
            "adherence.cli.compare:CompareCommand",
            "two score outputs of the same turns, paired; --fail-if-worse-by D gates a release",
        ),
        "view": ("adherence.cli.view:ViewCommand", "a local web viewer over score outputs (worst conversations first)"),
        "export": (
            "adherence.cli.export:ExportCommand",
            "scores of traces back to their spans: OpenTelemetry, Langfuse, Phoenix or LangSmith records",
        ),
        "audit": ("adherence.cli.audit:AuditCommand", "instruction-adherence audits with judge stability"),
        "persona": (
            "adherence.cli.persona:PersonaCommand",
            "EVAL4SIM: persona adherence, consistency and naturalness of simulations vs a human corpus",
        ),
        "bench": ("adherence.cli.bench:BenchCommand", "benchmarks and paper reproductions"),
        "models": (
            "adherence.cli.models:ModelsCommand",
            "model utilities: export the bundled judge as a transformers checkpoint",
        ),
    },
    base="adherence.cli.main:Command",
)


class Command:
    """A subcommand: ``name``, ``add_args(parser)`` and ``run(args) -> exit code`` (its one-line help is its
    entry in ``COMMANDS``, read without importing it)."""

    name: str = ""
    input: str = ""  # what its positional input file holds (its help); empty: no such argument
    input_nargs: Optional[str] = None  # "?": the input may be named elsewhere (a job file)
    #: what its ``-o`` writes, by step (``{"fit": "the classifier file"}``; ``""`` for a command without steps, ``"*"``
    #: for every step): the writer's ``what`` (whose kind the ownership check reads) and the check made before any
    #: work both read it. Empty: the command checks its own outputs (score: the engine, before any work; the
    #: labelling session: its file).
    writes: dict = {}

    def writes_at(self, step: str = "") -> Optional[str]:
        """What this command's ``-o`` writes at ``step`` (None: nothing through ``-o``)."""
        return self.writes.get(step, self.writes.get("*"))

    def output_what(self, step: str = "") -> str:
        """``writes_at(step)``, for the writer of a step that has an ``-o``."""
        what = self.writes_at(step)
        if what is None:
            raise LookupError(f"`{self.name} {step}` declares no -o in its `writes`")
        return what

    def add_args(self, parser: argparse.ArgumentParser) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def run(self, args: argparse.Namespace) -> int:  # pragma: no cover - interface
        raise NotImplementedError


def _load(name: str) -> Command:
    return COMMANDS.create(name)


class _Parser(argparse.ArgumentParser):
    """The top-level parser; ``selected_parser`` is the sub-parser of the command on the line, if any."""

    selected_parser: Optional[argparse.ArgumentParser] = None


def _parser(selected: Optional[str]) -> _Parser:
    parser = _Parser(
        prog="adherence",
        description="Score conversational AI at scale: role adherence, instruction-adherence audits, "
        "persona-simulation evaluation.",
    )
    parser.add_argument("--version", action="version", version=f"adherence {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            cmd = _load(name)
            if cmd.input:
                add_input(p, cmd.input, cmd.input_nargs)
            cmd.add_args(p)
            add_common_flags(p)
            p.set_defaults(_command=cmd)
            parser.selected_parser = p
    return parser


def _user_errors() -> tuple:
    """Bad input, options or configuration (exit 2): only the errors adherence raises as such."""
    from .._errors import UserError

    return (UserError,)


class _ErrorsOnly:
    """stderr under ``--quiet``: only the lines adherence prints for errors and failures pass."""

    def __init__(self, stream) -> None:
        self.stream, self.buf = stream, ""

    def write(self, text: str) -> int:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            if line.startswith("adherence"):
                self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


class _PipeSafe:
    """A standard stream whose reader may be gone (stderr piped through ``tee``, which the same Ctrl-C ends): a
    write to the broken pipe, and every later one, is dropped instead of raising in the middle of the job's
    cleanup and turning an interrupt (130) into a failure (1)."""

    def __init__(self, stream) -> None:
        self.stream, self.broken = stream, False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self.stream.write(text)
            except (BrokenPipeError, ValueError):  # ValueError: the stream was closed
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except (BrokenPipeError, ValueError):
                self.broken = True

    def __getattr__(self, name):
        return getattr(self.stream, name)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every ``finally`` removes its temporaries before the exit."""


def _on_sigterm(signum, frame):  # pragma: no cover - exercised by subprocess tests
    raise Terminated()


def _job_errors() -> tuple:
    """Failures of the job itself (not of its input): one line, exit 1."""
    import sqlite3

    from .._errors import JobError

    return (JobError, OSError, sqlite3.Error, MemoryError)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit codes: 0 done; 1 the job failed (a shard failed, nothing scored, error rate above
    ``--max-error-rate``, disk full, ...); 2 bad input, options or configuration; 130 / 143
    interrupted by SIGINT / SIGTERM (no partial output is published)."""
    import signal
    import threading
    import warnings

    # SIGTERM and the warning format are the process's; called in-process (a job calling main()),
    # both are put back on return. The handler goes in first: a signal while the options are read
    # still ends as 143 / 130.
    previous_sigterm = None
    if threading.current_thread() is threading.main_thread():
        previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_format = warnings.formatwarning
    # One line per warning, without the source path and line that mean nothing to a user, on a line of its
    # own above any progress bar. (Only the format is replaced: a caller recording warnings still gets them.)
    warnings.formatwarning = format_warning
    commit = sys.modules.get("adherence.engine._commit")
    if commit is not None:
        commit.published().clear()
    previous_stderr = sys.stderr
    if not isinstance(sys.stderr, _PipeSafe):
        sys.stderr = _PipeSafe(sys.stderr)
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    finally:
        sys.stderr = previous_stderr
        warnings.formatwarning = previous_format
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


def _interrupted(exc: KeyboardInterrupt) -> int:
    """130 (SIGINT) / 143 (SIGTERM) with one line; 0 when the job had already published its output."""
    what = "terminated" if isinstance(exc, Terminated) else "interrupted"
    commit = sys.modules.get("adherence.engine._commit")
    published = list(commit.published()) if commit is not None else []
    if published:
        print(f"adherence: {what} after the output was published; {published[0]} is complete", file=sys.stderr)
        return 0
    kept = list(commit.kept_for_resume()) if commit is not None else []
    hint = f"; the work done is kept in {kept[-1]}: rerun the same command with --resume to go on" if kept else ""
    print(f"adherence: {what}; nothing partial was published{hint}", file=sys.stderr)
    return 143 if isinstance(exc, Terminated) else 130


def console_main() -> None:
    """The ``adherence`` command: ``main``, then exit with its code -- a signal arriving after the job
    ended (its output published) no longer changes that code."""
    import signal

    try:  # a signal from the moment its handler is in place ends here, never in a traceback
        sys.stderr = _PipeSafe(sys.stderr)
        signal.signal(signal.SIGTERM, _on_sigterm)
        code = main()
    except KeyboardInterrupt as exc:  # before or after main's own handlers
        code = _interrupted(exc)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            # Its reader is gone: point the descriptor at /dev/null, so the interpreter's own flush at exit
            # cannot fail and replace the job's exit code.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
    sys.exit(code)


def _main(argv: Optional[Sequence[str]]) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in argv if a in COMMANDS), None)
    parser = _parser(selected)
    job_values: dict = {}
    job = job_file_argument(argv) if selected else None
    sub = parser.selected_parser
    if job and sub is not None and any(a.dest == "config_file" for a in sub._actions):
        from ..data import DataError

        try:
            job_values = apply_job_file(sub, job)
        except DataError as exc:
            print(f"adherence {selected}: error: {exc}", file=sys.stderr)
            return 2
    args = parser.parse_args(argv)
    if job_values:
        args._job_file, args._job_values = job, job_values
        from ._jobfile import names_a_file

        files = {a.dest for a in sub._actions if names_a_file(a)} if sub is not None else set()
        used = [
            f"{d.replace('_', '-')}={getattr(args, d)}"
            for d, v in job_values.items()
            if d in files and getattr(args, d, None) == v and v is not None
        ]
        if used and not getattr(args, "quiet", False):  # which files the job file points at, resolved
            print(f"{job}: {', '.join(used)}", file=sys.stderr)
    if getattr(args, "_command", None) is None:
        parser.print_help()
        return 0 if not argv else 2
    return _run(args)


def format_warning(message, category, filename, lineno, line=None) -> str:
    """``warning: MESSAGE``; running progress bars are cleared first, so the warning starts its own line (the
    bars redraw below it on their next update)."""
    tqdm = sys.modules.get("tqdm")
    if tqdm is not None:
        try:
            for bar in list(getattr(tqdm.tqdm, "_instances", ())):
                bar.clear()
        except (OSError, ValueError, AttributeError):
            pass  # a bar on a closed stream: the warning is still written
    return f"warning: {message}\n"


def _names_an_argument(filename, args) -> bool:
    if filename is None:
        return False
    given = []
    for v in vars(args).values():
        given.extend(v if isinstance(v, list) else [v])
    from pathlib import Path

    try:
        missing = Path(filename).resolve()
        return any(isinstance(v, str) and v and Path(v).resolve() in (missing, *missing.parents) for v in given)
    except (OSError, ValueError):
        return False


_INPUT_DESTS = ("input", "old", "new", "stages", "outputs", "labels", "cascade", "calibration", "system_prompt")


def _preflight(args, command: str) -> None:
    """Every file a command will write, checked before any work as its writer will check it (never an input, never
    a file of another kind or made by another command, never labels): a refusal comes first, not after the work."""
    cmd = getattr(args, "_command", None)
    what = cmd.writes_at(command.partition(" ")[2]) if isinstance(cmd, Command) else None
    targets = [(getattr(args, "output", None), what)] if what else []
    targets += [(getattr(args, d, None), "the HTML page") for d in ("html", "export_html")]
    if not any(isinstance(path, str) for path, _ in targets):
        return
    from ..engine import check_writable

    inputs: list = []
    for dest in _INPUT_DESTS:
        v = getattr(args, dest, None)
        if isinstance(v, (list, tuple)):
            inputs.extend(x for x in v if isinstance(x, str))
        elif isinstance(v, str):
            inputs.append(v)
    for path, kind in targets:
        if isinstance(path, str):
            check_writable(path, what=kind, inputs=inputs)


def _run(args) -> int:
    from .._notes import take  # the lines held back until the command succeeds

    quiet = bool(getattr(args, "quiet", False))
    try:
        real_stderr = sys.stderr
        try:
            if quiet:
                sys.stderr = _ErrorsOnly(real_stderr)
            with quiet_output(bool(getattr(args, "no_progress", False)), quiet):
                from ..data import set_command_name

                steps = ("step", "cascade", "audit", "models", "bench")
                # a step is a word (`cascade apply` names its file --cascade, the same dest as its step)
                words = [getattr(args, k, None) for k in steps]
                name = " ".join([args.command, *(w for w in words if isinstance(w, str) and w.isalpha())])
                set_command_name(name)
                _preflight(args, name)
                take()
                code = int(args._command.run(args) or 0)
                for line in take() if code == 0 else ():
                    print(line, file=sys.stderr)
                return code
        finally:
            sys.stderr = real_stderr
            take()  # a failed command's are dropped
    except _user_errors() as exc:
        print(f"adherence {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        # A path the user gave that is not there is bad input (2); any other file vanishing mid-job is the
        # job's failure (1).
        print(f"adherence {args.command}: error: {exc}", file=sys.stderr)
        return 2 if _names_an_argument(exc.filename, args) else 1
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except RecursionError:
        print(f"adherence {args.command}: error: input nested too deeply to process", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - an orchestrator reads one line and the exit code
        if isinstance(exc, _job_errors()):
            print(f"adherence {args.command}: error: {exc}", file=sys.stderr)
            return 1
        if getattr(args, "debug", False):
            raise
        # Not bad input and not a failure adherence foresaw: a bug, shown as one, never as "bad input" (exit 2).
        cause = (str(exc).strip().splitlines() or [""])[0]
        print(
            f"adherence {args.command}: internal error: {type(exc).__name__}: {cause} (unexpected; rerun with "
            "--debug for the traceback and report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

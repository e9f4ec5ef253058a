"""``adherence score``: score turns with a role-adherence method, write turn and session scores."""

from __future__ import annotations

import argparse
import sys

from .._errors import OptionError
from .._options import file_path
from .main import Command


def _summary(summary: dict) -> str:
    s = summary
    reused = s.get("turns_reused") or 0
    what = f"{s['turns']} turns" + (
        f" ({reused} reused from an earlier run, {s['turns'] - reused} scored now)" if reused else ""
    )
    lines = [
        f"method {s['method']}: {what} in {s['elapsed_s']:.1f}s ({s['turns_per_s'] or 0:.1f} turns/s), "
        f"{s['shards']} shard(s) on {s['executor']}"
        + (f", {s['shards_resumed']} resumed" if s["shards_resumed"] else ""),
        f"  ok {s['ok']}  error {s['error']}  unscored {s['unscored']}"
        + (f"  skipped {s['skipped']} (context rows, score_turn false)" if s.get("skipped") else "")
        + f"  sessions {s['sessions']}",
    ]
    if s.get("retried_shards") or s.get("workers_lost"):
        lines.append(f"  {s['retried_shards']} shard(s) retried, {s['workers_lost']} worker(s) lost")
    u = s.get("judge_usage")
    if u:
        parts = [f"{u.get('calls', 0)} judge calls ({u.get('cache_hits', 0)} from the cache)"]
        for key, label in (
            ("prompt_tokens", "prompt tokens"),
            ("forward_tokens", "forward tokens after prefix sharing"),
            ("generated_tokens", "generated tokens"),
        ):
            if key in u:
                parts.append(f"{u[key]:,} {label}")
        lines.append("  " + ", ".join(parts))
    sk = s.get("skipped_records")
    if sk:
        lines.append(
            f"  skipped {sk['count']} malformed input record(s) ({', '.join(sk['first'])}"
            f"{', ...' if sk['count'] > len(sk['first']) else ''}): {'; '.join(sk['reasons'][:3])}"
        )
    bad = s.get("bad_rows")
    if bad:
        lines.append(
            f"  {bad['count']} bad row(s) left out, each with its file, line and reason in {bad['file']} "
            "(--bad-rows fail stops on the first instead)"
        )
    return "\n".join(lines)


def job_failure(summary: dict, max_error_rate: float = 1.0) -> str:
    """Why a finished job must exit non-zero ('' when it succeeded)."""
    s = summary
    if s.get("failed_shards"):
        return (
            f"{len(s['failed_shards'])} shard(s) failed as a whole ({s.get('failure', '')}); "
            "their rows are status=error; --resume scores them again"
        )
    if s["turns"] and not s["ok"]:
        return "no turn was scored (every row is error or unscored)"
    rate = s["error"] / s["turns"] if s["turns"] else 0.0
    if rate > max_error_rate:
        return f"error rate {rate:.4f} is above --max-error-rate {max_error_rate}"
    return ""


class ScoreCommand(Command):
    name = "score"
    input = (
        "turns or chat transcripts: .parquet (file or directory), .jsonl, .csv, .json, .arrow, or a Hugging Face "
        "dataset directory (save_to_disk)"
    )
    input_nargs = "?"  # or the job file's `input:`

    def add_args(self, p: argparse.ArgumentParser) -> None:
        from .._options import add_arguments
        from ..engine import EngineOptions
        from ..judges import JudgeConfig
        from ..role import RoleConfig

        p.add_argument(
            "--config",
            dest="config_file",
            metavar="JOB.yaml",
            help="a YAML file of options (any flag below, e.g. `judge-model: PATH`, and `input`); flags on "
            "the command line override it; the resolved options are written to the run metadata",
        )
        p.add_argument(
            "--dry-run",
            action="store_true",
            help="llm_judge: print turns, judge calls and token counts (prompt, after prefix sharing, "
            "generated) without loading the judge model, then exit",
        )
        p.add_argument(
            "--estimate",
            type=int,
            default=0,
            metavar="N",
            help="with --dry-run: also score N conversations with the judge (after one untimed warm-up; an "
            "openai backend is sent their requests) and estimate the job's time with a 95%% interval",
        )
        add_arguments(p, EngineOptions, ["input_format", "columns"])
        p.add_argument(
            "--role", dest="role_text", metavar="TEXT", help="role definition for transcripts without a system message"
        )
        p.add_argument("--role-file", type=file_path, metavar="FILE", help="like --role, read from a file")
        add_arguments(p, EngineOptions, ["bad_rows", "max_bad_rows"])
        p.add_argument(
            "--strict-input", dest="bad_rows", action="store_const", const="fail", help="the same as --bad-rows fail"
        )
        p.add_argument(
            "-o",
            "--output",
            type=file_path,
            help="turn scores: .parquet, .jsonl or .csv, a local path or an "
            "s3:// / gs:// / hdfs:// URI (required unless --dry-run)",
        )
        p.add_argument(
            "--cascade",
            type=file_path,
            metavar="CASCADE.json",
            help="score through a cascade from `adherence cascade fit`: stage 1 on every turn, each later stage as "
            "its own resumable pass over only the turns the earlier ones did not accept (their conversations as "
            "history); a turn no stage accepts is status=abstained. The stages' scoring options come from the file",
        )
        add_arguments(p, RoleConfig, ["method"])
        # no default method: a job names what scores its turns (``_method``); naming a judge names llm_judge
        p.set_defaults(method=None)
        add_arguments(p, EngineOptions, ["ground_truth"])
        add_arguments(p, RoleConfig, ["reference_pool", "alpha"])
        p.add_argument(
            "--threshold",
            type=float,
            help="adherence threshold: prediction = score >= threshold (default 0.5, or the --calibration file's)",
        )
        p.add_argument(
            "--calibration",
            type=file_path,
            metavar="CAL.json",
            help="apply a calibration from `adherence calibrate`: its threshold decides `prediction` and "
            "sessions, and `calibrated_score` holds the mapped probability (recorded in the metadata)",
        )
        add_arguments(p, RoleConfig, ["calibration_any_judge", "strict_mode", "session_mode"])
        p.add_argument(
            "--sessions-output",
            type=file_path,
            help="session scores file (default: OUTPUT with .sessions before the extension)",
        )
        add_arguments(
            p,
            RoleConfig,
            [
                "encoder",
                "encoder_precision",
                "nli_model",
                "classifier",
                "bertscore_layer",
                "bertscore_idf",
                "bertscore_baseline",
            ],  # fmt: skip
        )
        from ._common import add_judge_args

        j = add_judge_args(p, device=False)
        add_arguments(
            j, JudgeConfig, ["output_mode", "granularity", "top_logprobs", "full_vocab", "yes_tokens", "no_tokens"]
        )
        add_arguments(j, JudgeConfig, ["max_history"])
        j.add_argument(
            "--judge-template",
            type=file_path,
            metavar="FILE",
            help="per-turn prompt template with {role} {history} {user} {assistant}, ending with the question",
        )
        add_arguments(j, JudgeConfig, ["system", "layout", "samples", "include_reason", "cache", "binary_fallback"])
        j.add_argument(
            "--no-prefix-sharing", action="store_true", help="transformers backend: one forward pass per turn"
        )
        add_arguments(j, JudgeConfig, ["temperature"])
        e = p.add_argument_group("engine")
        add_arguments(
            e,
            EngineOptions,
            [
                "executor",
                "ray_address",
                "num_workers",
                "gpus_per_worker",
                "tensor_parallel",
                "stall_timeout",
                "shard_size",
                "checkpoint_every",
                "resume",
                "work_dir",
                "keep_work_dir",
                "progress_every",
            ],
        )
        e.add_argument(
            "--max-error-rate",
            type=float,
            default=1.0,
            metavar="R",
            help="exit 1 when more than this fraction of rows is status=error (default 1.0: only when "
            "nothing was scored or a shard failed)",
        )
        add_arguments(p, RoleConfig, ["device", "batch_size"])
        add_arguments(p, EngineOptions, ["n_bootstrap", "seed"])

    def run(self, args: argparse.Namespace) -> int:
        from .._options import values
        from ..role import RoleConfig

        if not 0.0 <= args.max_error_rate <= 1.0:
            raise OptionError(f"--max-error-rate must be in [0, 1], got {args.max_error_rate}")
        role_text = args.role_text
        if args.role_file:
            if role_text:
                raise OptionError("give --role or --role-file, not both")
            from pathlib import Path

            from ..data import DataError

            try:
                role_text = Path(args.role_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise DataError(f"cannot read the role file ({exc})", file=args.role_file) from None

        if args.input is None:
            raise OptionError("give the input file (or `input:` in --config)")
        if args.cascade:
            return self._run_cascade(args, role_text)
        if args.output is None and not args.dry_run:
            raise OptionError("give -o/--output (or `output:` in --config)")
        args.method = _method(args)
        if args.estimate and not args.dry_run:
            raise OptionError("--estimate goes with --dry-run")
        from ..role import get_method

        uses_judge = get_method(args.method).uses_judge
        if args.dry_run and not uses_judge:
            raise OptionError("--dry-run counts judge tokens: it applies to --method llm_judge")
        judge = None
        if uses_judge:
            from ..judges import JudgeConfig

            template = None
            if args.judge_template:
                from pathlib import Path

                from ..data import DataError

                try:
                    template = Path(args.judge_template).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise DataError(f"cannot read the judge template ({exc})", file=args.judge_template) from None
            from ..judges import capabilities
            from ._common import judge_backend_options

            extra = {"prefix_sharing": not args.no_prefix_sharing} if capabilities(args.backend).prefix_sharing else {}
            opts = judge_backend_options(args, progress=not args.no_progress, **extra)
            judge = JudgeConfig(
                backend_options=opts,
                template=template,
                **values(JudgeConfig, args),
            )
        config = RoleConfig(
            threshold=args.threshold,
            calibration=args.calibration,  # its threshold, and its checks against the run: RoleConfig's
            progress=not args.no_progress,
            judge=judge,
            **values(RoleConfig, args),
        )
        if args.dry_run:
            from ..role import dry_run

            print(
                dry_run(
                    args.input,
                    config,
                    input_format=args.input_format,
                    role=role_text,
                    bad_rows=args.bad_rows,
                    estimate=args.estimate,
                    columns=_engine_options(args, role_text).column_map,
                )
            )
            return 0
        from ..engine import Engine

        engine = Engine(config=config, options=_engine_options(args, role_text), job=_job(args))
        result = engine.run(args.input, args.output, sessions_output=args.sessions_output)
        return _finish(result, _summary(result.summary), args.max_error_rate, config.method)

    # Options that never change a score, and the job's own: what a --cascade run may still set (the stages'
    # scoring options are the cascade file's).
    _CASCADE_ALLOWED = {
        "input",
        "output",
        "config_file",
        "sessions_output",
        "cascade",
        "device",
        "batch_size",
        "no_progress",
        "max_error_rate",
        "role_text",
        "role_file",
    }

    def _run_cascade(self, args: argparse.Namespace, role_text) -> int:
        import dataclasses

        from ..cascade import CascadeEngine, load_cascade, stage_configs
        from ..engine import EngineOptions

        if args.output is None:
            raise OptionError("give -o/--output (or `output:` in --config)")
        if args.dry_run:
            raise OptionError("--dry-run does not take --cascade: dry-run a stage by its own options")
        parser = argparse.ArgumentParser(add_help=False)
        self.add_args(parser)
        defaults = vars(parser.parse_args([]))
        engine = {f.name for f in dataclasses.fields(EngineOptions)}
        for action in parser._actions:
            d = action.dest
            if d in engine or d in self._CASCADE_ALLOWED or d == "help" or not action.option_strings:
                continue
            if getattr(args, d, None) != defaults.get(d):
                raise OptionError(
                    f"{action.option_strings[-1]}: with --cascade each stage's scoring options come from the cascade "
                    "file (recorded from the stage's own output); drop it, or score and fit again"
                )
        doc = load_cascade(args.cascade)
        configs = stage_configs(
            doc,
            path=str(args.cascade),
            overrides={"device": args.device, "batch_size": args.batch_size, "progress": not args.no_progress},
        )
        result = CascadeEngine(
            doc, configs, options=_engine_options(args, role_text), job=_job(args), cascade_path=str(args.cascade)
        ).run(args.input, args.output, sessions_output=args.sessions_output)
        return _finish(result, cascade_summary(result.summary), args.max_error_rate)


def _job(args: argparse.Namespace) -> dict:
    """The command line's resolved options, as the run metadata keeps them."""
    return {
        "command": "score",
        "config_file": getattr(args, "_job_file", None),
        "from_config_file": sorted(getattr(args, "_job_values", {})),
        "options": {k: v for k, v in vars(args).items() if not k.startswith("_")},
    }


#: Options a re-run's command line leaves out: how a run shows itself, whether it resumes, secrets.
_NOT_REPEATED = {"help", "input", "config_file", "command", "quiet", "no_progress", "debug", "resume", "api_key"}


def score_command(options: dict, **changes) -> str:
    """The ``adherence score`` command line of a run whose options its metadata recorded (``job.options``), with
    ``changes`` (option dest -> value; None drops it) applied: each option whose value is not its default, by its
    flag, in the parser's order, quoted for a POSIX shell. A page's "What next" gives it so it runs as printed."""
    import shlex

    from .main import _parser

    sub = _parser("score").selected_parser
    assert sub is not None  # the score command's own parser, selected by name
    opts = {**options, **changes}
    words = ["adherence", "score", shlex.quote(str(opts["input"]))]
    for a in sub._actions:
        if not a.option_strings or a.dest in _NOT_REPEATED or a.help == argparse.SUPPRESS or a.dest not in opts:
            continue
        v = opts[a.dest]
        if v is None or v == a.default or (isinstance(v, (list, tuple)) and not v):
            continue
        flag = next((f for f in a.option_strings if f.startswith("--")), a.option_strings[0])
        if isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            words.append(flag)
        elif isinstance(v, (list, tuple)):
            if isinstance(a, argparse._AppendAction):
                for x in v:
                    words += [flag, shlex.quote(str(x))]
            else:
                words += [flag, *(shlex.quote(str(x)) for x in v)]
        elif isinstance(v, dict):
            import json

            words += [flag, shlex.quote(json.dumps(v))]
        else:
            words += [flag, shlex.quote(str(v))]
    return " ".join(words)


def _engine_options(args: argparse.Namespace, role_text):
    from .._options import values
    from ..engine import EngineOptions

    return EngineOptions(role=role_text, progress=not args.no_progress, **values(EngineOptions, args))


NO_METHOD = (
    "name what scores the turns: --method scope (no labels, no references), --method classifier --classifier FILE "
    "(trained on your labels by `adherence classifier fit`), --method cosine (reference replies: the input's "
    "ground_truth_assistant or --ground-truth FILE), --judge-model MODEL or --base-url URL (an LLM judge), or --judge-model "
    "bundled:SmolLM2-135M-Instruct (the bundled smoke-test judge: shows the pipeline runs, cannot judge)"
)


def _method(args: argparse.Namespace) -> str:
    """The method the job names: ``--method`` (or the job file's), else llm_judge when a judge is named (a model,
    a server, a backend other than the in-process one, or --dry-run, which counts judge tokens); else an error that
    lists the choices -- the bundled judge is a smoke test, never a silent default."""
    from ..judges import capabilities

    if args.method is not None:
        return args.method
    if args.judge_model or args.base_url or not capabilities(args.backend).default or args.dry_run:
        return "llm_judge"
    raise OptionError(NO_METHOD)


#: The methods whose scores come from the bundled (English) encoder's embeddings.
_ENCODER_METHODS = ("scope", "classifier", "cosine", "knn", "mahalanobis", "pca_mahalanobis")


def _language_warning(output) -> None:
    """A warning line when the replies of a finished output (its first 5,000) look written in another language than
    the bundled encoder reads."""
    try:
        import pyarrow.dataset as ds

        from ..models import language_note

        # the first 5,000 rows only (file or directory output): a million-turn output is not read again in full
        t = ds.dataset(str(output), format="parquet").head(5000, columns=["assistant"])
        note = language_note(t.column("assistant").to_pylist())
    except Exception:  # an output not on local disk as Parquet: the check is a courtesy, never a failure
        return
    if note:
        print(f"warning: {note}", file=sys.stderr)


def _finish(result, summary_text: str, max_error_rate: float, method: str = "") -> int:
    """Print a finished job's summary and what it wrote; its exit code."""
    print(summary_text)
    done = "kept" if result.summary.get("already_published") else "wrote"
    print(f"{done} {result.output} and {result.sessions_output}", file=sys.stderr)
    if method in _ENCODER_METHODS:
        _language_warning(result.output)
    failure = job_failure(result.summary, max_error_rate)
    if failure:
        print(f"adherence score: failed: {failure}", file=sys.stderr)
        return 1
    return 0


def cascade_summary(summary: dict) -> str:
    """A cascade job in a few lines: per stage the turns it saw and decided, its time and judge calls, then the
    outcome and the cost against the last stage on every turn."""
    s = summary
    scored = s["turns"] - s.get("skipped", 0)
    lines = [f"cascade: {scored} turns in {s['elapsed_s']:.1f}s ({s.get('guarantee') or 'no guarantee recorded'})"]
    for st in s["stages"]:
        u = st.get("judge_usage") or {}
        calls = f", {u['calls']:,} judge calls" if u.get("calls") else ""
        lines.append(
            f"  stage {st['stage']} {st['judge'] or st['method']}: scored {st['turns']} turns, decided "
            f"{st['decided']} ({st['share_decided']:.1%}) in {st['elapsed_s']:.1f}s{calls}"
        )
    lines.append(
        f"  ok {s['ok']}  abstained {s['abstained']}  error {s['error']}"
        + (f"  skipped {s['skipped']}" if s.get("skipped") else "")
        + f"  sessions {s['sessions']}"
    )
    c = s.get("cost_vs_last_stage")
    if c:
        lines.append(
            f"  {c['escalated_to_last']} turns ({c['escalated_share']:.1%}) reached the last stage; the cascade took "
            f"{c['cascade_s']:.1f}s against ~{c['estimated_s']:.1f}s for the last stage on every turn "
            f"({c['time_share']:.0%}, at its measured cost per turn)"
        )
    return "\n".join(lines)

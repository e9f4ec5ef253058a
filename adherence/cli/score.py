"""``adherence score``: score turns with a role-adherence method, write turn and session scores."""

from __future__ import annotations

import argparse
import sys

from .._errors import OptionError
from .main import Command


def _summary(summary: dict) -> str:
    s = summary
    lines = [
        f"method {s['method']}: {s['turns']} turns in {s['elapsed_s']:.1f}s ({s['turns_per_s'] or 0:.1f} turns/s), "
        f"{s['shards']} shard(s) on {s['executor']}"
        + (f", {s['shards_resumed']} resumed" if s["shards_resumed"] else ""),
        f"  ok {s['ok']}  error {s['error']}  unscored {s['unscored']}  sessions {s['sessions']}",
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
            f"{', ...' if sk['count'] > len(sk['first']) else ''}): {'; '.join(sk['reasons'])}"
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

    def add_args(self, p: argparse.ArgumentParser) -> None:
        from ..role import METHODS

        p.add_argument(
            "input",
            nargs="?",
            help="turns or chat transcripts: .parquet (file or directory), .jsonl, .csv, "
            ".json, .arrow, or a Hugging Face dataset directory (save_to_disk)",
        )
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
            "--input-format",
            default="auto",
            choices=["auto", "turns", "openai", "sharegpt"],
            help="auto (default): flat turns, or OpenAI {messages} / ShareGPT {conversations} transcripts "
            "detected from the first record",
        )
        p.add_argument(
            "--role", dest="role_text", metavar="TEXT", help="role definition for transcripts without a system message"
        )
        p.add_argument("--role-file", metavar="FILE", help="like --role, read from a file")
        p.add_argument(
            "--strict-input",
            action="store_true",
            help="a malformed transcript is an error (default: skipped with a warning and counted)",
        )
        p.add_argument(
            "-o",
            "--output",
            help="turn scores: .parquet, .jsonl or .csv, a local path or an "
            "s3:// / gs:// / hdfs:// URI (required unless --dry-run)",
        )
        p.add_argument(
            "--method", default="llm_judge", choices=list(METHODS), help="scoring method (default llm_judge)"
        )
        p.add_argument(
            "--ground-truth",
            metavar="FILE",
            help="reference replies for the reference methods (cosine, knn, bertscore, nli, kl, "
            "mahalanobis): .jsonl/.csv/.parquet with conversation_id, turn_index (0-based) and "
            "ground_truth_assistant (or references, a list, for knn); fills turns that have none",
        )
        p.add_argument(
            "--references",
            dest="reference_pool",
            default="per_turn",
            choices=["per_turn", "dataset"],
            help="knn reference pool: each turn's references, or every ground truth of the set",
        )
        p.add_argument("--alpha", default="median", help="Mahalanobis scale: a number or 'median' (default)")
        p.add_argument(
            "--threshold",
            type=float,
            help="adherence threshold: prediction = score >= threshold (default 0.5, or the --calibration file's)",
        )
        p.add_argument(
            "--calibration",
            metavar="CAL.json",
            help="apply a calibration from `adherence calibrate`: its threshold decides `prediction` and "
            "sessions, and `calibrated_score` holds the mapped probability (recorded in the metadata)",
        )
        p.add_argument(
            "--calibration-any-judge",
            action="store_true",
            help="apply a --calibration fitted on another judge's or prompt layout's scores (refused by default)",
        )
        p.add_argument(
            "--strict",
            action="store_true",
            help="a session is 1 only if every turn was scored and reaches the threshold (an unscored or "
            "error turn makes it 0)",
        )
        p.add_argument(
            "--session-mode",
            default="mean",
            choices=["mean", "threshold_mean"],
            help="session score: mean turn score (default), or threshold_mean: the share of turns at or "
            "above the threshold (pygaussia's binary session score)",
        )
        p.add_argument(
            "--sessions-output", help="session scores file (default: OUTPUT with .sessions before the extension)"
        )
        p.add_argument("--encoder", help="encoder: local path, bundled:all-MiniLM-L6-v2 (default) or a cached hub id")
        p.add_argument("--nli-model", help="local path of an NLI model (method nli)")
        p.add_argument("--bertscore-layer", type=int, help="hidden layer for bertscore (default: last)")
        p.add_argument("--idf", action="store_true", help="idf-weighted bertscore")
        p.add_argument("--baseline", type=float, help="bertscore F1 baseline for rescaling")
        from ._common import add_judge_args

        j = add_judge_args(p, device=False)
        j.add_argument(
            "--output-mode",
            default="continuous",
            choices=["binary", "continuous"],
            help="continuous: P(yes) at the first answer token (default; exact over the whole vocabulary "
            "in-process); binary: a YES/NO verdict",
        )
        j.add_argument(
            "--granularity",
            default="turn",
            choices=["turn", "conversation"],
            help="turn: one judge call per turn with its history (default); conversation: one call per "
            "conversation with a verdict per turn (binary)",
        )
        j.add_argument(
            "--top-logprobs",
            type=int,
            default=20,
            metavar="K",
            help="first-token log-probabilities read from servers / with --no-full-vocab (default 20)",
        )
        j.add_argument(
            "--no-full-vocab",
            action="store_true",
            help="transformers backend: read P(yes) from the top-K like a server instead of the exact "
            "whole-vocabulary sum",
        )
        j.add_argument(
            "--yes-tokens",
            nargs="+",
            metavar="TOKEN",
            help="token texts that count as a yes (default: yes; case and spaces ignored)",
        )
        j.add_argument("--no-tokens", nargs="+", metavar="TOKEN", help="token texts that count as a no (default: no)")
        j.add_argument(
            "--max-history",
            type=int,
            metavar="N",
            help="keep only the last N earlier exchanges in each turn's prompt (default: all)",
        )
        j.add_argument(
            "--judge-template",
            metavar="FILE",
            help="per-turn prompt template with {role} {history} {user} {assistant}, ending with the question",
        )
        j.add_argument("--judge-system", metavar="TEXT", help="a system message sent with every judge prompt")
        j.add_argument(
            "--judge-layout",
            default="user",
            choices=["user", "system", "pygaussia"],
            help="user: the prompt is the user message (default); system: the filled prompt is the system "
            "message and the user message asks for the verdict; pygaussia: the papers' prompt exactly as "
            "pygaussia sends it (filled prompt as the system message, the turn's user text as the user "
            "message) -- use it to reproduce the paper",
        )
        j.add_argument(
            "--samples",
            type=int,
            default=1,
            metavar="K",
            help="self-consistency: K judge calls per turn, majority verdict (binary, needs --temperature "
            "> 0) with the agreement share in llm_judge_agreement (default 1)",
        )
        j.add_argument("--include-reason", action="store_true", help="store a generated justification in `reason`")
        j.add_argument("--judge-cache", help="SQLite judge-call cache (re-runs cost nothing; interrupted runs resume)")
        j.add_argument(
            "--binary-fallback",
            action="store_true",
            help="continuous mode on a provider without logprobs: fall back to binary verdicts",
        )
        j.add_argument(
            "--no-prefix-sharing", action="store_true", help="transformers backend: one forward pass per turn"
        )
        j.add_argument(
            "--temperature",
            type=float,
            default=0.0,
            help="sampling temperature of generated verdicts and reasons (default 0: greedy)",
        )
        e = p.add_argument_group("engine")
        e.add_argument("--executor", default="local", choices=["local", "ray"], help="where shards run (default local)")
        e.add_argument("--ray-address", help="an existing Ray cluster (default: start a local one)")
        e.add_argument(
            "--num-workers",
            type=int,
            help="Ray actors (default: one per --gpus-per-worker GPUs of the "
            "cluster, else 1; more CPU workers than the cluster's CPUs run as fewer, with a warning)",
        )
        e.add_argument(
            "--gpus-per-worker",
            type=float,
            default=0.0,
            help="GPUs per Ray actor (1: one actor per GPU); each proves CUDA sees its GPU before a shard",
        )
        e.add_argument(
            "--judge-tensor-parallel",
            type=int,
            default=1,
            metavar="N",
            help="vllm backend: each judge replica over N GPUs (tensor parallel); with --executor ray one "
            "placement group of N GPUs on one node per replica, each GPU checked before the first shard",
        )
        e.add_argument(
            "--stall-timeout",
            type=float,
            default=300.0,
            metavar="S",
            help="Ray: seconds a worker may go unheard (node lost, no room elsewhere) before its shard "
            "moves to the others; none left: exit 1 naming the missing resources, work dir kept",
        )
        e.add_argument("--shard-size", type=int, default=100_000, help="turns per shard; conversations never split")
        e.add_argument("--resume", action="store_true", help="reuse the finished shards of an interrupted run")
        e.add_argument(
            "--work-dir",
            help="shards and checkpoints (default: OUTPUT.work; removed after success); "
            "a local path or an s3:// / gs:// / hdfs:// URI every worker can reach",
        )
        e.add_argument("--keep-work-dir", action="store_true", help="keep the work directory after success")
        e.add_argument(
            "--max-error-rate",
            type=float,
            default=1.0,
            metavar="R",
            help="exit 1 when more than this fraction of rows is status=error (default 1.0: only when "
            "nothing was scored or a shard failed)",
        )
        p.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
        p.add_argument(
            "--batch-size",
            type=int,
            help="encoder texts per forward pass (default 64 on CPU, up to 4096 within 65536 padded tokens on a GPU)",
        )
        p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for session CIs (0: none)")
        p.add_argument("--seed", type=int, default=42, help="seed of the session bootstrap (default 42)")

    def run(self, args: argparse.Namespace) -> int:
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
        if args.output is None and not args.dry_run:
            raise OptionError("give -o/--output (or `output:` in --config)")
        if args.dry_run and args.method != "llm_judge":
            raise OptionError("--dry-run counts judge tokens: it applies to --method llm_judge")
        judge = None
        if args.method == "llm_judge":
            from ..judges import JudgeConfig

            template = None
            if args.judge_template:
                from pathlib import Path

                from ..data import DataError

                try:
                    template = Path(args.judge_template).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise DataError(f"cannot read the judge template ({exc})", file=args.judge_template) from None
            from ._common import judge_backend_options

            extra = {"prefix_sharing": not args.no_prefix_sharing} if args.backend == "transformers" else {}
            opts = judge_backend_options(args, progress=not args.no_progress, **extra)
            judge = JudgeConfig(
                model=args.judge_model,
                backend=args.backend,
                output_mode=args.output_mode,
                granularity=args.granularity,
                include_reason=args.include_reason,
                cache=args.judge_cache,
                binary_fallback=args.binary_fallback,
                temperature=args.temperature,
                backend_options=opts,
                top_k=args.top_logprobs,
                full_vocab=not args.no_full_vocab,
                yes_tokens=args.yes_tokens,
                no_tokens=args.no_tokens,
                max_history=args.max_history,
                template=template,
                system=args.judge_system,
                layout=args.judge_layout,
                samples=args.samples,
            )
        threshold, calibration = args.threshold, None
        if args.calibration:
            from ..role._calibration import load_calibration

            cal = load_calibration(args.calibration)
            cal.check_method(args.method)
            if threshold is not None:
                raise OptionError(
                    "give --threshold or --calibration, not both (the calibration file holds the "
                    f"threshold: {cal.threshold:.6g})"
                )
            if args.method in ("mahalanobis", "pca_mahalanobis") and args.alpha == "median":
                raise OptionError(
                    f"--calibration with --method {args.method} needs a fixed --alpha: with 'median' "
                    "the score's scale depends on each job, so a fitted threshold does not carry over"
                )
            if args.method == "llm_judge" and not args.calibration_any_judge:
                cal.check_layout(args.judge_layout)
            threshold = cal.threshold
            calibration = dict(cal.describe(), map=cal.map.to_dict())
        config = RoleConfig(
            method=args.method,
            encoder=args.encoder,
            reference_pool=args.reference_pool,
            alpha=args.alpha,
            threshold=0.5 if threshold is None else threshold,
            calibration=calibration,
            calibration_any_judge=args.calibration_any_judge,
            strict_mode=args.strict,
            session_mode=args.session_mode,
            nli_model=args.nli_model,
            bertscore_layer=args.bertscore_layer,
            bertscore_idf=args.idf,
            bertscore_baseline=args.baseline,
            device=args.device,
            batch_size=args.batch_size,
            progress=not args.no_progress,
            judge=judge,
        )
        if args.dry_run:
            from ..judges._dryrun import dry_run

            print(
                dry_run(
                    args.input, config, input_format=args.input_format, role=role_text, strict_input=args.strict_input
                )
            )
            return 0
        from ..engine import Engine

        job = {
            "command": "score",
            "config_file": getattr(args, "_job_file", None),
            "from_config_file": sorted(getattr(args, "_job_values", {})),
            "options": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        }
        engine = Engine(
            config=config,
            executor=args.executor,
            num_workers=args.num_workers,
            gpus_per_worker=args.gpus_per_worker,
            stall_timeout=args.stall_timeout,
            tensor_parallel=args.judge_tensor_parallel,
            ray_address=args.ray_address,
            shard_size=args.shard_size,
            work_dir=args.work_dir,
            resume=args.resume,
            progress=not args.no_progress,
            n_bootstrap=args.bootstrap,
            seed=args.seed,
            keep_work_dir=args.keep_work_dir,
            input_format=args.input_format,
            role=role_text,
            strict_input=args.strict_input,
            job=job,
            ground_truth=args.ground_truth,
        )
        result = engine.run(args.input, args.output, sessions_output=args.sessions_output)
        print(_summary(result.summary))
        print(f"wrote {result.output} and {result.sessions_output}", file=sys.stderr)
        failure = job_failure(result.summary, args.max_error_rate)
        if failure:
            print(f"adherence score: failed: {failure}", file=sys.stderr)
            return 1
        return 0

"""``adherence score``: score turns with a role-adherence method, write turn and session scores."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .main import Command


def _summary(scores, sessions, elapsed: float) -> str:
    import numpy as np

    status = scores.column("status").to_pylist()
    s = np.array([v for v in scores.column("score").to_pylist() if v is not None], dtype=float)
    lines = [
        f"method {scores.column('method')[0].as_py()}: {len(status)} turns in {elapsed:.1f}s "
        f"({len(status) / max(elapsed, 1e-9):.1f} turns/s)",
        f"  ok {status.count('ok')}  error {status.count('error')}  unscored {status.count('unscored')}",
    ]
    if len(s):
        lines.append(f"  turn score: mean {s.mean():.4f}  median {np.median(s):.4f}  min {s.min():.4f}  max {s.max():.4f}")
    adherent = [v for v in sessions.column("adherent").to_pylist() if v is not None]
    if adherent:
        lines.append(f"  sessions: {len(adherent)} scored, {sum(adherent)} adherent ({100 * sum(adherent) / len(adherent):.1f}%)")
    errors = [e for e in scores.column("error").to_pylist() if e]
    if errors:
        lines.append(f"  first error: {errors[0]}")
    return "\n".join(lines)


class ScoreCommand(Command):
    name = "score"
    help = "score assistant turns for role adherence"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        from ..role import METHODS

        p.add_argument("input", help="turns: .parquet, .jsonl, .csv, or an adapter .json")
        p.add_argument("-o", "--output", required=True, help="turn scores: .parquet, .jsonl or .csv")
        p.add_argument("--method", default="llm_judge", choices=list(METHODS), help="scoring method (default llm_judge)")
        p.add_argument("--references", dest="reference_pool", default="per_turn", choices=["per_turn", "dataset"],
                       help="knn reference pool: each turn's references, or every ground truth of the set")
        p.add_argument("--alpha", default="median", help="Mahalanobis scale: a number or 'median' (default)")
        p.add_argument("--threshold", type=float, default=0.5, help="adherence threshold (default 0.5)")
        p.add_argument("--strict", action="store_true", help="a session is 1 only if every turn reaches the threshold")
        p.add_argument("--sessions-output", help="session scores file (default: OUTPUT with .sessions before the extension)")
        p.add_argument("--encoder", help="encoder: local path, bundled:all-MiniLM-L6-v2 (default) or a cached hub id")
        p.add_argument("--nli-model", help="local path of an NLI model (method nli)")
        p.add_argument("--bertscore-layer", type=int, help="hidden layer for bertscore (default: last)")
        p.add_argument("--idf", action="store_true", help="idf-weighted bertscore")
        p.add_argument("--baseline", type=float, help="bertscore F1 baseline for rescaling")
        j = p.add_argument_group("llm_judge")
        j.add_argument("--judge-model", help="judge: local path, hub id in the local cache, or the server's model name "
                       "(default: the bundled SmolLM2-135M-Instruct, a smoke-test judge)")
        j.add_argument("--backend", default="transformers", choices=["transformers", "vllm", "openai"])
        j.add_argument("--output-mode", default="continuous", choices=["binary", "continuous"])
        j.add_argument("--granularity", default="turn", choices=["turn", "conversation"])
        j.add_argument("--include-reason", action="store_true", help="store a generated justification in `reason`")
        j.add_argument("--judge-cache", help="SQLite judge-call cache (re-runs cost nothing; interrupted runs resume)")
        j.add_argument("--base-url", help="openai backend: server URL, e.g. http://127.0.0.1:8000/v1")
        j.add_argument("--api-key", help="openai backend: API key (default: $OPENAI_API_KEY)")
        j.add_argument("--concurrency", type=int, default=16, help="openai backend: requests in flight")
        j.add_argument("--binary-fallback", action="store_true",
                       help="continuous mode on a provider without logprobs: fall back to binary verdicts")
        j.add_argument("--no-prefix-sharing", action="store_true", help="transformers backend: one forward pass per turn")
        j.add_argument("--temperature", type=float, default=0.0)
        p.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
        p.add_argument("--batch-size", type=int, default=64)
        p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for session CIs (0: none)")
        p.add_argument("--seed", type=int, default=42)
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")

    def run(self, args: argparse.Namespace) -> int:
        from ..data import read_turns, run_metadata, write_table
        from ..role import Resources, RoleConfig, aggregate_sessions, score_turns

        judge = None
        if args.method == "llm_judge":
            from ..judges import JudgeConfig

            opts: dict = {}
            if args.backend == "transformers":
                opts = {"device": args.device, "prefix_sharing": not args.no_prefix_sharing, "progress": not args.no_progress}
            elif args.backend == "openai":
                opts = {"base_url": args.base_url, "api_key": args.api_key, "concurrency": args.concurrency}
            judge = JudgeConfig(
                model=args.judge_model, backend=args.backend, output_mode=args.output_mode, granularity=args.granularity,
                include_reason=args.include_reason, cache=args.judge_cache, binary_fallback=args.binary_fallback,
                temperature=args.temperature, backend_options=opts,
            )
        config = RoleConfig(
            method=args.method, encoder=args.encoder, reference_pool=args.reference_pool, alpha=args.alpha,
            threshold=args.threshold, strict_mode=args.strict, nli_model=args.nli_model,
            bertscore_layer=args.bertscore_layer, bertscore_idf=args.idf, bertscore_baseline=args.baseline,
            device=args.device, batch_size=args.batch_size, progress=not args.no_progress, judge=judge,
        )
        turns = read_turns(args.input)
        resources = Resources(config)
        start = time.perf_counter()
        scores = score_turns(turns, config.method, config=config, resources=resources)
        sessions = aggregate_sessions(scores, threshold=config.threshold, strict_mode=config.strict_mode,
                                      n_bootstrap=args.bootstrap, seed=args.seed)
        elapsed = time.perf_counter() - start
        out = Path(args.output)
        sess = Path(args.sessions_output) if args.sessions_output else out.with_name(f"{out.stem}.sessions{out.suffix or '.parquet'}")
        import dataclasses

        meta = run_metadata(config=dataclasses.asdict(config), seed=args.seed, inputs=[args.input],
                            models=resources.describe())
        write_table(scores, out, metadata=meta)
        write_table(sessions, sess, metadata=meta)
        print(_summary(scores, sessions, elapsed))
        print(f"wrote {out} and {sess}", file=sys.stderr)
        return 0

"""``adherence audit``: draft rubrics, run repeated audits, report verdict and reasoning stability."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from .main import Command


def _judge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--judge-model", help="judge model (default: the bundled SmolLM2-135M-Instruct, a smoke-test judge)")
    p.add_argument("--backend", default="transformers", choices=["transformers", "vllm", "openai"])
    p.add_argument("--base-url", help="openai backend: server URL")
    p.add_argument("--device")


def _backend(args):
    from ..judges import SMOKE_TEST_WARNING, get_backend

    if args.backend == "transformers":
        if not args.judge_model:
            warnings.warn(SMOKE_TEST_WARNING, stacklevel=2)
        return get_backend("transformers", model=args.judge_model, device=args.device, progress=False)
    if args.backend == "openai":
        return get_backend("openai", model=args.judge_model, base_url=args.base_url)
    return get_backend("vllm", model=args.judge_model)


def _fmt(v) -> str:
    return "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def format_metrics(metrics: dict) -> str:
    from ..report import audit_question_rows

    lines = ["pooled stability (macro-averaged over judge x generator)",
             f"{'k':<6}{'agreement':>11}{'AC1':>8}{'Fleiss':>8}{'R_stab':>8}"]
    for k, m in metrics["pooled"].items():
        lines.append(f"{k:<6}{_fmt(m['percent_agreement']):>11}{_fmt(m['gwet_ac1']):>8}{_fmt(m['fleiss_kappa']):>8}{_fmt(m['r_stab']):>8}")
    last = f"k={metrics['ks'][-1]}"
    lines += ["", f"per question ({last})",
              f"{'question':<20}{'source':>7}{'fingerprint':>12}{'agreement':>11}{'AC1':>8}{'Fleiss':>8}{'R_stab':>8}"]
    for q, src, strat, pa_, ac1, fk, imp, rs in audit_question_rows(metrics, last):
        lines.append(f"{q:<20}{src:>7}{strat:>12}{_fmt(pa_):>11}{_fmt(ac1):>8}{_fmt(fk) + ('*' if imp else ''):>8}{_fmt(rs):>8}")
    if any(r[6] for r in audit_question_rows(metrics, last)):
        lines.append("* Fleiss' kappa undefined (one category in every answer): 1.0 imputed")
    lines += ["", "per artifact: adherence score S_i = yes / answered over runs",
              f"{'artifact':<14}{'generator':>10}{'mean':>8}{'std':>8}"]
    for a in metrics["artifacts"]:
        lines.append(f"{a['artifact_id']:<14}{a['generator']:>10}{_fmt(a['mean']):>8}{_fmt(a['std']):>8}")
    return "\n".join(lines)


class AuditCommand(Command):
    name = "audit"
    help = "instruction-adherence audits with judge stability"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        sub = p.add_subparsers(dest="audit", metavar="STEP", required=True)
        r = sub.add_parser("rubric", help="draft objective and subjective rubric questions from a system prompt")
        r.add_argument("--system-prompt", required=True, help="file holding the application's system prompt")
        r.add_argument("-o", "--output", required=True, help="rubric file to write (.yaml or .json), for a person to review")
        _judge_args(r)
        run = sub.add_parser("run", help="answer the rubric for every artifact, k times")
        run.add_argument("--rubric", required=True)
        run.add_argument("--artifacts", required=True, help="artifacts table {artifact_id, generator, filled_prompt, output, ...inputs}")
        run.add_argument("--runs", type=int, default=5, help="independent judge runs k (default 5)")
        run.add_argument("--ks", help="comma-separated k values for the stability tables (default: 1..runs)")
        run.add_argument("--temperature", type=float, default=0.7)
        run.add_argument("--seed", type=int, default=0)
        run.add_argument("--max-tokens", type=int, default=384)
        run.add_argument("--judge-cache", help="SQLite judge-call cache")
        run.add_argument("--encoder", help="encoder for reasoning stability (default: bundled all-MiniLM-L6-v2)")
        run.add_argument("--eps", type=float, default=0.05, help="DBSCAN cosine eps (default 0.05)")
        run.add_argument("-o", "--output", required=True, help="output directory")
        _judge_args(run)
        rep = sub.add_parser("report", help="tables in the terminal and an HTML page with plots")
        rep.add_argument("output", help="an `audit run` output directory")
        rep.add_argument("--html", help="HTML path (default: OUTPUT/report.html)")

    def run(self, args: argparse.Namespace) -> int:
        if args.audit == "rubric":
            from ..audit import draft_rubric

            prompt = Path(args.system_prompt).read_text(encoding="utf-8")
            rubric, raw = draft_rubric(prompt, _backend(args))
            path = rubric.save(args.output)
            Path(str(path) + ".raw.json").write_text(json.dumps(raw, indent=2, ensure_ascii=False), encoding="utf-8")
            kinds = [i.kind for i in rubric.items]
            print(f"drafted {len(rubric.items)} questions ({kinds.count('objective')} objective, "
                  f"{kinds.count('subjective')} subjective), {len(rubric.ignored)} ignored instructions -> {path}")
            if not rubric.items:
                print(f"adherence audit rubric: failed: the judge drafted no question (raw answers in {path}.raw.json); "
                      "use a stronger --judge-model or write the rubric by hand", file=sys.stderr)
                return 1
            print("review and edit it (add code checks to objective questions) before running the audit")
            return 0
        if args.audit == "run":
            return self._run(args)
        return self._report(args)

    def _run(self, args) -> int:
        from ..audit import AuditConfig, load_rubric, run_audit, stability_tables
        from ..data import run_metadata, write_table
        from ..models import Encoder

        rubric = load_rubric(args.rubric)
        config = AuditConfig(runs=args.runs, temperature=args.temperature, seed=args.seed, max_tokens=args.max_tokens,
                             cache=args.judge_cache)
        ks = [int(k) for k in args.ks.split(",")] if args.ks else list(range(1, args.runs + 1))
        if not all(1 <= k <= args.runs for k in ks):
            raise ValueError(f"--ks values must be in [1, {args.runs}], got {args.ks}")
        needs_judge = any(not i.by_code for i in rubric.items)
        backend = _backend(args) if needs_judge else None
        judgments = run_audit(rubric, args.artifacts, backend or _NoJudge(), config=config)
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        meta = run_metadata(config={"audit": vars(config), "rubric": args.rubric, "ks": ks, "eps": args.eps,
                                    "judge": backend.describe() if backend else None},
                            seed=args.seed, inputs=[args.rubric, args.artifacts])
        write_table(judgments, out / "judgments.parquet", metadata=meta)
        metrics = stability_tables(judgments, Encoder(args.encoder, progress=False), ks=ks, eps=args.eps)
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
        answers = judgments.column("answer").to_pylist()
        sources = judgments.column("source").to_pylist()
        judged = [a for a, src in zip(answers, sources) if src == "judge"]
        print(format_metrics(metrics))
        print(f"{judgments.num_rows} judgments: code {sources.count('code')}, judge {len(judged)} "
              f"({judged.count(None)} unscored) -> {out}")
        if judged and judged.count(None) == len(judged):
            print("adherence audit run: failed: every judged answer is unscored (the judge's output could not be "
                  f"parsed; see the justifications in {out / 'judgments.parquet'})", file=sys.stderr)
            return 1
        return 0

    def _report(self, args) -> int:
        from ..report import write_audit_html

        out = Path(args.output)
        path = out / "metrics.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: run `adherence audit run ... -o {out}` first")
        metrics = json.loads(path.read_text(encoding="utf-8"))
        print(format_metrics(metrics))
        html = write_audit_html(args.html or out / "report.html", metrics, title=f"adherence audit: {out}")
        print(f"wrote {html}", file=sys.stderr)
        return 0


class _NoJudge:
    """Stands in for a backend when every question is answered by code (it is never called)."""

    model_id = "code-only"

    def generate(self, *a, **k):  # pragma: no cover - unreachable: no judge questions
        raise RuntimeError("no judge questions to answer")

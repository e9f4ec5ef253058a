"""``adherence audit``: draft rubrics, run repeated audits, report verdict and reasoning stability."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .._errors import OptionError
from .._options import add_arguments, file_path, model_name, values
from ._common import add_json_flag, write_result
from .main import Command


def _judge_args(p: argparse.ArgumentParser, cache: bool = True) -> None:
    from ._common import add_judge_args

    add_judge_args(p)
    if cache:
        p.add_argument(
            "--judge-cache",
            type=file_path,
            help="SQLite judge-call cache: a re-run costs nothing, an interrupted one resumes",
        )


def _backend(args, progress: bool = False):
    from ._common import make_backend

    backend = make_backend(args, progress=progress and not args.no_progress)
    backend.preflight(logprobs=False)  # a server that cannot answer stops the audit before its first question
    return backend


def _fmt(v) -> str:
    return "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


# What `audit run` writes in metrics.json, by key: the type of each value the report reads.
_METRICS_KEYS: dict[str, Any] = {"ks": list, "strata": list, "judges": (list, type(None)), "questions": dict, "pooled": dict,
                 "artifacts": list, "eps": (int, float)}  # fmt: skip
_NUMBER_OR_NONE = (int, float, type(None))


def load_metrics(path: Path) -> dict:
    """``metrics.json`` of an audit, checked to hold what the report reads; a one-line DataError naming the file
    and the first key that does not."""
    from ..data import DataError

    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"cannot read the audit's metrics ({exc})", file=path) from None
    if not isinstance(metrics, dict):
        raise DataError(f"the audit's metrics must be a JSON object, got {type(metrics).__name__}", file=path)
    for key, kind in _METRICS_KEYS.items():
        if not isinstance(metrics.get(key), kind):
            raise DataError(
                f"`{key}` is {type(metrics.get(key)).__name__}, not what `adherence audit run` writes; run the audit "
                "again rather than editing its metrics",
                file=path,
            )
    if not metrics["ks"] or not all(isinstance(k, int) and not isinstance(k, bool) for k in metrics["ks"]):
        raise DataError("`ks` must be a non-empty list of run counts", file=path)
    for k, m in metrics["pooled"].items():
        bad = [n for n in ("percent_agreement", "gwet_ac1", "fleiss_kappa", "r_stab") if not isinstance(
            (m or {}).get(n) if isinstance(m, dict) else "", _NUMBER_OR_NONE)]  # fmt: skip
        if bad:
            raise DataError(f"`pooled.{k}.{bad[0]}` must be a number or null", file=path)
    return metrics


def format_metrics(metrics: dict) -> str:
    from ..report import audit_question_rows, code_question_rows

    judges = ", ".join(metrics.get("judges") or []) or "none (every question answered by code)"
    lines = [
        f"judge: {judges}",
        "",
        "pooled stability of the judge (judge-answered questions, macro-averaged over judge x generator)",
        f"{'k':<6}{'agreement':>11}{'AC1':>8}{'Fleiss':>8}{'R_stab':>8}",
    ]
    for k, m in metrics["pooled"].items():
        lines.append(
            f"{k:<6}{_fmt(m['percent_agreement']):>11}{_fmt(m['gwet_ac1']):>8}{_fmt(m['fleiss_kappa']):>8}{_fmt(m['r_stab']):>8}"
        )
    last = f"k={metrics['ks'][-1]}"
    rows = audit_question_rows(metrics, last)
    lines += [
        "",
        f"judge-answered questions ({last})",
        f"{'question':<20}{'fingerprint':>12}{'answers':>9}{'unscored':>10}{'agreement':>11}{'AC1':>8}"
        f"{'Fleiss':>8}{'R_stab':>8}",
    ]
    for q, strat, n, un, pa_, ac1, fk, imp, rs in rows:
        lines.append(
            f"{q:<20}{_fmt(strat):>12}{_fmt(n):>9}{_fmt(un):>10}{_fmt(pa_):>11}{_fmt(ac1):>8}"
            f"{_fmt(fk) + ('*' if imp else ''):>8}{_fmt(rs):>8}"
        )
    if any(r[7] for r in rows):
        lines.append("* Fleiss' kappa undefined (one category in every answer): 1.0 imputed")
    code = code_question_rows(metrics)
    if code:
        lines += [
            "",
            "code-answered questions (deterministic: no stability statistic)",
            f"{'question':<20}{'answers':>9}{'unscored':>10}{'yes-rate':>10}",
        ]
        for q, n, un, yr in code:
            lines.append(f"{q:<20}{_fmt(n):>9}{_fmt(un):>10}{_fmt(yr):>10}")
    lines += [
        "",
        "per artifact: adherence score S_i = yes / answered over runs (code + judge answers)",
        f"{'artifact':<14}{'generator':>10}{'mean':>8}{'std':>8}",
    ]
    for a in metrics["artifacts"]:
        lines.append(f"{a['artifact_id']:<14}{a['generator']:>10}{_fmt(a['mean']):>8}{_fmt(a['std']):>8}")
    return "\n".join(lines)


class AuditCommand(Command):
    name = "audit"
    writes = {"rubric": "the rubric"}

    def add_args(self, p: argparse.ArgumentParser) -> None:
        from ..audit import AuditConfig

        sub = p.add_subparsers(dest="audit", metavar="STEP", required=True)
        r = sub.add_parser("rubric", help="draft objective and subjective rubric questions from a system prompt")
        r.add_argument(
            "--system-prompt", type=file_path, required=True, help="file holding the application's system prompt"
        )
        r.add_argument(
            "-o",
            "--output",
            type=file_path,
            required=True,
            help="rubric file to write (.yaml or .json), for a person to review",
        )
        r.add_argument("--max-tokens", type=int, default=512, help="token budget of each drafting pass")
        _judge_args(r, cache=False)
        run = sub.add_parser("run", help="answer the rubric for every artifact, k times")
        run.add_argument("--rubric", type=file_path, required=True, help="reviewed rubric file (.yaml or .json)")
        run.add_argument(
            "--artifacts",
            type=file_path,
            required=True,
            help="artifacts table {artifact_id, generator, filled_prompt, output, ...inputs}",
        )
        add_arguments(run, AuditConfig, ["runs"])
        run.add_argument("--ks", help="comma-separated k values for the stability tables (default: 1..runs)")
        add_arguments(run, AuditConfig, ["temperature", "seed", "max_tokens", "answer_format"])
        run.add_argument(
            "--encoder", type=model_name, help="encoder for reasoning stability (default: bundled all-MiniLM-L6-v2)"
        )
        run.add_argument("--eps", type=float, default=0.05, help="DBSCAN cosine eps (default 0.05)")
        run.add_argument("-o", "--output", type=file_path, required=True, help="output directory")
        _judge_args(run)
        rep = sub.add_parser("report", help="tables in the terminal and an HTML page with plots")
        rep.add_argument("output", help="an `audit run` output directory")
        rep.add_argument("--html", type=file_path, help="HTML path (default: OUTPUT/report.html)")
        add_json_flag(rep, "the metrics as JSON instead of the tables")

    def run(self, args: argparse.Namespace) -> int:
        if args.audit == "rubric":
            from ..audit import draft_rubric

            prompt = Path(args.system_prompt).read_text(encoding="utf-8")
            if args.max_tokens < 1:
                raise OptionError(f"--max-tokens must be >= 1, got {args.max_tokens}")
            rubric, raw = draft_rubric(prompt, _backend(args, progress=True), max_tokens=args.max_tokens)
            inputs = [args.system_prompt]
            write_result(args.output, rubric.text(args.output), inputs=inputs, what=self.output_what("rubric"))
            write_result(str(args.output) + ".raw.json", json.dumps(raw, indent=2, ensure_ascii=False), inputs=inputs,
                         what="the judge's raw answer")  # fmt: skip
            path = args.output
            kinds = [i.kind for i in rubric.items]
            print(
                f"drafted {len(rubric.items)} questions ({kinds.count('objective')} objective, "
                f"{kinds.count('subjective')} subjective), {len(rubric.ignored)} ignored instructions -> {path}"
            )
            if not rubric.items:
                print(
                    f"adherence audit rubric: failed: the judge drafted no question (raw answers in {path}.raw.json); "
                    "use a stronger --judge-model or write the rubric by hand",
                    file=sys.stderr,
                )
                return 1
            print("review and edit it (add code checks to objective questions) before running the audit")
            return 0
        if args.audit == "run":
            return self._run(args)
        return self._report(args)

    def _run(self, args) -> int:
        from ..audit import AuditConfig, load_rubric, read_artifacts, run_audit, stability_tables
        from ..data import run_metadata
        from ..models import Encoder

        rubric = load_rubric(args.rubric)
        config = AuditConfig(**values(AuditConfig, args), cache=args.judge_cache, progress=not args.no_progress)
        ks = [int(k) for k in args.ks.split(",")] if args.ks else list(range(1, args.runs + 1))
        if not all(1 <= k <= args.runs for k in ks):
            raise OptionError(f"--ks values must be in [1, {args.runs}], got {args.ks}")
        artifacts = read_artifacts(rubric, args.artifacts)  # bad input is one line now, before a judge loads
        needs_judge = any(not i.by_code for i in rubric.items)
        backend = _backend(args) if needs_judge else None
        judgments = run_audit(rubric, artifacts, backend or _NoJudge(), config=config)
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        meta = run_metadata(
            config={
                "audit": vars(config),
                "rubric": args.rubric,
                "ks": ks,
                "eps": args.eps,
                "judge": backend.describe() if backend else None,
            },
            seed=args.seed,
            inputs=[args.rubric, args.artifacts],
        )
        from ..engine import write_owned
        from ._common import table_bytes

        jpath = out / "judgments.parquet"
        write_owned(jpath, table_bytes(judgments, jpath), what="the audit's judgments",
                    inputs=[args.rubric, args.artifacts], config=meta.get("config"))  # fmt: skip
        metrics = stability_tables(judgments, Encoder(args.encoder, progress=False), ks=ks, eps=args.eps)
        write_result(out / "metrics.json", metrics, inputs=[args.rubric, args.artifacts], what="the audit's metrics")
        answers = judgments.column("answer").to_pylist()
        sources = judgments.column("source").to_pylist()
        judged = [a for a, src in zip(answers, sources) if src == "judge"]
        print(format_metrics(metrics))
        print(
            f"{judgments.num_rows} judgments: code {sources.count('code')}, judge {len(judged)} "
            f"({judged.count(None)} unscored) -> {out}"
        )
        if judged and judged.count(None) == len(judged):
            print(
                "adherence audit run: failed: every judged answer is unscored (the judge's output could not be "
                f"parsed; see the justifications in {out / 'judgments.parquet'})",
                file=sys.stderr,
            )
            return 1
        return 0

    def _report(self, args) -> int:
        from ..report import write_audit_html

        out = Path(args.output)
        path = out / "metrics.json"
        if not path.exists():
            from ..data import DataError

            raise DataError(f"no metrics.json: run `adherence audit run ... -o {out}` first", file=path)
        metrics = load_metrics(path)
        try:
            text = json.dumps(metrics, indent=2) if args.json else format_metrics(metrics)
            html = write_audit_html(
                args.html or out / "report.html", metrics, title=f"adherence audit: {out}", inputs=[path]
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            from ..data import DataError

            raise DataError(
                f"not the metrics `adherence audit run` writes ({type(exc).__name__}: {exc}); run the audit again "
                "rather than editing it",
                file=path,
            ) from None
        print(text)
        print(f"wrote {html}", file=sys.stderr)
        return 0


class _NoJudge:
    """Stands in for a backend when every question is answered by code (it is never called)."""

    model_id = "code-only"

    def generate(self, *a, **k):  # pragma: no cover - unreachable: no judge questions
        raise RuntimeError("no judge questions to answer")

"""``adherence evaluate``: how well a score column separates labels."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from .main import Command


def _fmt(v) -> str:
    if v is None:
        return "undefined"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def format_evaluation(result: dict) -> str:
    """A readable plain-text rendering of an ``evaluate_table`` result."""
    lines = [
        f"score {result['score_column']!r} vs label {result['label_column']!r} (positive = {result['positive']!r})",
        f"rows {result['n_rows']}  evaluated {result['n']}  positive {result['n_positive']}  "
        f"negative {result['n_negative']}  unscored {result['n_unscored']}  unlabeled {result['n_unlabeled']}",
        "",
    ]
    ci = result.get("ci", {})
    level = int(round(100 * result.get("ci_level", 0.95)))
    header = f"{'metric':<15}{'value':>10}" + (f"{f'{level}% CI':>22}" if ci else "")
    lines += [header, "-" * len(header)]
    for m in (
        "auc",
        "ap",
        "mean_positive",
        "mean_negative",
        "separation",
        "f1_positive",
        "f1_negative",
        "macro_f1",
        "kappa",
    ):
        if m not in result:
            continue
        row = f"{m:<15}{_fmt(result[m]):>10}"
        if m in ci and ci[m][0] is not None:
            row += f"{f'[{ci[m][0]:.4f}, {ci[m][1]:.4f}]':>22}"
        lines.append(row)
    for m, why in result.get("undefined", {}).items():
        lines.append(f"  {m}: {why}")
    if result.get("note"):
        lines.append(f"note: {result['note']}")
    by = result.get("by_label", {})
    if by:
        lines += ["", f"{'label':<24}{'n':>7}{'mean':>10}{'median':>10}"]
        for k, v in by.items():
            lines.append(f"{k:<24}{v['n']:>7}{v['mean']:>10.4f}{v['median']:>10.4f}")
    return "\n".join(lines)


# Label values that read as the positive (adherent) class, and their negatives.
_POSITIVE_WORDS = (
    "adherent",
    "adheres",
    "yes",
    "true",
    "1",
    "pass",
    "passed",
    "positive",
    "good",
    "ok",
    "compliant",
    "in_role",
    "in-role",
)


def _metadata(path) -> Optional[dict]:
    """The run metadata beside ``path`` (an `adherence score` output), or None."""
    from ..data import metadata_path

    try:
        meta = json.loads(metadata_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return None
    return meta if isinstance(meta, dict) else None


def resolve_columns(
    table,
    meta: Optional[dict],
    score: Optional[str],
    label: Optional[str],
    positive: Optional[str],
    prediction: Optional[str],
    *,
    file: str,
) -> tuple:
    """The score, label, positive value and prediction column to evaluate: the flags given, else what an
    `adherence score` output's metadata and the data say; a one-line DataError when one cannot be told."""
    from ..data import DataError

    cols = table.column_names
    scored_output = meta is not None and ("engine" in meta or "method" in (meta.get("config") or {}))
    if score is None:
        if "score" not in cols:
            raise DataError(f"no `score` column: give --score (columns are: {', '.join(cols)})", file=file)
        score = "score"
    if label is None:
        if "label" not in cols:
            raise DataError(f"no `label` column: give --label (columns are: {', '.join(cols)})", file=file)
        label = "label"
    if positive is None:
        if label not in cols:
            raise DataError(f"no label column {label!r}; columns are: {', '.join(cols)}", file=file, column=label)
        values = sorted({str(v) for v in table.column(label).to_pylist() if v is not None})
        hits = [v for v in values if v.strip().lower() in _POSITIVE_WORDS]
        if len(hits) != 1:
            raise DataError(
                f"give --positive: which label is the adherent class? values: {', '.join(values[:20])}"
                f"{', ...' if len(values) > 20 else ''}",
                file=file,
                column=label,
            )
        positive = hits[0]
    if prediction is None and scored_output and "prediction" in cols:
        prediction = "prediction"
    elif prediction is not None and prediction.lower() == "none":
        prediction = None
    return score, label, positive, prediction


class EvaluateCommand(Command):
    name = "evaluate"
    help = "how well a score column separates labels"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("input", help="table to read: .parquet, .jsonl, .csv, or an adapter .json")
        p.add_argument(
            "--score",
            help="score column, higher = more adherent (default: `score` when the table has "
            "one, as every `adherence score` output does)",
        )
        p.add_argument("--label", help="label column (default: `label` when the table has one)")
        p.add_argument(
            "--positive",
            help="label value of the positive class (default: the label that reads as "
            "positive -- adherent, yes, true, 1, pass, ... -- when exactly one does)",
        )
        p.add_argument(
            "--prediction",
            help="0/1 prediction column, adds F1, macro F1, kappa (default: `prediction` "
            "of an `adherence score` output; `--prediction none` for none)",
        )
        p.add_argument(
            "--bootstrap",
            type=int,
            default=1000,
            metavar="N",
            help="bootstrap resamples for CIs (0: none; default 1000)",
        )
        p.add_argument("--seed", type=int, default=42, help="bootstrap seed (default 42)")
        p.add_argument("--level", type=float, default=0.95, help="confidence level (default 0.95)")
        p.add_argument("--format", help="override the input format (parquet, jsonl, csv, json)")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        p.add_argument("-o", "--output", help="also write the results as JSON here")
        p.add_argument("--html", metavar="OUT", help="write an HTML page with the ROC curve and score distributions")
        p.add_argument(
            "--calibration",
            metavar="CAL.json",
            help="apply a calibration from `adherence calibrate`: predictions become score >= its "
            "threshold, and balanced accuracy and ECE are shown before and after (with a reliability "
            "diagram on the --html page)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from ..data import read_table
        from ..stats import evaluate_table

        if args.bootstrap < 0:
            raise ValueError(f"--bootstrap must be >= 0, got {args.bootstrap}")
        table = read_table(args.input, format=args.format)
        meta = _metadata(args.input)
        cal = None
        if args.calibration:
            from ..role._calibration import load_calibration

            cal = load_calibration(args.calibration)
            if args.prediction not in (None, "none"):
                raise ValueError("give --prediction or --calibration, not both (the calibration decides predictions)")
        score, label, positive, prediction = resolve_columns(
            table, meta, args.score, args.label, args.positive, "none" if cal else args.prediction, file=str(args.input)
        )
        if cal is not None:
            cfg_method = ((meta or {}).get("config") or {}).get("method")
            if cfg_method:
                cal.check_method(cfg_method)
        args.prediction = prediction
        result, labels, scores = evaluate_table(
            table,
            score=score,
            label=label,
            positive=positive,
            prediction=prediction,
            n_bootstrap=args.bootstrap,
            seed=args.seed,
            level=args.level,
            file=str(args.input),
            return_rows=True,
            threshold=cal.threshold if cal is not None else None,
        )
        if (args.score, args.label, args.positive) != (score, label, positive):
            print(
                f"evaluating score={score!r} label={label!r} positive={positive!r}"
                + (f" prediction={prediction!r}" if prediction else "")
                + " (defaults; override with --score, "
                "--label, --positive, --prediction)",
                file=sys.stderr,
            )
        result["input"] = str(args.input)
        if args.prediction:
            result["prediction_column"] = args.prediction
        calibration = None
        if cal is not None:
            from ..stats import assess_calibration

            y = (labels == str(positive)).astype("int8")
            calibration = assess_calibration(
                y,
                scores,
                threshold=cal.threshold,
                cmap=cal.map,
                n_bootstrap=args.bootstrap,
                seed=args.seed,
                level=args.level,
            )
            calibration.update(
                rule=cal.data.get("rule"),
                target=cal.data.get("target"),
                file=str(args.calibration),
                threshold_ci=(cal.data.get("fit") or {}).get("threshold_ci"),
                after_label=f"after ({args.calibration}: threshold {cal.threshold:.4g}, {cal.map.method} map)",
            )
            result["calibration"] = calibration
            result["prediction_column"] = f"score >= {cal.threshold:.6g} ({args.calibration})"
        if args.html:
            from ..report import write_evaluation_html

            path = write_evaluation_html(
                args.html,
                result,
                labels,
                scores,
                title=f"adherence evaluate: {args.input}",
                meta=meta if isinstance(meta, dict) else None,
                calibration=calibration,
            )
            print(f"wrote {path}", file=sys.stderr)
        for m, why in result["undefined"].items():
            print(f"warning: {m} is undefined: {why}", file=sys.stderr)
        if args.output:
            from pathlib import Path

            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n", encoding="utf-8")
            print(f"wrote {args.output}", file=sys.stderr)
        if args.json:
            print(json.dumps(result, indent=2, allow_nan=False))
        else:
            print(format_evaluation(result))
            if calibration is not None:
                from .calibrate import format_calibration

                print(
                    "\ncalibration "
                    + str(args.calibration)
                    + ":\n"
                    + format_calibration(calibration, after_label=calibration["after_label"])
                )
        return 0

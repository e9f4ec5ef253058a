"""``adherence estimate``: the adherent share of a scored table, from its labelled rows and the judge's scores on
all of them (prediction-powered inference, PPI++), beside the labels-only and judge-only numbers."""

from __future__ import annotations

import argparse
import sys
from typing import NamedTuple, Optional

from .._options import add_arguments, values
from ._common import add_result_outputs, json_text, write_result
from ._labelled import (
    LabelledOptions,
    applied_calibration,
    fitted_mask,
    map_labels,
    read_labelled,
    resolve_columns,
)
from .main import Command


def format_estimate(r: dict) -> str:
    """The estimate as a plain-text table."""
    level = int(round(100 * r["confidence"]))
    clustered = f", clustered by {r['clustered_by']}" if r.get("clustered_by") else ""
    c = r["classical"]
    eff = r.get("effective_labels")
    labels_only = f"labels only ({r['n_labelled']:,} rows)"
    judge_only = f"judge only ({r['n']:,} rows)"
    lines = [
        f"adherent share: {r['label_column']!r} = {r['positive']!r}, judge score {r['score_column']!r} "
        f"({level}% intervals{clustered})",
        f"  {('cross-fitted PPI++' if r.get('cross_fitted') else 'prediction-powered (PPI++)'):<30}{r['estimate']:>8.4f}  [{r['ci_low']:.4f}, {r['ci_high']:.4f}]  "
        f"lambda {r['lam']:.2f}" + (f", worth {eff:,.0f} labels" if eff is not None else ""),
        f"  {labels_only:<30}{c['estimate']:>8.4f}  [{c['ci_low']:.4f}, {c['ci_high']:.4f}]",
        f"  {judge_only:<30}{r['judge_only']:>8.4f}  (mean score; no interval: it carries the judge's errors)",
    ]
    if r.get("n_unscored"):
        lines.append(f"  {r['n_unscored']:,} rows without a score were left out")
    if r.get("census"):
        lines.append("  every scored turn is labelled: the share is counted, not estimated")
    if r.get("one_class"):
        lines.append(
            f"  every label is {'one class'}: exact binomial (Clopper-Pearson) bounds from the labels alone; "
            "label more turns"
        )
    if r.get("effective_labels_capped"):
        lines.append(
            f"  (the judge's worth is capped at the {r['n']:,} scored rows: labelling them all is an exact count)"
        )
    groups = (r.get("by") or {}).get("groups") or {}
    if groups:
        lines += ["", f"by {r['by']['column']}:"]
        for k, g in groups.items():
            name = k if len(k) <= 28 else k[:25] + "..."
            if "error" in g:
                lines.append(f"  {name:<30}{g['error']}")
            else:
                lines.append(
                    f"  {name:<30}{g['estimate']:>8.4f}  [{g['ci_low']:.4f}, {g['ci_high']:.4f}]  "
                    f"labels only {g['classical']['estimate']:.4f}  ({g['n_labelled']} labelled of {g['n']})"
                )
    return "\n".join(lines)


class TrainingTurns(NamedTuple):
    """The labelled turns of a classifier's score output that trained it: ``n`` of them over ``folds`` folds, and
    ``column`` the cross-fitted score to estimate with (``classifier_crossfit``: each training turn's out-of-fold
    score, every other turn's mean over the fold models), or None when there is none (a fine-tuned classifier keeps
    no fold encoders): their labels must then be set aside."""

    column: Optional[str]
    n: int
    folds: int


def training_turns(table, score: str, label: str) -> Optional[TrainingTurns]:
    """``TrainingTurns`` when ``table`` is a classifier's score output some of whose labelled turns trained it (the
    estimate must then be cross-fitted, or read only the other labels), else None."""
    import pyarrow.compute as pc

    cols = table.column_names
    if score != "score" or not {"classifier_fold", "classifier_crossfit", label} <= set(cols):
        return None
    both = pc.and_(pc.is_valid(table.column("classifier_fold")), pc.is_valid(table.column(label)))
    n = pc.sum(pc.cast(both, "int64")).as_py() or 0
    if not n:
        return None
    k = (pc.max(table.column("classifier_fold")).as_py() or 0) + 1
    none = table.column("classifier_crossfit").null_count == table.num_rows
    return TrainingTurns(None if none else "classifier_crossfit", int(n), int(k))


def set_aside_training_labels(table, label: str, n: int, file: str):
    """A fine-tuned classifier's output (no cross-fitted column): the labels of the turns that trained it are set
    aside, so the estimate reads only labels the classifier did not see; refused in one line when none is left."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..data import DataError

    trained = pc.is_valid(table.column("classifier_fold"))
    kept = pc.if_else(trained, pa.scalar(None, table.schema.field(label).type), table.column(label))
    left = len(kept) - kept.null_count
    if not left:
        raise DataError(
            f"every labelled turn ({n}) trained the fine-tuned classifier that scored this output, and its fold "
            "encoders are not kept, so no cross-fitted estimate can be made: label another random sample of turns "
            "for the estimate, or fit the classifier with --learner frozen (whose estimate is cross-fitted)",
            file=file,
        )
    print(
        f"{file}: {n} labelled turn(s) trained the fine-tuned classifier that scored it (no cross-fit: its fold "
        f"encoders are not kept): their labels are set aside, the estimate reads the {left} other labelled turn(s)",
        file=sys.stderr,
    )
    return table.set_column(table.column_names.index(label), label, kept)


class EstimateCommand(Command):
    name = "estimate"
    writes = {"": "the JSON output"}
    input = (
        "scored turns (an `adherence score` output, or any table with a score column) where a random sample of "
        "rows carries a label"
    )

    def add_args(self, p: argparse.ArgumentParser) -> None:
        add_arguments(p, LabelledOptions, ["score", "label", "positive", "format", "labels", "label_map"])
        p.add_argument(
            "--confidence",
            type=float,
            default=0.95,
            help="coverage of the intervals (default 0.95: 95%%, as every command)",
        )
        p.add_argument("--by", metavar="COLUMN", help="also one estimate per value of this column (e.g. role)")
        add_result_outputs(p, page="the three estimates drawn")

    def run(self, args: argparse.Namespace) -> int:
        from .._errors import OptionError
        from ..stats import estimate_table

        if not 0 < args.confidence < 1:
            raise OptionError(f"--confidence must be in (0, 1), got {args.confidence}")
        lab = values(LabelledOptions, args, ["score", "label", "positive", "format", "labels", "label_map"])
        table, meta, join = read_labelled(args.input, format=lab["format"], labels=lab["labels"])
        table = map_labels(table, lab["label"], lab["label_map"])
        score, label, positive, _ = resolve_columns(
            table, meta, lab["score"], lab["label"], lab["positive"], "none", file=str(args.input)
        )
        weight = "label_weight" if "label_weight" in table.column_names else None
        applied = applied_calibration(meta)
        if score == "calibrated_score" and applied is not None and "score" in table.column_names:
            fitted, _ = fitted_mask(table, label, [("", applied)])
            if fitted.any():
                print(
                    f"{args.input}: {int(fitted.sum())} labelled turn(s) fitted the calibration behind calibrated_score "
                    f"({applied.get('path')}: its map was chosen on them), so it is not a held-out prediction there: "
                    "the estimate reads the raw score instead (PPI++'s lambda rescales it)",
                    file=sys.stderr,
                )
                score = "score"
        trained = training_turns(table, score, label)
        if trained is not None and trained.column is None:
            table = set_aside_training_labels(table, label, trained.n, str(args.input))
            trained = None
        if trained is not None:
            print(
                f"{args.input}: {trained.n} labelled turn(s) trained the classifier that scored it: a cross-fitted "
                f"estimate (each labelled turn scored by the fold model that did not see it, every other turn by the "
                f"{trained.folds} fold models' mean; Zrnic and Candes, 2024)",
                file=sys.stderr,
            )
        result = estimate_table(
            table, score=trained.column if trained is not None and trained.column else score, label=label,
            positive=positive, confidence=args.confidence, by=args.by, file=str(args.input), weight=weight,
        )  # fmt: skip
        result["cross_fitted"] = trained is not None
        if trained is not None:
            result.update(score_column=score, cross_fit={"column": trained.column, "labelled_training_turns": trained.n,
                                                         "folds": trained.folds})  # fmt: skip
        result["input"] = str(args.input)
        if join is not None:
            result["labels"] = join.describe()
        inputs = [args.input, lab["labels"]]
        if args.output:
            write_result(args.output, result, inputs=inputs, what=self.output_what())
        if args.html:
            from ..report import write_estimate_html

            print(f"wrote {write_estimate_html(args.html, result, inputs=inputs)}", file=sys.stderr)
        print(json_text(result) if args.json else format_estimate(result))
        return 0

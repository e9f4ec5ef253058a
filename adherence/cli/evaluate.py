"""``adherence evaluate``: how well a score column separates labels."""

from __future__ import annotations

import argparse
import sys

from .._errors import OptionError
from .._options import add_arguments, file_path, values
from ._common import add_result_outputs, json_text, write_result
from ._labelled import (
    LabelledOptions,
    applied_calibration,
    format_calibration,
    format_evaluation,
    labelled_columns,
    leave_out_fitted,
    map_labels,
    read_labelled,
    refuse_unequal_design,
)
from .main import Command


class EvaluateCommand(Command):
    name = "evaluate"
    writes = {"": "the JSON output"}
    input = "table to read: .parquet, .jsonl, .csv, or an adapter .json"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        add_arguments(p, LabelledOptions)
        p.add_argument(
            "--prediction",
            help="0/1 prediction column, adds F1, macro F1, kappa (default: `prediction` "
            "of an `adherence score` output; `--prediction none` for none)",
        )
        add_result_outputs(p, page="the ROC curve and score distributions")
        p.add_argument(
            "--calibration",
            type=file_path,
            metavar="CAL.json",
            help="apply a calibration from `adherence calibrate`: predictions become score >= its "
            "threshold, and balanced accuracy and ECE are shown before and after (with a reliability "
            "diagram on the --html page)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from ..stats import evaluate_table

        lab = LabelledOptions(**values(LabelledOptions, args))
        table, meta, join = read_labelled(args.input, format=lab.format, labels=lab.labels)
        table = map_labels(table, lab.label, lab.label_map)
        refuse_unequal_design(table, str(args.input), "evaluating")
        cal = None
        if args.calibration:
            from ..role import load_calibration

            cal = load_calibration(args.calibration)
            if args.prediction not in (None, "none"):
                raise OptionError("give --prediction or --calibration, not both (the calibration decides predictions)")
        score, label, positive, prediction, note = labelled_columns(
            table, meta, lab, "none" if cal else args.prediction, file=str(args.input), doing="evaluating"
        )
        if cal is not None:
            cfg_method = ((meta or {}).get("config") or {}).get("method")
            if cfg_method:
                cal.check_method(cfg_method)
        args.prediction = prediction
        fitted = [(str(args.calibration), cal.data)] if cal is not None else []
        applied = applied_calibration(meta)
        if applied is not None:
            fitted.append((str(applied.get("path") or "its run applied"), applied))
        table = leave_out_fitted(table, score, label, fitted, file=str(args.input), doing="evaluating")
        if "assistant" in table.column_names:
            from ..models import language_note

            said = language_note(v for v, lab_ in zip(table.column("assistant").to_pylist(),
                                                     table.column(label).to_pylist()) if lab_ is not None)  # fmt: skip
            if said:
                print(f"warning: {said}", file=sys.stderr)
        result, labels, scores = evaluate_table(
            table,
            score=score,
            label=label,
            positive=positive,
            prediction=prediction,
            **lab.intervals,
            file=str(args.input),
            return_rows=True,
            threshold=cal.threshold if cal is not None else None,
        )
        if note:
            print(note, file=sys.stderr)
        result["input"] = str(args.input)
        if join is not None:
            result["labels"] = join.describe()
        inputs = [args.input, lab.labels, args.calibration]
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
                **lab.intervals,
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
                inputs=inputs,
            )
            print(f"wrote {path}", file=sys.stderr)
        for m, why in result["undefined"].items():
            print(f"warning: {m} is undefined: {why}", file=sys.stderr)
        if args.output:
            write_result(args.output, result, inputs=inputs, what=self.output_what())
        if args.json:
            print(json_text(result))
        else:
            print(format_evaluation(result))
            if calibration is not None:
                print(
                    "\ncalibration "
                    + str(args.calibration)
                    + ":\n"
                    + format_calibration(calibration, after_label=calibration["after_label"])
                )
        return 0

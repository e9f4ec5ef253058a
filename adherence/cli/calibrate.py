"""``adherence calibrate``: fit a threshold and a probability map on labelled scores."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Optional

from .._options import add_arguments, file_path, values
from ._common import add_json_flag, json_text, write_result
from ._labelled import (
    CalibrationOptions,
    LabelledOptions,
    baseline_lines,
    format_calibration,
    labelled_columns,
    map_labels,
    read_labelled,
    refuse_unequal_design,
)
from .main import Command


def fitted_turns(table, score: str, label: str) -> Optional[dict]:
    """The turns a calibration is fitted on (a label and a score that is a number: the rows ``evaluate_table``
    reads), as the file records them so that no later figure on them passes for a held-out one; None for a table
    without turn keys."""
    import numpy as np
    import pyarrow as pa

    from ..data import cast_column
    from ..role import training_record

    cols = table.column_names
    if "conversation_id" not in cols or "turn_index" not in cols:
        return None
    s = cast_column(table.column(score), pa.float64(), column=score).to_numpy(zero_copy_only=False)
    used = np.isfinite(np.asarray(s, dtype=np.float64)) & np.asarray(table.column(label).is_valid(), dtype=bool)
    rows = np.flatnonzero(used)
    cids, tidx = table.column("conversation_id").to_pylist(), table.column("turn_index").to_pylist()
    if any(cids[i] is None or tidx[i] is None for i in rows):
        return None
    replies = table.column("assistant").to_pylist() if "assistant" in cols else None
    return training_record([cids[i] for i in rows], [tidx[i] for i in rows],
                           None if replies is None else [replies[i] for i in rows])  # fmt: skip


class CalibrateCommand(Command):
    name = "calibrate"
    writes = {"": "the calibration file"}
    input = "labelled scores (.parquet, .jsonl, .csv): a `score` output with a label column, or any such table"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "-o",
            "--output",
            type=file_path,
            required=True,
            metavar="CAL.json",
            help="the calibration file, for `score --calibration` and `evaluate --calibration`",
        )
        add_arguments(p, LabelledOptions)
        add_arguments(p, CalibrationOptions)
        p.add_argument(
            "--html", type=file_path, metavar="OUT", help="also write a page with the reliability diagram and threshold"
        )
        add_json_flag(p, "the calibration file instead of a table")
        p.add_argument(
            "--allow-inverted",
            action="store_true",
            help="fit a score whose AUC is below 0.5 anyway (refused by default: higher scores go with the "
            "violations, so 'score >= threshold' contradicts the map)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from pathlib import Path

        from ..data import DataError, file_digest
        from ..role import calibration_document
        from ..stats import UndefinedMetricError, evaluate_table, fit_calibration

        lab = LabelledOptions(**values(LabelledOptions, args))
        fit = CalibrationOptions(**values(CalibrationOptions, args))
        table, meta, join = read_labelled(args.input, format=lab.format, labels=lab.labels)
        table = map_labels(table, lab.label, lab.label_map)
        refuse_unequal_design(table, str(args.input), "calibrating")
        score, label, positive, _, note = labelled_columns(
            table, meta, lab, "none", file=str(args.input), doing="calibrating"
        )
        if note:
            print(note, file=sys.stderr)
        # The evaluation's own intervals are shown only on the page: without --html none are drawn.
        result, labels, scores = evaluate_table(
            table,
            score=score,
            label=label,
            positive=positive,
            **dict(lab.intervals, n_bootstrap=lab.n_bootstrap if args.html else 0),
            file=str(args.input),
            return_rows=True,
        )
        y = (labels == str(positive)).astype("int8")
        try:
            cal = fit_calibration(
                y,
                scores,
                **dataclasses.asdict(fit),
                **lab.intervals,
                allow_inverted=args.allow_inverted,
            )
        except UndefinedMetricError as exc:
            raise DataError(f"cannot calibrate: {exc}", file=str(args.input), column=label) from None
        cfg = (meta or {}).get("config") or {}
        models = (meta or {}).get("models") or {}
        source = {
            "input": str(args.input),
            "input_digest": file_digest(Path(args.input), "sha256"),
            "score_column": score,
            "label_column": label,
            "positive": str(positive),
            "method": cfg.get("method"),
            "judge": (models.get("judge") or {}).get("model"),
            "judge_layout": (cfg.get("judge") or {}).get("layout"),
            "encoder": (models.get("encoder") or {}).get("name"),
            "n_unscored": result["n_unscored"],
            "n_unlabeled": result["n_unlabeled"],
        }
        if join is not None and lab.labels is not None:
            source["labels"] = join.describe()
            source["labels_digest"] = file_digest(Path(lab.labels), "sha256")
        out = Path(args.output)
        inputs = [args.input, lab.labels]
        doc = calibration_document(cal, source, fitted_turns(table, score, label))
        after_label = f"after (held-out, {cal['folds']}-fold)"
        if args.html:
            from ..report import write_evaluation_html

            result["input"] = str(args.input)
            if join is not None:
                result["labels"] = join.describe()
            job = (meta or {}).get("job") or {}
            apply = None
            if job.get("command") == "score" and (job.get("options") or {}).get("input"):
                from .score import score_command

                inp = Path(args.input)
                apply = score_command(
                    job["options"],
                    output=str(inp.with_name(f"{inp.stem}-calibrated{inp.suffix}")),
                    sessions_output=None,
                    calibration=str(out),
                    threshold=None,
                )
            path = write_evaluation_html(
                args.html,
                result,
                labels,
                scores,
                meta=meta,
                title=f"adherence calibrate: {args.input}",
                calibration=dict(cal, after_label=after_label, file=str(out), apply_command=apply),
                inputs=inputs,
            )
            print(f"wrote {path}", file=sys.stderr)
        write_result(out, json_text(doc, indent=None), inputs=inputs, what=self.output_what())
        if args.json:
            print(json_text(doc))
        else:
            print(format_calibration(cal, after_label=after_label))
            print("\n".join(baseline_lines(result.get("baselines"))).lstrip("\n"))
        return 0

"""``adherence calibrate``: fit a threshold and a probability map on labelled scores."""

from __future__ import annotations

import argparse
import json
import sys

from .._errors import OptionError
from .._options import file_path
from ._labelled import add_labelled_args, baseline_lines, format_calibration, read_metadata, resolve_columns
from .main import Command


class CalibrateCommand(Command):
    name = "calibrate"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "input",
            type=file_path,
            help="labelled scores: an `adherence score` output with a label column (.parquet, "
            ".jsonl, .csv), or any table with a score and a label column",
        )
        p.add_argument(
            "-o",
            "--output",
            type=file_path,
            required=True,
            metavar="CAL.json",
            help="the calibration file, for `score --calibration` and `evaluate --calibration`",
        )
        add_labelled_args(p)
        p.add_argument(
            "--map",
            dest="map_method",
            default="platt",
            choices=["platt", "isotonic", "none"],
            help="probability map: platt (a sigmoid of the score, default), isotonic (monotone steps, "
            "needs more labels), none",
        )
        p.add_argument(
            "--rule",
            default="youden",
            choices=["youden", "precision", "recall"],
            help="threshold: youden (max TPR - FPR, default), precision / recall (reach --target)",
        )
        p.add_argument(
            "--target", type=float, help="target precision or recall of the adherent class (--rule precision / recall)"
        )
        p.add_argument("--folds", type=int, default=5, help="cross-validation folds for the held-out check (default 5)")
        p.add_argument("--bins", type=int, default=10, help="reliability bins for ECE (default 10)")
        p.add_argument(
            "--html", type=file_path, metavar="OUT", help="also write a page with the reliability diagram and threshold"
        )
        p.add_argument("--json", action="store_true", help="print the calibration file instead of a table")
        p.add_argument(
            "--allow-inverted",
            action="store_true",
            help="fit a score whose AUC is below 0.5 anyway (refused by default: higher scores go with the "
            "violations, so 'score >= threshold' contradicts the map)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from pathlib import Path

        from ..data import DataError, file_digest, read_table
        from ..role._calibration import save_calibration
        from ..stats import UndefinedMetricError, evaluate_table, fit_calibration

        if args.bootstrap < 0:
            raise OptionError(f"--bootstrap must be >= 0, got {args.bootstrap}")
        if args.rule == "youden" and args.target is not None:
            raise OptionError("--target applies to --rule precision or recall")
        if args.rule != "youden" and (args.target is None or not 0 < args.target <= 1):
            raise OptionError(f"--rule {args.rule} needs --target in (0, 1], e.g. --target 0.9")
        table = read_table(args.input, format=args.format)
        meta = read_metadata(args.input)
        score, label, positive, _ = resolve_columns(
            table, meta, args.score, args.label, args.positive, "none", file=str(args.input)
        )
        if (args.score, args.label, args.positive) != (score, label, positive):
            print(
                f"calibrating score={score!r} against label={label!r} positive={positive!r} (defaults; override "
                "with --score, --label, --positive)",
                file=sys.stderr,
            )
        # The evaluation's own intervals are shown only on the page: without --html none are drawn.
        result, labels, scores = evaluate_table(
            table,
            score=score,
            label=label,
            positive=positive,
            n_bootstrap=args.bootstrap if args.html else 0,
            seed=args.seed,
            level=args.level,
            file=str(args.input),
            return_rows=True,
        )
        y = (labels == str(positive)).astype("int8")
        try:
            cal = fit_calibration(
                y,
                scores,
                method=args.map_method,
                rule=args.rule,
                target=args.target,
                folds=args.folds,
                n_bins=args.bins,
                n_bootstrap=args.bootstrap,
                seed=args.seed,
                level=args.level,
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
        out = Path(args.output)
        doc = save_calibration(out, cal, source)
        after_label = f"after (held-out, {cal['folds']}-fold)"
        if args.html:
            from ..report import write_evaluation_html

            result["input"] = str(args.input)
            path = write_evaluation_html(
                args.html,
                result,
                labels,
                scores,
                meta=meta,
                title=f"adherence calibrate: {args.input}",
                calibration=dict(cal, after_label=after_label, file=str(out)),
            )
            print(f"wrote {path}", file=sys.stderr)
        print(f"wrote {out}", file=sys.stderr)
        if args.json:
            print(json.dumps(doc, indent=2, allow_nan=False))
        else:
            print(format_calibration(cal, after_label=after_label))
            print("\n".join(baseline_lines(result.get("baselines"))).lstrip("\n"))
        return 0

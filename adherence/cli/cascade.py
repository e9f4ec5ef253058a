"""``adherence cascade``: fit and apply judge cascades with a stated guarantee on the verdicts they accept.

``fit`` learns, for each stage (cheapest first), the confidence above which its verdict is accepted, on labelled
turns all stages scored, so that with probability >= 1 - delta the accepted verdicts agree with the labels at
least 1 - alpha of the time (see ``adherence.stats._cascade``). ``apply`` makes the same decision on tables that
are already scored: each turn is decided by the first stage confident enough, or abstains.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from .._errors import OptionError
from .._options import add_arguments, file_path
from ..cascade import FORMAT, load_cascade
from ._labelled import LabelledOptions
from .main import Command


def _stage_arrays(
    paths: list,
    label: Optional[str],
    positive: Optional[str],
    labels_file: Optional[str] = None,
    label_map: Optional[str] = None,
) -> dict:
    """The stages' scores, keyed by (conversation_id, turn_index), each stage opened through the one reader of score
    outputs (an `adherence score` output, published, one row per turn); the labels from ``labels_file`` when given,
    else from the first stage that has a label column. ``keys`` are stage 1's turns, in its order."""
    import numpy as np

    from ..data import DataError, file_digest
    from ..engine import open_scores
    from ..role import fitted_rows
    from ._labelled import applied_calibration, map_labels, resolve_columns

    stages: list[dict] = []
    labels: Optional[dict] = None
    positive_value = positive
    join = None
    for i, path in enumerate(paths):
        out = open_scores(path, what="stage (score output)")
        for note in out.notes:
            print(f"{path}: {note}", file=sys.stderr)
        t, meta = out.table, out.meta or {}
        for col in ("conversation_id", "turn_index", "score"):
            if col not in t.column_names:
                raise DataError(
                    f"a stage needs a {col} column (an `adherence score` output)", file=str(path), column=col
                )
        if i == 0 and labels_file is not None:
            from ..data import join_labels, read_labels

            t, join = join_labels(t, read_labels(labels_file), file=str(path))
            for line in join.lines():
                print(line, file=sys.stderr)
        cfg = meta.get("config") or {}
        threshold = float(cfg.get("threshold", 0.5) if cfg.get("threshold") is not None else 0.5)
        k = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
        score = np.asarray(t.column("score").cast("float64").fill_null(np.nan).to_numpy(zero_copy_only=False))
        pred = None
        if "prediction" in t.column_names:
            pred = np.asarray(t.column("prediction").cast("float64").fill_null(np.nan).to_numpy(zero_copy_only=False))
        fitted = fitted_rows(applied_calibration(meta), t)  # its verdicts on these turns are in-sample
        stages.append(
            {
                "path": str(path),
                "digest": file_digest(path, "sha256") if "://" not in str(path) else None,
                "method": cfg.get("method"),
                "judge": (cfg.get("judge") or {}).get("model"),
                "options": cfg,
                "score_threshold": threshold,
                "keys": dict(zip(k, range(len(k)))),
                "score": score,
                "prediction": pred,
                "fitted": set() if fitted is None else {k[j] for j in np.flatnonzero(fitted)},
            }
        )
        if labels is None and (label or "label") in t.column_names and (i == 0 or labels_file is None):
            t = map_labels(t, label, label_map)
            _, label_col, positive_value, _ = resolve_columns(t, meta, None, label, positive, "none", file=str(path))
            labels = dict(zip(k, t.column(label_col).to_pylist()))
            label = label_col
    keys = list(stages[0]["keys"])
    return {"stages": stages, "keys": keys, "labels": labels, "label": label, "positive": positive_value, "join": join}


def _verdicts(stage: dict, keys: list) -> tuple:
    import numpy as np

    from ..stats import verdict_confidence

    # a turn this stage did not score has no verdict here (NaN): it cannot be accepted by it
    idx = np.array([stage["keys"].get(k, -1) for k in keys], dtype=np.int64)
    missing = idx < 0
    score = np.where(missing, np.nan, stage["score"][np.where(missing, 0, idx)])
    pred = (
        None
        if stage["prediction"] is None
        else np.where(missing, np.nan, stage["prediction"][np.where(missing, 0, idx)])
    )
    return verdict_confidence(score, stage["score_threshold"], pred)


class CascadeCommand(Command):
    name = "cascade"
    writes = {"fit": "the cascade file", "apply": "the decided turns"}

    def add_args(self, p: argparse.ArgumentParser) -> None:
        sub = p.add_subparsers(dest="cascade", metavar="STEP", required=True)
        f = sub.add_parser("fit", help="learn each stage's acceptance threshold on labelled turns, with a guarantee")
        f.add_argument("stages", nargs="+", type=file_path, metavar="STAGE", help="scored turns, cheapest stage first")
        # the label options are declared once, as evaluate, calibrate and estimate read them (joined onto stage 1)
        add_arguments(f, LabelledOptions, ["label", "labels", "positive", "label_map"])
        f.add_argument("--alpha", type=float, default=0.1, help="error rate allowed on accepted verdicts (default 0.1)")
        f.add_argument("--delta", type=float, default=0.1, help="chance allowed that the guarantee fails (default 0.1)")
        f.add_argument(
            "--labels-from",
            default="people",
            choices=("people", "judge"),
            help="who wrote the labels: people, or the strongest judge (the guarantee is then agreement with it)",
        )
        f.add_argument(
            "-o", "--output", type=file_path, required=True, metavar="CASCADE.json", help="the cascade file, for apply"
        )
        f.add_argument(
            "--html", type=file_path, metavar="OUT", help="write a page with each stage's error bound and threshold"
        )
        a = sub.add_parser("apply", help="decide each turn by the first stage confident enough (or abstain)")
        a.add_argument("stages", nargs="+", type=file_path, metavar="STAGE", help="scored turns, in the fit's order")
        a.add_argument(
            "--cascade", type=file_path, required=True, metavar="CASCADE.json", help="the file `cascade fit` wrote"
        )
        a.add_argument("-o", "--output", type=file_path, required=True, help="decided turns (.parquet, .jsonl, .csv)")

    def run(self, args: argparse.Namespace) -> int:
        return self._fit(args) if args.cascade == "fit" else self._apply(args)

    def _fit(self, args: argparse.Namespace) -> int:
        import numpy as np

        from ..data import DataError
        from ..stats import fit_cascade
        from ._common import write_result

        if len(args.stages) < 1:
            raise OptionError("give at least one stage")
        data = _stage_arrays(args.stages, args.label, args.positive, args.labels, args.label_map)
        if data["labels"] is None:
            raise DataError("no stage has a label column; give --label or --labels", file=str(args.stages[0]))
        keys = [
            k for k in data["keys"] if data["labels"].get(k) is not None and all(k in s["keys"] for s in data["stages"])
        ]
        fitted = set().union(*(s["fitted"] for s in data["stages"]))
        if fitted & set(keys):
            kept = [k for k in keys if k not in fitted]
            print(
                f"{len(keys) - len(kept)} labelled turn(s) fitted the calibration a stage applied (its verdicts there "
                f"are in-sample): left out, the stages are certified on the {len(kept)} other labelled turn(s)",
                file=sys.stderr,
            )
            if len(kept) < 2:
                raise DataError(
                    f"{len(kept)} labelled turns left once those that fitted a stage's calibration are out: a stage is "
                    "certified only on labels it did not learn from; give labels on other turns",
                    file=str(args.labels or args.stages[0]),
                )
            keys = kept
        if len(keys) < 2:
            raise DataError(f"{len(keys)} labelled turns scored by every stage", file=str(args.stages[0]))
        values = {str(data["labels"][k]) for k in keys}
        if str(data["positive"]) not in values or len(values) < 2:
            raise DataError(
                f"--positive {data['positive']!r} must be one of the labels and not the only one; the labelled turns "
                f"hold: {', '.join(sorted(values))}",
                file=str(args.labels or args.stages[0]),
                column=data["label"],
            )
        y = np.array([float(str(data["labels"][k]) == str(data["positive"])) for k in keys])
        arrays = [_verdicts(s, keys) for s in data["stages"]]
        fits = fit_cascade(arrays, y, alpha=args.alpha, delta=args.delta)
        doc = {
            "format": FORMAT,
            "alpha": args.alpha,
            "delta": args.delta,
            "labels_from": args.labels_from,
            "guarantee": (
                f"with probability >= {1 - args.delta:g}, the verdicts the cascade accepts agree with the "
                f"{'labels' if args.labels_from == 'people' else 'strongest judge'} at least "
                f"{1 - args.alpha:.0%} of the time (turns drawn like the calibration turns)"
            ),
            "label_column": data["label"],
            "positive": str(data["positive"]),
            "n": len(keys),
            "stages": [
                {
                    "stage": i,
                    "path": s["path"],
                    "digest": s["digest"],
                    "method": s["method"],
                    "judge": s["judge"],
                    "score_threshold": s["score_threshold"],
                    "options": s["options"],
                    **fit,
                }
                for i, (s, fit) in enumerate(zip(data["stages"], fits), start=1)
            ],
        }
        if data["join"] is not None:
            doc["labels"] = data["join"].describe()
        from ..cascade import cascade_digest

        doc["digest"] = cascade_digest(doc)
        inputs = [*args.stages, args.labels]
        write_result(args.output, doc, inputs=inputs, what=self.output_what("fit"))
        if args.html:
            from ..report import bound_curve, write_cascade_html

            left = np.ones(len(keys), dtype=bool)
            curves = []
            for (v, c), fit in zip(arrays, fits):
                usable = left & np.isfinite(c) & np.isfinite(v)
                curves.append(bound_curve(c[usable], v[usable] == y[usable], args.alpha, fit["delta"]))
                if fit["threshold"] is not None:
                    left &= ~(usable & (c >= fit["threshold"]))
            print(
                f"wrote {write_cascade_html(args.html, doc, curves, inputs=inputs, cascade_file=str(args.output))}",
                file=sys.stderr,
            )
        lines = [f"cascade on {len(keys)} labelled turns: alpha {args.alpha:g}, delta {args.delta:g}"]
        for st in doc["stages"]:
            t = st["threshold"]
            lines.append(
                f"  stage {st['stage']} ({st['method'] or st['path']}): "
                + (
                    f"accepts confidence >= {t:.4g}: {st['accepted']} of the {st['reaching']} turns reaching it, "
                    f"{st['errors']} errors (p = {st['p_value']:.3g})"
                    if t is not None
                    else f"accepts nothing (its verdicts cannot be certified on the {st['reaching']} turns reaching it)"
                )
            )
        print("\n".join(lines))
        return 0

    def _apply(self, args: argparse.Namespace) -> int:
        import numpy as np
        import pyarrow as pa

        from ..data import DataError
        from ..stats import apply_cascade
        from ._common import table_bytes, write_result

        doc = load_cascade(args.cascade)
        if len(doc["stages"]) != len(args.stages):
            raise OptionError(f"the cascade has {len(doc['stages'])} stages; {len(args.stages)} tables were given")
        data = _stage_arrays(args.stages, None, doc.get("positive"))
        for i, (given, fitted) in enumerate(zip(data["stages"], doc["stages"]), start=1):
            # a stage is the scorer the cascade was fitted on: the same method and score-relevant options
            if given["method"] != fitted.get("method") or _scoring(given["options"]) != _scoring(fitted.get("options")):
                raise DataError(
                    f"stage {i} was scored by {given['method']!r} with other options than the cascade's stage {i} "
                    f"({fitted.get('method')!r}, fitted on {fitted.get('path')}): give the stages in the fit's order, "
                    "scored as they were",
                    file=given["path"],
                )
        keys = data["keys"]
        arrays = [_verdicts(s, keys) for s in data["stages"]]
        verdict, decided = apply_cascade(arrays, [st["threshold"] for st in doc["stages"]])
        cols = {
            "conversation_id": pa.array([str(k[0]) for k in keys], pa.string()),
            "turn_index": pa.array([int(k[1]) for k in keys], pa.int32()),
            "prediction": pa.array([None if np.isnan(v) else int(v) for v in verdict], pa.int8()),
            "decided_by": pa.array([int(d) if d else None for d in decided], pa.int32()),
            "status": pa.array(["ok" if d else "abstained" for d in decided], pa.string()),
        }
        for i, (_, c) in enumerate(arrays, start=1):
            cols[f"stage{i}_confidence"] = pa.array(c, pa.float64())
        write_result(args.output, table_bytes(pa.table(cols), args.output), inputs=[*args.stages, args.cascade],
                     what=self.output_what("apply"))  # fmt: skip
        n = len(keys)
        shares = [int((decided == i).sum()) for i in range(1, len(arrays) + 1)]
        line = ", ".join(f"stage {i} {c} ({c / n:.1%})" for i, c in enumerate(shares, start=1))
        print(f"{n} turns: {line}, abstained {int((decided == 0).sum())} ({(decided == 0).mean():.1%})")
        if data["labels"] is not None:
            lab = np.array([data["labels"].get(k) is not None for k in keys]) & (decided > 0)
            if lab.any():
                y = np.array([float(str(data["labels"].get(k)) == str(doc.get("positive"))) for k in keys])
                agree = float((verdict[lab] == y[lab]).mean())
                print(f"  agreement with the labels on {int(lab.sum())} decided labelled turns: {agree:.4f}")
        return 0


# Options that never change a stage's scores (where and how fast it ran); everything else must match the fit's.
_PLACEMENT = {"device", "batch_size", "progress", "reference_file", "calibration_any_judge"}


def _scoring(options) -> dict:
    return {k: v for k, v in (options or {}).items() if k not in _PLACEMENT}

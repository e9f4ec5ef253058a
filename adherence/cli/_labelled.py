"""What ``evaluate`` and ``calibrate`` share: the columns of a labelled scores table, and their plain-text tables."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Optional

from .._errors import OptionError
from .._options import file_path, option
from ..data import adherent_values

__all__ = [
    "CalibrationOptions",
    "LabelledOptions",
    "applied_calibration",
    "fitted_mask",
    "format_calibration",
    "format_evaluation",
    "labelled_columns",
    "leave_out_fitted",
    "map_labels",
    "read_labelled",
    "read_metadata",
    "resolve_columns",
]


@dataclass
class LabelledOptions:
    """What ``evaluate`` and ``calibrate`` share: which columns hold the score and the label, which label is the
    adherent class, the input format, and the bootstrap behind the intervals."""

    score: Optional[str] = option(
        None,
        help="score column, higher = more adherent (default: `score` when the table has one, as every "
        "`adherence score` output does)",
    )
    label: Optional[str] = option(None, help="label column (default: `label` when the table has one)")
    positive: Optional[str] = option(
        None,
        help="label value of the adherent class (default: the label that reads as positive -- adherent, yes, "
        "true, 1, pass, ... -- when exactly one does)",
    )
    format: Optional[str] = option(None, help="override the input format (parquet, jsonl, csv, json)")
    labels: Optional[str] = option(
        None,
        type=file_path,
        metavar="LABELS",
        help="labels file (Parquet, JSONL or CSV: conversation_id, turn_index, label [, labeller, weight]; what "
        "`adherence view OUT --label LABELS` writes), joined on (conversation_id, turn_index); it replaces the "
        "table's own label column, and labels that match no turn are counted and named",
    )
    n_bootstrap: int = option(
        1000,
        aliases=("--bootstrap",),
        metavar="N",
        help="bootstrap resamples for the intervals (0: none; default 1000)",
    )
    label_map: Optional[str] = option(
        None,
        metavar="FROM=TO,...",
        help="read label values as others (e.g. maybe=violation,good=adherent): a label that is neither the adherent "
        "class nor a violation word (violation, *_violation, *_failure, no, false, 0, fail, ...) is refused unless "
        "mapped",
    )
    seed: int = option(42, help="seed of the bootstrap (and of calibrate's folds; default 42)")
    level: float = option(0.95, help="confidence level (default 0.95)")

    def __post_init__(self) -> None:
        if self.n_bootstrap < 0:
            raise OptionError(f"--n-bootstrap must be >= 0, got {self.n_bootstrap}")
        if not 0 < self.level < 1:
            raise OptionError(f"--level must be in (0, 1), got {self.level}")

    @property
    def intervals(self) -> dict:
        """The keyword arguments of the statistics' intervals."""
        return {"n_bootstrap": self.n_bootstrap, "seed": self.seed, "level": self.level}


@dataclass
class CalibrationOptions:
    """How ``calibrate`` fits: the probability map, the threshold rule, and the held-out check."""

    method: str = option(
        "platt",
        flag="--map",
        dest="map_method",
        choices=("platt", "isotonic", "none"),
        help="probability map: platt (a sigmoid of the score, default), isotonic (monotone steps, "
        "needs more labels), none",
    )
    rule: str = option(
        "youden",
        choices=("youden", "precision", "recall"),
        help="threshold: youden (max TPR - FPR, default), precision / recall (reach --target)",
    )
    target: Optional[float] = option(
        None, type=float, help="target precision or recall of the adherent class (--rule precision / recall)"
    )
    folds: int = option(5, help="cross-validation folds for the held-out check (default 5)")
    n_bins: int = option(10, flag="--bins", help="reliability bins for ECE (default 10)")

    def __post_init__(self) -> None:
        if self.rule == "youden" and self.target is not None:
            raise OptionError("--target applies to --rule precision or recall")
        if self.rule != "youden" and (self.target is None or not 0 < self.target <= 1):
            raise OptionError(f"--rule {self.rule} needs --target in (0, 1], e.g. --target 0.9")


def labelled_columns(table, meta, opts: LabelledOptions, prediction, *, file: str, doing: str) -> tuple:
    """``(score, label, positive, prediction, note)``: the columns of ``table`` (``opts`` or their defaults), and
    the line to print once the table was read when a default was taken ('' when none was)."""
    score, label, positive, prediction = resolve_columns(
        table, meta, opts.score, opts.label, opts.positive, prediction, file=file
    )
    note = ""
    if (opts.score, opts.label, opts.positive) != (score, label, positive):
        note = (
            f"{doing} score={score!r} label={label!r} positive={positive!r}"
            + (f" prediction={prediction!r}" if prediction else "")
            + " (defaults; override with --score, --label, --positive"
            + (", --prediction)" if doing == "evaluating" else ")")
        )
    return score, label, positive, prediction, note


def applied_calibration(meta) -> Optional[dict]:
    """What a score output's metadata records of the calibration its run applied (None when it applied none)."""
    cal = (((meta or {}) if isinstance(meta, dict) else {}).get("config") or {}).get("calibration")
    return cal if isinstance(cal, dict) else None


def fitted_mask(table, label: str, calibrations: list) -> tuple:
    """``(mask, names)``: the labelled rows of ``table`` that a calibration of ``calibrations`` (``(name, record)``
    pairs: a file given to the command, the one the output's run applied) was fitted on, and the names of those
    calibrations."""
    import numpy as np

    from ..role import fitted_rows

    labelled = np.asarray(table.column(label).is_valid(), dtype=bool)
    mask = np.zeros(table.num_rows, dtype=bool)
    names = []
    for name, record in calibrations:
        rows = fitted_rows(record, table)
        if rows is not None and (rows & labelled).any():
            mask |= rows & labelled
            names.append(name)
    return mask, names


def leave_out_fitted(table, score: str, label: str, calibrations: list, *, file: str, doing: str):
    """``table`` without the labelled turns a calibration of ``calibrations`` was fitted on (its threshold and map
    were chosen on them, so a figure there is in-sample), saying so in one line; a one-line ``DataError`` when no
    other labelled turn with a score is left."""
    import sys

    import numpy as np
    import pyarrow as pa

    from ..data import DataError, cast_column

    mask, names = fitted_mask(table, label, calibrations)
    if not mask.any():
        return table
    s = cast_column(table.column(score), pa.float64(), column=score, file=file).to_numpy(zero_copy_only=False)
    other = np.isfinite(np.asarray(s, dtype=np.float64)) & np.asarray(table.column(label).is_valid(), dtype=bool)
    rest = int((other & ~mask).sum())
    which = " and ".join(names)
    if rest == 0:
        raise DataError(
            f"every labelled turn ({int(mask.sum())}) fitted the calibration {which}: a figure on them would be "
            f"in-sample, not held out; {doing} needs labels on other turns (calibrate prints its own held-out check)",
            file=file,
            column=label,
        )
    print(
        f"{file}: {int(mask.sum())} labelled turn(s) fitted the calibration {which} (its threshold and map were chosen "
        f"on them): left out, the figures are on the {rest} other labelled turn(s)",
        file=sys.stderr,
    )
    return table.filter(pa.array(~mask))


def _fmt(v) -> str:
    if v is None:
        return "undefined"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def baseline_lines(b: Optional[dict]) -> list:
    """The trivial baselines beside the score, as text (nothing without them)."""
    if not b:
        return []
    aucs = "  ".join(f"{k.replace('_', ' ')} {v:.4f}" for k, v in b["auc"].items())
    lines = [
        "",
        f"trivial baselines on the same rows (AUC): {aucs}",
        f"  score {b['score_auc']:.4f}; {b['folds']}-fold logistic on the baselines {b['cv_auc_baselines']:.4f}, with "
        f"the score {b['cv_auc_with_score']:.4f} (gain {b['gain']:+.4f})",
    ]
    if b.get("note"):
        lines.append(f"warning: {b['note']}")
    return lines


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
    from ..stats import EVALUATION_METRICS

    for m in EVALUATION_METRICS:
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
    lines += baseline_lines(result.get("baselines"))
    by = result.get("by_label", {})
    if by:
        lines += ["", f"{'label':<24}{'n':>7}{'mean':>10}{'median':>10}"]
        for k, v in by.items():
            lines.append(f"{k:<24}{v['n']:>7}{v['mean']:>10.4f}{v['median']:>10.4f}")
    return "\n".join(lines)


def read_labelled(input, *, format: Optional[str] = None, labels: Optional[str] = None):
    """``(table, meta, join)``: a scored table opened through the one reader of score outputs
    (``engine.open_scores``), with the labels file joined onto it when one is given (``join`` is then its
    ``LabelJoin``, else None); the reader's and the join's notes go to stderr."""
    import sys

    from ..engine import open_scores

    out = open_scores(input, format=format)
    for note in out.notes:
        print(f"{input}: {note}", file=sys.stderr)
    table, join = out.table, None
    if labels is not None:
        from ..data import join_labels, read_labels

        table, join = join_labels(table, read_labels(labels), file=str(input))
        for line in join.lines():
            print(line, file=sys.stderr)
    return table, out.meta, join


def refuse_unequal_design(table, file: str, doing: str) -> None:
    """``evaluate`` and ``calibrate`` measure on the labelled turns as they are: labels drawn with unequal
    probabilities (the viewer's ``by-score`` or ``by-uncertainty`` designs) over-represent some scores, and an AUC or
    a threshold taken on them is not the log's (an AUC of 0.93 on a by-score sample where every turn gives 0.85).
    Refused with the reason; ``estimate`` weights by the design."""
    from ..data import DataError

    if "label_weight" not in table.column_names or "label" not in table.column_names:
        return
    w = [v for v, lab in zip(table.column("label_weight").to_pylist(), table.column("label").to_pylist())
         if lab is not None and v is not None]  # fmt: skip
    if w and max(w) - min(w) > 1e-9 * max(w):
        raise DataError(
            f"these labels were drawn with unequal probabilities (design weights {min(w):g} to {max(w):g}): {doing} "
            "on them would describe the sample, not the log; label a uniform sample for it (`adherence view --label "
            "NEW.jsonl --design uniform`), or use `adherence estimate`, which weights by the design",
            file=file,
            column="label_weight",
        )


def read_metadata(path) -> Optional[dict]:
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
            raise DataError(
                f"no labels: give --labels FILE (JSONL or CSV: conversation_id, turn_index, label), or --label COLUMN "
                f"(columns are: {', '.join(cols)})",
                file=file,
            )
        label = "label"
    if positive is None:
        if label not in cols:
            raise DataError(f"no label column {label!r}; columns are: {', '.join(cols)}", file=file, column=label)
        values = sorted({str(v) for v in table.column(label).to_pylist() if v is not None})
        if not values:  # a score output made without labels: a label column of nulls
            raise DataError(
                "no labels: give --labels FILE (JSONL or CSV: conversation_id, turn_index, label), or label a sample "
                "of its turns with `adherence view OUTPUT --label LABELS.jsonl`",
                file=file,
                column=label,
            )
        hits = adherent_values(values)
        if len(hits) != 1:
            raise DataError(
                f"give --positive: which label is the adherent class? values: {', '.join(values[:20])}"
                f"{', ...' if len(values) > 20 else ''}",
                file=file,
                column=label,
            )
        positive = hits[0]
    _check_label_values(table, label, positive, file)
    # an output whose method decides nothing without a threshold (scope) has a prediction column of nulls: no F1
    if (
        prediction is None
        and scored_output
        and "prediction" in cols
        and table.column("prediction").null_count < len(table)
    ):
        prediction = "prediction"
    elif prediction is not None and prediction.lower() == "none":
        prediction = None
    return score, label, positive, prediction


_NEGATIONS = ("non", "not", "un", "in", "dis", "no", "mis")
# label values that read as a violation: anything else beside the adherent class is refused unless --label-map says
_NEGATIVE_WORDS = {"violation", "violations", "violating", "no", "false", "0", "fail", "failed", "failure", "negative",
                   "bad", "wrong", "off_role", "off-role", "out_of_role", "out-of-role", "off_topic", "off-topic",
                   "incorrect", "reject", "rejected", "unsafe"}  # fmt: skip
_NEGATIVE_END = re.compile(r"(violation|violations|failure|failed|fail)$")


def parse_label_map(text: Optional[str]) -> dict:
    """``--label-map a=b,c=d`` as ``{"a": "b", "c": "d"}``; a one-line ``OptionError`` when malformed."""
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        if "=" not in part or not part.split("=", 1)[0].strip() or not part.split("=", 1)[1].strip():
            raise OptionError(f"--label-map takes FROM=TO pairs separated by commas, got {part!r}")
        a, b = part.split("=", 1)
        out[a.strip()] = b.strip()
    return out


def map_labels(table, label: Optional[str], label_map: Optional[str]):
    """``table`` with its label column's values renamed by ``--label-map`` (unchanged without one)."""
    import pyarrow as pa

    mapping = parse_label_map(label_map)
    col = label or "label"
    if not mapping or col not in table.column_names:
        return table
    values = [None if v is None else mapping.get(str(v), str(v)) for v in table.column(col).to_pylist()]
    return table.set_column(table.column_names.index(col), col, pa.array(values, pa.string()))


def _check_label_values(table, label: str, positive, file: str) -> None:
    """Every label other than the adherent class counts as a violation: a value that is the adherent class misspelt
    or in another case (``adherant``, ``Adherent``) would be counted as one in silence, a value that is no violation
    word either (``maybe``) would too, and a ``--positive`` that no label carries makes every label a violation. Each
    is a one-line ``DataError`` naming the value and its rows (``--label-map`` says what a value of one's own is)."""
    import difflib

    from ..data import DataError

    if label not in table.column_names:
        return
    values = [None if v is None else str(v) for v in table.column(label).to_pylist()]
    present = sorted({v for v in values if v is not None})
    pos = str(positive)
    if present and pos not in present:
        raise DataError(
            f"--positive {pos!r} is no label here; the labels are: {', '.join(present[:20])}", file=file, column=label
        )
    want = pos.strip().lower()
    flipped = want in _NEGATIVE_WORDS or bool(_NEGATIVE_END.search(want))  # --positive a violation class, on purpose
    for v in present:
        low = v.strip().lower()
        if v == pos:
            continue
        negated = low.startswith(_NEGATIONS) and want in low  # non_adherent, not-adherent, nonadherent
        if not negated and (
            low == want or (abs(len(low) - len(want)) <= 2 and difflib.SequenceMatcher(None, low, want).ratio() >= 0.8)
        ):
            why = f"looks like the adherent class {pos!r} misspelt or in another case, and would count as a violation: "
            why += "correct it in the labels"
        elif not (flipped or negated or low in _NEGATIVE_WORDS or _NEGATIVE_END.search(low)):
            why = (
                f"is neither the adherent class {pos!r} nor a violation word (violation, *_violation, *_failure, no, "
                f"false, 0, fail, ...): say what it is with --label-map '{v}=violation' (or '{v}={pos}')"
            )
        else:
            continue
        rows = [i + 1 for i, x in enumerate(values) if x == v]  # walked only to name the value's rows
        raise DataError(f"label {v!r} on {len(rows)} row(s) (first: {rows[0]}) {why}", file=file, row=rows[0],
                        column=label)  # fmt: skip


def _cell(m: dict, key: str) -> str:
    v, ci = m.get(key), m.get(f"{key}_ci")
    if v is None:
        return "n/a"
    return f"{v:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci and ci[0] is not None else "")


def format_calibration(cal: dict, *, after_label: str) -> str:
    """Plain-text before/after table of a calibration."""
    level = int(round(100 * cal.get("ci_level", 0.95)))
    b, a = cal["before"], cal["after"]
    target = "" if cal.get("target") is None else f", target {cal['target']}"
    thr_ci = cal.get("threshold_ci")
    lines = [
        f"{cal['n']} labelled turns ({cal['n_positive']} positive, {cal['n_negative']} negative)"
        + (f", AUC {cal['auc']:.4f}" if cal.get("auc") is not None else ""),
        f"threshold ({cal['rule']}{target}): score >= {cal['threshold']:.6g}"
        + (f"  {level}% CI [{thr_ci[0]:.6g}, {thr_ci[1]:.6g}]" if thr_ci and thr_ci[0] is not None else "")
        + (
            f"  (calibrated probability there {cal['threshold_probability']:.3f})"
            if cal.get("threshold_probability") is not None
            else ""
        ),
        f"probability map: {cal['map']['method']}",
        "",
    ]
    left = f"before (score >= {b.get('threshold', 0.5):g})"
    w = max(30, len(left) + 2)
    lines.append(f"{'':<26}{left:<{w}}{after_label}")
    for key, name in (
        ("balanced_accuracy", "balanced accuracy"),
        ("ece", f"ECE ({cal.get('n_bins', 10)} bins)"),
        ("brier", "Brier score"),
        ("predicted_positive_share", "share predicted positive"),
    ):
        lines.append(f"{name:<26}{_cell(b, key):<{w}}{_cell(a, key)}")
    if cal.get("note"):
        lines.append(f"note: {cal['note']}")
    return "\n".join(lines)

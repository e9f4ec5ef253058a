"""How well a score separates labels: the statistics behind ``adherence evaluate``."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._errors import OptionError
from ._bootstrap import bootstrap_ci
from ._checks import UndefinedMetricError
from ._classification import cohen_kappa, f1_per_class, macro_f1
from ._ranking import average_precision_score, roc_auc_score, separation

__all__ = ["EVALUATION_METRICS", "evaluate_scores", "evaluate_table"]


def _f1_pos(y, p):
    return f1_per_class(y, p, labels=[0, 1])[1]


def _f1_neg(y, p):
    return f1_per_class(y, p, labels=[0, 1])[0]


def _macro(y, p):
    return macro_f1(y, p, labels=[0, 1])


def _kappa(y, p):
    return cohen_kappa(y, p, labels=[0, 1])


def _mean_pos(y, s):
    if not y.any():
        raise UndefinedMetricError("no positive rows")
    return float(s[y == 1].mean())


def _mean_neg(y, s):
    if y.all():
        raise UndefinedMetricError("no negative rows")
    return float(s[y == 0].mean())


_SCORE_METRICS: dict[str, Callable] = {
    "auc": roc_auc_score,
    "ap": average_precision_score,
    "mean_positive": _mean_pos,
    "mean_negative": _mean_neg,
    "separation": separation,
}
_PREDICTION_METRICS: dict[str, Callable] = {
    "f1_positive": _f1_pos,
    "f1_negative": _f1_neg,
    "macro_f1": _macro,
    "kappa": _kappa,
}
#: Every metric ``evaluate_table`` reports, in the order the text and HTML reports list them.
EVALUATION_METRICS = tuple(_SCORE_METRICS) + tuple(_PREDICTION_METRICS)


def _nan_to_none(v: float) -> Optional[float]:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def evaluate_scores(
    y_true: Any,
    y_score: Any,
    *,
    y_pred: Any = None,
    n_bootstrap: int = 1000,
    seed: int = 42,
    level: float = 0.95,
) -> dict:
    """Separation statistics of ``y_score`` (and optional 0/1 ``y_pred``) against 0/1 ``y_true``.

    Returns a JSON-ready dict: ``n, n_positive, n_negative, auc, ap, mean_positive,
    mean_negative, separation`` (+ ``f1_positive, f1_negative, macro_f1, kappa``
    with predictions), ``ci`` (metric -> [low, high] percentile bootstrap interval)
    and ``undefined`` (metric -> reason) for every statistic that is undefined on
    this input, whose value is then None.
    """
    y = np.asarray(y_true, dtype=np.int8)
    s = np.asarray(y_score, dtype=np.float64)
    out: dict[str, Any] = {"n": int(len(y)), "n_positive": int(y.sum()), "n_negative": int(len(y) - y.sum())}
    undefined: dict[str, str] = {}
    ci: dict[str, Any] = {}
    jobs: list[tuple[str, Callable[..., Any], tuple[np.ndarray, np.ndarray]]]
    jobs = [(name, fn, (y, s)) for name, fn in _SCORE_METRICS.items()]
    if y_pred is not None:
        p = np.asarray(y_pred, dtype=np.int8)
        jobs += [(name, fn, (y, p)) for name, fn in _PREDICTION_METRICS.items()]
    for name, fn, arrays in jobs:
        try:
            out[name] = float(fn(*arrays))
        except UndefinedMetricError as exc:
            out[name] = None
            undefined[name] = str(exc)
            continue
        if n_bootstrap > 0:
            interval = bootstrap_ci(fn, *arrays, n_resamples=n_bootstrap, seed=seed, level=level)
            ci[name] = interval.as_list()
    if n_bootstrap > 0:
        out["ci"] = ci
        out["ci_level"] = level
        out["bootstrap_resamples"] = n_bootstrap
    out["undefined"] = undefined
    return out


def _binary_prediction(arr: pa.ChunkedArray, column: str, file: Optional[str]) -> np.ndarray:
    from ..data import DataError

    values = arr.to_pylist()
    out = np.empty(len(values), dtype=np.int8)
    for i, v in enumerate(values):
        if isinstance(v, str):
            v = v.strip()
        if v in (1, True, "1", "1.0", "true", "True"):
            out[i] = 1
        elif v in (0, False, "0", "0.0", "false", "False"):
            out[i] = 0
        elif v is None:
            out[i] = -1  # no prediction: allowed only where the row has no score (error / unscored rows)
        else:
            raise DataError(f"expected a 0/1 prediction, got {v!r}", file=file, row=i + 1, column=column)
    return out


def evaluate_table(
    table: pa.Table,
    *,
    score: str,
    label: str,
    positive: Any,
    prediction: Optional[str] = None,
    n_bootstrap: int = 1000,
    seed: int = 42,
    level: float = 0.95,
    file: Optional[str] = None,
    return_rows: bool = False,
    threshold: Optional[float] = None,
):
    """``evaluate_scores`` on columns of ``table``; nothing is dropped silently.

    Rows whose score is null or NaN (e.g. ``status=unscored``) are counted in
    ``n_unscored`` and rows without a label in ``n_unlabeled``; both are left out
    of the statistics. ``by_label`` gives count, mean and median score for each
    label value (fine-grained labels such as scope/tone violations included).
    The label is compared as text to ``positive``.

    With ``return_rows=True`` the result is ``(result, labels, scores)`` of the
    evaluated rows (for plotting). ``threshold`` (instead of a ``prediction``
    column) predicts ``score >= threshold`` for the prediction metrics.

    Raises:
        DataError: a named column is missing, or a score or prediction value is
            not a number / 0-1 value (naming the row).
    """
    from ..data import DataError, cast_column

    for role, name in (("score", score), ("label", label), ("prediction", prediction)):
        if name is not None and name not in table.column_names:
            raise DataError(
                f"no {role} column {name!r}; columns are: {', '.join(table.column_names)}", file=file, column=name
            )
    s_arr = cast_column(table.column(score), pa.float64(), column=score, file=file)
    s = s_arr.to_numpy(zero_copy_only=False).astype(np.float64)
    s[~np.asarray(s_arr.is_valid())] = np.nan
    lab_arr = table.column(label)
    if not pa.types.is_string(lab_arr.type):
        lab_arr = pc.cast(lab_arr, pa.string())
    labels = lab_arr.to_pylist()
    has_label = np.array([v is not None for v in labels])
    scored = ~np.isnan(s)
    keep = scored & has_label
    positive_text = str(positive)
    y = np.array([v == positive_text for v in labels], dtype=np.int8)
    p = None
    if prediction is not None:
        p_all = _binary_prediction(table.column(prediction), prediction, file)
        missing = np.flatnonzero(keep & (p_all < 0))
        if len(missing):
            raise DataError(
                "the prediction is missing (null) on a row that has a score",
                file=file,
                row=int(missing[0]) + 1,
                column=prediction,
            )
        p = p_all[keep]
    if threshold is not None:
        if prediction is not None:
            raise OptionError("give a prediction column or a threshold, not both")
        p = (s[keep] >= threshold).astype(np.int8)
    out = {
        "score_column": score,
        "label_column": label,
        "positive": positive_text,
        "n_rows": int(table.num_rows),
        "n_unscored": int((~scored).sum()),
        "n_unlabeled": int((~has_label).sum()),
    }
    if keep.sum() == 0:
        raise DataError("no row has both a score and a label to evaluate", file=file, column=score)
    if not (y[keep] == 1).any():
        values = sorted({v for v in labels if v is not None})
        raise DataError(
            f"no scored row has label {positive_text!r}, so nothing is positive; labels present: {', '.join(values)}",
            file=file,
            column=label,
        )
    out.update(evaluate_scores(y[keep], s[keep], y_pred=p, n_bootstrap=n_bootstrap, seed=seed, level=level))
    if p is not None:  # rows = true class, columns = predicted class
        yk = y[keep]
        out["confusion"] = {
            "tp": int(((yk == 1) & (p == 1)).sum()),
            "fn": int(((yk == 1) & (p == 0)).sum()),
            "fp": int(((yk == 0) & (p == 1)).sum()),
            "tn": int(((yk == 0) & (p == 0)).sum()),
        }
    by_label = {}
    kept_labels = np.array(labels, dtype=object)[keep]
    kept_scores = s[keep]
    for value in sorted(set(kept_labels.tolist())):
        vs = kept_scores[kept_labels == value]
        by_label[value] = {
            "n": int(len(vs)),
            "mean": float(vs.mean()),
            "median": float(np.median(vs)),
            "std": float(vs.std(ddof=1)) if len(vs) > 1 else None,
        }
    out["by_label"] = by_label
    if "assistant" in table.column_names:  # trivial baselines on the same rows: what the score adds over them
        from ._baselines import baseline_report, text_baselines

        kept = table.select([c for c in ("assistant", "role", "user") if c in table.column_names]).filter(
            pa.array(keep)
        )
        texts = {c: kept.column(c).to_pylist() for c in kept.column_names}
        report = baseline_report(y[keep], s[keep], text_baselines(texts), seed=seed)
        if report is not None:
            out["baselines"] = report
    if return_rows:
        return out, kept_labels, kept_scores
    return out

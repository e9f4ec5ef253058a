"""Classification metrics of predicted labels against true labels."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ._checks import UndefinedMetricError, check_same_length

__all__ = ["f1_per_class", "macro_f1", "cohen_kappa", "confusion_matrix"]


def _labels(y_true: np.ndarray, y_pred: np.ndarray, labels: Optional[Sequence]) -> list:
    if labels is not None:
        return list(labels)
    return sorted(set(y_true.tolist()) | set(y_pred.tolist()), key=lambda v: (str(type(v)), v))


def confusion_matrix(y_true: Any, y_pred: Any, labels: Optional[Sequence] = None) -> tuple[np.ndarray, list]:
    """Counts C[i, j] of true label i predicted as j, and the label order."""
    check_same_length(y_true=y_true, y_pred=y_pred)
    t, p = np.asarray(y_true), np.asarray(y_pred)
    labs = _labels(t, p, labels)
    index = {lab: i for i, lab in enumerate(labs)}
    c = np.zeros((len(labs), len(labs)), dtype=np.int64)
    for a, b in zip(t.tolist(), p.tolist()):
        if a in index and b in index:
            c[index[a], index[b]] += 1
    return c, labs


def f1_per_class(y_true: Any, y_pred: Any, labels: Optional[Sequence] = None) -> dict:
    """F1 of each label treated as the positive class (0.0 where precision and recall are both 0/0).

    Example:
        >>> f1_per_class([1, 1, 0, 0], [1, 0, 0, 0])
        {0: 0.8, 1: 0.6666666666666666}
    """
    c, labs = confusion_matrix(y_true, y_pred, labels)
    tp = np.diag(c).astype(np.float64)
    fp = c.sum(axis=0) - tp
    fn = c.sum(axis=1) - tp
    denom = 2 * tp + fp + fn
    f1 = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)
    return {lab: float(v) for lab, v in zip(labs, f1)}


def macro_f1(y_true: Any, y_pred: Any, labels: Optional[Sequence] = None) -> float:
    """Unweighted mean of ``f1_per_class`` over the labels present in either input."""
    per = f1_per_class(y_true, y_pred, labels)
    if not per:
        raise UndefinedMetricError("no labels; macro F1 is undefined")
    return float(np.mean(list(per.values())))


def cohen_kappa(y1: Any, y2: Any, labels: Optional[Sequence] = None) -> float:
    """Cohen's kappa, (p_o - p_e) / (1 - p_e), between two label sequences.

    Raises:
        UndefinedMetricError: chance agreement is 1 (both raters used a single, identical label).
    """
    c, _ = confusion_matrix(y1, y2, labels)
    n = c.sum()
    if n == 0:
        raise UndefinedMetricError("no rated items; Cohen's kappa is undefined")
    po = np.trace(c) / n
    pe = float((c.sum(axis=0) * c.sum(axis=1)).sum()) / (n * n)
    if np.isclose(pe, 1.0):
        raise UndefinedMetricError("chance agreement is 1 (a single label); Cohen's kappa is undefined")
    return float((po - pe) / (1 - pe))

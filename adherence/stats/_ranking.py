"""Ranking metrics of a score against binary labels."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._checks import UndefinedMetricError, as_binary, as_scores, check_same_length

__all__ = ["roc_auc_score", "average_precision_score", "roc_curve", "separation", "average_ranks"]


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x`` with ties given their average rank."""
    x = np.asarray(x)
    n = len(x)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    bounds = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1], True])
    counts = np.diff(bounds)
    avg = (bounds[:-1] + bounds[1:] - 1) / 2.0 + 1.0
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat(avg, counts)
    return ranks


def _binary_inputs(y_true: Any, y_score: Any) -> tuple[np.ndarray, np.ndarray]:
    check_same_length(y_true=y_true, y_score=y_score)
    return as_binary(y_true), as_scores(y_score)


def roc_auc_score(y_true: Any, y_score: Any) -> float:
    """Area under the ROC curve (the Mann-Whitney probability that a positive outranks a negative).

    Ties count one half.

    Raises:
        UndefinedMetricError: only one class is present in ``y_true``.

    Example:
        >>> roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
        0.75
    """
    y, s = _binary_inputs(y_true, y_score)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise UndefinedMetricError("Only one class present in y_true; ROC AUC is undefined")
    ranks = average_ranks(s)
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def _cumulative_counts(y: np.ndarray, s: np.ndarray):
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s_sorted)), len(s) - 1]
    tps = np.cumsum(y_sorted)[last].astype(np.float64)
    fps = (last + 1) - tps
    return tps, fps, s_sorted[last]


def average_precision_score(y_true: Any, y_score: Any) -> float:
    """Average precision: sum over thresholds of (R_n - R_{n-1}) * P_n (no interpolation).

    Raises:
        UndefinedMetricError: no positive in ``y_true``.
    """
    y, s = _binary_inputs(y_true, y_score)
    if y.sum() == 0:
        raise UndefinedMetricError("No positive sample in y_true; average precision is undefined")
    tps, fps, _ = _cumulative_counts(y, s)
    precision = tps / (tps + fps)
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def roc_curve(y_true: Any, y_score: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) at every distinct score, starting from (0, 0) at +inf."""
    y, s = _binary_inputs(y_true, y_score)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise UndefinedMetricError("Only one class present in y_true; the ROC curve is undefined")
    tps, fps, thr = _cumulative_counts(y, s)
    return np.r_[0.0, fps / n_neg], np.r_[0.0, tps / n_pos], np.r_[np.inf, thr]


def separation(y_true: Any, y_score: Any) -> float:
    """Mean score of positives minus mean score of negatives.

    Raises:
        UndefinedMetricError: only one class is present in ``y_true``.
    """
    y, s = _binary_inputs(y_true, y_score)
    if y.all() or not y.any():
        raise UndefinedMetricError("Only one class present in y_true; separation is undefined")
    return float(s[y == 1].mean() - s[y == 0].mean())

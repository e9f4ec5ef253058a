"""Authorship-verification metrics as the PAN shared task defines them.

Scores lie in [0, 1]; a score of exactly 0.5 is a non-answer. Decisions are
score > 0.5 (same author) and score < 0.5 (different authors).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import OptionError
from ._checks import as_binary, as_scores, check_same_length
from ._ranking import roc_auc_score

__all__ = ["verification_metrics", "c_at_1", "f05u_score", "pan_f1", "brier_complement"]


def _inputs(y_true: Any, y_score: Any) -> tuple[np.ndarray, np.ndarray]:
    check_same_length(y_true=y_true, y_score=y_score)
    y, s = as_binary(y_true), as_scores(y_score)
    if len(y) == 0:
        raise OptionError("no verification problems")
    if (s < 0).any() or (s > 1).any():
        i = int(np.flatnonzero((s < 0) | (s > 1))[0])
        raise OptionError(f"`y_score` must lie in [0, 1]; index {i} is {s[i]}")
    return y, s


def c_at_1(y_true: Any, y_score: Any) -> float:
    """c@1 = (n_c + n_u * n_c / n) / n: non-answers earn the accuracy of the answered ones."""
    y, s = _inputs(y_true, y_score)
    n = len(y)
    answered = s != 0.5
    nc = float(((s[answered] > 0.5) == (y[answered] == 1)).sum())
    nu = float((~answered).sum())
    return (nc + nu * nc / n) / n


def pan_f1(y_true: Any, y_score: Any) -> float:
    """F1 of the same-author class over answered problems only (non-answers ignored); 0.0 if none answered."""
    y, s = _inputs(y_true, y_score)
    answered = s != 0.5
    y, pred = y[answered], (s[answered] > 0.5).astype(np.int8)
    tp = float(((pred == 1) & (y == 1)).sum())
    fp = float(((pred == 1) & (y == 0)).sum())
    fn = float(((pred == 0) & (y == 1)).sum())
    denom = 2 * tp + fp + fn
    return 2 * tp / denom if denom else 0.0


def f05u_score(y_true: Any, y_score: Any) -> float:
    """F0.5u = 1.25 tp / (1.25 tp + 0.25 (fn + n_u) + fp): non-answers count as false negatives."""
    y, s = _inputs(y_true, y_score)
    nu = float((s == 0.5).sum())
    tp = float(((s > 0.5) & (y == 1)).sum())
    fp = float(((s > 0.5) & (y == 0)).sum())
    fn = float(((s < 0.5) & (y == 1)).sum())
    denom = 1.25 * tp + 0.25 * (fn + nu) + fp
    return 1.25 * tp / denom if denom else 0.0


def brier_complement(y_true: Any, y_score: Any) -> float:
    """1 - mean squared error of the scores as probabilities of the same-author class."""
    y, s = _inputs(y_true, y_score)
    return float(1.0 - np.mean((s - y) ** 2))


def verification_metrics(y_true: Any, y_score: Any) -> dict[str, float]:
    """PAN authorship-verification metrics.

    Returns:
        ``auc`` (ROC AUC over all scores), ``c_at_1``, ``f1`` (answered only),
        ``f05u``, ``brier`` (complement of the Brier loss), ``overall`` (mean of
        the five: the Brier score joined the measures in the PAN 2021 evaluator,
        and EVAL4SIM's consistency uses this mean) and ``overall_no_brier`` (mean
        of auc, c@1, f1 and f05u: the Overall published for PAN 2020).

    Raises:
        UndefinedMetricError: only one class in ``y_true`` (AUC is undefined).
    """
    y, s = _inputs(y_true, y_score)
    out = {
        "auc": roc_auc_score(y, s),
        "c_at_1": c_at_1(y, s),
        "f1": pan_f1(y, s),
        "f05u": f05u_score(y, s),
        "brier": brier_complement(y, s),
    }
    out["overall"] = float(np.mean([out[k] for k in ("auc", "c_at_1", "f1", "f05u", "brier")]))
    out["overall_no_brier"] = float(np.mean([out[k] for k in ("auc", "c_at_1", "f1", "f05u")]))
    return out

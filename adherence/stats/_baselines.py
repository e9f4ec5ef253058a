"""Trivial baselines on the same rows as a scorer, and the scorer's AUC controlling for them.

A judge's AUC means little alone: on role-adherence data the reply's length by itself often ranks adherent turns
above violations as well as a small judge does. ``baseline_report`` scores the same labelled rows with reply
length and with word overlap (the reply's words found in the role, and in the user message), and compares two
cross-validated logistic models, the baselines alone and the baselines with the score: the gain is what the
scorer adds over them.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np

from ._checks import UndefinedMetricError
from ._ranking import roc_auc_score

__all__ = ["balanced_weights", "baseline_report", "fit_logistic", "text_baselines"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _words(text: Any) -> set:
    return set(_WORD.findall(str(text).lower())) if text else set()


def text_baselines(columns: dict) -> dict:
    """``{name: float array}`` from the turns' text columns (``assistant``, and ``role`` / ``user`` when given):
    ``reply_length`` (words in the reply), ``role_overlap`` and ``user_overlap`` (the share of the reply's
    distinct words that the role / the user message also holds)."""
    tokens = [_WORD.findall(str(a or "").lower()) for a in columns["assistant"]]  # each reply read once
    out = {"reply_length": np.array([len(t) for t in tokens], dtype=np.float64)}
    reply_words = [set(t) for t in tokens]
    for other in ("role", "user"):
        if other in columns:
            seen: dict = {}  # a conversation's role repeats on every turn: its words are read once
            vals = []
            for wa, b in zip(reply_words, columns[other]):
                wb = (seen[b] if b in seen else seen.setdefault(b, _words(b))) if other == "role" else _words(b)
                vals.append(len(wa & wb) / len(wa) if wa else 0.0)
            out[f"{other}_overlap"] = np.array(vals, dtype=np.float64)
    return out


def fit_logistic(
    x: np.ndarray, y: np.ndarray, *, l2: float = 1e-6, max_iter: int = 100, sample_weight: Optional[np.ndarray] = None
) -> tuple:
    """Logistic regression by Newton's method: ``(coef, intercept)`` maximising the (``sample_weight``-weighted)
    log-likelihood minus ``l2 / 2 * |coef|^2`` (a whisker of ridge keeps separable data finite). With
    ``sample_weight`` it is scikit-learn's ``LogisticRegression(C=1/l2)`` fitted with the same weights
    (``class_weight="balanced"`` is ``balanced_weights(y)``)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, d = x.shape
    sw = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    a = np.hstack([x, np.ones((n, 1))])
    w = np.zeros(d + 1)
    ridge = np.full(d + 1, l2)
    ridge[-1] = 0.0  # the intercept is not shrunk
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -35, 35)))
        grad = a.T @ (sw * (p - y)) + ridge * w
        hess = (a * (sw * p * (1 - p))[:, None]).T @ a + np.diag(ridge)
        step = np.linalg.solve(hess + 1e-12 * np.eye(d + 1), grad)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return w[:-1], float(w[-1])


def balanced_weights(y: np.ndarray) -> np.ndarray:
    """Each row's weight so both classes weigh the same in total: ``n / (2 * n_class)``, scikit-learn's
    ``class_weight="balanced"`` (a few violations among many adherent turns would otherwise pull every
    probability towards adherent, and a cut at 0.5 would flag almost none)."""
    y = np.asarray(y)
    n_pos = int((y == 1).sum())
    counts = np.array([len(y) - n_pos, n_pos], dtype=np.float64)
    return len(y) / (2.0 * counts[(y == 1).astype(np.int64)])


def _cv_auc(x: np.ndarray, y: np.ndarray, folds: int, seed: int) -> float:
    """AUC of out-of-fold predictions of a logistic model on standardised features (stratified folds)."""
    from ._calibration import stratified_folds

    fold = stratified_folds(y, folds, seed)
    pred = np.empty(len(y))
    for k in range(folds):
        test, train = fold == k, fold != k
        mu, sd = x[train].mean(axis=0), x[train].std(axis=0)
        sd[sd == 0] = 1.0
        coef, b = fit_logistic((x[train] - mu) / sd, y[train])
        pred[test] = ((x[test] - mu) / sd) @ coef + b
    return float(roc_auc_score(y, pred))


def baseline_report(y: Any, score: Any, baselines: dict, *, folds: int = 5, seed: int = 42) -> Optional[dict]:
    """The baselines' AUCs on the scorer's rows, and the cross-validated AUC of a logistic model on the baselines
    alone and with the score; ``beats_baselines`` says whether the score ranks the rows better than every
    baseline alone and adds to them. None (with nothing to compare) when a class has fewer rows than folds."""
    y = np.asarray(y, dtype=np.int8)
    s = np.asarray(score, dtype=np.float64)
    if min(int(y.sum()), int(len(y) - y.sum())) < folds or not baselines:
        return None
    try:
        score_auc = float(roc_auc_score(y, s))
        aucs = {name: float(roc_auc_score(y, v)) for name, v in baselines.items()}
    except UndefinedMetricError:
        return None
    x = np.column_stack(list(baselines.values()))
    alone = _cv_auc(x, y, folds, seed)
    together = _cv_auc(np.column_stack([x, s]), y, folds, seed)
    best = max(aucs, key=lambda k: max(aucs[k], 1 - aucs[k]))
    best_auc = max(aucs[best], 1 - aucs[best])  # a baseline that ranks backwards is as strong reversed
    out = {
        "auc": aucs,
        "best": best,
        "best_auc": best_auc,
        "score_auc": score_auc,
        "cv_auc_baselines": alone,
        "cv_auc_with_score": together,
        "gain": together - alone,
        "folds": folds,
        "beats_baselines": bool(score_auc > best_auc and together > alone),
    }
    if not out["beats_baselines"]:
        out["note"] = (
            f"the score (AUC {score_auc:.3f}) does not beat {best.replace('_', ' ')} alone (AUC {best_auc:.3f}) "
            f"on these rows, or adds nothing to the baselines (cross-validated AUC {alone:.3f} without it, "
            f"{together:.3f} with it)"
        )
    return out

"""Calibration of a score on a labelled sample: a decision threshold and a probability map.

A judge's P(yes) is rarely a probability one can threshold at 0.5: a small judge may put every turn
between 0.15 and 0.23, a base model every turn above 0.5. ``fit_calibration`` fits, on labelled
turns, a threshold on the raw score (Youden's J, a target precision or a target recall) and a monotone
map from score to probability (Platt's sigmoid or isotonic regression), and measures what they do on
turns they were not fitted on (stratified k-fold): balanced accuracy and expected calibration error
before and after, with percentile bootstrap intervals.

The positive class is the adherent one; a prediction is ``score >= threshold``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .._errors import OptionError
from ._bootstrap import bootstrap_ci
from ._checks import UndefinedMetricError, as_binary, check_same_length

__all__ = [
    "CalibrationMap",
    "assess_calibration",
    "balanced_accuracy",
    "brier_score_loss",
    "expected_calibration_error",
    "fit_calibration",
    "fit_isotonic",
    "fit_platt",
    "fit_threshold",
    "reliability_bins",
]

THRESHOLD_RULES = ("youden", "precision", "recall")
MAP_METHODS = ("platt", "isotonic", "none")


def _arrays(y_true: Any, y_score: Any) -> tuple[np.ndarray, np.ndarray]:
    y = as_binary(y_true)
    s = np.asarray(y_score, dtype=np.float64)
    check_same_length(y_true=y, y_score=s)
    if s.ndim != 1:
        raise OptionError(f"`y_score` must be one-dimensional, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise OptionError("`y_score` holds NaN or infinite values")
    return y, s


def _both_classes(y: np.ndarray) -> None:
    if len(y) == 0:
        raise UndefinedMetricError("no rows")
    if y.all() or not y.any():
        raise UndefinedMetricError("only one class present")


# ---------------------------------------------------------------------------------------------------------------
# Measures


def balanced_accuracy(y_true: Any, y_pred: Any) -> float:
    """Mean of the recall of each class (``sklearn.metrics.balanced_accuracy_score`` on two classes)."""
    y = as_binary(y_true)
    p = as_binary(y_pred, "y_pred")
    check_same_length(y_true=y, y_pred=p)
    _both_classes(y)
    tpr = float((p[y == 1] == 1).mean())
    tnr = float((p[y == 0] == 0).mean())
    return (tpr + tnr) / 2.0


def brier_score_loss(y_true: Any, y_prob: Any) -> float:
    """Mean squared difference between the probability and the 0/1 outcome."""
    y, p = _arrays(y_true, y_prob)
    if len(y) == 0:
        raise UndefinedMetricError("no rows")
    return float(np.mean((p - y) ** 2))


def reliability_bins(y_true: Any, y_prob: Any, n_bins: int = 10) -> dict:
    """Equal-width bins of ``[0, 1]``: per bin the count, mean probability and observed positive share.

    Binning follows ``sklearn.calibration.calibration_curve(strategy="uniform")``; empty bins have
    ``None`` for their means.
    """
    y, p = _arrays(y_true, y_prob)
    if n_bins < 1:
        raise OptionError(f"`n_bins` must be >= 1, got {n_bins}")
    if len(p) and (p.min() < 0.0 or p.max() > 1.0):
        raise UndefinedMetricError(f"probabilities must lie in [0, 1]; got values in [{p.min():.4g}, {p.max():.4g}]")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    ids = np.searchsorted(edges[1:-1], p)
    count = np.bincount(ids, minlength=n_bins)
    sum_p = np.bincount(ids, weights=p, minlength=n_bins)
    sum_y = np.bincount(ids, weights=y.astype(np.float64), minlength=n_bins)
    mean_p = [float(sp / c) if c else None for sp, c in zip(sum_p, count)]
    frac = [float(sy / c) if c else None for sy, c in zip(sum_y, count)]
    return {
        "edges": edges.tolist(),
        "count": count.astype(int).tolist(),
        "mean_probability": mean_p,
        "fraction_positive": frac,
    }


def expected_calibration_error(y_true: Any, y_prob: Any, n_bins: int = 10) -> float:
    """ECE: the count-weighted mean over equal-width bins of |mean probability - positive share|."""
    b = reliability_bins(y_true, y_prob, n_bins)
    n = sum(b["count"])
    if n == 0:
        raise UndefinedMetricError("no rows")
    return float(
        sum(c * abs(mp - fp) for c, mp, fp in zip(b["count"], b["mean_probability"], b["fraction_positive"]) if c) / n
    )


# ---------------------------------------------------------------------------------------------------------------
# Threshold


def fit_threshold(y_true: Any, y_score: Any, rule: str = "youden", target: Optional[float] = None) -> float:
    """A threshold on the raw score; a turn is predicted adherent when ``score >= threshold``.

    Candidates are the observed scores. ``youden``: the one maximising TPR - FPR (the highest such
    score on ties). ``precision``: the lowest score whose precision reaches ``target`` (most recall
    at that precision). ``recall``: the highest score whose recall reaches ``target`` (fewest false
    positives at that recall). The threshold returned lies halfway between the chosen score and the
    next lower observed one, so it decides the fitted rows exactly as the chosen score does, and new
    rows falling in between go to the nearer side (at the lowest score: that score).

    Raises:
        UndefinedMetricError: a single class, or no threshold reaches the target precision.
    """
    y, s = _arrays(y_true, y_score)
    _both_classes(y)
    if rule not in THRESHOLD_RULES:
        raise OptionError(f"`rule` must be one of {', '.join(THRESHOLD_RULES)}, got {rule!r}")
    if rule == "youden":
        if target is not None:
            raise OptionError("the youden rule takes no target")
    elif target is None or not 0.0 < target <= 1.0:
        raise OptionError(f"the {rule} rule needs a target in (0, 1], got {target!r}")
    goal = 0.0 if target is None else target
    order = np.argsort(-s, kind="stable")
    ss, yy = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(ss)), len(ss) - 1]  # last index of each distinct score (descending)
    tp = np.cumsum(yy)[last].astype(np.float64)
    fp = (last + 1 - tp).astype(np.float64)
    cand = ss[last]
    pos, neg = float(y.sum()), float(len(y) - y.sum())
    tpr, fpr = tp / pos, fp / neg
    if rule == "youden":
        j = int(np.argmax(tpr - fpr))
    elif rule == "recall":
        j = int(np.flatnonzero(tpr >= goal - 1e-12)[0])
    else:
        precision = tp / (tp + fp)
        ok = np.flatnonzero(precision >= goal - 1e-12)
        if not len(ok):
            raise UndefinedMetricError(f"no threshold reaches precision {target} (the best is {precision.max():.4f})")
        j = int(ok[-1])
    return float(cand[j]) if j + 1 == len(cand) else float((cand[j] + cand[j + 1]) / 2.0)


# ---------------------------------------------------------------------------------------------------------------
# Probability maps


@dataclass(frozen=True)
class CalibrationMap:
    """A monotone map from raw score to probability.

    ``method="platt"``: ``1 / (1 + exp(-(a * score + b)))``. ``method="isotonic"``: linear
    interpolation through ``(x, y)`` knots, constant beyond the first and last. ``method="none"``:
    the score itself, clipped to [0, 1].
    """

    method: str
    a: float = 1.0
    b: float = 0.0
    x: tuple = ()
    y: tuple = ()

    def __call__(self, score: Any) -> np.ndarray:
        s = np.asarray(score, dtype=np.float64)
        if self.method == "platt":
            z = self.a * s + self.b
            return np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))
        if self.method == "isotonic":
            return np.interp(s, np.asarray(self.x), np.asarray(self.y))
        if self.method == "none":
            return np.clip(s, 0.0, 1.0)
        raise OptionError(f"unknown calibration map {self.method!r}")

    def to_dict(self) -> dict:
        if self.method == "platt":
            return {"method": "platt", "a": self.a, "b": self.b}
        if self.method == "isotonic":
            return {"method": "isotonic", "x": list(self.x), "y": list(self.y)}
        return {"method": "none"}

    @classmethod
    def from_dict(cls, d: dict) -> CalibrationMap:
        """The map of a calibration file's ``map`` object; a ValueError naming the field that is wrong."""

        def finite(name: str, v: Any) -> float:
            f = float(v)
            if not math.isfinite(f):
                raise OptionError(f"`map.{name}` must be a finite number, got {v!r}")
            return f

        m = d.get("method")
        if m == "platt":
            return cls("platt", a=finite("a", d["a"]), b=finite("b", d["b"]))
        if m == "isotonic":
            x = [finite(f"x[{i}]", v) for i, v in enumerate(d["x"])]
            y = [finite(f"y[{i}]", v) for i, v in enumerate(d["y"])]
            if (
                len(x) != len(y)
                or not x
                or any(b < a for a, b in zip(x, x[1:]))
                or any(b < a for a, b in zip(y, y[1:]))
            ):
                raise OptionError("isotonic map: x and y must be non-empty, of equal length and non-decreasing")
            bad = next((i for i, v in enumerate(y) if not 0.0 <= v <= 1.0), None)
            if bad is not None:
                raise OptionError(f"`map.y[{bad}]` must be a probability in [0, 1], got {y[bad]!r}")
            return cls("isotonic", x=tuple(x), y=tuple(y))
        if m == "none":
            return cls("none")
        raise OptionError(f"unknown calibration map {m!r}; expected platt, isotonic or none")


def fit_platt(y_true: Any, y_score: Any, *, max_iter: int = 100) -> CalibrationMap:
    """Platt scaling: a logistic regression of the label on the score.

    Targets are Platt's smoothed labels ``(N+ + 1) / (N+ + 2)`` and ``1 / (N- + 2)``, which keep the fit
    finite when the score separates the classes; solved by Newton's method with step halving. Without
    the smoothing this is ``sklearn.linear_model.LogisticRegression(penalty=None)`` on the score.
    """
    y, s = _arrays(y_true, y_score)
    _both_classes(y)
    n_pos, n_neg = float(y.sum()), float(len(y) - y.sum())
    t = np.where(y == 1, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    return _logistic_fit(s, t, max_iter=max_iter)


def _logistic_fit(s: np.ndarray, t: np.ndarray, *, max_iter: int = 100) -> CalibrationMap:
    """Minimise the cross-entropy of sigmoid(a*s + b) against soft targets ``t``."""
    X = np.column_stack([s, np.ones_like(s)])
    w = np.array([0.0, math.log((t.sum() + 1e-12) / (len(t) - t.sum() + 1e-12))])

    def loss(w):
        z = X @ w
        return float(np.sum(np.logaddexp(0.0, z) - t * z))

    cur = loss(w)
    for _ in range(max_iter):
        z = X @ w
        p = 1.0 / (1.0 + np.exp(-z))
        g = X.T @ (p - t)
        h = (X * (p * (1 - p))[:, None]).T @ X + 1e-12 * np.eye(2)
        step = np.linalg.solve(h, g)
        lam = 1.0
        while lam > 1e-10:
            new = w - lam * step
            val = loss(new)
            if val <= cur + 1e-15:
                break
            lam /= 2.0
        else:
            break
        done = abs(cur - val) <= 1e-12 * max(1.0, abs(cur))
        w, cur = new, val
        if done or np.max(np.abs(lam * step)) < 1e-12:
            break
    return CalibrationMap("platt", a=float(w[0]), b=float(w[1]))


def fit_isotonic(y_true: Any, y_score: Any) -> CalibrationMap:
    """Isotonic regression (pool adjacent violators), non-decreasing in the score.

    Equal scores are pooled first; predictions interpolate linearly between the fitted scores and are
    clipped beyond them, as ``sklearn.isotonic.IsotonicRegression(out_of_bounds="clip")``.
    """
    y, s = _arrays(y_true, y_score)
    if len(y) == 0:
        raise UndefinedMetricError("no rows")
    xs, inv = np.unique(s, return_inverse=True)
    w = np.bincount(inv).astype(np.float64)
    m = np.bincount(inv, weights=y.astype(np.float64)) / w
    # Pool adjacent violators over blocks (value, weight, length).
    vals, wts, lens = [], [], []
    for v, wt in zip(m, w):
        vals.append(v)
        wts.append(wt)
        lens.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v2, w2, l2 = vals.pop(), wts.pop(), lens.pop()
            v1, w1, l1 = vals.pop(), wts.pop(), lens.pop()
            vals.append((v1 * w1 + v2 * w2) / (w1 + w2))
            wts.append(w1 + w2)
            lens.append(l1 + l2)
    fitted = np.repeat(vals, lens)
    return CalibrationMap("isotonic", x=tuple(float(v) for v in xs), y=tuple(float(v) for v in fitted))


def _fit_map(method: str, y: np.ndarray, s: np.ndarray) -> CalibrationMap:
    if method == "platt":
        return fit_platt(y, s)
    if method == "isotonic":
        return fit_isotonic(y, s)
    if method == "none":
        return CalibrationMap("none")
    raise OptionError(f"`method` must be one of {', '.join(MAP_METHODS)}, got {method!r}")


# ---------------------------------------------------------------------------------------------------------------
# The whole fit with its held-out check


def stratified_folds(y: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Fold number of each row: each class shuffled and dealt round-robin into ``k`` folds."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(y), dtype=np.int64)
    offset = 0
    for cls in (1, 0):
        idx = np.flatnonzero(y == cls)
        idx = idx[rng.permutation(len(idx))]
        fold[idx] = (np.arange(len(idx)) + offset) % k
        offset += len(idx)
    return fold


def stratified_group_folds(y: np.ndarray, groups: Any, k: int, seed: int) -> Optional[np.ndarray]:
    """Fold number of each row with every group (a conversation) whole in one fold, the rarer class spread evenly
    and the rows too: groups shuffled by ``seed``, then dealt, those holding most of the rarer class first, each to
    the fold with fewest of that class so far (then fewest rows), and the groups without it each to the fold with
    fewest rows (then fewest of the class). None when some fold would lack a class (the rarer class sits in
    fewer than ``k`` groups): the caller falls back to row folds and says so.

    Turns of one conversation share its role, its user and often its wording; a model that saw a conversation's
    other turns scores the rest of it better than it will score a new conversation, so out-of-fold figures are
    honest only when conversations are kept whole (scikit-learn's ``StratifiedGroupKFold`` keeps them whole too).
    """
    y = np.asarray(y)
    _, g = np.unique(np.asarray([str(v) for v in groups]), return_inverse=True)
    n_groups = int(g.max()) + 1 if len(g) else 0
    rare = 1 if (y == 1).sum() <= (y == 0).sum() else 0
    rare_per_group = np.bincount(g, weights=(y == rare).astype(np.float64), minlength=n_groups)
    size = np.bincount(g, minlength=n_groups).astype(np.float64)
    order = np.random.default_rng(seed).permutation(n_groups)
    order = order[np.argsort(-rare_per_group[order], kind="stable")]
    fold_rare, fold_size = np.zeros(k), np.zeros(k)
    fold_of_group = np.empty(n_groups, dtype=np.int64)
    for grp in order:
        keys = (fold_size, fold_rare) if rare_per_group[grp] else (fold_rare, fold_size)
        f = int(np.lexsort(keys)[0])
        fold_of_group[grp] = f
        fold_rare[f] += rare_per_group[grp]
        fold_size[f] += size[grp]
    fold = fold_of_group[g]
    if any(len(set(y[fold == f].tolist())) < 2 for f in range(k)):
        return None
    return fold


def _in_unit(s: np.ndarray) -> bool:
    return bool(len(s)) and float(s.min()) >= 0.0 and float(s.max()) <= 1.0


def _measures(y: np.ndarray, pred: np.ndarray, prob: Optional[np.ndarray], n_bins: int) -> dict:
    out: dict[str, Any] = {
        "balanced_accuracy": balanced_accuracy(y, pred),
        "predicted_positive_share": float(pred.mean()),
    }
    if prob is not None:
        out["ece"] = expected_calibration_error(y, prob, n_bins)
        out["brier"] = brier_score_loss(y, prob)
    else:
        out["ece"] = out["brier"] = None
    return out


def _ci(fn, *arrays, n_bootstrap: int, seed: int, level: float) -> Optional[list]:
    if n_bootstrap <= 0:
        return None
    return bootstrap_ci(fn, *arrays, n_resamples=n_bootstrap, seed=seed, level=level).as_list()


def _before_after(
    y: np.ndarray,
    s: np.ndarray,
    pred: np.ndarray,
    prob: Optional[np.ndarray],
    default_threshold: float,
    n_bins: int,
    **boot,
) -> tuple[dict, dict]:
    """Measures of the raw score at ``default_threshold`` (read as a probability where it lies in [0, 1]) and
    of ``pred`` / ``prob`` (None: no probability), with bootstrap intervals and reliability bins."""
    raw_prob = s if _in_unit(s) else None
    raw_pred = (s >= default_threshold).astype(np.int8)

    def ece(yy, pp):
        return expected_calibration_error(yy, pp, n_bins)

    out = []
    for p, q in ((raw_pred, raw_prob), (pred, prob)):
        m = _measures(y, p, q, n_bins)
        m["balanced_accuracy_ci"] = _ci(balanced_accuracy, y, p, **boot)
        m["ece_ci"] = _ci(ece, y, q, **boot) if q is not None else None
        if q is not None:
            m["reliability"] = reliability_bins(y, q, n_bins)
        out.append(m)
    out[0]["threshold"] = default_threshold
    return out[0], out[1]


def fit_calibration(
    y_true: Any,
    y_score: Any,
    *,
    method: str = "platt",
    rule: str = "youden",
    target: Optional[float] = None,
    default_threshold: float = 0.5,
    folds: int = 5,
    n_bins: int = 10,
    n_bootstrap: int = 1000,
    seed: int = 42,
    level: float = 0.95,
    allow_inverted: bool = False,
) -> dict:
    """Fit a threshold and a probability map on labelled scores, and measure them on held-out rows.

    A score that ranks the negative class above the positive one (AUC below 0.5) is refused
    (``UndefinedMetricError``): "score >= threshold" and an increasing probability map would both contradict
    it. ``allow_inverted`` fits it anyway (the result's ``note`` says so).

    Returns a JSON-ready dict: ``threshold`` (on the raw score) with its bootstrap ``threshold_ci``,
    ``map`` (``CalibrationMap.to_dict``), ``before`` (the raw score at ``default_threshold``, and as
    a probability where it lies in [0, 1]) and ``after`` (out-of-fold: each fold's rows predicted and
    mapped by a threshold and map fitted on the other folds), each with balanced accuracy, ECE, Brier
    score and bootstrap intervals, and the reliability bins of both.
    """
    y, s = _arrays(y_true, y_score)
    _both_classes(y)
    if method not in MAP_METHODS:
        raise OptionError(f"`method` must be one of {', '.join(MAP_METHODS)}, got {method!r}")
    n_min = int(min(y.sum(), len(y) - y.sum()))
    if folds < 2:
        raise OptionError(f"`folds` must be >= 2, got {folds}")
    if n_min < folds:
        raise UndefinedMetricError(
            f"{folds}-fold cross-validation needs at least {folds} rows of each class; "
            f"the smaller class has {n_min} (lower --folds or label more turns)"
        )
    from ._ranking import roc_auc_score

    auc = float(roc_auc_score(y, s))
    if auc < 0.5 and not allow_inverted:
        raise UndefinedMetricError(
            f"the score ranks the negative class above the positive one (AUC {auc:.3f} < 0.5): a threshold "
            "'score >= t' and a probability map would contradict each other; check --positive (or the score's "
            "direction), or pass --allow-inverted to fit it anyway"
        )
    threshold = fit_threshold(y, s, rule, target)
    cmap = _fit_map(method, y, s)

    fold = stratified_folds(y, folds, seed)
    oof_pred = np.empty(len(y), dtype=np.int8)
    oof_prob = np.empty(len(y), dtype=np.float64)
    fold_thresholds = []
    for k in range(folds):
        test, train = fold == k, fold != k
        t_k = fit_threshold(y[train], s[train], rule, target)
        fold_thresholds.append(t_k)
        oof_pred[test] = (s[test] >= t_k).astype(np.int8)
        oof_prob[test] = _fit_map(method, y[train], s[train])(s[test])

    has_prob = method != "none" or _in_unit(s)
    before, after = _before_after(
        y,
        s,
        oof_pred,
        oof_prob if has_prob else None,
        default_threshold,
        n_bins,
        n_bootstrap=n_bootstrap,
        seed=seed,
        level=level,
    )

    def refit(yy, ss):
        return fit_threshold(yy, ss, rule, target)

    out: dict[str, Any] = {
        "n": int(len(y)),
        "n_positive": int(y.sum()),
        "n_negative": int(len(y) - y.sum()),
        "auc": auc,
        "rule": rule,
        "target": target,
        "threshold": threshold,
        "threshold_ci": _ci(refit, y, s, n_bootstrap=n_bootstrap, seed=seed, level=level),
        "threshold_probability": float(cmap(np.array([threshold]))[0]),
        "map": cmap.to_dict(),
        "folds": folds,
        "fold_thresholds": [float(t) for t in fold_thresholds],
        "n_bins": n_bins,
        "seed": seed,
        "ci_level": level,
        "bootstrap_resamples": n_bootstrap,
        "before": before,
        "after": after,
    }
    if out["auc"] < 0.5:
        out["note"] = (
            f"fitted with --allow-inverted: AUC {out['auc']:.3f} < 0.5, higher scores go with the negative class "
            "here, so no threshold of the form score >= t predicts well; check --positive and the score's direction"
        )
    return out


def assess_calibration(
    y_true: Any,
    y_score: Any,
    *,
    threshold: float,
    cmap: CalibrationMap,
    default_threshold: float = 0.5,
    n_bins: int = 10,
    n_bootstrap: int = 1000,
    seed: int = 42,
    level: float = 0.95,
) -> dict:
    """A fitted calibration applied to (new) labelled scores: ``before`` (the raw score at
    ``default_threshold``) and ``after`` (``threshold`` and ``cmap``), in ``fit_calibration``'s shape."""
    y, s = _arrays(y_true, y_score)
    _both_classes(y)
    pred = (s >= threshold).astype(np.int8)
    has_prob = cmap.method != "none" or _in_unit(s)
    before, after = _before_after(
        y,
        s,
        pred,
        cmap(s) if has_prob else None,
        default_threshold,
        n_bins,
        n_bootstrap=n_bootstrap,
        seed=seed,
        level=level,
    )
    from ._ranking import roc_auc_score

    return {
        "n": int(len(y)),
        "n_positive": int(y.sum()),
        "n_negative": int(len(y) - y.sum()),
        "auc": float(roc_auc_score(y, s)),
        "threshold": float(threshold),
        "threshold_ci": None,
        "threshold_probability": float(cmap(np.array([threshold]))[0]),
        "map": cmap.to_dict(),
        "n_bins": n_bins,
        "ci_level": level,
        "bootstrap_resamples": n_bootstrap,
        "before": before,
        "after": after,
    }

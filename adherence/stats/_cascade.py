"""Selective verdicts with a guarantee: accept a judge's verdict only where it is confident enough, with the
threshold chosen so that, with probability at least ``1 - delta``, the accepted verdicts agree with the labels at
least ``1 - alpha`` of the time.

The threshold is learnt by fixed-sequence testing (Learn-then-Test, Angelopoulos et al. 2021; used for judge
cascades in Jung et al., "Trust or Escalate", ICLR 2025): candidate thresholds are tried from the most confident
down; at each, the null hypothesis "the error rate of the verdicts accepted at this threshold exceeds alpha" is
tested with the exact binomial tail ``P(Binomial(n, alpha) <= errors)``, and the sequence stops at the first
threshold whose p-value exceeds ``delta`` (it starts at the first threshold accepting enough turns for a
certificate to be possible at all, and steps by about 2% of the turns). Every threshold before it is certified; the lowest one (accepting
the most turns) is chosen. A stage that cannot certify even its most confident verdicts accepts nothing.

In a cascade each stage is fitted on the calibration turns the earlier stages did not accept, with ``delta``
shared equally among the stages, so the accepted verdicts of the whole cascade meet the bound with
probability at least ``1 - delta`` (a union bound; each stage's accepted set has error at most alpha, and so
has their union).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._errors import OptionError

__all__ = ["apply_cascade", "binomial_p_value", "fit_cascade", "select_threshold", "verdict_confidence"]


def binomial_p_value(errors: int, n: int, alpha: float) -> float:
    """``P(Binomial(n, alpha) <= errors)``: small when ``errors`` out of ``n`` is implausible for an error rate of
    ``alpha`` or more (the exact test of "the error rate exceeds alpha")."""
    from scipy.stats import binom

    if n == 0:
        return 1.0
    return float(binom.cdf(errors, n, alpha))


def select_threshold(confidence, correct, *, alpha: float, delta: float, min_accepted: int = 1, grid: int = 50) -> dict:
    """The lowest confidence threshold certified by fixed-sequence testing (see the module's text).

    Args:
        confidence: each calibration turn's confidence in its verdict (higher = surer).
        correct: whether its verdict agrees with the label.
        alpha: the error rate allowed on accepted turns.
        delta: the chance allowed that the chosen threshold's true error rate exceeds ``alpha``.
        grid: at most this many thresholds are tested (one every ``len / grid`` turns accepted).

    Returns:
        ``{"threshold", "accepted", "errors", "p_value", "tested"}``; ``threshold`` is None when nothing is
        certified (the stage accepts nothing).
    """
    if not 0 < alpha < 1 or not 0 < delta < 1:
        raise OptionError(f"alpha and delta must be in (0, 1), got {alpha} and {delta}")
    c = np.asarray(confidence, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    if len(c) != len(ok):
        raise OptionError(f"{len(c)} confidences but {len(ok)} verdicts")
    order = np.argsort(-c, kind="stable")
    c, ok = c[order], ok[order]
    errors = np.cumsum(~ok)
    chosen: dict = {"threshold": None, "accepted": 0, "errors": 0, "p_value": None, "tested": 0}
    # candidate thresholds: the distinct confidences, most confident first; at threshold c[i] every turn with
    # confidence >= c[i] is accepted (ties accepted together)
    last_of_value = np.flatnonzero(np.r_[c[1:] != c[:-1], True])
    # The sequence starts where the test can succeed at all: a threshold accepting fewer than n0 turns could not
    # be certified even with no error ((1 - alpha)^n0 <= delta), so it is not tested (the order, and where it
    # starts, depend on the confidences alone, never on the labels).
    n0 = max(min_accepted, int(np.ceil(np.log(delta) / np.log1p(-alpha))))
    if not len(c) or n0 > len(c):
        return chosen
    # Candidates every ~2% of the turns (at most `grid` tests): between two tests the accepted set grows enough
    # that one unlucky error among the most confident turns does not end the sequence (with a step of one turn
    # the p-value jumps with every error); the grid, like the start, comes from the confidences alone.
    step = max(1, int(np.ceil(len(c) / grid)))
    wanted = np.minimum(np.arange(n0, len(c) + step, step), len(c))
    candidates = np.unique(last_of_value[np.searchsorted(last_of_value + 1, wanted)])
    for tested, i in enumerate(candidates, start=1):
        n, e = int(i + 1), int(errors[i])
        p = binomial_p_value(e, n, alpha)
        if p > delta:
            chosen["tested"] = tested
            break
        chosen = {"threshold": float(c[i]), "accepted": n, "errors": e, "p_value": p, "tested": tested}
    return chosen


def fit_cascade(stages: list, labels, *, alpha: float, delta: float) -> list:
    """Thresholds for a cascade of judges, cheapest first.

    Args:
        stages: per stage, ``(verdict, confidence)`` arrays over the same calibration turns (verdict 1 adherent,
            0 not; NaN confidence: the stage has no verdict for that turn).
        labels: each turn's label (1 adherent, 0 not).

    Returns:
        Per stage, ``select_threshold``'s result plus ``reaching`` (the calibration turns earlier stages left
        to it) and ``delta`` (its share).
    """
    y = np.asarray(labels, dtype=np.int64)
    left = np.ones(len(y), dtype=bool)
    share = delta / len(stages)
    out = []
    for verdict, confidence in stages:
        v = np.asarray(verdict, dtype=np.float64)
        c = np.asarray(confidence, dtype=np.float64)
        usable = left & np.isfinite(c) & np.isfinite(v)
        fit = select_threshold(c[usable], v[usable] == y[usable], alpha=alpha, delta=share)
        fit.update(reaching=int(left.sum()), delta=share)
        out.append(fit)
        if fit["threshold"] is not None:
            left &= ~(usable & (c >= fit["threshold"]))
    return out


def apply_cascade(stages: list, thresholds: list) -> tuple:
    """``(verdict, decided_by)`` per turn: the first stage whose confidence reaches its threshold decides
    (``decided_by`` 1-based; 0 and a NaN verdict where none does: the turn abstains)."""
    n = len(stages[0][0])
    verdict = np.full(n, np.nan)
    decided = np.zeros(n, dtype=np.int64)
    for k, ((v, c), t) in enumerate(zip(stages, thresholds), start=1):
        if t is None:
            continue
        v, c = np.asarray(v, dtype=np.float64), np.asarray(c, dtype=np.float64)
        take = (decided == 0) & np.isfinite(c) & np.isfinite(v) & (c >= t)
        verdict[take] = v[take]
        decided[take] = k
    return verdict, decided


def verdict_confidence(score, threshold: float = 0.5, prediction: Optional[np.ndarray] = None) -> tuple:
    """A stage's verdict (``prediction`` when given, else ``score >= threshold``) and its confidence: how far the
    score lies from the threshold on the verdict's side (NaN where there is no score)."""
    s = np.asarray(score, dtype=np.float64)
    v = (s >= threshold).astype(np.float64) if prediction is None else np.asarray(prediction, dtype=np.float64)
    v = np.where(np.isfinite(s), v, np.nan)
    return v, np.abs(s - threshold)

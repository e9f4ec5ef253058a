"""Two score outputs of the same turns, compared: paired differences with intervals that resample whole
conversations, McNemar's exact test on the predictions, and a non-inferiority gate on the violation rate."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._errors import OptionError

__all__ = ["cluster_bootstrap_diff", "compare_paired", "mcnemar_exact"]


def mcnemar_exact(old, new) -> dict:
    """McNemar's exact test on paired binary predictions (1 adherent, 0 a violation).

    Returns the 2x2 table (rows: old 1/0, columns: new 1/0), the discordant counts ``b`` (old 1, new 0: turns the
    new output calls violations) and ``c`` (old 0, new 1), and the two-sided exact p-value
    ``min(1, 2 P(Binomial(b + c, 1/2) <= min(b, c)))``.
    """
    from scipy.stats import binom

    o = np.asarray(old, dtype=np.int64)
    n = np.asarray(new, dtype=np.int64)
    table = [[int(((o == 1) & (n == 1)).sum()), int(((o == 1) & (n == 0)).sum())],
             [int(((o == 0) & (n == 1)).sum()), int(((o == 0) & (n == 0)).sum())]]  # fmt: skip
    b, c = table[0][1], table[1][0]
    p = 1.0 if b + c == 0 else float(min(1.0, 2.0 * binom.cdf(min(b, c), b + c, 0.5)))
    return {"table": table, "b": b, "c": c, "p_value": p}


def cluster_bootstrap_diff(
    diff, clusters, *, n_bootstrap: int = 2000, seed: int = 0, level: float = 0.95, max_elements: int = 1 << 24
) -> dict:
    """The mean of paired differences ``diff`` (one per turn) with a percentile bootstrap interval that resamples
    whole clusters (conversations) with replacement: each resample's mean is the sum of its conversations'
    differences over the number of their turns.

    Returns ``{"diff", "ci_low", "ci_high", "n", "clusters"}``.
    """
    d = np.asarray(diff, dtype=np.float64)
    if d.size == 0:
        return {"diff": None, "ci_low": None, "ci_high": None, "n": 0, "clusters": 0}
    _, inverse = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    g = int(inverse.max()) + 1
    sums = np.bincount(inverse, weights=d, minlength=g)
    counts = np.bincount(inverse, minlength=g).astype(np.float64)
    rng = np.random.default_rng(seed)
    stats = np.empty(n_bootstrap)
    step = max(1, max_elements // max(1, g))
    for a in range(0, n_bootstrap, step):
        b = min(step, n_bootstrap - a)
        draws = rng.integers(0, g, size=(b, g))
        w = np.zeros((b, g))
        np.add.at(w, (np.repeat(np.arange(b), g), draws.ravel()), 1.0)  # how often each conversation is drawn
        stats[a : a + b] = (w @ sums) / (w @ counts)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.percentile(stats, [100 * alpha, 100 * (1 - alpha)])
    return {"diff": float(d.mean()), "ci_low": float(lo), "ci_high": float(hi), "n": int(d.size), "clusters": g}


def compare_paired(
    conversation_id,
    old_score,
    new_score,
    old_pred=None,
    new_pred=None,
    *,
    n_bootstrap: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict:
    """Mean score and violation rate (share of ``prediction == 0``) of each side over the turns both scored, and
    the paired difference (new - old) of each with a conversation-clustered bootstrap interval; McNemar's exact
    test where both sides have predictions."""
    if not 0 < level < 1:
        raise OptionError(f"the interval's level must be in (0, 1), got {level}")
    cid = np.asarray(conversation_id, dtype=object)
    so, sn = np.asarray(old_score, dtype=np.float64), np.asarray(new_score, dtype=np.float64)
    both = np.isfinite(so) & np.isfinite(sn)
    out: dict = {"n": int(len(cid)), "n_both_scored": int(both.sum())}
    kw: dict[str, Any] = {"n_bootstrap": n_bootstrap, "seed": seed, "level": level}
    out["score"] = {
        "old": float(so[both].mean()) if both.any() else None,
        "new": float(sn[both].mean()) if both.any() else None,
        **cluster_bootstrap_diff(sn[both] - so[both], cid[both], **kw),
    }
    if old_pred is not None and new_pred is not None:
        po, pn = np.asarray(old_pred, dtype=np.float64), np.asarray(new_pred, dtype=np.float64)
        bp = np.isfinite(po) & np.isfinite(pn)
        vo, vn = (po[bp] == 0).astype(np.float64), (pn[bp] == 0).astype(np.float64)
        out["violation_rate"] = {
            "old": float(vo.mean()) if bp.any() else None,
            "new": float(vn.mean()) if bp.any() else None,
            **cluster_bootstrap_diff(vn - vo, cid[bp], **kw),
        }
        out["mcnemar"] = mcnemar_exact(po[bp], pn[bp])
    return out


def gate(result: dict, worse_by: float) -> Optional[str]:
    """Non-inferiority: the reason the new output fails (its violation rate may be worse than the old one's by
    more than ``worse_by``: the interval's upper bound on new - old exceeds it), or None when it passes."""
    v = result.get("violation_rate")
    if v is None or v.get("ci_high") is None:
        return "no turn has a prediction in both outputs, so the violation rate cannot be compared"
    if v["ci_high"] > worse_by:
        return (
            f"the violation rate may be worse by more than {worse_by:g}: {v['old']:.4f} -> {v['new']:.4f}, "
            f"difference {v['diff']:+.4f} [{v['ci_low']:+.4f}, {v['ci_high']:+.4f}] (upper bound above {worse_by:g})"
        )
    return None

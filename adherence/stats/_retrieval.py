"""Retrieval and curve helpers: MRR, span weights, normalised area, curve similarity."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._errors import OptionError

__all__ = ["mrr", "span_weights", "normalized_auc", "curve_similarity"]


def mrr(ranks: Any) -> float:
    """Mean reciprocal rank of 1-based ranks; a missing rank (None, NaN, inf, 0) counts 0.

    Example:
        >>> mrr([1, 2, None, 4])
        0.4375
    """
    values = []
    for r in list(ranks):
        if r is None or (isinstance(r, float) and (math.isnan(r) or math.isinf(r))) or r == 0:
            values.append(0.0)
            continue
        if r < 1:
            raise OptionError(f"ranks are 1-based; got {r}")
        values.append(1.0 / float(r))
    if not values:
        raise OptionError("mrr of no ranks")
    return float(np.mean(values))


def span_weights(points: Any) -> np.ndarray:
    """Weights of curve points by the span they cover.

    Interior points get (p[i+1] - p[i-1]) / 2; the endpoints the gap to their neighbour.
    """
    p = np.asarray(points, dtype=np.float64)
    if p.ndim != 1 or len(p) < 2:
        raise OptionError("span_weights needs at least two points")
    if np.any(np.diff(p) <= 0):
        raise OptionError("points must be strictly increasing")
    w = np.empty_like(p)
    w[0] = p[1] - p[0]
    w[-1] = p[-1] - p[-2]
    w[1:-1] = (p[2:] - p[:-2]) / 2.0
    return w


def normalized_auc(points: Any, values: Any) -> float:
    """Trapezoid area under ``values`` over ``points``, divided by the span p[-1] - p[0]."""
    p = np.asarray(points, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if p.shape != v.shape or len(p) < 2:
        raise OptionError("normalized_auc needs two equal-length arrays of at least two points")
    area = float(np.sum((p[1:] - p[:-1]) * (v[1:] + v[:-1]) / 2.0))
    return area / float(p[-1] - p[0])


def curve_similarity(reference: Any, candidate: Any, points: Any) -> float:
    """sum(w a b) / max(sum(w a^2), sum(w b^2)) with span weights ``w`` over ``points``.

    1.0 when the curves are equal; lower when ``candidate`` deviates in either direction.
    """
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    w = span_weights(points)
    if a.shape != w.shape or b.shape != w.shape:
        raise OptionError("curves and points must have the same length")
    denom = max(float(np.sum(w * a * a)), float(np.sum(w * b * b)))
    if denom == 0:
        return 1.0 if np.allclose(a, b) else 0.0
    return float(np.sum(w * a * b) / denom)

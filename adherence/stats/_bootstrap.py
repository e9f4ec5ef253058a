"""Percentile bootstrap confidence intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from .._errors import OptionError
from ._checks import UndefinedMetricError, check_same_length

__all__ = ["ConfidenceInterval", "bootstrap_ci"]


@dataclass(frozen=True)
class ConfidenceInterval:
    """A percentile bootstrap interval.

    Attributes:
        low: the interval's lower bound (NaN when no resample was valid).
        high: the interval's upper bound (NaN when no resample was valid).
        estimate: the statistic on the full data (NaN when undefined there).
        level: the confidence level.
        n_resamples: resamples that produced a value.
        n_skipped: resamples skipped because the statistic was undefined on them
            (e.g. a resample holding a single class).
    """

    low: float
    high: float
    estimate: float
    level: float
    n_resamples: int
    n_skipped: int

    def as_list(self) -> list[Optional[float]]:
        return [None if math.isnan(self.low) else self.low, None if math.isnan(self.high) else self.high]


def bootstrap_ci(
    statistic: Callable[..., float],
    *arrays: Any,
    n_resamples: int = 1000,
    seed: int = 42,
    level: float = 0.95,
) -> ConfidenceInterval:
    """Percentile bootstrap interval of ``statistic(*arrays)``.

    Rows are resampled jointly across ``arrays``. A resample on which the statistic
    is undefined (it raises ``UndefinedMetricError``, e.g. a single class for
    AUC, or returns NaN) is skipped and counted in ``n_skipped``, as the
    role-adherence paper's experiments did.

    Example:
        >>> from adherence.stats import roc_auc_score
        >>> ci = bootstrap_ci(roc_auc_score, [0, 1, 0, 1, 1, 0], [.1, .9, .3, .7, .4, .5], n_resamples=200)
        >>> 0.0 <= ci.low <= ci.estimate <= ci.high <= 1.0
        True
    """
    if not arrays:
        raise OptionError("bootstrap_ci needs at least one array")
    if n_resamples < 1:
        raise OptionError(f"`n_resamples` must be >= 1, got {n_resamples}")
    if not 0.0 < level < 1.0:
        raise OptionError(f"`level` must be in (0, 1), got {level}")
    n = check_same_length(**{f"array{i}": a for i, a in enumerate(arrays)})
    if n == 0:
        raise UndefinedMetricError("no data to resample")
    data = [np.asarray(a) for a in arrays]
    try:
        estimate = float(statistic(*data))
    except UndefinedMetricError:
        estimate = math.nan
    rng = np.random.default_rng(seed)
    values = []
    skipped = 0
    for _ in range(n_resamples):
        idx = rng.integers(0, n, size=n)
        try:
            v = float(statistic(*(a[idx] for a in data)))
        except UndefinedMetricError:
            skipped += 1
            continue
        if math.isnan(v):
            skipped += 1
            continue
        values.append(v)
    if not values:
        return ConfidenceInterval(math.nan, math.nan, estimate, level, 0, skipped)
    alpha = (1.0 - level) / 2.0
    low, high = np.percentile(values, [100 * alpha, 100 * (1 - alpha)])
    return ConfidenceInterval(float(low), float(high), estimate, level, len(values), skipped)

"""Input checks shared by the statistics."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import OptionError, UserError

__all__ = ["UndefinedMetricError", "as_binary", "as_scores", "check_same_length"]


class UndefinedMetricError(UserError, ValueError):
    """The statistic is undefined for this input (e.g. only one class present)."""


def check_same_length(**arrays: Any) -> int:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise OptionError(f"inputs have different lengths: {shown}")
    return next(iter(lengths.values())) if lengths else 0


def as_binary(y: Any, name: str = "y_true") -> np.ndarray:
    """Return ``y`` as an int8 array of 0/1, or raise naming the first bad value."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise OptionError(f"`{name}` must be one-dimensional, got shape {arr.shape}")
    if arr.dtype == bool:
        return arr.astype(np.int8)
    try:
        values = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise OptionError(f"`{name}` must hold 0/1 labels, got values like {arr[:3].tolist()}") from None
    bad = ~np.isin(values, (0.0, 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise OptionError(f"`{name}` must hold 0/1 labels; index {i} is {arr[i]!r}")
    return values.astype(np.int8)


def as_scores(y: Any, name: str = "y_score") -> np.ndarray:
    """Return ``y`` as a finite float64 array, or raise naming the first NaN/inf."""
    arr = np.asarray(y, dtype=np.float64)
    if arr.ndim != 1:
        raise OptionError(f"`{name}` must be one-dimensional, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise OptionError(f"`{name}` must be finite; index {i} is {arr[i]}")
    return arr

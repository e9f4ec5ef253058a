"""Inter-rater agreement over a subjects x raters matrix of categorical answers.

In an audit the subjects are (question, artifact) pairs and the raters are the
k repeated judge runs. Missing answers (None, NaN or "") are allowed; a subject
with no answer at all is dropped, and percent agreement uses the subjects with
at least two answers (Gwet's handling of missing ratings, as irrCAC does).
Categories are the distinct answers present anywhere in the matrix; string answers
that differ only in case or surrounding white space (``"Yes"``, ``"yes "``) are one
category unless ``normalize=False``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import OptionError
from ._checks import UndefinedMetricError

__all__ = ["Agreement", "agreement", "percent_agreement", "gwet_ac1", "fleiss_kappa", "category_counts"]


def _is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and v == "")


def category_counts(ratings: Any, *, normalize: bool = True) -> tuple[np.ndarray, list]:
    """(counts, categories): counts[i, k] = raters who put subject i in category k.

    Subjects without any answer are dropped. With ``normalize`` (default), string
    answers that are equal after strip + casefold are one category (``"Yes"`` and
    ``"yes "``), labelled by the first spelling seen; a blank string is a missing answer.
    """
    arr = np.asarray(ratings, dtype=object)
    if arr.ndim != 2:
        raise OptionError(f"`ratings` must be a subjects x raters matrix, got shape {arr.shape}")
    if normalize:  # each spelling maps to the first one seen (stripped), so labels stay readable
        first: dict = {}
        flat = [
            first.setdefault(v.strip().casefold(), v.strip()) if isinstance(v, str) else v for v in arr.ravel().tolist()
        ]
        arr = np.array(flat + [None], dtype=object)[:-1].reshape(arr.shape)
    present = [v for v in arr.ravel().tolist() if not _is_missing(v)]
    categories = sorted(set(present), key=lambda v: (str(type(v)), v))
    index = {c: k for k, c in enumerate(categories)}
    counts = np.zeros((arr.shape[0], len(categories)), dtype=np.float64)
    for i, row in enumerate(arr.tolist()):
        for v in row:
            if not _is_missing(v):
                counts[i, index[v]] += 1
    counts = counts[counts.sum(axis=1) > 0]
    return counts, categories


def _pa_pi(counts: np.ndarray) -> tuple[float, np.ndarray]:
    if counts.shape[0] == 0:
        raise UndefinedMetricError("no answered subject; agreement is undefined")
    r = counts.sum(axis=1)
    multi = r >= 2
    if not multi.any():
        raise UndefinedMetricError("no subject has two or more answers; agreement is undefined")
    pa = float(np.mean((counts[multi] * (counts[multi] - 1)).sum(axis=1) / (r[multi] * (r[multi] - 1))))
    pi = (counts / r[:, None]).mean(axis=0)
    return pa, pi


@dataclass(frozen=True)
class Agreement:
    """Agreement statistics of one ratings matrix.

    ``fleiss_imputed`` / ``ac1_imputed`` are True when the coefficient is
    undefined (a single category is used: chance agreement is 1) and 1.0 was
    reported for the perfect agreement it reflects.
    """

    percent_agreement: float
    gwet_ac1: float
    fleiss_kappa: float
    ac1_imputed: bool
    fleiss_imputed: bool
    n_subjects: int
    categories: tuple


def agreement(ratings: Any, *, normalize: bool = True) -> Agreement:
    """Percent agreement, Gwet's AC1 and Fleiss' kappa of ``ratings`` in one pass.

    Example:
        >>> a = agreement([["Yes", "Yes", "Yes"], ["No", "No", "Yes"], ["Yes", None, "Yes"]])
        >>> round(a.percent_agreement, 4), round(a.gwet_ac1, 4)
        (0.7778, 0.6604)
    """
    counts, categories = category_counts(ratings, normalize=normalize)
    pa, pi = _pa_pi(counts)
    q = len(categories)
    if q < 2:
        # One category used by everyone: chance agreement is 1 and both coefficients are 0/0.
        return Agreement(pa, 1.0, 1.0, True, True, counts.shape[0], tuple(categories))
    pe_gwet = float((pi * (1 - pi)).sum() / (q - 1))
    ac1 = (pa - pe_gwet) / (1 - pe_gwet)
    pe_fleiss = float((pi**2).sum())
    kappa = (pa - pe_fleiss) / (1 - pe_fleiss)
    return Agreement(pa, float(ac1), float(kappa), False, False, counts.shape[0], tuple(categories))


def percent_agreement(ratings: Any, *, normalize: bool = True) -> float:
    """Mean over subjects (with >= 2 answers) of the share of agreeing rater pairs."""
    return agreement(ratings, normalize=normalize).percent_agreement


def gwet_ac1(ratings: Any, *, normalize: bool = True) -> float:
    """Gwet's AC1: (p_a - p_e) / (1 - p_e) with p_e = sum_k pi_k (1 - pi_k) / (q - 1).

    Returns 1.0 when a single category is used (see ``agreement`` for the flag).
    """
    return agreement(ratings, normalize=normalize).gwet_ac1


def fleiss_kappa(ratings: Any, *, return_imputed: bool = False, normalize: bool = True):
    """Fleiss' kappa: (p_a - p_e) / (1 - p_e) with p_e = sum_k pi_k^2.

    Undefined when a single category is used (p_e = 1); then 1.0 is returned
    and, with ``return_imputed=True``, the result is ``(1.0, True)``.
    """
    a = agreement(ratings, normalize=normalize)
    return (a.fleiss_kappa, a.fleiss_imputed) if return_imputed else a.fleiss_kappa

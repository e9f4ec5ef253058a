"""Score turns with a method, and aggregate turn scores into session scores."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._errors import OptionError
from ..data import TURN_SCORES, TURNS, read_table, turns_to_score
from ._base import Resources, RoleConfig, get_method

__all__ = ["score_turns", "aggregate_sessions", "bad_weight_rows"]


def score_turns(
    turns: Union[pa.Table, str],
    method: str = "llm_judge",
    *,
    config: Optional[RoleConfig] = None,
    resources: Optional[Resources] = None,
    **options: Any,
) -> pa.Table:
    """Score every turn of ``turns`` with a reference-based method.

    Returns the input columns plus ``method, score, prediction, status, error``
    and the method's diagnostic columns (``reason, p_yes_source, truncated`` for
    ``llm_judge``). Every input row appears once: a turn that cannot be scored
    (empty text, no ground truth) has ``status="error"`` and a message, an
    unparseable judge answer ``status="unscored"``, never a silent 0.

    Example:
        >>> from adherence.data import example_path
        >>> out = score_turns(example_path("role"), "kl")
        >>> out.num_rows, set(out.column("status").to_pylist())
        (28, {'ok'})
    """
    if config is None:
        config = RoleConfig(method=method, **options)
    elif options or method != config.method:
        config = dataclasses.replace(config, method=method, **options)
    table = read_table(turns, TURNS)
    resources = resources or Resources(config)
    result = get_method(config.method).score(table, config, resources)
    score = np.asarray(result.score, dtype=np.float64)
    if result.status is not None:
        status = list(result.status)
        ok = np.array([st == "ok" for st in status]) & ~np.isnan(score)
        errors = list(result.error)
    else:
        ok = np.array([e is None for e in result.error]) & ~np.isnan(score)
        status = ["ok" if k else ("error" if e is not None else "unscored") for k, e in zip(ok, result.error)]
        errors = [e if e is not None else (None if k else "method returned no score") for k, e in zip(ok, result.error)]
    for i, why in bad_weight_rows(table):  # a bad weight would poison its session: the row is an error instead
        ok[i] = False
        status[i], errors[i] = "error", why
    for j in np.flatnonzero(~turns_to_score(table)):  # context rows: history for later turns, never a score
        ok[j] = False
        status[j], errors[j] = "skipped", None
    thr = config.threshold
    pred = [int(s >= thr) if k and thr is not None else None for s, k in zip(score, ok)]
    out = table
    cols = {
        "method": pa.array([config.method] * table.num_rows, pa.string()),
        "score": pa.array([float(s) if k else None for s, k in zip(score, ok)], pa.float64()),
        "prediction": pa.array(pred, pa.int8()),
        "status": pa.array(status, pa.string()),
        "error": pa.array(errors, pa.string()),
    }
    if config.calibration:
        from ..stats import CalibrationMap

        mapped = CalibrationMap.from_dict(config.calibration["map"])(np.where(ok, score, 0.0))
        cols["calibrated_score"] = pa.array([float(v) if k else None for v, k in zip(mapped, ok)], pa.float64())
    for name, values in result.extra.items():
        # Contract columns (reason, p_yes_source, truncated) keep their names; diagnostics get the method prefix.
        own = name in TURN_SCORES.names or name.startswith(config.method)
        cols[name if own else f"{config.method}_{name}"] = pa.array(values)
    for name, arr in cols.items():
        if name in out.column_names:
            out = out.drop_columns([name])
        out = out.append_column(name, arr)
    return out


def _weights(scores: pa.Table) -> np.ndarray:
    if "weight" not in scores.column_names:
        return np.ones(scores.num_rows)
    return scores.column("weight").cast(pa.float64()).fill_null(1.0).to_numpy(zero_copy_only=False)


def bad_weight_rows(scores: pa.Table) -> list[tuple[int, str]]:
    """Rows whose ``weight`` is NaN, infinite or negative, with the reason (null means 1)."""
    if "weight" not in scores.column_names:
        return []
    w = _weights(scores)
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    return [(int(i), f"weight must be a finite number >= 0, got {w[i]!r}") for i in bad]


def _session_bootstrap(
    vals: np.ndarray, wts: np.ndarray, *, n_bootstrap: int, seed: int, level: float, max_elements: int = 1 << 24
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap of the weighted mean for G sessions of the same length n at once.

    ``vals``/``wts`` are (G, n). Each session is resampled exactly as ``bootstrap_ci``
    with ``seed`` would resample it alone (the same index matrix, drawn once per length), so
    the bounds equal the per-session computation; resamples whose weights sum to 0 are skipped.
    """
    g, n = vals.shape
    idx = np.random.default_rng(seed).integers(0, n, size=(n_bootstrap, n))
    # Resample b's weighted mean is (c_b . v*w) / (c_b . w) with c_b the draw counts of each turn:
    # one (B, n) count matrix per length, and two matmuls for every session of that length.
    counts = np.zeros((n_bootstrap, n))
    np.add.at(counts, (np.repeat(np.arange(n_bootstrap), n), idx.ravel()), 1.0)
    alpha = (1.0 - level) / 2.0
    low, high = np.full(g, np.nan), np.full(g, np.nan)
    step = max(1, max_elements // max(1, n_bootstrap))
    for a in range(0, g, step):
        v, w = vals[a : a + step], wts[a : a + step]
        den = counts @ w.T  # (B, chunk)
        with np.errstate(invalid="ignore", divide="ignore"):
            stat = (counts @ (v * w).T) / den
        stat[den <= 0] = np.nan
        pct = [100 * alpha, 100 * (1 - alpha)]
        q = np.nanpercentile(stat, pct, axis=0) if np.isnan(stat).any() else np.percentile(stat, pct, axis=0)
        low[a : a + step], high[a : a + step] = q[0], q[1]
    return low, high


def aggregate_sessions(
    scores: pa.Table,
    *,
    threshold: Optional[float] = 0.5,
    strict_mode: bool = False,
    session_mode: str = "mean",
    n_bootstrap: int = 1000,
    seed: int = 42,
    level: float = 0.95,
) -> pa.Table:
    """Session scores: the weighted mean of a conversation's scored turns.

    ``weight`` (when present, null = 1) weights the mean. ``session_mode="mean"``
    averages the turn scores (P(yes) for the continuous judge); ``"threshold_mean"``
    first turns each score into a decision (score >= ``threshold``: 1, else 0) and
    averages those (pygaussia's binary session score). ``strict_mode`` makes a session
    1.0 only if every turn was scored and reaches ``threshold``: a turn left unscored
    or in error makes it 0.0, since it cannot be shown to adhere (a context row, ``status=skipped``, is not one of
    the session's turns). ``ci_low``/``ci_high``
    is a percentile bootstrap over the session's scored turns (the same resamples as
    ``adherence.stats.bootstrap_ci`` with ``seed``, computed for all sessions of one
    length at once). A session with no scored turn, or whose scored turns all weigh 0,
    has a null score and ``adherent``; without a ``threshold`` (a method that decides nothing by itself) every
    session's ``adherent`` is null.
    """
    if threshold is None and (strict_mode or session_mode == "threshold_mean"):
        raise OptionError("--strict and --session-mode threshold_mean need a threshold")
    if session_mode not in ("mean", "threshold_mean"):
        raise OptionError(f"`session_mode` must be 'mean' or 'threshold_mean', got {session_mode!r}")
    s = scores.column("score").cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    if session_mode == "threshold_mean":
        with np.errstate(invalid="ignore"):
            s = np.where(np.isnan(s), np.nan, (s >= threshold).astype(np.float64))
    w = _weights(scores)
    cid = scores.column("conversation_id").combine_chunks().dictionary_encode()
    if "method" in scores.column_names:
        meth = scores.column("method").combine_chunks().dictionary_encode()
        m_idx, m_names = meth.indices.to_numpy(zero_copy_only=False), meth.dictionary.to_pylist()
    else:
        m_idx, m_names = np.zeros(len(s), dtype=np.int64), [None]
    c_idx, c_names = cid.indices.to_numpy(zero_copy_only=False), cid.dictionary.to_pylist()
    code = c_idx.astype(np.int64) * len(m_names) + m_idx
    uniq, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # sessions in order of first appearance
    n = len(uniq)
    counted = np.ones(len(s), dtype=bool)
    if "status" in scores.column_names:  # context rows (status skipped) are not the session's turns
        counted = np.asarray(
            pc.not_equal(scores.column("status"), "skipped").fill_null(True).to_numpy(zero_copy_only=False), dtype=bool
        )
    n_turns = np.bincount(inverse[counted], minlength=n)
    ok = np.isfinite(s) & np.isfinite(w) & (w >= 0)
    sw = np.bincount(inverse[ok], weights=(s * w)[ok], minlength=n)
    wsum = np.bincount(inverse[ok], weights=w[ok], minlength=n)
    n_ok = np.bincount(inverse[ok], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where((n_ok > 0) & (wsum > 0), sw / wsum, np.nan)
    if strict_mode:
        below = np.bincount(inverse[ok], weights=(s[ok] < threshold).astype(float), minlength=n)
        unscored = n_turns - n_ok  # unscored / error turns (and bad weights) cannot pass a strict session
        score = np.where(n_ok > 0, ((below == 0) & (unscored == 0)).astype(float), np.nan)
    low, high = np.full(n, np.nan), np.full(n, np.nan)
    if n_bootstrap > 0 and not strict_mode:
        rows_ok = np.flatnonzero(ok)
        grp = inverse[rows_ok]
        by_group = np.argsort(grp, kind="stable")
        rows_sorted, grp_sorted = rows_ok[by_group], grp[by_group]
        starts = np.searchsorted(grp_sorted, np.arange(n))
        for length in np.unique(n_ok[np.isfinite(score)]):
            members = np.flatnonzero((n_ok == length) & np.isfinite(score))
            take = rows_sorted[starts[members][:, None] + np.arange(length)[None, :]]
            low[members], high[members] = _session_bootstrap(
                s[take], w[take], n_bootstrap=n_bootstrap, seed=seed, level=level
            )

    def col(a):
        return pa.array(a[order], pa.float64(), mask=np.isnan(a[order]))

    key_c, key_m = uniq // len(m_names), uniq % len(m_names)
    fin = np.isfinite(score[order])
    decided = fin & (threshold is not None)  # a method without a threshold decides no session
    adherent = pa.array(score[order] >= (threshold or 0.0), pa.bool_(), mask=~decided)
    table = pa.table(
        {
            "conversation_id": pa.array([c_names[i] for i in key_c[order]], pa.string()),
            "method": pa.array([m_names[i] for i in key_m[order]], pa.string()),
            "n_turns": pa.array(n_turns[order], pa.int32()),
            "score": col(score),
            "ci_low": col(low),
            "ci_high": col(high),
            "adherent": adherent,
        }
    )
    from ..data import SESSION_SCORES

    return read_table(table, SESSION_SCORES, allow_empty=True)

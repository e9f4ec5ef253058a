"""Score turns with a method, and aggregate turn scores into session scores."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import numpy as np
import pyarrow as pa

from ..data import TURN_SCORES, TURNS, read_table
from ..stats import bootstrap_ci
from ._base import Resources, RoleConfig, get_method

__all__ = ["score_turns", "aggregate_sessions"]


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
    pred = [int(s >= config.threshold) if k else None for s, k in zip(score, ok)]
    out = table
    cols = {
        "method": pa.array([config.method] * table.num_rows, pa.string()),
        "score": pa.array([float(s) if k else None for s, k in zip(score, ok)], pa.float64()),
        "prediction": pa.array(pred, pa.int8()),
        "status": pa.array(status, pa.string()),
        "error": pa.array(errors, pa.string()),
    }
    for name, values in result.extra.items():
        # Contract columns (reason, p_yes_source, truncated) keep their names; diagnostics get the method prefix.
        own = name in TURN_SCORES.names or name.startswith(config.method)
        cols[name if own else f"{config.method}_{name}"] = pa.array(values)
    for name, arr in cols.items():
        if name in out.column_names:
            out = out.drop_columns([name])
        out = out.append_column(name, arr)
    return out


def aggregate_sessions(
    scores: pa.Table,
    *,
    threshold: float = 0.5,
    strict_mode: bool = False,
    n_bootstrap: int = 1000,
    seed: int = 42,
    level: float = 0.95,
) -> pa.Table:
    """Session scores: the weighted mean of a conversation's scored turns.

    ``weight`` (when present, null = 1) weights the mean; ``strict_mode`` makes
    a session 1.0 only if every scored turn reaches ``threshold`` (else 0.0);
    ``ci_low``/``ci_high`` is a percentile bootstrap over the session's turns.
    A session with no scored turn has a null score and ``adherent``.
    """
    cid = scores.column("conversation_id").to_pylist()
    s = np.array([np.nan if v is None else v for v in scores.column("score").to_pylist()], dtype=np.float64)
    w = np.ones(len(s))
    if "weight" in scores.column_names:
        w = np.array([1.0 if v is None else v for v in scores.column("weight").to_pylist()], dtype=np.float64)
    method = scores.column("method").to_pylist() if "method" in scores.column_names else [None] * len(s)
    groups: dict = {}
    for i, key in enumerate(zip(cid, method)):
        groups.setdefault(key, []).append(i)
    rows = []
    for (conv, m), idx in groups.items():
        idx = np.array(idx)
        ok = idx[~np.isnan(s[idx])]
        row = {"conversation_id": conv, "method": m, "n_turns": len(idx), "score": None, "ci_low": None,
               "ci_high": None, "adherent": None}
        if len(ok):
            vals, wts = s[ok], w[ok]
            if strict_mode:
                value = float(np.all(vals >= threshold))
            else:
                value = float(np.sum(vals * wts) / np.sum(wts))
            row["score"] = value
            row["adherent"] = bool(value >= threshold)
            if n_bootstrap > 0 and not strict_mode:
                ci = bootstrap_ci(lambda v, ww: np.sum(v * ww) / np.sum(ww), vals, wts, n_resamples=n_bootstrap,
                                  seed=seed, level=level)
                row["ci_low"], row["ci_high"] = ci.low, ci.high
        rows.append(row)
    from ..data import SESSION_SCORES

    return read_table(pa.Table.from_pylist(rows), SESSION_SCORES)

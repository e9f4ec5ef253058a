"""Reproduce the role-adherence paper's table shape on a flat benchmark file.

For each n in ``sizes``: the first n records are scored with each method, the
references being the first n ground truths (the ``dataset`` pool), and each
method gets adherent mean, violation mean, separation, ROC AUC and AP
("adherent" is the positive label).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .._errors import OptionError
from ..data import read_turns
from ..role import Resources, RoleConfig, score_turns
from ..stats import UndefinedMetricError, average_precision_score, roc_auc_score

__all__ = ["role_paper", "DEFAULT_METHODS"]

DEFAULT_METHODS = ("cosine", "knn", "mahalanobis", "pca_mahalanobis", "kl")


def _metrics(labels: list, scores: np.ndarray) -> dict:
    y = np.array([lab == "adherent" for lab in labels], dtype=np.int8)
    ok = ~np.isnan(scores)
    y, s = y[ok], scores[ok]
    out: dict[str, Any] = {
        "adherent": None,
        "violation": None,
        "separation": None,
        "auc": None,
        "ap": None,
        "n_scored": int(ok.sum()),
    }
    if y.any():
        out["adherent"] = float(s[y == 1].mean())
    if (y == 0).any():
        out["violation"] = float(s[y == 0].mean())
    if out["adherent"] is not None and out["violation"] is not None:
        out["separation"] = out["adherent"] - out["violation"]
    for name, fn in (("auc", roc_auc_score), ("ap", average_precision_score)):
        try:
            out[name] = fn(y, s)
        except UndefinedMetricError:
            pass
    return out


def role_paper(
    path,
    *,
    sizes: Sequence[int] = (15, 50, 150),
    encoder: Optional[str] = None,
    bertscore: bool = False,
    bertscore_layer: Optional[int] = None,
    nli_model: Optional[str] = None,
    device: Optional[str] = None,
    progress: bool = False,
) -> dict:
    """``{method: {"n=15": {adherent, violation, separation, auc, ap, n_scored}, ...}}``."""
    turns = read_turns(path)
    if "label" not in turns.column_names:
        raise OptionError(f"{path}: the benchmark needs a 'label' column ('adherent' = positive)")
    methods = list(DEFAULT_METHODS) + (["bertscore"] if bertscore else []) + (["nli"] if nli_model else [])
    base = RoleConfig(
        encoder=encoder,
        reference_pool="dataset",
        alpha="median",
        nli_model=nli_model,
        bertscore_layer=bertscore_layer,
        device=device,
        progress=progress,
    )
    resources = Resources(base)
    result: dict = {m: {} for m in methods}
    for n in sizes:
        subset = turns.slice(0, n)
        labels = subset.column("label").to_pylist()
        for m in methods:
            scored = score_turns(subset, m, config=base, resources=resources)
            s = np.array([np.nan if v is None else v for v in scored.column("score").to_pylist()], dtype=np.float64)
            entry = _metrics(labels, s)
            if subset.num_rows < n:
                entry["n_records"] = subset.num_rows  # the file is shorter than n
            result[m][f"n={n}"] = entry
    return result

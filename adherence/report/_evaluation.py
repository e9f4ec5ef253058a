"""The ``adherence evaluate --html`` page: ROC curve and score distributions per label."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Sequence, Union

import numpy as np

from ..stats import UndefinedMetricError, roc_curve
from ._html import figure_svg, page, pyplot, table_html

__all__ = ["evaluation_html", "write_evaluation_html"]

_METRICS = ("auc", "ap", "mean_positive", "mean_negative", "separation", "f1_positive", "f1_negative", "macro_f1", "kappa")


def _roc_svg(y: np.ndarray, s: np.ndarray, auc) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    try:
        fpr, tpr, _ = roc_curve(y, s)
        ax.plot(fpr, tpr, color="#1f5fa8", lw=2, label=f"AUC = {auc:.3f}" if auc is not None else None)
    except UndefinedMetricError as exc:
        ax.text(0.5, 0.5, str(exc), ha="center", va="center", wrap=True, fontsize=8)
    ax.plot([0, 1], [0, 1], ls="--", color="#999", lw=1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title("ROC curve")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    if auc is not None:
        ax.legend(loc="lower right")
    return figure_svg(fig)


def _hist_svg(y: np.ndarray, s: np.ndarray, positive: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    lo, hi = float(np.min(s)), float(np.max(s))
    bins = np.linspace(lo, hi if hi > lo else lo + 1e-9, 21)
    for value, name, color in ((1, positive, "#2a9d55"), (0, f"not {positive}", "#c0392b")):
        vs = s[y == value]
        if len(vs):
            ax.hist(vs, bins=bins, alpha=0.55, color=color, label=f"{name} (n={len(vs)})")
    ax.set_xlabel("score")
    ax.set_ylabel("turns")
    ax.set_title("Score distribution by class")
    ax.legend()
    return figure_svg(fig)


def _by_label_svg(labels: np.ndarray, s: np.ndarray, positive: str) -> str:
    plt = pyplot()
    values = sorted(set(labels.tolist()), key=lambda v: (v != positive, v))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(values) + 2), 4.2))
    data = [s[labels == v] for v in values]
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(range(1, len(values) + 1), labels=values)
    rng = np.random.default_rng(0)
    for i, vs in enumerate(data, start=1):
        ax.scatter(i + rng.uniform(-0.12, 0.12, len(vs)), vs, s=10, alpha=0.6, color="#1f5fa8" if values[i - 1] == positive else "#c0392b")
    ax.set_ylabel("score")
    ax.set_title("Score by label")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    return figure_svg(fig)


def evaluation_html(result: dict, labels: Sequence, scores: Sequence, *, title: str = "adherence evaluate") -> str:
    """Render an evaluation (``evaluate_table`` output) with its kept rows' labels and scores."""
    labels = np.asarray(labels, dtype=object)
    s = np.asarray(scores, dtype=np.float64)
    positive = result["positive"]
    y = (labels == positive).astype(np.int8)
    ci = result.get("ci", {})
    rows = []
    for m in _METRICS:
        if m in result:
            low, high = (ci.get(m) or [None, None])
            rows.append([m, result[m], low, high, result["undefined"].get(m, "")])
    counts = [
        ["rows", result["n_rows"]],
        ["evaluated", result["n"]],
        [f"positive ({positive})", result["n_positive"]],
        ["negative", result["n_negative"]],
        ["unscored (no score)", result["n_unscored"]],
        ["unlabeled", result["n_unlabeled"]],
    ]
    level = int(round(100 * result.get("ci_level", 0.95)))
    sections = [
        "<h2>Summary</h2>",
        table_html(["count", "value"], counts),
        table_html(["metric", "value", f"{level}% CI low", f"{level}% CI high", "undefined because"], rows),
    ]
    if result.get("note"):
        sections.append(f'<p class="warn">{html.escape(str(result["note"]))}</p>')
    figs = [_roc_svg(y, s, result.get("auc")), _hist_svg(y, s, positive)]
    if len(set(labels.tolist())) > 2:
        figs.append(_by_label_svg(labels, s, positive))
    sections.append("<h2>Figures</h2><div class='figs'>" + "".join(figs) + "</div>")
    by = result.get("by_label", {})
    sections.append("<h2>Scores per label</h2>")
    sections.append(table_html(["label", "n", "mean", "median", "std"], [[k, v["n"], v["mean"], v["median"], v["std"]] for k, v in by.items()]))
    sub = f"score column {result['score_column']!r} against label column {result['label_column']!r}, positive = {positive!r}"
    return page(title, sections, sub)


def write_evaluation_html(
    path: Union[str, os.PathLike], result: dict, labels: Sequence, scores: Sequence, *, title: str = "adherence evaluate"
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(evaluation_html(result, labels, scores, title=title), encoding="utf-8")
    return path

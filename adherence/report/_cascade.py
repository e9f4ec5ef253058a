"""The ``adherence cascade fit`` page: per stage, the error bound against the threshold, the chosen threshold and
what it accepts."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from ._html import figure_svg, page, pyplot, table_html

__all__ = ["cascade_html", "write_cascade_html"]


def _bound_svg(doc: dict, curves: list) -> str:
    """Per stage: the observed error rate and its exact binomial upper bound at each candidate threshold, against
    alpha, with the chosen threshold marked."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.2), squeeze=False)
    for ax, st, (t, observed, upper) in zip(axes[0], doc["stages"], curves):
        if len(t):
            ax.plot(t, upper, color="#3949ab", label=f"{1 - st['delta']:.0%} upper bound")
            ax.plot(t, observed, color="#888", linestyle="--", label="observed")
        ax.axhline(doc["alpha"], color="#c62828", linewidth=1, label=f"alpha {doc['alpha']:g}")
        if st["threshold"] is not None:
            ax.axvline(st["threshold"], color="#2e7d32", linewidth=1, label="chosen")
        ax.set_title(f"stage {st['stage']}: {st.get('method') or Path(st['path']).name}", fontsize=9)
        ax.set_xlabel("confidence threshold")
        ax.set_ylim(0, min(1.0, max(0.3, 2 * doc["alpha"])))
        ax.invert_xaxis()  # the sequence is tested from the most confident down
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("error rate of accepted verdicts")
    fig.tight_layout()
    return figure_svg(fig)


def cascade_html(
    doc: dict, curves: list, *, title: str = "adherence cascade", cascade_file: Optional[str] = None
) -> str:
    """The page of a fitted cascade; ``curves`` per stage: (thresholds, observed error, upper bound)."""
    rows = [
        [
            st["stage"],
            f"{st.get('method')} ({Path(st['path']).name})" if st.get("method") else Path(st["path"]).name,
            st["threshold"],
            st["reaching"],
            st["accepted"],
            st["errors"],
            st["p_value"],
        ]
        for st in doc["stages"]
    ]
    left = doc["stages"][-1]["reaching"] - doc["stages"][-1]["accepted"] if doc["stages"] else doc["n"]
    summary = (
        f"<p>{html.escape(doc['guarantee'])}. Fitted on {doc['n']:,} labelled turns: "
        + ", ".join(f"stage {st['stage']} decides {st['accepted']:,}" for st in doc["stages"])
        + f", {left:,} abstain.</p>"
    )
    how = (
        "<p>Each stage's thresholds are tested from the most confident down; at each, the exact binomial bound "
        "on the error rate of the verdicts it would accept must stay under alpha (p-value at most the stage's "
        "share of delta), and the lowest threshold before the first failure is kept (fixed-sequence testing, "
        "Learn-then-Test). The curves show, per candidate threshold, the observed error rate and that bound.</p>"
    )
    import shlex

    stages = " ".join(shlex.quote(str(st["path"])) for st in doc["stages"])
    apply = html.escape(
        f"adherence cascade apply {stages} --cascade {shlex.quote(str(cascade_file or 'CASCADE.json'))} "
        "-o decided.parquet"
    )
    steps = [
        f"Decide these turns with it: <code>{apply}</code> (on new turns, score them with each stage's method and "
        "give those outputs in the same order).",
        "More labelled turns tighten the bound and let cheaper stages accept more.",
    ]
    sections = [
        summary,
        _bound_svg(doc, curves),
        table_html(["stage", "method", "threshold", "reaching", "accepted", "errors", "p-value"], rows),
        how,
        "<h2>What next</h2>",
        "<ul>" + "".join(f"<li>{s}</li>" for s in steps) + "</ul>",
    ]
    return page(title, sections, subtitle=f"alpha {doc['alpha']:g}, delta {doc['delta']:g}")


def write_cascade_html(
    path: Union[str, os.PathLike],
    doc: dict,
    curves: list,
    *,
    inputs: Sequence = (),
    cascade_file: Optional[str] = None,
) -> Path:
    """``cascade_html`` written through the one owner-checked writer (never onto ``inputs``); returns the path."""
    from ..engine import write_owned

    write_owned(path, cascade_html(doc, curves, cascade_file=cascade_file), what="the HTML page", inputs=inputs)
    return Path(path)


def bound_curve(confidence, correct, alpha: float, delta: float) -> tuple:
    """(thresholds, observed error rate, exact one-sided upper bound at level 1 - delta) for accepting every
    turn at or above each distinct confidence, most confident first."""
    from scipy.stats import beta

    c = np.asarray(confidence, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    order = np.argsort(-c, kind="stable")
    c, ok = c[order], ok[order]
    if not len(c):
        return np.array([]), np.array([]), np.array([])
    last = np.flatnonzero(np.r_[c[1:] != c[:-1], True])
    n = last + 1
    e = np.cumsum(~ok)[last]
    upper = np.where(e >= n, 1.0, beta.ppf(1 - delta, e + 1, n - e))  # Clopper-Pearson, one-sided
    return c[last], e / n, upper

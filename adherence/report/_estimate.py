"""The ``adherence estimate`` page: the prediction-powered estimate beside the labels-only and judge-only ones."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Union

from ._html import figure_svg, page, pyplot, table_html

__all__ = ["estimate_html", "write_estimate_html"]


def _intervals_svg(r: dict) -> str:
    """The estimates as points with their intervals, one row each (the overall one, then each group)."""
    plt = pyplot()
    rows = [("all rows", r)] + [
        (k, g) for k, g in ((r.get("by") or {}).get("groups") or {}).items() if "error" not in g
    ]
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.75 * len(rows)))
    for i, (_, g) in enumerate(rows):
        y = -i
        c = g["classical"]
        ax.errorbar(c["estimate"], y - 0.15, xerr=[[c["estimate"] - c["ci_low"]], [c["ci_high"] - c["estimate"]]],
                    fmt="o", color="#888", capsize=3, label="labels only" if i == 0 else None)  # fmt: skip
        ax.errorbar(g["estimate"], y + 0.15, xerr=[[g["estimate"] - g["ci_low"]], [g["ci_high"] - g["estimate"]]],
                    fmt="o", color="#3949ab", capsize=3, label="prediction-powered" if i == 0 else None)  # fmt: skip
        ax.plot(
            g["judge_only"], y, marker="x", color="#c62828", linestyle="none", label="judge only" if i == 0 else None
        )
    ax.set_yticks([-i for i in range(len(rows))], [n if len(n) <= 32 else n[:29] + "..." for n, _ in rows])
    ax.set_xlabel("adherent share")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    return figure_svg(fig)


def estimate_html(r: dict, *, title: str = "adherence estimate") -> str:
    level = int(round(100 * r["confidence"]))
    c = r["classical"]
    width = (r["ci_high"] - r["ci_low"]) / max(c["ci_high"] - c["ci_low"], 1e-12)
    eff = r.get("effective_labels")
    summary = (
        f"<p><b>{r['estimate']:.1%}</b> of turns are {html.escape(repr(r['positive']))} ({level}% interval "
        f"{r['ci_low']:.1%} to {r['ci_high']:.1%}), from {r['n_labelled']:,} labelled turns and the judge's scores "
        f"on {r['n']:,}. The interval is {width:.0%} as wide as the labels' alone"
        + (f": the judge's scores were worth about {eff:,.0f} labels." if eff is not None else ".")
        + "</p>"
    )
    ppi = "cross-fitted PPI++" if r.get("cross_fitted") else "prediction-powered (PPI++)"
    rows = [
        [ppi, r["estimate"], r["ci_low"], r["ci_high"], r["n"]],
        ["labels only", c["estimate"], c["ci_low"], c["ci_high"], r["n_labelled"]],
        ["judge only (mean score)", r["judge_only"], None, None, r["n"]],
    ]
    how = (
        "<p>The labelled turns must be a random sample of all the turns. The judge-only number is the mean score "
        "and carries the judge's errors; the labels-only interval is valid but wide; the prediction-powered "
        "estimate corrects the judge's mean by its error on the labelled turns, weighted by lambda "
        f"({r['lam']:.2f}; 0 would be the labels alone), so it stays unbiased however good the judge is"
        + (f", and its intervals are clustered by {html.escape(r['clustered_by'])}" if r.get("clustered_by") else "")
        + " (Angelopoulos, Duchi and Zrnic, PPI++, 2023).</p>"
    )
    if r.get("cross_fitted"):
        cf = r.get("cross_fit") or {}
        how += (
            f"<p>{cf.get('labelled_training_turns', 'Some')} of the labelled turns trained the classifier that scored "
            "the table, so the estimate is cross-fitted (Zrnic and Candes, 2024): each labelled turn is scored by the "
            f"fold model that did not see it, every other turn by the mean of the {cf.get('folds', 'K')} fold models. "
            "Its scores on its own training turns would have made the interval too narrow.</p>"
        )
    import shlex

    scores = shlex.quote(str(r.get("input") or "SCORES"))
    labels_file = (r.get("labels") or {}).get("file")
    flags = f" --labels {shlex.quote(str(labels_file))}" if labels_file else ""
    if r.get("score_column") not in (None, "score"):
        flags += f" --score {shlex.quote(str(r['score_column']))}"
    if r.get("label_column") not in (None, "label"):
        flags += f" --label {shlex.quote(str(r['label_column']))}"
    if r.get("positive") is not None:
        flags += f" --positive {shlex.quote(str(r['positive']))}"
    by_role = html.escape(f"adherence estimate {scores}{flags} --by role --html by-role.html")
    next_steps = [
        f"Per role: <code>{by_role}</code>.",
        "Narrow the interval: label more turns drawn at random (the interval shrinks with the square root of "
        "their number), or give the judge's calibrated score with <code>--score calibrated_score</code>.",
    ]
    sections = [
        summary,
        _intervals_svg(r),
        table_html(["estimate", "value", f"{level}% low", f"{level}% high", "rows"], rows),
        how,
        "<h2>What next</h2>",
        "<ul>" + "".join(f"<li>{s}</li>" for s in next_steps) + "</ul>",
    ]
    return page(title, sections, subtitle=str(r.get("input") or ""))


def write_estimate_html(path: Union[str, os.PathLike], r: dict, **kwargs) -> Path:
    """``estimate_html`` written through the one owner-checked writer (never onto ``inputs``); returns the path."""
    from ..engine import write_owned

    inputs = kwargs.pop("inputs", ())
    write_owned(path, estimate_html(r, **kwargs), what="the HTML page", inputs=inputs)
    return Path(path)

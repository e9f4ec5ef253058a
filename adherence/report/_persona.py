"""The EVAL4SIM page: summary table, MRR degradation curves, similarities per dimension."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Optional, Sequence, Union

from ._html import figure_svg, page, pyplot, table_html

__all__ = ["adherence_rows", "persona_html", "persona_rows", "write_persona_html"]

DIMS = ("adherence", "consistency", "naturalness")


def persona_rows(results: dict) -> list:
    """``[dataset, role, dimension, raw, similarity, offset, rank]`` rows, E4s last per dataset."""
    rows = []
    for name, res in results.items():
        for dim in DIMS:
            d = res.get(dim)
            if not isinstance(d, dict):
                continue
            if "skipped" in d or "error" in d:
                rows.append([name, res["role"], dim, None, None, None, "skipped" if "skipped" in d else "error"])
            else:
                rows.append(
                    [name, res["role"], dim, d.get("score"), d.get("similarity"), d.get("offset"), d.get("rank")]
                )
        rows.append([name, res["role"], "E4s", None, res.get("e4s"), None, res.get("e4s_rank")])
    return rows


def adherence_rows(results: dict) -> tuple[list, list]:
    """``(methods, rows)``: per corpus with curves, ``[dataset, "nAUC (similarity)" per method]``."""
    scored = {n: r["adherence"] for n, r in results.items() if "curves" in (r.get("adherence") or {})}
    if not scored:
        return [], []
    methods = list(next(iter(scored.values()))["curves"])
    rows = []
    for name, adh in scored.items():
        cells = []
        for m in methods:
            c = adh["curves"][m]
            cells.append(f"{c['nauc']:.4f}" + (f" ({c['similarity']:.3f})" if "similarity" in c else ""))
        rows.append([name, *cells])
    return methods, rows


def _log_axis(ax) -> None:
    """A log x axis with readable ticks (1, 2, 5, 10, 20, 50, ...) written as plain numbers."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    ticks = [m * 10**e for e in range(-1, 7) for m in (1, 2, 5) if lo <= m * 10**e <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    fmt = ScalarFormatter()
    fmt.set_scientific(False)
    ax.xaxis.set_major_formatter(fmt)


def _curves_svg(results: dict, method: str, title: str, *, log: bool = True) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for i, (name, res) in enumerate(results.items()):
        curve = res.get("adherence", {}).get("curves", {}).get(method)
        if not curve:
            continue
        ref = res["role"] == "reference"
        sim = curve.get("similarity")
        label = name + ("" if ref or sim is None else f" (sim {sim:.3f})")
        ax.plot(
            curve["pool_sizes"],
            curve["mrr"],
            marker="o",
            ms=3,
            lw=2.4 if ref else 1.4,
            color="black" if ref else f"C{i}",
            label=label,
        )
    if log:
        _log_axis(ax)
    ax.set_xlabel("distractors D (pool = D + 1)")
    ax.set_ylabel("MRR")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return figure_svg(fig)


def _methods_svg(res: dict, name: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for i, (m, curve) in enumerate(res["adherence"]["curves"].items()):
        ax.plot(
            curve["pool_sizes"], curve["mrr"], marker="o", ms=3, color=f"C{i}", label=f"{m} (nAUC {curve['nauc']:.3f})"
        )
    _log_axis(ax)
    ax.set_xlabel("distractors D")
    ax.set_ylabel("MRR")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{name}: retrievers")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return figure_svg(fig)


def _similarity_svg(results: dict) -> str:
    import numpy as np

    plt = pyplot()
    sims = [n for n, r in results.items() if r["role"] != "reference"]
    dims = [
        d
        for d in DIMS
        if any(isinstance(results[n].get(d), dict) and results[n][d].get("similarity") is not None for n in sims)
    ] + ["E4s"]
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    width = 0.8 / max(len(sims), 1)
    x = np.arange(len(dims))
    for i, n in enumerate(sims):
        vals = [results[n].get("e4s") if d == "E4s" else (results[n].get(d) or {}).get("similarity") for d in dims]
        ax.bar(x + i * width, [v if v is not None else 0 for v in vals], width, label=n, color=f"C{i + 1}")
    ax.axhline(1.0, color="black", lw=1, ls="--")
    ax.set_xticks(x + width * (len(sims) - 1) / 2, dims)
    ax.set_ylabel("similarity to the reference")
    ax.set_ylim(0, 1.25)
    ax.set_title("similarity per dimension (1 = human-like)")
    ax.legend(fontsize=7, ncol=min(len(sims), 3), loc="upper center")
    return figure_svg(fig)


def persona_html(results: dict, *, title: str = "adherence persona", about: Optional[list] = None) -> str:
    """The persona page; ``about``: ``[name, value]`` rows of the run's settings (files, encoder, ...)."""
    sections = []
    if about:
        sections += ["<h2>What was compared, and how</h2>", table_html(["setting", "value"], about)]
    sections += [
        "<h2>Corpora</h2>",
        table_html(
            ["dataset", "role", "conversations", "utterances"],
            [[n, r.get("role"), r.get("n_conversations"), r.get("n_utterances")] for n, r in results.items()],
        ),
    ]
    sections += [
        "<h2>Summary</h2>",
        table_html(["dataset", "role", "dimension", "raw", "similarity", "offset", "rank"], persona_rows(results)),
    ]
    for name, res in results.items():
        sk = res.get("skipped_records")
        if sk:
            more = ", ..." if sk["count"] > len(sk["first"]) else ""
            sections.append(
                f"<p class='warn'>{html.escape(name)}: {sk['count']} malformed record(s) skipped "
                f"({html.escape(', '.join(sk['first']) + more)}): {html.escape('; '.join(sk['reasons']))}</p>"
            )
    first = next(iter(results.values()))
    adh = next((r["adherence"] for r in results.values() if "curves" in (r.get("adherence") or {})), None)
    figs = []
    if adh:
        primary = adh["method"]
        figs.append(_curves_svg(results, primary, f"MRR degradation ({primary})"))
        for m in adh["curves"]:
            if m != primary:
                figs.append(_curves_svg(results, m, f"MRR degradation ({m})"))
    if len(results) > 1:
        figs.append(_similarity_svg(results))
    if adh:
        figs += [_methods_svg(res, n) for n, res in results.items() if "curves" in (res.get("adherence") or {})]
    if figs:
        sections.append("<h2>Figures</h2><div class='figs'>" + "".join(figs) + "</div>")
    if adh:
        methods, rows = adherence_rows(results)
        sections.append("<h2>Adherence: normalised AUC (similarity) per retriever</h2>")
        sections.append(table_html(["dataset", *methods], rows))
        note = adh.get("note")
        sections.append(
            f"<p class='meta'>alpha {adh['alpha']}, w = sin(alpha·π/2) = {adh['w']:.3f}; "
            f"{adh['repeats']} random pools per query and size" + (f"; {html.escape(note)}" if note else "") + "</p>"
        )
    if any("score" in (r.get("consistency") or {}) for r in results.values()):
        keys = ["f1", "auc", "c_at_1", "f05u", "brier", "score", "similarity", "p1", "p2", "n_authors", "n_test"]
        sections.append("<h2>Consistency (authorship verification, char 4-gram TF-IDF)</h2>")
        sections.append(_dimension_table(results, "consistency", keys))
    nat = next(
        (r["naturalness"] for r in results.values() if "score" in (r.get("naturalness") or {})),
        first.get("naturalness"),
    )
    if nat:
        sections.append("<h2>Naturalness (NLI)</h2>")
        if "skipped" in nat:
            sections.append(f"<p class='warn'>skipped: {html.escape(nat['skipped'])}</p>")
        else:
            keys = ["cs", "pcr", "scr", "er", "nr", "cr", "score", "similarity", "n_pairs"]
            sections.append(_dimension_table(results, "naturalness", keys))
    ref = next(iter(results))
    return page(title, sections, f"reference: {ref}; simulations: {', '.join(list(results)[1:]) or 'none'}")


def write_persona_html(
    path: Union[str, os.PathLike],
    results: dict,
    *,
    title: str = "adherence persona",
    about: Optional[list] = None,
    inputs: Sequence = (),
) -> Path:
    """``persona_html`` written through the one owner-checked writer (never onto ``inputs``); returns the path."""
    from ..engine import write_owned

    write_owned(path, persona_html(results, title=title, about=about), what="the HTML page", inputs=inputs)
    return Path(path)


def _dimension_table(results: dict, dimension: str, keys: list) -> str:
    """One row per corpus scored on ``dimension``: its name, then ``keys`` of that dimension's results."""
    rows = [
        [n] + [r[dimension].get(k) for k in keys] for n, r in results.items() if "score" in (r.get(dimension) or {})
    ]
    return table_html(["dataset", *keys], rows)

"""The audit report page: verdict vs reasoning stability per question, score volatility per artifact."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import numpy as np

from ._html import figure_svg, page, pyplot, table_html

__all__ = ["audit_html", "write_audit_html", "audit_question_rows"]


def audit_question_rows(metrics: dict, k: str) -> list:
    rows = []
    for q, m in metrics["questions"].items():
        e = m.get(k, {})
        rows.append([q, m["source"], m["strategy"], e.get("percent_agreement"), e.get("gwet_ac1"), e.get("fleiss_kappa"),
                     "yes" if e.get("fleiss_imputed") else "", e.get("r_stab")])
    return rows


def _scatter(metrics: dict, k: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    groups: dict = {}
    for q, m in metrics["questions"].items():
        e = m.get(k, {})
        x, y = e.get("percent_agreement"), e.get("r_stab")
        if x is None or y is None:
            continue
        groups.setdefault((round(x, 3), round(y, 3), m["source"]), []).append(q)
    for source, color in (("code", "#2a9d55"), ("judge", "#1f5fa8")):
        pts = [(x, y, len(qs)) for (x, y, s), qs in groups.items() if s == source]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=[30 + 12 * p[2] for p in pts], color=color,
                       alpha=0.8, label=f"answered by {source}")
    for (x, y, source), qs in groups.items():
        label = ", ".join(qs) if len(qs) <= 2 else f"{len(qs)} questions ({qs[0]}, ...)"
        ax.annotate(label, (x, y), fontsize=7, xytext=(-4, -12 if source == "code" else 6), textcoords="offset points",
                    ha="right")
    ax.plot([0, 1], [0, 1], ls="--", color="#bbb", lw=1)
    ax.set_xlabel("verdict stability (percent agreement)")
    ax.set_ylabel("reasoning stability (R_stab)")
    ax.set_xlim(-0.02, 1.05)
    ax.set_ylim(-0.02, 1.08)
    ax.set_title(f"Verdict vs reasoning stability per question ({k})")
    if groups:
        ax.legend(loc="lower left", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no question has both measures", ha="center", va="center")
    return figure_svg(fig)


def _volatility(metrics: dict) -> str:
    plt = pyplot()
    arts = metrics["artifacts"]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(arts) + 2), 4.2))
    labels = [f"{a['artifact_id']}\n{a['generator']}" for a in arts]
    stds = [a["std"] or 0.0 for a in arts]
    means = [a["mean"] or 0.0 for a in arts]
    x = np.arange(len(arts))
    ax.bar(x, means, color="#9ecae1", label="mean adherence score S_i")
    ax.errorbar(x, means, yerr=stds, fmt="none", ecolor="#c0392b", capsize=3, label="std over runs")
    ax.set_xticks(x, labels=labels, fontsize=7, rotation=45, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("yes / answered")
    ax.set_title("Adherence score and its volatility per artifact")
    ax.legend(fontsize=8)
    return figure_svg(fig)


def audit_html(metrics: dict, *, title: str = "adherence audit") -> str:
    ks = [f"k={k}" for k in metrics["ks"]]
    sections = ["<h2>Pooled stability</h2>",
                table_html(["k", "percent agreement", "Gwet AC1", "Fleiss kappa", "R_stab"],
                           [[k, metrics["pooled"][k]["percent_agreement"], metrics["pooled"][k]["gwet_ac1"],
                             metrics["pooled"][k]["fleiss_kappa"], metrics["pooled"][k]["r_stab"]] for k in ks])]
    last = ks[-1]
    sections.append("<h2>Figures</h2><div class='figs'>" + _scatter(metrics, last) + _volatility(metrics) + "</div>")
    for k in ks:
        sections.append(f"<h2>Per question ({k})</h2>")
        sections.append(table_html(["question", "source", "fingerprint", "agreement", "AC1", "Fleiss", "imputed", "R_stab"],
                                   audit_question_rows(metrics, k)))
    sections.append("<h2>Per artifact</h2>")
    sections.append(table_html(["artifact", "generator", "judge", "mean S_i", "std"],
                               [[a["artifact_id"], a["generator"], a["judge"], a["mean"], a["std"]] for a in metrics["artifacts"]]))
    strata = ", ".join(f"{j} × {g}" for j, g in metrics["strata"])
    return page(title, sections, f"strata (judge × generator, macro-averaged): {strata}; DBSCAN eps {metrics['eps']}")


def write_audit_html(path: Union[str, os.PathLike], metrics: dict, *, title: str = "adherence audit") -> Path:
    path = Path(path)
    path.write_text(audit_html(metrics, title=title), encoding="utf-8")
    return path

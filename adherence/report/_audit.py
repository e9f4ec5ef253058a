"""The audit report page: verdict vs reasoning stability per question, score volatility per artifact."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence, Union

import numpy as np

from ._html import figure_svg, page, pyplot, table_html

__all__ = ["audit_html", "write_audit_html", "audit_question_rows", "code_question_rows"]


def audit_question_rows(metrics: dict, k: str) -> list:
    """Judge-answered questions: ``[question, fingerprint, answers, unscored, agreement, AC1, Fleiss,
    imputed, R_stab]``."""
    rows = []
    for q, m in metrics["questions"].items():
        if m["source"] != "judge":
            continue
        e = m.get(k, {})
        rows.append(
            [
                q,
                m["strategy"],
                m.get("answers"),
                m.get("unscored"),
                e.get("percent_agreement"),
                e.get("gwet_ac1"),
                e.get("fleiss_kappa"),
                "yes" if e.get("fleiss_imputed") else "",
                e.get("r_stab"),
            ]
        )
    return rows


def code_question_rows(metrics: dict) -> list:
    """Code-answered questions (deterministic): ``[question, answers, unscored, yes-rate]``."""
    return [
        [q, m.get("answers"), m.get("unscored"), m.get("yes_rate")]
        for q, m in metrics["questions"].items()
        if m["source"] == "code"
    ]


def label_levels(labels: dict, char_width: float = 0.012, near: float = 0.06) -> dict:
    """A height level per point's label (0: just above it) so that no two labels overlap: a label ends at its
    point and reaches ``len(label) * char_width`` to its left (in axis units, 7-point type on this figure); a
    label that would cross an earlier one whose point lies within ``near`` vertically goes one level up."""
    placed: list = []  # (x_left, x_right, y, level)
    out = {}
    for (x, y), label in sorted(labels.items()):
        left = x - len(label) * char_width
        level = 0
        while any(lv == level and abs(py - y) < near and left < pr and pl < x for pl, pr, py, lv in placed):
            level += 1
        placed.append((left, x, y, level))
        out[(x, y)] = level
    return out


def _scatter(metrics: dict, k: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    groups: dict = {}
    for q, m in metrics["questions"].items():
        e = m.get(k, {})
        x, y = e.get("percent_agreement"), e.get("r_stab")
        if x is None or y is None:
            continue
        if m["source"] == "judge":  # code answers are deterministic: no stability to plot
            groups.setdefault((round(x, 3), round(y, 3)), []).append(q)
    if groups:
        ax.scatter(
            [x for x, _ in groups],
            [y for _, y in groups],
            s=[30 + 12 * len(qs) for qs in groups.values()],
            color="#1f5fa8",
            alpha=0.8,
            label="judge-answered question (size: how many share the point)",
        )
    labels = {pt: ", ".join(qs) if len(qs) <= 2 else f"{len(qs)} questions ({qs[0]}, ...)" for pt, qs in groups.items()}
    levels = label_levels(labels)
    for (x, y), label in labels.items():
        lift = 6 + 10 * levels[(x, y)]
        arrow = {"arrowstyle": "-", "color": "#999", "lw": 0.6} if levels[(x, y)] else None
        ax.annotate(
            label, (x, y), fontsize=7, xytext=(-4, lift), textcoords="offset points", ha="right", arrowprops=arrow
        )
    ax.plot([0, 1], [0, 1], ls="--", color="#bbb", lw=1)
    ax.set_xlabel("verdict stability (percent agreement)")
    ax.set_ylabel("reasoning stability (R_stab)")
    ax.set_xlim(-0.02, 1.05)
    ax.set_ylim(-0.02, 1.08)
    ax.set_title(f"Verdict vs reasoning stability per question ({k})")
    if groups:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, frameon=False)
    else:
        ax.text(0.5, 0.5, "no judge-answered question has both measures", ha="center", va="center")
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


def _reading_guide() -> str:
    """What the stability numbers mean, with the conventional benchmarks of chance-corrected agreement."""
    bands = [
        ["below 0", "poor: less agreement than chance"],
        ["0.00 - 0.20", "slight"],
        ["0.21 - 0.40", "fair"],
        ["0.41 - 0.60", "moderate"],
        ["0.61 - 0.80", "substantial"],
        ["0.81 - 1.00", "almost perfect"],
    ]
    return (
        "<h2>Reading the numbers</h2><p><b>Percent agreement</b>: the share of pairs of runs that give a question "
        "the same answer. <b>Gwet's AC1</b> and <b>Fleiss' kappa</b> correct it for the agreement chance alone "
        "would give (1: the runs always agree, 0: no better than chance); read them against the conventional "
        "benchmarks of Landis and Koch (1977) below. When nearly every answer is the same (a question the judge "
        "always answers Yes), kappa can be low although the runs agree (the kappa paradox): AC1, which is not "
        "pulled down by a skewed Yes rate, is the figure to read there. <b>R_stab</b>: the share of a question's "
        "justifications in its largest cluster of similar reasoning (1: every run argued the same way), so a "
        "judge can be stable in its verdict (high AC1) while its reasons wander (low R_stab).</p>"
        + table_html(["AC1 / kappa", "agreement"], bands)
    )


def audit_html(metrics: dict, *, title: str = "adherence audit", about: str = "") -> str:
    from html import escape

    ks = [f"k={k}" for k in metrics["ks"]]
    judges = metrics.get("judges") or []
    code_rows = code_question_rows(metrics)
    judge_q = [q for q, m in metrics["questions"].items() if m["source"] == "judge"]
    unscored = sum(metrics["questions"][q].get("unscored") or 0 for q in judge_q)
    answers = sum(metrics["questions"][q].get("answers") or 0 for q in judge_q)
    intro = (
        f"<p><b>Judge:</b> {escape(', '.join(judges)) or 'none (every question answered by code)'}. "
        f"{len(judge_q)} judge-answered question(s), {len(code_rows)} code-answered. "
        f"Unscored judge answers: {unscored} of {answers}"
        + (
            " &mdash; <b>most judge answers could not be parsed; the stability figures rest on few answers</b>"
            if answers and unscored > answers / 2
            else ""
        )
        + ".</p>"
    )
    if about:
        intro += f"<p>{escape(about)}</p>"
    if any("bundled:SmolLM2" in str(j) for j in judges):
        intro = (
            '<p class="warn">These answers come from the bundled SmolLM2-135M-Instruct, a smoke-test judge that '
            "shows the pipeline works but cannot judge: its stability below is the stability of a model too small "
            "to follow the rubric. Audit with <code>--judge-model</code> (a served model with "
            "<code>--backend openai --base-url ...</code>) for figures that mean something.</p>"
        ) + intro
    sections = [
        intro,
        "<h2>Pooled stability of the judge (judge-answered questions)</h2>",
        table_html(
            ["k", "percent agreement", "Gwet AC1", "Fleiss kappa", "R_stab"],
            [
                [
                    k,
                    metrics["pooled"][k]["percent_agreement"],
                    metrics["pooled"][k]["gwet_ac1"],
                    metrics["pooled"][k]["fleiss_kappa"],
                    metrics["pooled"][k]["r_stab"],
                ]
                for k in ks
            ],
        ),
    ]
    sections.append(_reading_guide())
    last = ks[-1]
    sections.append("<h2>Figures</h2><div class='figs'>" + _scatter(metrics, last) + _volatility(metrics) + "</div>")
    for k in ks:
        sections.append(f"<h2>Judge-answered questions ({k})</h2>")
        sections.append(
            table_html(
                ["question", "fingerprint", "answers", "unscored", "agreement", "AC1", "Fleiss", "imputed", "R_stab"],
                audit_question_rows(metrics, k),
            )
        )
    if code_rows:
        sections.append(
            "<h2>Code-answered questions</h2><p>Answered by deterministic checks: the same answer on "
            "every run by construction, so no stability statistic applies.</p>"
        )
        sections.append(table_html(["question", "answers", "unscored", "yes-rate"], code_rows))
    sections.append("<h2>Per artifact</h2>")
    if len(judges) > 1:
        sections.append(
            table_html(
                ["artifact", "generator", "judge (+ code)", "mean S_i", "std"],
                [[a["artifact_id"], a["generator"], a["judge"], a["mean"], a["std"]] for a in metrics["artifacts"]],
            )
        )
    else:  # one judge, named at the top
        sections.append(
            table_html(
                ["artifact", "generator", "mean S_i", "std"],
                [[a["artifact_id"], a["generator"], a["mean"], a["std"]] for a in metrics["artifacts"]],
            )
        )
    strata = (
        "strata (judge × generator, macro-averaged): " + ", ".join(f"{j} × {g}" for j, g in metrics["strata"])
        if len(judges) > 1
        else "generators (macro-averaged): " + ", ".join(g for _, g in metrics["strata"])
    )
    return page(title, sections, f"{strata}; DBSCAN eps {metrics['eps']}")


def write_audit_html(
    path: Union[str, os.PathLike],
    metrics: dict,
    *,
    title: str = "adherence audit",
    about: str = "",
    inputs: Sequence[Any] = (),
) -> Path:
    """``audit_html`` written through the one owner-checked writer (never onto ``inputs``); returns the path."""
    from ..engine import write_owned

    write_owned(path, audit_html(metrics, title=title, about=about), what="the HTML page", inputs=inputs)
    return Path(path)

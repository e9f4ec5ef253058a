"""The ``adherence compare`` page: paired differences with their intervals, overall and per group, McNemar's
table, and the turns and conversations that changed most."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Union

from ._html import figure_svg, page, pyplot, table_html

__all__ = ["compare_html", "write_compare_html"]


def _short(text: str, n: int = 60) -> str:
    """A group's value as a row label: a role is a whole system prompt, shown by its start."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _rows(r: dict, key: str) -> list:
    rows = [("all turns", r.get(key))]
    for name, per in (r.get("by") or {}).items():
        rows += [(f"{name}: {_short(v)}", x.get(key)) for v, x in per.items()]
    return [(n, x) for n, x in rows if x and x.get("diff") is not None]


def _diff_svg(r: dict, key: str, label: str, gate: float | None = None) -> str:
    """Each difference (new - old) as a point with its interval, one row per group; the gate's margin dashed."""
    rows = _rows(r, key)
    if not rows:
        return ""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 0.8 + 0.45 * len(rows)))
    for i, (_, x) in enumerate(rows):
        worse = x["ci_low"] > 0 if key == "violation_rate" else x["ci_high"] < 0  # agreement, score: lower is worse
        color = "#c62828" if worse else "#3949ab"
        ax.errorbar(x["diff"], -i, xerr=[[x["diff"] - x["ci_low"]], [x["ci_high"] - x["diff"]]], fmt="o",
                    color=color, capsize=3)  # fmt: skip
    ax.axvline(0, color="#444", linewidth=0.8)
    if gate is not None:
        at = gate if key == "violation_rate" else -gate  # worse is a higher violation rate, a lower agreement
        ax.axvline(at, color="#c62828", linestyle="--", linewidth=1, label=f"gate: worse by {gate:g}")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, frameon=False)
    ax.set_yticks([-i for i in range(len(rows))], [n if len(n) <= 40 else n[:37] + "..." for n, _ in rows])
    ax.set_xlabel(f"{label}: new - old")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return figure_svg(fig)


def compare_html(r: dict, *, title: str = "adherence compare") -> str:
    level = int(round(100 * r["confidence"]))
    v = r.get("violation_rate")
    g = r.get("gate")
    head = []
    if g:
        verdict = "passed" if g["passed"] else "failed"
        head.append(f"<p><b>Gate {verdict}</b> (--fail-if-worse-by {g['fail_if_worse_by']:g})"
                    + (f": {html.escape(g['reason'])}" if g.get("reason") else "") + "</p>")  # fmt: skip
    if v and v.get("diff") is not None:
        head.append(
            f"<p>Violation rate {v['old']:.2%} &rarr; <b>{v['new']:.2%}</b> on {r['n_both_scored']:,} turns scored in "
            f"both; difference {v['diff']:+.2%} ({level}% interval {v['ci_low']:+.2%} to {v['ci_high']:+.2%}, "
            f"resampling whole conversations).</p>"
        )
    ag = r.get("agreement")
    if ag and ag.get("diff") is not None:
        head.append(
            f"<p>Agreement with the labels {ag['old']:.2%} &rarr; <b>{ag['new']:.2%}</b> on {ag['n']:,} labelled turns "
            f"both predicted; difference {ag['diff']:+.2%} ({level}% interval {ag['ci_low']:+.2%} to "
            f"{ag['ci_high']:+.2%}, resampling whole conversations); {ag['mcnemar']['b']} turns went from right to "
            f"wrong and {ag['mcnemar']['c']} from wrong to right (McNemar exact p = {ag['mcnemar']['p_value']:.4g}).</p>"
        )
    for note in r.get("notes") or []:
        head.append(f"<p class='warn'>{html.escape(note)}</p>")
    margin = g["fail_if_worse_by"] if g else None
    on_agreement = g is not None and g.get("on") == "agreement"
    sections = list(head)
    if ag and ag.get("diff") is not None:
        sections += ["<h2>Agreement with the labels</h2>",
                     _diff_svg(r, "agreement", "agreement", margin if on_agreement else None)]  # fmt: skip
    sections += ["<h2>Violation rate</h2>",
                 _diff_svg(r, "violation_rate", "violation rate", None if on_agreement else margin)]  # fmt: skip
    if r.get("score"):  # two methods' scores are not on one scale: left out unless --allow-methods
        sections += ["<h2>Mean score</h2>", _diff_svg(r, "score", "mean score")]
    by_rate = bool(_rows(r, "violation_rate"))
    sections.append(f"<h2>{'Violation rate' if by_rate else 'Mean score'} by group</h2>")
    rows = []
    for name, x in _rows(r, "violation_rate") or _rows(r, "score"):
        rows.append([name, x["old"], x["new"], x["diff"], x["ci_low"], x["ci_high"], x["n"]])
    sections.append(table_html(["group", "old", "new", "new - old", f"{level}% low", f"{level}% high", "turns"], rows))
    m = r.get("mcnemar")
    if m:
        t = m["table"]
        sections += [
            "<h2>Predictions, paired (McNemar's exact test)</h2>",
            table_html(
                ["old \\ new", "adherent", "violation"],
                [["adherent", t[0][0], t[0][1]], ["violation", t[1][0], t[1][1]]],
            ),  # fmt: skip
            f"<p>{m['b']} turns went from adherent to violation and {m['c']} the other way; exact two-sided "
            f"p = {m['p_value']:.4g}.</p>",
        ]
    if r.get("changed_conversations"):
        links = "".join(
            f"<li><a href='{_view_link(c['conversation_id'])}'>{html.escape(str(c['conversation_id']))}</a>: "
            f"{c['turns']} turns, mean change {c['mean_change']:+.4f}</li>"
            for c in r["changed_conversations"]
        )
        sections += [
            "<h2>Conversations that changed most</h2>",
            f"<p class='meta'>The links open the new output's conversation in <code>adherence view "
            f"{html.escape(r['old'])} {html.escape(r['new'])}</code> (on its default address).</p><ul>{links}</ul>",
        ]
    if r.get("changed_turns"):
        sections += ["<h2>Turns that changed most</h2>",
                     table_html(["conversation", "turn", "old", "new", "change"],
                                [[t["conversation_id"], t["turn_index"], t["old"], t["new"], t["change"]]
                                 for t in r["changed_turns"]])]  # fmt: skip
    for side in ("only_in_old", "only_in_new"):
        o = r[side]
        if o["count"]:
            first = ", ".join(html.escape(f"{c}#{t}") for c, t in o["first"])
            sections.append(f"<p>{o['count']:,} turn(s) {side.replace('_', ' ')}: {first}"
                            + (" ..." if o["count"] > len(o["first"]) else "") + "</p>")  # fmt: skip
    return page(title, sections, subtitle=f"{r['old']} → {r['new']}")


def _view_link(conversation_id) -> str:
    """The conversation in ``adherence view OLD NEW`` on its default address (NEW is the view's second output)."""
    from urllib.parse import quote

    return html.escape(f"http://127.0.0.1:8765/#c/1/{quote(str(conversation_id), safe='')}", quote=True)


def write_compare_html(path: Union[str, os.PathLike], r: dict, **kwargs) -> Path:
    """``compare_html`` written through the one owner-checked writer (never onto ``inputs``); returns the path."""
    from ..engine import write_owned

    inputs = kwargs.pop("inputs", ())
    write_owned(path, compare_html(r, **kwargs), what="the HTML page", inputs=inputs)
    return Path(path)

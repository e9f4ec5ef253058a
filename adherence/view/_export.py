"""``adherence view --export-html``: one self-contained page of the worst conversations, for sharing (no server,
no script, every text escaped)."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Optional, Sequence, Union

from ._store import Filters, ScoreStore

__all__ = ["export_html"]


def _fmt(v) -> str:
    if v is None:
        return "–"
    return f"{v:.4f}" if isinstance(v, float) else html.escape(str(v))


def export_html(
    store: ScoreStore,
    path: Union[str, os.PathLike],
    *,
    top: int = 50,
    filters: Optional[Filters] = None,
    inputs: Sequence = (),
) -> Path:
    """The ``top`` worst conversations (lowest mean score first) with every turn, written to ``path`` through the one
    owner-checked writer (never onto ``inputs``, the outputs shown)."""
    from ..engine import write_owned
    from ..report import page

    f = filters or Filters()
    ranked = store.conversations(f, sort="worst", limit=top)
    sections = [
        f"<p>The {len(ranked['rows'])} conversations with the lowest mean score, of {ranked['total']:,} "
        f"({store.rows:,} turns from {', '.join(html.escape(s.path) for s in store.sources)}).</p>"
    ]
    for r in ranked["rows"]:
        c = store.conversation(r["source"], r["conversation_id"])
        items = []
        for t in c["turns"]:
            verdict = {0: "violation", 1: "adherent"}.get(t["prediction"], "")
            facts = " · ".join(
                f"{name} {_fmt(t[key])}"
                for name, key in (
                    ("score", "score"),
                    ("status", "status"),
                    ("label", "label"),
                    ("error", "error"),
                    ("reason", "reason"),
                    ("decided by stage", "decided_by"),
                )  # fmt: skip
                if t.get(key) is not None
            )
            items.append(
                f"<li><p class='meta'>turn {t['turn_index']} · {html.escape(t['method'] or '')} · "
                f"<b>{verdict}</b></p><p><b>user:</b> {html.escape(t['user'] or '')}</p>"
                f"<p><b>assistant:</b> {html.escape(t['assistant'] or '')}</p><p class='meta'>{facts}</p></li>"
            )
        sections.append(
            f"<h2>{html.escape(str(r['conversation_id']))} <span class='meta'>mean score {_fmt(r['mean_score'])}, "
            f"violations {_fmt(r['violations'])}</span></h2>"
            f"<p class='meta'>{html.escape(c['role'] or '')}</p><ol>{''.join(items)}</ol>"
        )
    write_owned(path, page("adherence view: worst conversations", sections), what="the HTML page",
                inputs=list(inputs) or [s.path for s in store.sources])  # fmt: skip
    return Path(path)

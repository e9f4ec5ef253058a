"""Small self-contained HTML pages: inline SVG figures, no external assets."""

from __future__ import annotations

import html
import io
from typing import Any, Iterable

from .._optional import require

__all__ = ["pyplot", "figure_svg", "page", "table_html"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0} td,th{border:1px solid #ddd;padding:.3em .7em;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.meta{color:#666;font-size:.9em} .figs{display:flex;flex-wrap:wrap;gap:1em} .figs svg{max-width:100%;height:auto}
.warn{color:#a33}
"""


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (needs ``adherence[report]``)."""
    matplotlib = require("matplotlib", "report", "HTML reports")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def figure_svg(fig) -> str:
    """The figure as inline SVG. Every text is drawn literally: a label, file name or title holding ``$``
    is the user's text, never matplotlib mathtext (which would fail on it or change it)."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        t.set_parse_math(False)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4f}"
    return html.escape(str(v))


def table_html(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, sections: Iterable[str], subtitle: str = "") -> str:
    sub = f'<p class="meta">{html.escape(subtitle)}</p>' if subtitle else ""
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{sub}{''.join(sections)}</body></html>"
    )

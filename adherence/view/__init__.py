"""``adherence view``: a local, read-only web viewer over score outputs of any size, and a shareable page of the
worst conversations (``export_html``)."""

from ._export import export_html
from ._labelling import LabelSession
from ._server import ViewServer, serve
from ._store import VIEW_COLUMNS, Filters, ScoreStore

__all__ = [
    "Filters",
    "LabelSession",
    "ScoreStore",
    "VIEW_COLUMNS",
    "ViewServer",
    "export_html",
    "serve",
]

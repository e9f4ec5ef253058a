"""HTML reports with plots (needs ``adherence[report]`` for matplotlib)."""

from ._audit import audit_html, audit_question_rows, write_audit_html
from ._evaluation import evaluation_html, write_evaluation_html
from ._persona import persona_html, persona_rows, write_persona_html

__all__ = [
    "audit_html",
    "audit_question_rows",
    "evaluation_html",
    "persona_html",
    "persona_rows",
    "write_audit_html",
    "write_evaluation_html",
    "write_persona_html",
]

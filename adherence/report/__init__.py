"""HTML reports with plots (needs ``adherence[report]`` for matplotlib)."""

from ._audit import audit_html, audit_question_rows, write_audit_html
from ._evaluation import evaluation_html, write_evaluation_html

__all__ = ["audit_html", "audit_question_rows", "evaluation_html", "write_audit_html", "write_evaluation_html"]

"""HTML reports with plots (needs ``adherence[report]`` for matplotlib)."""

from ._audit import audit_html, audit_question_rows, code_question_rows, write_audit_html
from ._cascade import bound_curve, cascade_html, write_cascade_html
from ._compare import compare_html, write_compare_html
from ._estimate import estimate_html, write_estimate_html
from ._evaluation import evaluation_html, write_evaluation_html
from ._html import page
from ._persona import adherence_rows, persona_html, persona_rows, write_persona_html

__all__ = [
    "adherence_rows",
    "audit_html",
    "audit_question_rows",
    "bound_curve",
    "cascade_html",
    "code_question_rows",
    "compare_html",
    "estimate_html",
    "evaluation_html",
    "page",
    "persona_html",
    "persona_rows",
    "write_audit_html",
    "write_cascade_html",
    "write_compare_html",
    "write_estimate_html",
    "write_evaluation_html",
    "write_persona_html",
]

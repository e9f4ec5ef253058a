"""HTML reports with plots (needs ``adherence[report]`` for matplotlib)."""

from ._audit import audit_html, audit_question_rows, code_question_rows, write_audit_html
from ._cascade import cascade_html, write_cascade_html
from ._compare import compare_html, write_compare_html
from ._estimate import estimate_html, write_estimate_html
from ._evaluation import evaluation_html, write_evaluation_html
from ._persona import adherence_rows, persona_html, persona_rows, write_persona_html

__all__ = [
    "adherence_rows",
    "audit_html",
    "audit_question_rows",
    "cascade_html",
    "compare_html",
    "code_question_rows",
    "estimate_html",
    "evaluation_html",
    "persona_html",
    "persona_rows",
    "write_audit_html",
    "write_cascade_html",
    "write_compare_html",
    "write_estimate_html",
    "write_evaluation_html",
    "write_persona_html",
]

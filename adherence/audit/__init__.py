"""Instruction-adherence audits with verdict and reasoning stability of the judge."""

from ._checks import CHECKS, CheckError, run_check, validate_check, word_count
from ._judge import audit_request, parse_audit_answer, repair_json
from ._rubric import CATEGORIES, Rubric, RubricItem, draft_rubric, load_rubric
from ._run import AuditConfig, artifact_variables, read_artifacts, run_audit
from ._stability import choose_strategy, dbscan_cosine, dominant_share, fingerprint, stability_tables

__all__ = [
    "AuditConfig",
    "CATEGORIES",
    "CHECKS",
    "CheckError",
    "Rubric",
    "RubricItem",
    "artifact_variables",
    "audit_request",
    "choose_strategy",
    "dbscan_cosine",
    "dominant_share",
    "draft_rubric",
    "fingerprint",
    "load_rubric",
    "parse_audit_answer",
    "read_artifacts",
    "repair_json",
    "run_audit",
    "run_check",
    "stability_tables",
    "validate_check",
    "word_count",
]

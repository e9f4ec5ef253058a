"""Role adherence: reference-based methods and session aggregation."""

from ._base import METHODS, Method, MethodResult, Resources, RoleConfig, get_method, missing_references, text_column
from ._calibration import calibration_document, fitted_rows, load_calibration
from ._classifier import (
    check_objective,
    classifier_document,
    classifier_features,
    decision_rates,
    decision_threshold,
    fit_classifier,
    load_classifier,
    model_digest,
    model_probability,
    training_record,
)
from ._classifier_file import encoder_file_of
from ._dryrun import dry_run
from ._finetune import LEARNERS, FineTuning, fine_tuned_classifier, fit_fine_tuned, length_grouped_steps, require_tuning
from ._judge import tensor_parallel_config
from ._nli import NliModel
from ._platform import SCORE_FIELDS, ConversationScorer, cached_scorer, output_schema, platform_config
from ._scope import scope_parts, scope_score
from ._score import aggregate_sessions, score_turns

__all__ = [
    "ConversationScorer",
    "FineTuning",
    "LEARNERS",
    "METHODS",
    "Method",
    "MethodResult",
    "NliModel",
    "Resources",
    "RoleConfig",
    "SCORE_FIELDS",
    "aggregate_sessions",
    "cached_scorer",
    "calibration_document",
    "check_objective",
    "classifier_document",
    "classifier_features",
    "decision_rates",
    "decision_threshold",
    "dry_run",
    "encoder_file_of",
    "fine_tuned_classifier",
    "fit_classifier",
    "fit_fine_tuned",
    "fitted_rows",
    "get_method",
    "length_grouped_steps",
    "load_calibration",
    "load_classifier",
    "missing_references",
    "model_digest",
    "model_probability",
    "output_schema",
    "platform_config",
    "require_tuning",
    "scope_parts",
    "scope_score",
    "score_turns",
    "text_column",
    "tensor_parallel_config",
    "training_record",
]

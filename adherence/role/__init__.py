"""Role adherence: reference-based methods and session aggregation."""

from ._base import METHODS, MethodResult, Resources, RoleConfig, get_method
from ._classifier_file import encoder_file_of
from ._finetune import LEARNERS, FineTuning, fine_tuned_classifier, fit_fine_tuned, length_grouped_steps, require_tuning
from ._score import aggregate_sessions, score_turns

__all__ = [
    "LEARNERS",
    "METHODS",
    "FineTuning",
    "MethodResult",
    "Resources",
    "RoleConfig",
    "aggregate_sessions",
    "encoder_file_of",
    "fine_tuned_classifier",
    "fit_fine_tuned",
    "get_method",
    "length_grouped_steps",
    "require_tuning",
    "score_turns",
]

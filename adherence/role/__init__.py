"""Role adherence: reference-based methods and session aggregation."""

from ._base import METHODS, MethodResult, Resources, RoleConfig, get_method
from ._score import aggregate_sessions, score_turns

__all__ = ["METHODS", "MethodResult", "Resources", "RoleConfig", "aggregate_sessions", "get_method", "score_turns"]

"""LLM judges: prompts, backends (transformers, vLLM, OpenAI-compatible), log-prob scoring, parsing, cache."""

from ._backend import BACKENDS, JudgeBackend, JudgeOutput, get_backend
from ._backend_options import Capabilities, capabilities
from ._cache import JudgeCache
from ._judge import SMOKE_TEST_WARNING, JudgeConfig, RoleJudge
from ._parse import p_yes_from_logprobs, parse_turn_verdicts, parse_yes_no
from ._prompts import DEFAULT_CRITERIA, JudgeRequest, conversation_request, turn_requests

__all__ = [
    "BACKENDS",
    "Capabilities",
    "DEFAULT_CRITERIA",
    "JudgeBackend",
    "JudgeCache",
    "JudgeConfig",
    "RoleJudge",
    "SMOKE_TEST_WARNING",
    "JudgeOutput",
    "JudgeRequest",
    "capabilities",
    "conversation_request",
    "get_backend",
    "p_yes_from_logprobs",
    "parse_turn_verdicts",
    "parse_yes_no",
    "turn_requests",
]

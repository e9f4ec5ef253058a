"""LLM judges: prompts, backends (transformers, vLLM, OpenAI-compatible), log-prob scoring, parsing, cache."""

from ._backend import BACKENDS, JudgeBackend, JudgeOutput, get_backend
from ._backend_options import (
    BACKEND_OPTIONS,
    Capabilities,
    ServerOptions,
    TransformersOptions,
    VLLMOptions,
    capabilities,
)
from ._cache import JudgeCache
from ._dryrun import judge_plan
from ._judge import SMOKE_TEST_WARNING, JudgeConfig, RoleJudge, cached_calls, is_bundled_judge
from ._parse import (
    NO_VARIANTS,
    YES_VARIANTS,
    p_yes_from_logprobs,
    p_yes_from_sums,
    parse_turn_verdicts,
    parse_yes_no,
    variant_sets,
)
from ._planner import PromptPlanner
from ._prompts import DEFAULT_CRITERIA, LAYOUTS, JudgeRequest, conversation_request, turn_requests
from ._transformers import TransformersBackend
from ._verdict import first_token_verdict

__all__ = [
    "BACKENDS",
    "BACKEND_OPTIONS",
    "Capabilities",
    "DEFAULT_CRITERIA",
    "JudgeBackend",
    "JudgeCache",
    "JudgeConfig",
    "JudgeOutput",
    "JudgeRequest",
    "LAYOUTS",
    "NO_VARIANTS",
    "PromptPlanner",
    "RoleJudge",
    "SMOKE_TEST_WARNING",
    "ServerOptions",
    "TransformersBackend",
    "TransformersOptions",
    "VLLMOptions",
    "YES_VARIANTS",
    "cached_calls",
    "capabilities",
    "conversation_request",
    "first_token_verdict",
    "get_backend",
    "is_bundled_judge",
    "judge_plan",
    "p_yes_from_logprobs",
    "p_yes_from_sums",
    "parse_turn_verdicts",
    "parse_yes_no",
    "turn_requests",
    "variant_sets",
]

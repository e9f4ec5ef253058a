"""The judge backend interface and its registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Sequence

from .._registry import Registry
from ._prompts import JudgeRequest

__all__ = ["JudgeOutput", "JudgeBackend", "Sampling", "BACKENDS", "get_backend", "score_options"]

BACKENDS = Registry(
    "judge backend",
    {
        "transformers": "adherence.judges._transformers:TransformersBackend",
        "vllm": "adherence.judges._vllm:VLLMBackend",
        "openai": "adherence.judges._openai:OpenAIBackend",
    },
    base="adherence.judges._backend:JudgeBackend",
)


def score_options(backend: str, options: Optional[dict]) -> dict:
    """The part of a backend's constructor ``options`` that can change a verdict (all of an unknown backend's)."""
    from ._backend_options import cosmetic_options

    cosmetic = cosmetic_options(backend)
    return {k: v for k, v in (options or {}).items() if k not in cosmetic}


@dataclass
class JudgeOutput:
    """What one judge call returned.

    Attributes:
        top_logprobs: the first generated token's top-k ``(token, logprob)`` pairs (continuous mode).
        yes_no: ``(log P(yes variants), log P(no variants))`` summed over the whole vocabulary at
            the first generated position, from backends that hold the full distribution.
        text: generated text (binary mode, reasons).
        truncated: the prompt's history was left-truncated to fit the context.
        error: why the call failed (the row becomes ``status=error``).
    """

    top_logprobs: Optional[list] = None
    text: Optional[str] = None
    truncated: bool = False
    error: Optional[str] = None
    yes_no: Optional[tuple] = None

    def to_json(self) -> dict:
        out = {"top_logprobs": self.top_logprobs, "text": self.text, "truncated": self.truncated, "error": self.error}
        if self.yes_no is not None:  # -inf is not JSON: stored as None
            out["yes_no"] = [None if v == float("-inf") else v for v in self.yes_no]
        return out

    @classmethod
    def from_json(cls, d: dict) -> JudgeOutput:
        lp = d.get("top_logprobs")
        yn = d.get("yes_no")
        return cls(
            [tuple(x) for x in lp] if lp is not None else None,
            d.get("text"),
            bool(d.get("truncated")),
            d.get("error"),
            tuple(float("-inf") if v is None else float(v) for v in yn) if yn else None,
        )


@dataclass(frozen=True)
class Sampling:
    """How ``generate`` samples: at most ``max_tokens``, greedy at temperature 0, ``seed`` for sampled runs, and
    the strings that end an answer early."""

    max_tokens: int
    temperature: float = 0.0
    seed: Optional[int] = None
    stop: tuple = ()


class JudgeBackend(ABC):
    """A judge model behind two calls: first-token log-probabilities and text generation."""

    name: str = ""
    #: False for providers that return no log-probabilities (continuous mode then falls back to binary).
    supports_logprobs: bool = True
    #: True when ``first_token_logprobs(..., variants=...)`` returns exact whole-vocabulary ``yes_no`` sums.
    full_vocab: bool = False

    @property
    @abstractmethod
    def model_id(self) -> str:
        """Identity of the model for caching and metadata."""

    @abstractmethod
    def first_token_logprobs(
        self, requests: Sequence[JudgeRequest], *, top_k: int = 20, variants: Optional[tuple] = None
    ) -> list[JudgeOutput]:
        """Top-k log-probabilities of the first generated token of each request.

        ``variants`` = ``(yes_texts, no_texts)`` (normalised token texts): backends with
        ``full_vocab`` also return ``yes_no``, the log of each set's total probability.
        """

    def generate(
        self,
        requests: Sequence[JudgeRequest],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        seed: Optional[int] = None,
        stop: Optional[Sequence[str]] = None,
    ) -> list[JudgeOutput]:
        """Generated text of each request (greedy at temperature 0), ending early at any ``stop`` string."""
        return self._generate(requests, Sampling(max_tokens, temperature, seed, tuple(stop or ())))

    def _generate(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeOutput]:
        """What a backend implements for ``generate`` (or it overrides ``generate`` itself)."""
        raise NotImplementedError(f"the {self.name or type(self).__name__} backend implements no generate")

    @property
    def cache_id(self) -> str:
        """Identity of the model in the judge-call cache: what answers, not where it is served (a cached call
        is reused across endpoints, ports and host names that serve the same model)."""
        return self.model_id

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model_id}

    def preflight(self, *, logprobs: bool) -> None:
        """Check, before any row, that the backend can serve the job (servers override this)."""


def get_backend(name: str, **kwargs) -> JudgeBackend:
    """Build the backend registered under ``name`` (imported lazily)."""
    return BACKENDS.create(name, **kwargs)

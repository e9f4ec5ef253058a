"""The judge backend interface and its registry."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Sequence

from .._registry import unknown_name
from ._prompts import JudgeRequest

__all__ = ["JudgeOutput", "JudgeBackend", "BACKENDS", "get_backend"]

BACKENDS = {
    "transformers": "adherence.judges._transformers:TransformersBackend",
    "vllm": "adherence.judges._vllm:VLLMBackend",
    "openai": "adherence.judges._openai:OpenAIBackend",
}


@dataclass
class JudgeOutput:
    """What one judge call returned.

    Attributes:
        top_logprobs: the first generated token's top-k ``(token, logprob)`` pairs (continuous mode).
        text: generated text (binary mode, reasons).
        truncated: the prompt's history was left-truncated to fit the context.
        error: why the call failed (the row becomes ``status=error``).
    """

    top_logprobs: Optional[list] = None
    text: Optional[str] = None
    truncated: bool = False
    error: Optional[str] = None

    def to_json(self) -> dict:
        return {"top_logprobs": self.top_logprobs, "text": self.text, "truncated": self.truncated, "error": self.error}

    @classmethod
    def from_json(cls, d: dict) -> "JudgeOutput":
        lp = d.get("top_logprobs")
        return cls([tuple(x) for x in lp] if lp is not None else None, d.get("text"), bool(d.get("truncated")), d.get("error"))


class JudgeBackend(ABC):
    """A judge model behind two calls: first-token log-probabilities and text generation."""

    name: str = ""
    #: False for providers that return no log-probabilities (continuous mode then falls back to binary).
    supports_logprobs: bool = True

    @property
    @abstractmethod
    def model_id(self) -> str:
        """Identity of the model for caching and metadata."""

    @abstractmethod
    def first_token_logprobs(self, requests: Sequence[JudgeRequest], *, top_k: int = 20) -> list[JudgeOutput]:
        """Top-k log-probabilities of the first generated token of each request."""

    @abstractmethod
    def generate(self, requests: Sequence[JudgeRequest], *, max_tokens: int, temperature: float = 0.0,
                 seed: Optional[int] = None) -> list[JudgeOutput]:
        """Generated text of each request (greedy at temperature 0)."""

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model_id}

    def preflight(self, *, logprobs: bool) -> None:
        """Check, before any row, that the backend can serve the job (servers override this)."""

    def close(self) -> None:
        """Release resources (servers, engines)."""


def get_backend(name: str, **kwargs) -> JudgeBackend:
    """Build the backend registered under ``name`` (imported lazily)."""
    if name not in BACKENDS:
        raise ValueError(unknown_name("judge backend", name, BACKENDS))
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)

"""What one judge call says about one request: a ``Verdict`` with a status, never a tuple whose slots change
meaning, and the one place a first token's output becomes P(yes) (the role judge and the audit both use it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Optional

from ._backend import JudgeOutput
from ._parse import p_yes_from_logprobs, p_yes_from_sums, parse_yes_no

__all__ = ["Status", "Verdict", "binary_verdict", "first_token_verdict"]


class Status(str, Enum):
    """A row's status in the turn-scores contract."""

    OK = "ok"
    UNSCORED = "unscored"  # the judge answered, but with no usable verdict (never read as 0 or 0.5)
    ERROR = "error"  # the call itself failed


@dataclass(frozen=True)
class Verdict:
    """One judge call's verdict on one request.

    ``p_yes``: P(yes) of the first token (continuous), or 1.0 / 0.0 for a generated YES / NO (binary);
    None unless ``status`` is ``ok``. ``source``: ``full_vocab`` | ``logprobs`` | ``generated``.
    ``mass``: the probability the yes and no tokens hold together (continuous). ``error``: why there
    is no verdict. ``truncated``: the prompt's history was cut to fit.
    """

    status: Status
    p_yes: Optional[float] = None
    source: Optional[str] = None
    mass: Optional[float] = None
    error: Optional[str] = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @classmethod
    def failed(cls, error: str, *, truncated: bool = False) -> Verdict:
        return cls(Status.ERROR, error=error, truncated=truncated)

    @classmethod
    def unscored(cls, error: str, *, truncated: bool = False) -> Verdict:
        return cls(Status.UNSCORED, error=error, truncated=truncated)


def first_token_verdict(o: JudgeOutput, yes: frozenset, no: frozenset) -> Verdict:
    """P(yes) of one first-token output: exact over the whole vocabulary when the backend summed the yes and no
    variants (``o.yes_no``), else from its top log-probabilities. A top-k that holds neither a yes nor a no
    token is ``unscored`` with the top tokens as the reason (a 0.5 would read as a verdict)."""
    if o.error:
        return Verdict.failed(o.error, truncated=o.truncated)
    try:
        if o.yes_no is not None:
            p, mass = p_yes_from_sums(*o.yes_no)
            source = "full_vocab"
        elif not o.top_logprobs:
            return Verdict.unscored(
                "the judge returned no top log-probabilities for the first token", truncated=o.truncated
            )
        else:
            p, source, mass = p_yes_from_logprobs(o.top_logprobs, yes=yes, no=no, with_mass=True)
            if source == "fallback_0.5":
                top = o.top_logprobs
                tokens = list(top)[:8] if isinstance(top, Mapping) else [t for t, _ in list(top)[:8]]
                return Verdict.unscored(
                    f"neither a yes nor a no token among the first token's top {len(top)} log-probabilities "
                    f"(top: {', '.join(map(repr, tokens))})",
                    truncated=o.truncated,
                )
        if not math.isfinite(p):
            return Verdict.unscored(f"unusable log-probabilities: P(yes) is {p}", truncated=o.truncated)
    except (ValueError, TypeError) as exc:
        return Verdict.unscored(f"unusable log-probabilities: {exc}", truncated=o.truncated)
    return Verdict(Status.OK, p_yes=p, source=source, mass=mass, truncated=o.truncated)


def binary_verdict(o: JudgeOutput) -> Verdict:
    """The YES / NO a generated answer gives, or ``unscored`` with the answer when it gives neither."""
    if o.error:
        return Verdict.failed(o.error, truncated=o.truncated)
    v = parse_yes_no(o.text)
    if v is None:
        return Verdict.unscored(f"unparseable judge answer: {(o.text or '')[:80]!r}", truncated=o.truncated)
    return Verdict(Status.OK, p_yes=float(v), source="generated", truncated=o.truncated)

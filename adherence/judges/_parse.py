"""Parse judge outputs: YES/NO text, first-token log-probabilities, per-turn verdict lists."""

from __future__ import annotations

import math
import re
import string
from typing import Mapping, Optional

__all__ = ["parse_yes_no", "p_yes_from_logprobs", "parse_turn_verdicts", "normalize_token"]

_PUNCT = string.punctuation + "“”‘’«»"
YES_VARIANTS = frozenset({"yes"})
NO_VARIANTS = frozenset({"no"})


def normalize_token(token: str) -> str:
    """Strip whitespace (incl. SentencePiece/BPE space markers) and casefold."""
    return token.replace("▁", " ").replace("Ġ", " ").strip().casefold()


def parse_yes_no(text: Optional[str]) -> Optional[int]:
    """1 for YES, 0 for NO, None when the answer is neither.

    Tolerates case, surrounding punctuation and markup, a leading space and
    trailing words ("Yes, it adheres."); anything else is unparseable.

    Example:
        >>> [parse_yes_no(t) for t in [" YES", "no.", "**Yes**", "Maybe", ""]]
        [1, 0, 1, None, None]
    """
    if not text:
        return None
    words = text.strip().strip(_PUNCT + " \n\t").split()
    if not words:
        return None
    first = words[0].strip(_PUNCT).casefold()
    if first in YES_VARIANTS:
        return 1
    if first in NO_VARIANTS:
        return 0
    return None


def _lse(values: list[float]) -> float:
    if not values:
        return -math.inf
    m = max(values)
    if m == -math.inf:  # every probability is 0
        return -math.inf
    return m + math.log(sum(math.exp(v - m) for v in values))


def p_yes_from_logprobs(top_logprobs: Mapping[str, float] | list) -> tuple[float, str]:
    """P(yes) = sigmoid(LSE(yes variants) - LSE(no variants)) over the first token's top log-probs.

    ``top_logprobs`` maps token text to log-probability (or is a list of
    ``(token, logprob)``). Tokens match after strip + casefold. Returns
    ``(p_yes, source)``: source ``"logprobs"``, or ``"fallback_0.5"`` when
    neither a yes nor a no variant is among them.

    Raises:
        ValueError: a log-probability is NaN or positive, or every yes/no variant has
            log-probability -inf (no P(yes) is defined); the judge marks the row unscored.

    Example:
        >>> round(p_yes_from_logprobs({"Yes": -0.1, " yes": -3.0, "No": -2.5})[0], 4)
        0.9208
    """
    items = top_logprobs.items() if isinstance(top_logprobs, Mapping) else top_logprobs
    yes, no = [], []
    for token, lp in items:
        if math.isnan(float(lp)) or float(lp) > 0:
            raise ValueError(f"invalid log-probability {lp!r} for token {token!r}")
        t = normalize_token(token)
        if t in YES_VARIANTS:
            yes.append(float(lp))
        elif t in NO_VARIANTS:
            no.append(float(lp))
    if not yes and not no:
        return 0.5, "fallback_0.5"
    if _lse(yes) == -math.inf and _lse(no) == -math.inf:
        raise ValueError("both the yes and the no tokens have probability 0 (log-probability -inf)")
    diff = _lse(yes) - _lse(no)
    if diff == math.inf:
        return 1.0, "logprobs"
    if diff == -math.inf:
        return 0.0, "logprobs"
    return 1.0 / (1.0 + math.exp(-diff)), "logprobs"


_TURN_LINE = re.compile(r"turn\s*#?\s*(\d+)\s*[:.)\-–—]*\s*\**\s*(yes|no)\b", re.IGNORECASE)


def parse_turn_verdicts(text: Optional[str], n_turns: int) -> list[Optional[int]]:
    """Per-turn verdicts from 'Turn 1: YES' lines (1-based); missing or repeated-conflicting turns are None."""
    out: list[Optional[int]] = [None] * n_turns
    seen: dict[int, set] = {}
    for m in _TURN_LINE.finditer(text or ""):
        i = int(m.group(1)) - 1
        if 0 <= i < n_turns:
            seen.setdefault(i, set()).add(1 if m.group(2).casefold() == "yes" else 0)
    for i, values in seen.items():
        out[i] = values.pop() if len(values) == 1 else None
    return out

"""Parse judge outputs: YES/NO text, first-token log-probabilities, per-turn verdict lists."""

from __future__ import annotations

import math
import re
import string
from typing import Mapping, Optional

__all__ = [
    "parse_yes_no",
    "p_yes_from_logprobs",
    "p_yes_from_sums",
    "parse_turn_verdicts",
    "normalize_token",
    "YES_VARIANTS",
    "NO_VARIANTS",
    "variant_sets",
]

_PUNCT = string.punctuation + "“”‘’«»"
YES_VARIANTS = frozenset({"yes"})
NO_VARIANTS = frozenset({"no"})


def normalize_token(token: str) -> str:
    """Strip whitespace (incl. SentencePiece/BPE space markers) and casefold."""
    return token.replace("▁", " ").replace("Ġ", " ").strip().casefold()


def variant_sets(yes=None, no=None) -> tuple[frozenset, frozenset]:
    """Normalised (yes, no) token-text sets; defaults ``{"yes"}`` and ``{"no"}``.

    Raises:
        ValueError: a set is empty after normalisation, or the two sets overlap.
    """
    ys = frozenset(normalize_token(t) for t in (YES_VARIANTS if yes is None else yes)) - {""}
    ns = frozenset(normalize_token(t) for t in (NO_VARIANTS if no is None else no)) - {""}
    if not ys or not ns:
        raise ValueError("the yes and no token sets must each hold at least one non-blank token")
    if ys & ns:
        raise ValueError(f"a token cannot be both a yes and a no variant: {sorted(ys & ns)}")
    return ys, ns


def parse_yes_no(text: Optional[str]) -> Optional[int]:
    """1 for YES, 0 for NO, None when the answer is neither.

    Tolerates case, surrounding punctuation and markup, a leading space and
    trailing words ("Yes, it adheres."); anything else is unparseable.

    Examples:
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


def _sigmoid_diff(ly: float, ln: float) -> float:
    diff = ly - ln
    if diff == math.inf:
        return 1.0
    if diff == -math.inf:
        return 0.0
    return 1.0 / (1.0 + math.exp(-diff)) if diff > -700 else 0.0


def p_yes_from_sums(log_yes: float, log_no: float) -> tuple[float, float]:
    """``(P(yes), yes+no mass)`` from the logs of the yes and no variants' total probabilities.

    Raises:
        ValueError: a value is NaN or positive, or both are -inf (the judge put no mass on an answer).
    """
    for v in (log_yes, log_no):
        if math.isnan(v) or v > 1e-6:
            raise ValueError(f"invalid log-probability sum {v!r}")
    if log_yes == -math.inf and log_no == -math.inf:
        raise ValueError("the yes and no tokens have probability 0 over the whole vocabulary")
    return _sigmoid_diff(log_yes, log_no), min(1.0, math.exp(log_yes) + math.exp(log_no))


def p_yes_from_logprobs(
    top_logprobs: Mapping[str, float] | list, *, yes=YES_VARIANTS, no=NO_VARIANTS, with_mass: bool = False
):
    """P(yes) = sigmoid(LSE(yes variants) - LSE(no variants)) over the first token's top log-probs.

    ``top_logprobs`` maps token text to log-probability (or is a list of
    ``(token, logprob)``). Tokens match after strip + casefold. Returns
    ``(p_yes, source)``: source ``"logprobs"``, or ``"fallback_0.5"`` when
    neither a yes nor a no variant is among them (the judge then marks the row
    unscored: 0.5 is no verdict); a token listed twice counts once; with ``with_mass``,
    ``(p_yes, source, mass)`` where mass is the yes+no probability found among
    the top-k (a lower bound of the whole-vocabulary mass). ``yes``/``no``: the
    normalised variant sets (``variant_sets``).

    Raises:
        ValueError: a log-probability is NaN or positive, or every yes/no variant has
            log-probability -inf (no P(yes) is defined); the judge marks the row unscored.

    Example:
        >>> round(p_yes_from_logprobs({"Yes": -0.1, " yes": -3.0, "No": -2.5})[0], 4)
        0.9208
    """
    items = top_logprobs.items() if isinstance(top_logprobs, Mapping) else top_logprobs
    ys, ns = [], []
    seen = set()
    for token, lp in items:
        if token in seen:  # the same token listed twice counts once
            continue
        seen.add(token)
        if math.isnan(float(lp)) or float(lp) > 0:
            raise ValueError(f"invalid log-probability {lp!r} for token {token!r}")
        t = normalize_token(token)
        if t in yes:
            ys.append(float(lp))
        elif t in no:
            ns.append(float(lp))
    if not ys and not ns:
        return (0.5, "fallback_0.5", 0.0) if with_mass else (0.5, "fallback_0.5")
    ly, ln = _lse(ys), _lse(ns)
    if ly == -math.inf and ln == -math.inf:
        raise ValueError("both the yes and the no tokens have probability 0 (log-probability -inf)")
    p = _sigmoid_diff(ly, ln)
    return (p, "logprobs", min(1.0, math.exp(ly) + math.exp(ln))) if with_mass else (p, "logprobs")


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

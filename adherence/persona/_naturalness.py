"""Persona naturalness with a (dialogue) NLI model: coherence, persona and self contradictions.

Three kinds of (premise, hypothesis) pairs, batched through one NLI model:

* consecutive turns (turn t-1, turn t): entailment / neutral / contradiction rates
  (ER, NR, CR) and the coherence score CS (1 / 0.5 / 0 per pair, averaged);
* persona sentence, utterance of that speaker: an utterance contradicts its persona
  when any of its persona sentences contradicts it — PCR is the share of such utterances;
* the previous K (5) utterances of the same speaker, utterance: SCR is the share of
  utterances (with at least one earlier one) contradicted by any of them.

A pair is a contradiction when the model's contradiction probability is at least the
threshold (0.7); otherwise it is entailment or neutral, whichever is more probable.
``naturalness = 0.6 * CS + 0.2 * (1 - PCR) + 0.2 * (1 - SCR)``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._errors import OptionError

__all__ = ["classify_nli", "naturalness"]

ENTAILMENT, NEUTRAL, CONTRADICTION = 0, 1, 2


def _label_index(labels: list, word: str) -> Optional[int]:
    return next((i for i, lab in enumerate(labels) if word in lab), None)


def classify_nli(probs: np.ndarray, labels: list, threshold: float = 0.7) -> np.ndarray:
    """ENTAILMENT / NEUTRAL / CONTRADICTION (0/1/2) per row of NLI probabilities.

    Example:
        >>> p = np.array([[0.8, 0.1, 0.1], [0.1, 0.3, 0.6], [0.05, 0.2, 0.75]])
        >>> classify_nli(p, ["entailment", "neutral", "contradiction"]).tolist()
        [0, 1, 2]
    """
    ent, neu, con = (_label_index(labels, w) for w in ("entail", "neutral", "contradict"))
    if ent is None or con is None:
        raise OptionError(f"the NLI model needs entailment and contradiction labels, has {labels}")
    probs = np.asarray(probs, dtype=np.float64)
    p_neu = probs[:, neu] if neu is not None else np.zeros(len(probs))
    out = np.where(probs[:, ent] >= p_neu, ENTAILMENT, NEUTRAL)
    return np.where(probs[:, con] >= threshold, CONTRADICTION, out)


def naturalness(corpus, nli, *, k_previous: int = 5, threshold: float = 0.7) -> dict:
    """The naturalness dimension of one corpus.

    Args:
        nli: an NLI model with ``probabilities(premises, hypotheses) -> [n, n_labels]`` and ``labels``
            (``adherence.role.NliModel``).

    Returns:
        ``{"score", "cs", "pcr", "scr", "er", "nr", "cr", "n_consecutive", "n_persona_utterances",
        "n_self_utterances", "n_pairs"}``.
    """
    if k_previous < 1:
        raise OptionError(f"`k_previous` must be >= 1, got {k_previous}")
    if not 0.0 < threshold <= 1.0:
        raise OptionError(f"`threshold` must be in (0, 1], got {threshold}")
    personas = {
        (r["conversation_id"], r["speaker"]): [p for p in (r.get("persona") or []) if p and p.strip()]
        for r in corpus.personas.to_pylist()
    }
    pairs: dict = {}

    def pair(premise: str, hypothesis: str) -> int:
        return pairs.setdefault((premise, hypothesis), len(pairs))

    consecutive, persona_groups, self_groups = [], [], []
    prev_conv: str | None = None
    prev_text: str | None = None
    history: dict[str, list[str]] = {}
    for c, s, t in corpus.utterances():
        t = (t or "").strip()
        if c != prev_conv:
            prev_conv, prev_text, history = c, None, {}
        if not t:
            continue
        if prev_text is not None:
            consecutive.append(pair(prev_text, t))
        sentences = personas.get((c, s), [])
        if sentences:
            persona_groups.append([pair(p, t) for p in sentences])
        earlier = history.setdefault(s, [])
        if earlier:
            self_groups.append([pair(u, t) for u in earlier[-k_previous:]])
        earlier.append(t)
        prev_text = t
    if not consecutive:
        raise OptionError("naturalness needs conversations with at least two non-empty turns")
    keys = list(pairs)
    probs = nli.probabilities([k[0] for k in keys], [k[1] for k in keys])
    label = classify_nli(probs, list(nli.labels), threshold)
    cons = label[consecutive]
    cs = float(np.mean(np.select([cons == ENTAILMENT, cons == NEUTRAL], [1.0, 0.5], 0.0)))
    pcr = float(np.mean([np.any(label[g] == CONTRADICTION) for g in persona_groups])) if persona_groups else 0.0
    scr = float(np.mean([np.any(label[g] == CONTRADICTION) for g in self_groups])) if self_groups else 0.0
    return {
        "score": 0.6 * cs + 0.2 * (1.0 - pcr) + 0.2 * (1.0 - scr),
        "cs": cs,
        "pcr": pcr,
        "scr": scr,
        "er": float(np.mean(cons == ENTAILMENT)),
        "nr": float(np.mean(cons == NEUTRAL)),
        "cr": float(np.mean(cons == CONTRADICTION)),
        "n_consecutive": len(consecutive),
        "n_persona_utterances": len(persona_groups),
        "n_self_utterances": len(self_groups),
        "n_pairs": len(keys),
        "threshold": threshold,
        "k_previous": k_previous,
    }

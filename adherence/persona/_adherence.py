"""Persona adherence: can a persona description find its own conversation among distractors?

Each speaker with a persona is a query (its persona sentences joined); each conversation
is a document, indexed twice — all utterances (*full*) and only the query speaker's
utterances (*target*). A query's score for a conversation is
``(1 - w) * full + w * target`` with ``w = sin(alpha * pi / 2)``. For every pool size D
the relevant conversation competes with D random distractors (conversations whose
persona text equals the query's are never distractors); the reciprocal rank is averaged
over queries and repeated samples, giving an MRR degradation curve over D. The curve's
trapezoid area divided by the span of D (``adherence.stats.normalized_auc``) is the
raw adherence score.

Retrievers (each scores queries against documents): ``tfidf`` (word TF-IDF cosine),
``bm25`` (Okapi BM25), ``bi_encoder`` (sentence-embedding cosine, max over the
document's windows) and ``late_interaction`` (exact MaxSim on
``adherence.index.LateInteractionIndex``).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .._errors import OptionError
from .._registry import unknown_name
from ..stats import normalized_auc
from ._text import BM25, TfidfVectorizer, word_tokens

__all__ = [
    "RETRIEVERS",
    "AdherenceData",
    "Retriever",
    "adherence_curves",
    "build_adherence_data",
    "default_pool_sizes",
    "get_retriever",
    "mrr_curve",
]


def default_pool_sizes(n: int = 13, low: int = 1, high: int = 1000) -> list[int]:
    """Up to ``n`` distractor counts spaced geometrically over ``[low, high]`` (duplicates after rounding dropped).

    Example:
        >>> default_pool_sizes()
        [1, 2, 3, 6, 10, 18, 32, 56, 100, 178, 316, 562, 1000]
        >>> default_pool_sizes(high=20)
        [1, 2, 3, 4, 6, 7, 9, 12, 16, 20]
    """
    if not 1 <= low < high:
        raise OptionError(f"pool sizes need 1 <= low < high, got [{low}, {high}]")
    return sorted({int(round(x)) for x in np.geomspace(low, high, n)})


# -- retrievers --------------------------------------------------------------------------------
class Retriever(ABC):
    """Scores every query against every document: ``score(queries, documents) -> [nq, nd]``."""

    name: str = ""

    @abstractmethod
    def score(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        """Higher = more relevant."""

    def describe(self) -> dict:
        return {"name": self.name}


class TfidfRetriever(Retriever):
    name = "tfidf"

    def score(self, queries, documents):
        vec = TfidfVectorizer("word").fit(documents)
        return np.asarray((vec.transform(queries) @ vec.transform(documents).T).todense())


class Bm25Retriever(Retriever):
    name = "bm25"

    def score(self, queries, documents):
        return BM25([word_tokens(d) for d in documents]).scores([word_tokens(q) for q in queries])


class BiEncoderRetriever(Retriever):
    """Cosine of sentence embeddings; a long document is cut into windows and scores its best window."""

    name = "bi_encoder"

    def __init__(self, encoder) -> None:
        self.encoder = encoder

    def describe(self) -> dict:
        return {"name": self.name, "model": self.encoder.name}

    def score(self, queries, documents):
        from ..index import token_windows

        pieces, owner = [], []
        for i, d in enumerate(documents):
            for c in token_windows(self.encoder.tokenizer, d, self.encoder.max_length) if d.strip() else []:
                pieces.append(c)
                owner.append(i)
        q = self.encoder.encode(list(queries)).float().cpu().numpy()
        out = np.zeros((len(queries), len(documents)), dtype=np.float32)
        if not pieces:
            return out
        p = self.encoder.encode(pieces).float().cpu().numpy()
        sims = q @ p.T
        owners = np.asarray(owner)
        out[:] = -np.inf
        np.maximum.at(out.T, owners, sims.T)
        out[np.isinf(out)] = 0.0
        return out


class LateInteractionRetriever(Retriever):
    """Exact MaxSim between query and document token embeddings (documents chunked when long)."""

    name = "late_interaction"

    def __init__(self, encoder, *, device: Optional[str] = None, backend: str = "auto") -> None:
        self.encoder = encoder
        self.device, self.backend = device, backend

    def describe(self) -> dict:
        return {"name": self.name, **self.encoder.describe()}

    def score(self, queries, documents):
        from ..index import LateInteractionIndex

        index = LateInteractionIndex(self.encoder, device=self.device, backend=self.backend)
        index.add(list(documents))
        return index.score(list(queries))


RETRIEVERS = ("tfidf", "bm25", "bi_encoder", "late_interaction")


def get_retriever(name: str, *, encoder=None, li_encoder=None, device=None, backend: str = "auto") -> Retriever:
    """A retriever by name; ``encoder``/``li_encoder`` supply the models (loaded lazily when omitted)."""
    if name == "tfidf":
        return TfidfRetriever()
    if name == "bm25":
        return Bm25Retriever()
    if name == "bi_encoder":
        from ..models import Encoder

        return BiEncoderRetriever(encoder or Encoder(device=device))
    if name == "late_interaction":
        from ..index import LateInteractionEncoder

        return LateInteractionRetriever(
            li_encoder or LateInteractionEncoder(device=device), device=device, backend=backend
        )
    raise OptionError(unknown_name("adherence method", name, RETRIEVERS))


# -- data --------------------------------------------------------------------------------------
@dataclass
class AdherenceData:
    """Queries and the two document sets of one corpus.

    Attributes:
        conversation_ids: documents of the full index, ``[nc]``.
        full_texts: all utterances of each conversation.
        queries: persona text per query, ``[nq]``.
        query_conversation: index of each query's own conversation, ``[nq]``.
        query_speaker: the speaker each query describes.
        target_texts: ``{speaker: [nc] texts}`` — that speaker's utterances in every conversation
            (empty where the conversation has no such speaker).
    """

    conversation_ids: list
    full_texts: list
    queries: list
    query_conversation: np.ndarray
    query_speaker: list
    target_texts: dict

    @property
    def n_queries(self) -> int:
        return len(self.queries)


def build_adherence_data(corpus, *, max_queries: Optional[int] = None, seed: int = 0) -> AdherenceData:
    """Queries (speakers with a persona and at least one utterance) and documents from a ``PersonaCorpus``."""
    order: dict = {}
    by_conv: dict = {}
    by_speaker: dict = {}
    for c, s, t in corpus.utterances():
        t = t or ""
        order.setdefault(c, len(order))
        by_conv.setdefault(c, []).append(t)
        by_speaker.setdefault((c, s), []).append(t)
    conversation_ids = list(order)
    full_texts = ["\n".join(by_conv[c]) for c in conversation_ids]
    queries, q_conv, q_speaker = [], [], []
    for row in corpus.personas.to_pylist():
        c, s, persona = row["conversation_id"], row["speaker"], row.get("persona") or []
        text = " ".join(p.strip() for p in persona if p and p.strip())
        if not text or c not in order or not any(t.strip() for t in by_speaker.get((c, s), [])):
            continue
        queries.append(text)
        q_conv.append(order[c])
        q_speaker.append(s)
    if not queries:
        raise OptionError("no speaker has both a persona and utterances: adherence needs persona descriptions")
    if max_queries is not None and len(queries) > max_queries:
        keep = np.sort(np.random.default_rng(seed).choice(len(queries), size=max_queries, replace=False))
        queries = [queries[i] for i in keep]
        q_conv = [q_conv[i] for i in keep]
        q_speaker = [q_speaker[i] for i in keep]
    targets = {s: ["\n".join(by_speaker.get((c, s), [])) for c in conversation_ids] for s in dict.fromkeys(q_speaker)}
    return AdherenceData(conversation_ids, full_texts, queries, np.asarray(q_conv, dtype=np.int64), q_speaker, targets)


def _combined_scores(data: AdherenceData, retriever: Retriever, w: float) -> np.ndarray:
    """``(1 - w) * full + w * target`` for every query x conversation."""
    full = retriever.score(data.queries, data.full_texts) if w < 1 else 0.0
    target = np.zeros((data.n_queries, len(data.conversation_ids)), dtype=np.float64)
    if w > 0:
        speakers = np.asarray(data.query_speaker, dtype=object)
        for s, docs in data.target_texts.items():
            rows = np.flatnonzero(speakers == s)
            target[rows] = retriever.score([data.queries[i] for i in rows], docs)
    return (1.0 - w) * np.asarray(full, dtype=np.float64) + w * target


def _same_persona_mask(data: AdherenceData) -> np.ndarray:
    """``[nq, nc]``: True where a conversation holds a persona identical to the query's (never a distractor)."""
    text_to_convs: dict = {}
    for q, c in zip(data.queries, data.query_conversation):
        text_to_convs.setdefault(q, set()).add(int(c))
    mask = np.zeros((data.n_queries, len(data.conversation_ids)), dtype=bool)
    for i, q in enumerate(data.queries):
        mask[i, list(text_to_convs[q])] = True
    return mask


def mrr_curve(
    scores: np.ndarray,
    relevant: np.ndarray,
    pool_sizes: Sequence[int],
    *,
    repeats: int = 10,
    seed: int = 0,
    exclude: Optional[np.ndarray] = None,
) -> dict:
    """MRR of the relevant document among D random distractors, for each D in ``pool_sizes``.

    Pools are nested within a sample (the first D of one random order of the eligible
    distractors), and a query with fewer eligible distractors than D uses all of them.
    A distractor tied with the relevant document counts half.

    Args:
        scores: ``[nq, nd]``, higher = more relevant.
        relevant: ``[nq]`` index of each query's relevant document.
        exclude: ``[nq, nd]`` True for documents that may not be distractors (the relevant one always is).

    Returns:
        ``{"pool_sizes", "mrr" (mean over samples), "mrr_std" (std over samples), "n_eligible_min"}``.
    """
    scores = np.asarray(scores, dtype=np.float64)
    nq, nd = scores.shape
    relevant = np.asarray(relevant, dtype=np.int64)
    sizes = np.asarray(list(pool_sizes), dtype=np.int64)
    if len(sizes) < 2 or np.any(sizes < 1) or np.any(np.diff(sizes) <= 0):
        raise OptionError(f"pool sizes must be >= 2 increasing integers >= 1, got {list(pool_sizes)}")
    if repeats < 1:
        raise OptionError(f"`repeats` must be >= 1, got {repeats}")
    blocked = np.zeros((nq, nd), dtype=bool) if exclude is None else np.asarray(exclude, dtype=bool).copy()
    blocked[np.arange(nq), relevant] = True
    n_elig = nd - blocked.sum(axis=1)
    if np.any(n_elig < 1):
        raise OptionError("a query has no eligible distractor: the corpus needs at least two distinct conversations")
    rel = scores[np.arange(nq), relevant][:, None]
    rng = np.random.default_rng(seed)
    per_repeat = np.zeros((repeats, len(sizes)))
    for r in range(repeats):
        keys = rng.random((nq, nd))
        keys[blocked] = np.inf
        order = np.argsort(keys, axis=1)
        s = np.take_along_axis(scores, order, axis=1)
        wins = np.cumsum((s > rel) + 0.5 * (s == rel), axis=1)
        pos = np.minimum(sizes[None, :], n_elig[:, None]) - 1
        rank = 1.0 + np.take_along_axis(wins, pos, axis=1)
        per_repeat[r] = (1.0 / rank).mean(axis=0)
    return {
        "pool_sizes": sizes.tolist(),
        "mrr": per_repeat.mean(axis=0).tolist(),
        "mrr_std": per_repeat.std(axis=0).tolist(),
        "n_eligible_min": int(n_elig.min()),
    }


def adherence_curves(
    corpus,
    *,
    methods: Sequence[str] = RETRIEVERS,
    primary: str = "late_interaction",
    alpha: float = 0.5,
    pool_sizes: Optional[Sequence[int]] = None,
    repeats: int = 10,
    seed: int = 0,
    max_queries: Optional[int] = None,
    retrievers: Optional[dict] = None,
    encoder=None,
    li_encoder=None,
    device: Optional[str] = None,
) -> dict:
    """The adherence dimension of one corpus: an MRR curve per method and the primary method's score.

    Args:
        methods: retrievers to run (``RETRIEVERS``).
        primary: the method whose normalised AUC is the adherence score.
        alpha: speaker weight ``w = sin(alpha * pi / 2)`` (0: full conversation only, 1: target speaker only).
        pool_sizes: distractor counts D (default ``default_pool_sizes``).
        repeats: random pools per query and D.
        max_queries: score a seeded random subset of queries.
        retrievers: prebuilt ``{name: Retriever}`` (reuses loaded models across corpora).

    Returns:
        ``{"score", "method", "alpha", "w", "n_queries", "n_documents", "repeats", "pool_sizes",
        "curves": {method: {"mrr", "mrr_std", "nauc", ...}}}``.
    """
    if not 0.0 <= alpha <= 1.0:
        raise OptionError(f"`alpha` must be in [0, 1], got {alpha}")
    methods = list(dict.fromkeys(methods))
    if primary not in methods:
        raise OptionError(
            f"the primary adherence method {primary!r} must be one of the methods run ({', '.join(methods)})"
        )
    sizes = list(pool_sizes) if pool_sizes is not None else default_pool_sizes()
    w = math.sin(alpha * math.pi / 2)
    data = build_adherence_data(corpus, max_queries=max_queries, seed=seed)
    exclude = _same_persona_mask(data)
    retrievers = dict(retrievers or {})
    curves = {}
    for m in methods:
        r = retrievers.get(m) or get_retriever(m, encoder=encoder, li_encoder=li_encoder, device=device)
        retrievers[m] = r
        t0 = time.perf_counter()
        scores = _combined_scores(data, r, w)
        t1 = time.perf_counter()
        curve = mrr_curve(scores, data.query_conversation, sizes, repeats=repeats, seed=seed, exclude=exclude)
        curve["seconds"] = {"scoring": round(t1 - t0, 3), "mrr_curve": round(time.perf_counter() - t1, 3)}
        curve["nauc"] = normalized_auc(curve["pool_sizes"], curve["mrr"])
        curve["retriever"] = r.describe()
        curves[m] = curve
    return {
        "score": curves[primary]["nauc"],
        "method": primary,
        "alpha": alpha,
        "w": w,
        "n_queries": data.n_queries,
        "n_documents": len(data.conversation_ids),
        "repeats": repeats,
        "pool_sizes": sizes,
        "curves": curves,
    }

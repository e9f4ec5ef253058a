"""Persona consistency as authorship verification: does a speaker keep one voice?

Every speaker of every conversation is an author; their utterances are split into
sentences and the sentence list is cut at its midpoint. Same-author pairs join an
author's first half with their own second half; different-author pairs join it with
the second half of another author drawn at random, one per author, so the classes are
balanced. Pairs are split 80/20 (seeded). Character 4-gram TF-IDF (4000 features, fit
on the training texts) gives a cosine per pair; PAN's rescaling maps cosines below
``p1`` to ``[0, 0.49]``, between ``p1`` and ``p2`` to 0.5 (a non-answer) and above ``p2``
to ``[0.51, 1]``, with ``p1 <= p2`` grid-searched over ``[0.01, 0.99]`` in steps of
0.01 for the best overall PAN score on the training pairs. The consistency score is the
mean of F1, AUC, c@1, F0.5u and Brier on the test pairs.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._errors import OptionError
from ..stats import verification_metrics
from ._text import TfidfVectorizer, split_sentences

__all__ = ["author_pairs", "consistency", "pan_rescale", "fit_thresholds"]


def pan_rescale(scores, p1: float, p2: float) -> np.ndarray:
    """PAN's score correction: ``[0, p1] -> [0, 0.49]``, ``(p1, p2) -> 0.5``, ``[p2, 1] -> [0.51, 1]``.

    Example:
        >>> pan_rescale([0.1, 0.3, 0.5, 0.9], 0.2, 0.4).round(3).tolist()
        [0.245, 0.5, 0.592, 0.918]
    """
    s = np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0)
    low = s / p1 * 0.49 if p1 > 0 else np.zeros_like(s)
    high = 0.51 + (s - p2) / (1.0 - p2) * 0.49 if p2 < 1 else np.ones_like(s)
    return np.where(s <= p1, low, np.where(s < p2, 0.5, high))


def fit_thresholds(y_true, scores, *, step: float = 0.01, low: float = 0.01, high: float = 0.99) -> tuple:
    """``(p1, p2, overall)`` maximising PAN's overall score on ``(y_true, scores)``; the first best wins."""
    grid = np.round(np.arange(low, high + step / 2, step), 10)
    best = (float(grid[0]), float(grid[0]), -np.inf)
    for i, p1 in enumerate(grid):
        for p2 in grid[i:]:
            overall = verification_metrics(y_true, pan_rescale(scores, p1, p2))["overall"]
            if overall > best[2] + 1e-12:
                best = (float(p1), float(p2), float(overall))
    return best


def author_pairs(corpus, *, seed: int = 0) -> tuple[list, list, np.ndarray, int]:
    """``(first_halves, second_halves, labels, n_authors)``: balanced same/different-author pairs."""
    texts: dict = {}
    for c, s, t in corpus.utterances():
        texts.setdefault((c, s), []).extend(split_sentences(t or ""))
    halves = []
    for sentences in texts.values():
        if len(sentences) >= 2:
            mid = len(sentences) // 2
            halves.append((" ".join(sentences[:mid]), " ".join(sentences[mid:])))
    n = len(halves)
    if n < 3:
        raise OptionError(f"consistency needs at least 3 speakers with two or more sentences each, found {n}")
    rng = np.random.default_rng(seed)
    other = (np.arange(n) + rng.integers(1, n, size=n)) % n  # a different author for each author
    a = [h[0] for h in halves] * 2
    b = [h[1] for h in halves] + [halves[j][1] for j in other]
    y = np.concatenate([np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)])
    return a, b, y, n


def consistency(
    corpus, *, seed: int = 0, test_size: float = 0.2, ngram: int = 4, max_features: int = 4000, step: float = 0.01
) -> dict:
    """The consistency dimension of one corpus.

    Returns:
        ``{"f1", "auc", "c_at_1", "f05u", "brier", "score", "p1", "p2", "train_overall",
        "n_authors", "n_train", "n_test"}`` — ``score`` is the mean of the five test metrics.
    """
    if not 0.0 < test_size < 1.0:
        raise OptionError(f"`test_size` must be in (0, 1), got {test_size}")
    a, b, y, n_authors = author_pairs(corpus, seed=seed)
    rng = np.random.default_rng(seed + 1)
    perm = rng.permutation(len(y))
    n_test = max(2, int(round(test_size * len(y))))
    test, train = perm[:n_test], perm[n_test:]
    if len(set(y[test])) < 2 or len(set(y[train])) < 2:
        raise OptionError("the train/test split has a single class; the corpus is too small for consistency")
    vec = TfidfVectorizer("char", ngram=ngram, max_features=max_features)
    vec.fit([a[i] for i in train] + [b[i] for i in train])

    def cosines(idx) -> np.ndarray:
        xa = vec.transform([a[i] for i in idx])
        xb = vec.transform([b[i] for i in idx])
        return np.asarray(xa.multiply(xb).sum(axis=1)).ravel()

    p1, p2, train_overall = fit_thresholds(y[train], cosines(train), step=step)
    m = verification_metrics(y[test], pan_rescale(cosines(test), p1, p2))
    return {
        "f1": m["f1"],
        "auc": m["auc"],
        "c_at_1": m["c_at_1"],
        "f05u": m["f05u"],
        "brier": m["brier"],
        "score": m["overall"],
        "p1": p1,
        "p2": p2,
        "train_overall": train_overall,
        "n_authors": n_authors,
        "n_train": int(len(train)),
        "n_test": int(len(test)),
    }


def human_similarity(value: Optional[float], reference: Optional[float]) -> Optional[float]:
    """``1 - |value - reference| / reference``: 1 when equal, lower for a deviation in either direction."""
    if value is None or reference is None or reference == 0:
        return None
    return float(1.0 - abs(value - reference) / reference)

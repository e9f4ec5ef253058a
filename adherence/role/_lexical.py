"""The KL-divergence method over the ground-truth corpus's most frequent words."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from .._errors import OptionError
from ..kernels import fused_scores
from ._base import Method, MethodResult, dataset_references, text_column

__all__ = ["KlMethod", "kl_vocabulary", "word_distribution"]


def _tokens(text: str) -> list[str]:
    return text.lower().split()


def kl_vocabulary(corpus: list[str], size: int) -> list[str]:
    """The ``size`` most frequent lowercase whitespace tokens.

    Words tied at the cut-off keep their order of first occurrence in the corpus
    (``collections.Counter.most_common``), as in the role-adherence paper's own
    procedure; an alphabetical tie-break would pick different words at the boundary.
    """
    counts = Counter(t for text in corpus for t in _tokens(text))
    return [w for w, _ in counts.most_common(size)]


def word_distribution(texts: list[str], vocab: list[str]) -> np.ndarray:
    """Laplace-smoothed (+1 per word) distribution of the tokens of ``texts`` over ``vocab``."""
    index = {w: i for i, w in enumerate(vocab)}
    counts = np.ones(len(vocab), dtype=np.float64)
    for text in texts:
        for t in _tokens(text):
            j = index.get(t)
            if j is not None:
                counts[j] += 1
    return counts / counts.sum()


class KlMethod(Method):
    """exp(-beta * KL(P || Q)): P over the ground-truth corpus, Q over the turn, same vocabulary."""

    name = "kl"
    needs_ground_truth = False  # P comes from the whole ground-truth corpus

    def uses_dataset_references(self, config):
        return True

    def prepare(self, config, resources):
        if config.reference_file and not dataset_references(None, config):
            raise OptionError("method 'kl' needs ground_truth_assistant texts to build the reference distribution")

    def score(self, turns, config, resources):
        errors = self.row_errors(turns, config)
        corpus = dataset_references(turns, config)
        if not corpus:
            raise OptionError("method 'kl' needs ground_truth_assistant texts to build the reference distribution")
        vocab = kl_vocabulary(corpus, config.kl_vocab)
        p = word_distribution(corpus, vocab)
        a = text_column(turns, "assistant")
        ok = np.array([e is None for e in errors])
        score = np.full(turns.num_rows, np.nan)
        kl = np.full(turns.num_rows, np.nan)
        if ok.any():
            idx = np.flatnonzero(ok)
            q = np.stack([word_distribution([a[i]], vocab) for i in idx])
            x = torch.zeros(len(idx), 1)  # the kernel needs a candidate row; KL reads only p and q
            d = fused_scores(x, p=torch.from_numpy(p).float(), q=torch.from_numpy(q).float())[:, 3].numpy()
            kl[idx] = d
            score[idx] = np.exp(-config.kl_beta * d)
        return MethodResult(score, errors, {"kl": kl.tolist()})

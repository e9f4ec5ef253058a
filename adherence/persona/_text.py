"""Text features for the persona dimensions: sentence splitting, TF-IDF and BM25 (sparse, scipy).

``TfidfVectorizer`` follows scikit-learn's ``TfidfVectorizer`` defaults (lowercase,
raw counts, smooth idf ``ln((1 + n) / (1 + df)) + 1``, L2-normalised rows; ``max_features``
keeps the most frequent terms), for words (``\\b\\w\\w+\\b``) or
character n-grams (whitespace runs collapsed). ``BM25`` is Okapi BM25 as
``rank_bm25.BM25Okapi`` computes it (negative idf floored at ``epsilon`` x mean idf).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal, Optional, Sequence

import numpy as np

from .._errors import OptionError

__all__ = ["BM25", "TfidfVectorizer", "split_sentences", "word_tokens"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
_WORD2 = re.compile(r"(?u)\b\w\w+\b")
_WORD = re.compile(r"(?u)\w+")
_SPACES = re.compile(r"\s\s+")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after ``.``, ``!`` or ``?`` followed by whitespace, and at line breaks.

    Example:
        >>> split_sentences("Hi there! I like tea. Do you?\\nYes")
        ['Hi there!', 'I like tea.', 'Do you?', 'Yes']
    """
    out = []
    for line in str(text).splitlines():
        out += [s.strip() for s in _SENTENCE.split(line) if s.strip()]
    return out


def word_tokens(text: str) -> list[str]:
    """Lowercased word tokens (``\\w+``), the tokenisation BM25 uses."""
    return _WORD.findall(str(text).lower())


class TfidfVectorizer:
    """TF-IDF features of words or character n-grams as a CSR matrix.

    Args:
        analyzer: ``"word"`` (tokens of 2+ word characters) or ``"char"``.
        ngram: n-gram size for ``"char"`` (e.g. 4).
        max_features: keep only the most frequent terms (by total count).

    Example:
        >>> v = TfidfVectorizer("char", ngram=4, max_features=4000).fit(["hello world", "hello there"])
        >>> v.transform(["hello"]).shape
        (1, 13)
    """

    def __init__(
        self, analyzer: Literal["word", "char"] = "word", *, ngram: int = 1, max_features: Optional[int] = None
    ) -> None:
        if analyzer not in ("word", "char"):
            raise OptionError(f"`analyzer` must be 'word' or 'char', got {analyzer!r}")
        if analyzer == "word" and ngram != 1:
            raise OptionError("word n-grams other than 1 are not supported")
        if ngram < 1:
            raise OptionError(f"`ngram` must be >= 1, got {ngram}")
        if max_features is not None and max_features < 1:
            raise OptionError(f"`max_features` must be >= 1, got {max_features}")
        self.analyzer, self.ngram, self.max_features = analyzer, int(ngram), max_features
        self.vocabulary_: dict[str, int] = {}
        self.idf_: np.ndarray = np.zeros(0)

    def _terms(self, text: str) -> list[str]:
        text = str(text).lower()
        if self.analyzer == "word":
            return _WORD2.findall(text)
        text = _SPACES.sub(" ", text)
        n = self.ngram
        return [text[i : i + n] for i in range(len(text) - n + 1)]

    def fit(self, texts: Sequence[str]) -> TfidfVectorizer:
        counts = [Counter(self._terms(t)) for t in texts]
        total: Counter = Counter()
        df: Counter = Counter()
        for c in counts:
            total.update(c)
            df.update(c.keys())
        vocab = sorted(total)
        if self.max_features is not None and len(vocab) > self.max_features:
            tf = np.array([total[t] for t in vocab])
            # The most frequent terms; ties at the cut go to the alphabetically first (a stable sort of the sorted
            # vocabulary). numpy's default argsort (scikit-learn's) orders ties by the CPU's SIMD sort (AVX2 and
            # AVX-512 differ), so its vocabulary -- and every score built on it -- changes from machine to machine.
            keep = np.sort(np.argsort(-tf, kind="stable")[: self.max_features])
            vocab = [vocab[i] for i in keep]
        self.vocabulary_ = {t: i for i, t in enumerate(vocab)}
        n = len(texts)
        self.idf_ = np.log((1.0 + n) / (1.0 + np.array([df[t] for t in vocab], dtype=np.float64))) + 1.0
        return self

    def transform(self, texts: Sequence[str]):
        """L2-normalised TF-IDF rows, ``scipy.sparse.csr_matrix`` ``[len(texts), n_features]``."""
        from scipy import sparse

        rows, cols, vals = [], [], []
        for r, t in enumerate(texts):
            c = Counter(w for w in self._terms(t) if w in self.vocabulary_)
            for term, k in c.items():
                rows.append(r)
                cols.append(self.vocabulary_[term])
                vals.append(float(k))
        m = sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(self.vocabulary_)), dtype=np.float64)
        m = m.multiply(self.idf_[None, :]).tocsr()
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return sparse.diags(1.0 / norms) @ m

    def fit_transform(self, texts: Sequence[str]):
        return self.fit(texts).transform(texts)


class BM25:
    """Okapi BM25 over tokenised documents.

    Args:
        documents: token lists (see ``word_tokens``).
        k1, b, epsilon: BM25 parameters (rank_bm25's defaults).

    Example:
        >>> bm = BM25([["a", "cat"], ["a", "dog"], ["the", "bird"]])
        >>> bm.scores([["cat"]]).round(3).tolist()
        [[0.511, 0.0, 0.0]]
    """

    def __init__(
        self, documents: Sequence[Sequence[str]], *, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25
    ) -> None:
        from scipy import sparse

        self.k1, self.b = float(k1), float(b)
        vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        for r, doc in enumerate(documents):
            for term, k in Counter(doc).items():
                rows.append(r)
                cols.append(vocab.setdefault(term, len(vocab)))
                vals.append(float(k))
        self.vocabulary = vocab
        n = len(documents)
        tf = sparse.csr_matrix((vals, (rows, cols)), shape=(n, len(vocab)), dtype=np.float64)
        self.doc_len = np.array([len(d) for d in documents], dtype=np.float64)
        avgdl = float(self.doc_len.mean()) if n else 0.0
        df = np.bincount(cols, minlength=len(vocab)).astype(np.float64)
        idf = np.log(n - df + 0.5) - np.log(df + 0.5)
        average_idf = float(idf.sum() / len(idf)) if len(idf) else 0.0
        idf[idf < 0] = epsilon * average_idf
        self.idf = idf
        # Per (document, term) weight idf * tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl)).
        coo = tf.tocoo()
        denom = coo.data + self.k1 * (1 - self.b + self.b * self.doc_len[coo.row] / max(avgdl, 1e-12))
        w = idf[coo.col] * coo.data * (self.k1 + 1) / denom
        self.weights = sparse.csc_matrix((w, (coo.row, coo.col)), shape=tf.shape)

    def scores(self, queries: Sequence[Sequence[str]]) -> np.ndarray:
        """``[n_queries, n_documents]``; a repeated query term counts each time, unknown terms count 0."""
        from scipy import sparse

        rows, cols, vals = [], [], []
        for r, q in enumerate(queries):
            for term, k in Counter(q).items():
                j = self.vocabulary.get(term)
                if j is not None:
                    rows.append(r)
                    cols.append(j)
                    vals.append(float(k))
        qm = sparse.csr_matrix((vals, (rows, cols)), shape=(len(queries), len(self.vocabulary)))
        return np.asarray((qm @ self.weights.T).todense())

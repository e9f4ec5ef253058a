import numpy as np
import pytest

from adherence.persona._text import BM25, TfidfVectorizer, split_sentences, word_tokens

TEXTS = [
    "Hi! I love  hiking with my dogs.\nDo you have pets?",
    "I work as a nurse; nights are long. Coffee helps!!",
    "hiking, dogs, coffee... the usual weekend",
    "",
    "Ünïcode café naïve — résumé 42 times 42",
]


@pytest.mark.parametrize(
    "analyzer,ngram,max_features",
    [("word", 1, None), ("char", 4, None), ("char", 4, 30), ("char", 3, 7), ("word", 1, 5)],
)
def test_tfidf_matches_scikit_learn(analyzer, ngram, max_features):
    """Same terms, idf and rows as scikit-learn; at the max_features cut, ties go to the alphabetically first
    term on every machine (scikit-learn leaves them to numpy's unstable SIMD sort, whose order differs between
    AVX2 and AVX-512 CPUs)."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.feature_extraction.text import TfidfVectorizer as Sk

    kw = dict(analyzer="char", ngram_range=(ngram, ngram)) if analyzer == "char" else {}
    counts = CountVectorizer(**kw).fit(TEXTS[:4])
    total = np.asarray(counts.transform(TEXTS[:4]).sum(axis=0)).ravel()
    terms = sorted(counts.vocabulary_, key=lambda t: (-total[counts.vocabulary_[t]], t))
    expected = sorted(terms[:max_features] if max_features else terms)
    ours = TfidfVectorizer(analyzer, ngram=ngram, max_features=max_features).fit(TEXTS[:4])
    assert list(ours.vocabulary_) == expected
    sk_cut = Sk(max_features=max_features, **kw).fit(TEXTS[:4])
    if max_features:  # scikit-learn keeps the same terms above the cut; only ties at the cut may differ
        cut = sorted(total, reverse=True)[max_features - 1]
        above = {t for t in counts.vocabulary_ if total[counts.vocabulary_[t]] > cut}
        assert above <= set(sk_cut.vocabulary_) and above <= set(ours.vocabulary_)
        assert len(set(sk_cut.vocabulary_)) == len(expected)
    else:
        assert ours.vocabulary_ == sk_cut.vocabulary_
    sk = Sk(vocabulary=expected, **kw).fit(TEXTS[:4])
    np.testing.assert_allclose(ours.idf_, sk.idf_)
    np.testing.assert_allclose(ours.transform(TEXTS).toarray(), sk.transform(TEXTS).toarray(), atol=1e-12)


def test_tfidf_on_persona_sentences_matches_scikit_learn(fixtures):
    from sklearn.feature_extraction.text import TfidfVectorizer as Sk

    texts = [line for line in (fixtures / "synthetic_persona_chat_head.csv").read_text().splitlines() if line][:60]
    ours = TfidfVectorizer("char", ngram=4, max_features=4000).fit(texts[:40])
    sk = Sk(analyzer="char", ngram_range=(4, 4), vocabulary=list(ours.vocabulary_)).fit(texts[:40])
    np.testing.assert_allclose(ours.transform(texts).toarray(), sk.transform(texts).toarray(), atol=1e-12)


def test_bm25_matches_rank_bm25(rng):
    from rank_bm25 import BM25Okapi

    vocab = [f"w{i}" for i in range(30)]
    docs = [list(rng.choice(vocab, size=int(rng.integers(1, 40)))) for _ in range(25)]
    queries = [list(rng.choice(vocab + ["unseen"], size=int(rng.integers(1, 8)))) for _ in range(9)]
    queries.append(["w1", "w1", "w1"])  # repeated terms count each time
    ref = BM25Okapi(docs)
    expect = np.array([ref.get_scores(q) for q in queries])
    np.testing.assert_allclose(BM25(docs).scores(queries), expect, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        BM25(docs, k1=0.9, b=0.4).scores(queries),
        np.array([BM25Okapi(docs, k1=0.9, b=0.4).get_scores(q) for q in queries]),
        rtol=1e-10,
    )


def test_sentences_and_tokens():
    assert split_sentences("A b. C d? E!\n\nF") == ["A b.", "C d?", "E!", "F"]
    assert split_sentences("3.5 apples") == ["3.5 apples"]
    assert word_tokens("I'm OK, you?") == ["i", "m", "ok", "you"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="analyzer"):
        TfidfVectorizer("bytes")
    with pytest.raises(ValueError, match="max_features"):
        TfidfVectorizer(max_features=0)

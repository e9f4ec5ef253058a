import math

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from adherence.data import PERSONA_CONVERSATIONS, PERSONAS, PersonaCorpus, read_persona_corpus
from adherence.data._validate import conform
from adherence.persona import adherence_curves, build_adherence_data, default_pool_sizes, get_retriever, mrr_curve
from adherence.stats import normalized_auc


def test_default_pool_sizes_span_one_to_a_thousand():
    sizes = default_pool_sizes()
    assert len(sizes) == 13 and sizes[0] == 1 and sizes[-1] == 1000
    with pytest.raises(ValueError, match="low < high"):
        default_pool_sizes(high=1)


def test_mrr_matches_hypergeometric_expectation(rng):
    # Query i's relevant document is beaten by k_i of the N eligible documents. With D distractors drawn
    # without replacement, the number drawn above it is hypergeometric: E[1 / (1 + X)].
    nq, nd = 12, 40
    scores = rng.normal(size=(nq, nd))
    relevant = rng.integers(0, nd, size=nq)
    sizes = [1, 3, 10, 25, 39]
    got = mrr_curve(scores, relevant, sizes, repeats=3000, seed=1)
    for j, D in enumerate(sizes):
        expect = []
        for i in range(nq):
            k = int(np.sum(np.delete(scores[i], relevant[i]) > scores[i, relevant[i]]))
            x = np.arange(0, min(k, D) + 1)
            expect.append(np.sum(stats.hypergeom(nd - 1, k, D).pmf(x) / (1 + x)))
        assert got["mrr"][j] == pytest.approx(np.mean(expect), abs=4e-3)
    # The whole pool is deterministic: the reciprocal of the exact rank among all documents.
    exact = np.mean([1.0 / (1 + np.sum(np.delete(scores[i], relevant[i]) > scores[i, relevant[i]])) for i in range(nq)])
    assert got["mrr"][-1] == pytest.approx(exact, abs=1e-12) and got["mrr_std"][-1] == pytest.approx(0, abs=1e-12)


def test_mrr_ties_exclusions_and_small_pools():
    scores = np.array([[1.0, 1.0, 0.0, 5.0]])
    # doc 3 (score 5) is excluded; doc 1 ties with the relevant doc 0 (half a rank); doc 2 loses.
    out = mrr_curve(
        scores, np.array([0]), [1, 2, 5], repeats=200, seed=0, exclude=np.array([[False, False, False, True]])
    )
    assert out["n_eligible_min"] == 2
    assert out["mrr"][1] == pytest.approx(1 / 1.5) and out["mrr"][2] == pytest.approx(1 / 1.5)  # capped at 2
    assert 1 / 1.5 < out["mrr"][0] < 1.0
    with pytest.raises(ValueError, match="increasing"):
        mrr_curve(scores, np.array([0]), [3, 2])
    with pytest.raises(ValueError, match="no eligible distractor"):
        mrr_curve(np.zeros((1, 1)), np.array([0]), [1, 2])


def _corpus(conversations, personas):
    conv = [
        {"conversation_id": c, "turn_index": i, "speaker": s, "text": t}
        for c, turns in conversations.items()
        for i, (s, t) in enumerate(turns)
    ]
    pers = [{"conversation_id": c, "speaker": s, "persona": p} for (c, s), p in personas.items()]
    return PersonaCorpus(
        conform(pa.Table.from_pylist(conv), PERSONA_CONVERSATIONS), conform(pa.Table.from_pylist(pers), PERSONAS)
    )


def test_queries_and_documents():
    corpus = _corpus(
        {
            "a": [("U1", "I love cats."), ("U2", "I race cars.")],
            "b": [("U1", "Bread is life."), ("U2", "")],
            "c": [("U1", "Chess!"), ("U2", "Jazz.")],
        },
        {
            ("a", "U1"): ["I love cats."],
            ("a", "U2"): ["I race cars."],
            ("b", "U1"): ["I bake."],
            ("b", "U2"): ["I am silent."],
            ("c", "U1"): ["I love cats."],
            ("c", "U2"): [],
        },
    )
    data = build_adherence_data(corpus)
    assert data.conversation_ids == ["a", "b", "c"]
    assert data.full_texts[0] == "I love cats.\nI race cars."
    # b/U2 has no utterance and c/U2 no persona: neither is a query.
    assert data.queries == ["I love cats.", "I race cars.", "I bake.", "I love cats."]
    assert data.target_texts["U2"] == ["I race cars.", "", "Jazz."]
    from adherence.persona._adherence import _same_persona_mask

    mask = _same_persona_mask(data)
    assert mask[0].tolist() == [True, False, True]  # c holds the same persona: never a distractor of a/U1


def test_tfidf_and_bm25_retrievers_match_references():
    from rank_bm25 import BM25Okapi
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    docs = ["I love my dog and long walks", "Pizza is my favourite food", "I walk my dogs daily", ""]
    queries = ["dog walks", "favourite pizza food", "nothing matches"]
    sk = TfidfVectorizer().fit(docs)
    np.testing.assert_allclose(
        get_retriever("tfidf").score(queries, docs),
        cosine_similarity(sk.transform(queries), sk.transform(docs)),
        atol=1e-12,
    )
    ref = BM25Okapi([d.lower().split() for d in docs])
    np.testing.assert_allclose(
        get_retriever("bm25").score(queries, docs), [ref.get_scores(q.lower().split()) for q in queries], atol=1e-12
    )
    with pytest.raises(ValueError, match="Did you mean 'bm25'"):
        get_retriever("bm52")


def test_adherence_separates_faithful_from_drifted_personas():
    from adherence.data import example_path

    base = example_path("persona")
    human = read_persona_corpus(base / "human.csv", limit=30)
    drift = read_persona_corpus(base / "sim_persona_drift.csv", limit=30)
    sizes = default_pool_sizes(high=29)
    kw = dict(methods=["tfidf", "bm25"], primary="bm25", pool_sizes=sizes, repeats=5)
    h = adherence_curves(human, **kw)
    d = adherence_curves(drift, **kw)
    assert h["n_queries"] == 60 and h["n_documents"] == 30
    assert h["w"] == pytest.approx(math.sin(math.pi / 4))
    assert h["score"] == pytest.approx(normalized_auc(sizes, h["curves"]["bm25"]["mrr"]))
    assert h["curves"]["bm25"]["mrr"][0] > 0.85 and h["score"] > 0.5
    assert d["score"] < 0.6 * h["score"]  # personas moved to other conversations no longer find their dialogue
    assert np.all(np.diff(h["curves"]["tfidf"]["mrr"]) <= 1e-9)  # MRR degrades with the pool
    # alpha moves weight between the full and the target-speaker index.
    full_only = adherence_curves(human, **dict(kw, methods=["tfidf"], primary="tfidf"), alpha=0.0)
    target_only = adherence_curves(human, **dict(kw, methods=["tfidf"], primary="tfidf"), alpha=1.0)
    assert full_only["w"] == 0.0 and target_only["w"] == pytest.approx(1.0)
    assert full_only["score"] != pytest.approx(target_only["score"])


@pytest.mark.slow
def test_late_interaction_and_bi_encoder_run_on_a_small_corpus():
    from adherence.data import example_path

    human = read_persona_corpus(example_path("persona") / "human.csv", limit=12)
    out = adherence_curves(human, methods=["bi_encoder", "late_interaction"], pool_sizes=[1, 3, 11], repeats=3)
    for m in ("bi_encoder", "late_interaction"):
        mrr = out["curves"][m]["mrr"]
        assert 1.0 >= mrr[0] >= mrr[1] >= mrr[2] > 1 / 12  # better than chance on its own data
    assert out["curves"]["late_interaction"]["retriever"]["model"].endswith("all-MiniLM-L6-v2")

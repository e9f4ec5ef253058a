"""The encoder's int8 CPU path (ONNX Runtime): close to float32, exported once per machine, recorded."""

import json
from importlib.resources import files

import numpy as np
import pytest
import torch

from adherence._errors import OptionError
from adherence.cli.main import main
from adherence.models import Encoder
from adherence.models._onnx import OnnxSentenceModel, cache_dir, rowwise_int8, weight_levels
from tests.models.conftest import cosines_to_float32


def _texts():
    rows = [json.loads(line) for line in (files("adherence") / "examples" / "role_turns.jsonl").open()]
    return [r[k] for r in rows for k in ("user", "assistant", "ground_truth_assistant")]


@pytest.fixture(scope="module")
def encoders(cache):
    exact = Encoder(device="cpu", progress=False, cache_bytes=0)
    fast = Encoder(device="cpu", progress=False, cache_bytes=0, precision="int8")
    return exact, fast


@pytest.mark.slow
def test_int8_embeddings_are_unit_norm_and_close_to_float32(encoders):
    exact, fast = encoders
    texts = _texts()
    cos, a, b = cosines_to_float32(exact, fast, texts)
    assert cos.mean() > 0.98 and cos.min() > 0.9
    assert cos.min() < 0.99999  # it is the quantised model, not float32 under another name
    # ranking is what scores use: each reply is nearer its own reference than a random other one
    n = len(texts) // 3
    own = np.array([b[3 * i + 1] @ b[3 * i + 2] for i in range(n)])
    own_exact = np.array([a[3 * i + 1] @ a[3 * i + 2] for i in range(n)])
    assert np.corrcoef(own, own_exact)[0, 1] > 0.98


@pytest.mark.slow
def test_int8_model_is_exported_once_into_the_cache_and_reused(encoders, cache):
    _, fast = encoders
    found = list(cache.rglob("*.onnx"))
    assert [p.name for p in found] == [f"model-int8-w{weight_levels()}.onnx"]  # the float32 export was a temporary
    assert not [p for p in cache.rglob("*") if p.name.startswith(".export-")]
    assert cache_dir() == cache and fast._runtime.path == found[0]
    mtime = found[0].stat().st_mtime_ns
    again = Encoder(device="cpu", progress=False, precision="int8")
    assert again._runtime.path == found[0] and found[0].stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_a_texts_embedding_does_not_depend_on_its_batch(encoders):
    _, fast = encoders
    texts = _texts()
    together = fast.encode(texts).numpy()
    alone = np.stack([fast.encode([t]).numpy()[0] for t in texts[:12]])
    np.testing.assert_allclose(alone, together[:12], atol=1e-6)


@pytest.mark.slow
def test_every_linear_layer_is_rewritten_and_7_bit_weights_stay_close(encoders, tmp_path):
    import onnx

    from adherence.models._onnx import export_float

    exact, fast = encoders
    fp32 = tmp_path / "f.onnx"
    export_float(exact, fp32)
    q7 = tmp_path / "q7.onnx"
    assert rowwise_int8(fp32, q7, 63) == 6 * 6  # q, k, v, attention out, two feed-forward per layer
    ops = [n.op_type for n in onnx.load(str(q7)).graph.node]
    assert ops.count("MatMulInteger") == 36 and ops.count("MatMul") == 12  # the two attention products stay float
    texts = _texts()
    seven = OnnxSentenceModel(q7, threads=1)
    batches = [(b["input_ids"].numpy(), b["attention_mask"].numpy()) for _, b in fast._batches(texts, "t")]
    idx = [i for i, _ in fast._batches(texts, "t")]
    got = np.empty((len(texts), exact.dim), np.float32)
    for rows, emb in zip(idx, seven.run(batches)):
        got[rows] = emb
    cos = (got * exact.encode(texts).numpy()).sum(1)
    assert cos.mean() > 0.98 and cos.min() > 0.9


@pytest.mark.slow
def test_sessions_side_by_side_give_the_same_embeddings_in_order(encoders):
    _, fast = encoders
    texts = _texts()
    one = OnnxSentenceModel(fast._runtime.path, threads=1)
    two = OnnxSentenceModel(fast._runtime.path, threads=3)
    batches = [(b["input_ids"].numpy(), b["attention_mask"].numpy()) for _, b in fast._batches(texts, "t")]
    assert len(batches) > 3
    for x, y in zip(one.run(batches), two.run(batches)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_the_torch_checkpoint_loads_only_when_token_embeddings_need_it(encoders):
    """A worker on the int8 path starts without importing and loading the torch model (its sentence
    embeddings come from ONNX Runtime); BERTScore's token embeddings load it then, and equal float32's."""
    exact, _ = encoders
    fast = Encoder(device="cpu", progress=False, cache_bytes=0, precision="int8")
    texts = _texts()[:4]
    fast.encode(texts)
    assert fast.describe()["precision"] == "int8" and fast.token_limit == exact.token_limit == 512
    assert fast.dim == exact.dim and fast._model is None
    got, got_ids = fast.encode_tokens(texts)
    assert fast._model is not None
    want, want_ids = exact.encode_tokens(texts)
    assert got_ids == want_ids
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.slow
def test_precision_is_checked_and_described(encoders):
    exact, fast = encoders
    assert exact.describe()["precision"] == "float32" and exact.describe()["runtime"].split()[0] == exact.runtime
    d = fast.describe()
    assert d["precision"] == "int8" and d["runtime"].startswith("onnxruntime ") and d["name"] == exact.name
    assert "per token" in d["quantization"] and d["file"] == fast._runtime.path.name
    with pytest.raises(OptionError, match="encoder_precision"):
        Encoder(device="cpu", precision="int4")


@pytest.mark.slow
def test_score_records_the_precision_and_its_scores_differ_a_little(tmp_path, cache):
    example = str(files("adherence") / "examples" / "role_turns.jsonl")
    out = tmp_path / "s.parquet"
    assert main(["score", example, "-o", str(out), "--method", "cosine", "--encoder-precision", "int8"]) == 0
    meta = json.loads(out.with_name("s.parquet.meta.json").read_text())
    assert meta["models"]["encoder"]["precision"] == "int8"
    assert meta["config"]["encoder_precision"] == "int8"
    exact = tmp_path / "e.parquet"
    assert main(["score", example, "-o", str(exact), "--method", "cosine"]) == 0
    import pyarrow.parquet as pq

    s8, s32 = pq.read_table(out)["score"].to_numpy(), pq.read_table(exact)["score"].to_numpy()
    assert np.abs(s8 - s32).max() < 0.05 and not np.array_equal(s8, s32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (int8 is refused there)")
def test_int8_is_refused_on_a_gpu():
    with pytest.raises(OptionError, match="CPU path"):
        Encoder(device="cuda", precision="int8")

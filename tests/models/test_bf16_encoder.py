"""The encoder's bf16 CPU path (OpenVINO): within float32's bar, exported once per machine, recorded, refused
on a CPU without bf16 products."""

import json
from importlib.resources import files

import numpy as np
import pytest

from adherence._errors import OptionError
from adherence.bench.encoder import persona_chat_utterances
from adherence.cli.main import main
from adherence.models import Encoder
from tests.conftest import REPO
from tests.models.conftest import cosines_to_float32

ov = pytest.importorskip("openvino")
from adherence.models._onnx import openvino_core  # noqa: E402

BF16 = "BF16" in openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
needs_bf16 = pytest.mark.skipif(not BF16, reason="this CPU has no bf16 products (AMX / AVX512-BF16)")
PERSONA = REPO / "tests" / "fixtures" / "synthetic_persona_chat_head.csv"  # Jandaghi et al. 2023, CC BY 4.0


def _texts():
    rows = [json.loads(line) for line in (files("adherence") / "examples" / "role_turns.jsonl").open()]
    own = [r[k] for r in rows for k in ("user", "assistant", "ground_truth_assistant")]
    return own + persona_chat_utterances(str(PERSONA), 400)


@pytest.fixture(scope="module")
def encoders(cache):
    exact = Encoder(device="cpu", progress=False, cache_bytes=0)
    fast = Encoder(device="cpu", progress=False, cache_bytes=0, precision="bf16")
    return exact, fast


@needs_bf16
def test_bf16_embeddings_keep_float32s_bar(encoders):
    exact, fast = encoders
    cos, _, _ = cosines_to_float32(exact, fast, _texts())
    assert cos.min() >= 0.9999
    assert cos.min() < 0.999999  # bf16 products, not float32 under another name


@needs_bf16
def test_bf16_model_is_the_float32_export_kept_once_in_the_cache(encoders, cache):
    _, fast = encoders
    found = list(cache.rglob("*.onnx"))
    assert [p.name for p in found] == ["model-float32.onnx"] and fast._runtime.path == found[0]
    assert not [p for p in cache.rglob("*") if p.name.startswith(".export-")]
    mtime = found[0].stat().st_mtime_ns
    again = Encoder(device="cpu", progress=False, precision="bf16")
    assert again._runtime.path == found[0] and found[0].stat().st_mtime_ns == mtime


@needs_bf16
def test_rows_come_back_in_input_order_whatever_the_batches(encoders):
    _, fast = encoders
    texts = _texts()[:200]
    ref = fast.encode(texts).numpy()
    order = np.random.default_rng(0).permutation(len(texts))
    shuffled = fast.encode([texts[i] for i in order]).numpy()
    # the same text lands in other batches (other padding): a small shift, never another text's row
    np.testing.assert_allclose(shuffled, ref[order], atol=2e-3)
    nearest = (shuffled @ ref.T).argmax(1)
    assert (nearest == order).mean() > 0.99
    assert fast._runtime.streams >= 1


@needs_bf16
def test_bf16_is_described_and_scores_record_it(encoders, tmp_path):
    exact, fast = encoders
    d = fast.describe()
    assert d["precision"] == "bf16" and d["runtime"].startswith("openvino ") and d["name"] == exact.name
    assert d["inference_precision"] == "bf16" and d["file"] == "model-float32.onnx"
    example = str(files("adherence") / "examples" / "role_turns.jsonl")
    out, ref = tmp_path / "b.parquet", tmp_path / "f.parquet"
    assert main(["score", example, "-o", str(out), "--method", "cosine", "--encoder-precision", "bf16"]) == 0
    assert main(["score", example, "-o", str(ref), "--method", "cosine"]) == 0
    meta = json.loads(out.with_name("b.parquet.meta.json").read_text())
    assert meta["models"]["encoder"]["precision"] == "bf16" and meta["config"]["encoder_precision"] == "bf16"
    import pyarrow.parquet as pq

    sb, sf = pq.read_table(out)["score"].to_numpy(), pq.read_table(ref)["score"].to_numpy()
    assert np.abs(sb - sf).max() < 2e-3 and not np.array_equal(sb, sf)


@pytest.mark.slow
def test_bf16_is_refused_on_a_cpu_without_bf16_products(cache, monkeypatch):
    if BF16:  # this CPU has them: a CPU without them cannot be made here, so OpenVINO is told it has none
        real = ov.Core.get_property

        def without_bf16(self, device, name, *rest):
            got = real(self, device, name, *rest)
            return [c for c in got if c != "BF16"] if name == "OPTIMIZATION_CAPABILITIES" else got

        monkeypatch.setattr(ov.Core, "get_property", without_bf16)
    with pytest.raises(OptionError, match="needs a CPU with bf16 products"):
        Encoder(device="cpu", progress=False, precision="bf16")


@needs_bf16
def test_threads_are_pinned_only_when_they_cover_every_cpu(encoders):
    from adherence.models._onnx import OpenVinoSentenceModel, _usable_cpus

    _, fast = encoders
    path = fast._runtime.path
    assert OpenVinoSentenceModel(path, threads=_usable_cpus()).pinned is True
    if _usable_cpus() > 1:  # a process with fewer threads than CPUs shares the machine: no pinning
        one = OpenVinoSentenceModel(path, threads=1)
        assert one.pinned is False and one.model.get_property("ENABLE_CPU_PINNING") is False


def _shaped(tokenizer, texts: list, tokens: int) -> tuple:
    """``(input_ids, attention_mask)`` of ``texts`` padded or cut to ``tokens``, as the encoder's batches."""
    enc = tokenizer(texts, padding="max_length", truncation=True, max_length=tokens, return_tensors="np")
    return enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)


@needs_bf16
def test_a_recurring_batch_shape_gets_a_static_model_and_the_rest_stay_dynamic(encoders, monkeypatch):
    from adherence.models import _onnx

    _, fast = encoders
    texts = _texts()
    # three batches of 4 x 32 tokens (384 tokens), two of 4 x 20 (160), one of 2 x 12 (24), interleaved
    plan = [(0, 4, 32), (4, 4, 20), (8, 4, 32), (12, 2, 12), (14, 4, 20), (18, 4, 32)]
    batches = [_shaped(fast.tokenizer, texts[s : s + n], t) for s, n, t in plan]
    monkeypatch.setattr(_onnx, "STATIC_AFTER_TOKENS", 160)
    model = _onnx.OpenVinoSentenceModel(fast._runtime.path)
    model.static_models = 1
    got = model.run(batches)
    # the shape with the most tokens has its model; 4 x 20 reached the bar too, but there was room for one
    assert model.static_shapes == [(4, 32)] and dict(model.batches_run) == {"static": 3, "dynamic": 3}
    ((compiled, _),) = model._static.values()
    assert compiled.input("input_ids").get_partial_shape().is_static
    assert model.model.input("input_ids").get_partial_shape().is_dynamic

    never = _onnx.OpenVinoSentenceModel(fast._runtime.path)
    never.static_models = 0
    dynamic = never.run(batches)
    assert never.static_shapes == [] and dict(never.batches_run) == {"dynamic": 6}
    for k, (_, n, t) in enumerate(plan):
        assert got[k].shape == dynamic[k].shape == (n, 384)
        if t != 32:  # the same dynamic model's rows, in the same places
            assert np.array_equal(got[k], dynamic[k])
        else:  # another compilation of the same arithmetic: as close as another batching
            assert np.abs(got[k] - dynamic[k]).max() < _onnx.BF16_BATCH_TOLERANCE
            assert (got[k] * dynamic[k]).sum(1).min() >= 0.9999

    model.static_models = 2
    model.run(batches[1:2])  # room for a second: the other shape past the bar gets it on its next call
    assert model.static_shapes == [(4, 32), (4, 20)] and model.batches_run["static"] == 4


@needs_bf16
def test_texts_on_static_models_keep_float32s_bar_and_their_order(encoders, monkeypatch):
    from adherence.models import _onnx

    exact, _ = encoders
    monkeypatch.setattr(_onnx, "STATIC_AFTER_TOKENS", 256)
    fast = Encoder(device="cpu", progress=False, cache_bytes=0, precision="bf16")
    fast.batch_size = 8
    texts = _texts()[:240]
    fast.encode(texts)  # the shapes pass the bar: later calls run on static models
    assert len(fast._runtime.static_shapes) == _onnx.STATIC_MODELS
    cos, _, _ = cosines_to_float32(exact, fast, texts)
    assert cos.min() >= 0.9999 and fast._runtime.batches_run["static"] > 0
    order = np.random.default_rng(1).permutation(len(texts))
    shuffled = fast.encode([texts[i] for i in order]).numpy()
    assert np.abs(shuffled - fast.encode(texts).numpy()[order]).max() < _onnx.BF16_BATCH_TOLERANCE

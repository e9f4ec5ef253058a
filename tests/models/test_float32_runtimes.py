"""The float32 path's runtime, chosen at load by the kind of CPU: OpenVINO float32 on x86-64 (converted from the
torch checkpoint once per machine), torch elsewhere; both exact, recorded in the metadata."""

import json
import platform
from importlib.resources import files

import numpy as np
import pytest

from adherence._errors import OptionError
from adherence.bench.encoder import persona_chat_utterances
from adherence.cli.main import main
from adherence.models import Encoder
from adherence.models._device import cpu_kind
from adherence.models._onnx import FLOAT32_RUNTIMES, float32_runtime
from tests.conftest import REPO
from tests.models.conftest import cosines_to_float32

PERSONA = REPO / "tests" / "fixtures" / "synthetic_persona_chat_head.csv"  # Jandaghi et al. 2023, CC BY 4.0
X86 = platform.machine().lower() in ("x86_64", "amd64")


def _texts():
    rows = [json.loads(line) for line in (files("adherence") / "examples" / "role_turns.jsonl").open()]
    own = [r[k] for r in rows for k in ("user", "assistant", "ground_truth_assistant")]
    return own + persona_chat_utterances(str(PERSONA), 300) + [" ".join(own[i : i + 12]) for i in range(0, 48, 12)]


@pytest.fixture(scope="module")
def encoders(cache):
    chosen = Encoder(device="cpu", progress=False, cache_bytes=0)
    torch_path = Encoder(device="cpu", progress=False, cache_bytes=0, runtime="torch")
    return chosen, torch_path


@pytest.mark.parametrize(
    "flags, kind",
    [
        ({"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "amx"),
        ({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"}, "avx512bf16"),
        ({"avx2", "avx512f", "avx512bw"}, "avx512"),
        ({"avx", "avx2", "fma"}, "avx2"),
        ({"sse4_2"}, "other"),
    ],
)
def test_each_kind_of_cpu_is_named_from_its_flags(flags, kind):
    if not X86:
        pytest.skip("the x86-64 kinds are named on x86-64 machines")
    assert cpu_kind(frozenset(flags)) == kind


@pytest.mark.slow
def test_the_runtime_is_this_kinds_fastest_measured(encoders):
    chosen, torch_path = encoders
    want = FLOAT32_RUNTIMES.get(cpu_kind(), "torch")
    assert chosen.runtime == want == float32_runtime()
    assert torch_path.runtime == "torch" and torch_path._runtime is None
    if X86:
        assert chosen.runtime == "openvino" and chosen._runtime.inference_precision == "f32"


@pytest.mark.slow
def test_openvino_float32_equals_torch_float32(encoders):
    chosen, torch_path = encoders
    if chosen.runtime != "openvino":
        pytest.skip("this CPU's float32 path is torch: no second runtime to compare")
    cos, a, b = cosines_to_float32(torch_path, chosen, _texts())
    # float32 products in another order: rounding, far inside the exact bar (0.9999)
    assert cos.min() >= 0.999999
    np.testing.assert_allclose(b, a, atol=2e-4)


@pytest.mark.slow
def test_a_texts_float32_embedding_does_not_move_with_its_batch(encoders):
    chosen, _ = encoders
    texts = _texts()[:120]
    together = chosen.encode(texts).numpy()
    alone = np.concatenate([chosen.encode([t]).numpy() for t in texts[:20]])
    np.testing.assert_allclose(alone, together[:20], atol=1e-5)
    order = np.random.default_rng(0).permutation(len(texts))
    shuffled = chosen.encode([texts[i] for i in order]).numpy()
    np.testing.assert_allclose(shuffled, together[order], atol=1e-5)


@pytest.mark.slow
def test_the_converted_model_is_kept_once_in_the_cache(encoders, cache):
    chosen, _ = encoders
    if chosen.runtime != "openvino":
        pytest.skip("this CPU's float32 path is torch: nothing is converted")
    found = list(cache.rglob("openvino-float32.*"))
    assert sorted(p.suffix for p in found) == [".bin", ".xml"]
    assert chosen._runtime.path.name == "openvino-float32.xml" and not list(cache.rglob(".export-*"))
    xml = next(p for p in found if p.suffix == ".xml")
    mtime = xml.stat().st_mtime_ns
    again = Encoder(device="cpu", progress=False)
    assert again._runtime.path == xml and xml.stat().st_mtime_ns == mtime
    # weights kept float32 (OpenVINO's save_model would compress them to fp16 unless told not to)
    assert xml.with_suffix(".bin").stat().st_size > 4 * 20_000_000


@pytest.mark.slow
def test_the_runtime_is_recorded_and_scores_equal_torchs(encoders, tmp_path):
    chosen, torch_path = encoders
    d = chosen.describe()
    assert d["precision"] == "float32" and d["runtime"].split()[0] == chosen.runtime and d["cpu_kind"] == cpu_kind()
    assert torch_path.describe()["runtime"].startswith("torch ")
    example = str(files("adherence") / "examples" / "role_turns.jsonl")
    out = tmp_path / "s.parquet"
    assert main(["score", example, "-o", str(out), "--method", "cosine", "--no-progress"]) == 0
    meta = json.loads(out.with_name("s.parquet.meta.json").read_text())
    assert meta["models"]["encoder"]["runtime"] == d["runtime"]
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in open(example)]
    got = pq.read_table(out).to_pandas().set_index(["conversation_id", "turn_index"])["score"]
    a = torch_path.encode([r["assistant"] for r in rows]).numpy()
    b = torch_path.encode([r["ground_truth_assistant"] for r in rows]).numpy()
    want = np.clip((a * b).sum(1), 0.0, 1.0)  # cosine's score
    assert np.abs(np.array([got[(r["conversation_id"], r["turn_index"])] for r in rows]) - want).max() < 1e-5


def test_a_runtime_is_named_from_the_runtimes_that_can_run_it():
    with pytest.raises(OptionError, match="`runtime` must be one of openvino, torch for float32, got 'onnx'"):
        Encoder(device="cpu", progress=False, runtime="onnx")
    with pytest.raises(OptionError, match="cannot run --encoder-precision int8: it runs on onnxruntime"):
        Encoder(device="cpu", progress=False, precision="int8", runtime="torch")


def test_the_late_interaction_encoder_loads_no_sentence_runtime():
    from adherence.index import LateInteractionEncoder

    li = LateInteractionEncoder(progress=False)
    assert li.encoder.runtime == "torch" and li.encoder._runtime is None  # token embeddings run on torch
    assert li.encoder._model is not None


class _InterruptedAfterOne:
    """The real queue, with an interrupt (Ctrl-C, SIGTERM) arriving right after its first submission: a signal
    between two calls cannot be timed from outside."""

    def __init__(self, queue) -> None:
        self.queue = queue

    def start_async(self, inputs, k) -> None:
        self.queue.start_async(inputs, k)
        raise KeyboardInterrupt

    def wait_all(self) -> None:
        self.queue.wait_all()


@pytest.mark.slow
def test_an_interrupt_mid_call_leaves_no_openvino_request_running(encoders):
    """A request left running when the interrupt ends the process would call back into an exiting interpreter
    (an abort, -6, instead of the interrupt's 130 / 143): the call waits for what it submitted before it raises."""
    chosen, _ = encoders
    if chosen.runtime != "openvino":
        pytest.skip("this CPU's float32 path is torch: no OpenVINO queue")
    model = chosen._runtime
    real, static_models = model._queue, model.static_models
    model._queue, model.static_models = _InterruptedAfterOne(real), 0  # every batch on the dynamic-shape queue
    ids = np.full((64, 256), 1000, dtype=np.int64)  # long enough to be still running when the interrupt lands
    batches = [(ids, np.ones_like(ids)), (ids, np.ones_like(ids))]
    try:
        with pytest.raises(KeyboardInterrupt):
            model.run(batches)
        assert model._out.items[0] is not None and model._out.items[0].shape == (64, chosen.dim)  # its callback ran
        assert model._out.items[1] is None and real.is_ready()  # the second never started; nothing is running
    finally:
        model._queue, model.static_models, model._out.items = real, static_models, []
    assert len(model.run(batches[:1])) == 1  # the model serves the next call


def test_an_encoder_let_go_frees_its_openvino_models(cache):
    """The inference queues hold their callback from C++, out of the collector's sight: a callback of the model's
    own kept every OpenVINO model ever loaded alive, with its compiled models (about 170 MB per in-process job)."""
    import gc

    from adherence.models._onnx import OpenVinoSentenceModel

    def alive() -> int:
        gc.collect()
        return sum(isinstance(o, OpenVinoSentenceModel) for o in gc.get_objects())

    if not X86:
        pytest.skip("OpenVINO's CPU plugin runs on x86-64 here")
    before = alive()
    enc = Encoder(device="cpu", progress=False, cache_bytes=0, runtime="openvino")
    assert enc.encode(_texts()[:40]).shape == (40, enc.dim)  # a call through the queue and its callback
    assert alive() == before + 1
    del enc
    assert alive() == before


_LET_GO_THEN_SIGNALLED = """
import gc, os, signal
from adherence.models import Encoder
first = Encoder(device="cpu", progress=False, cache_bytes=0, runtime="openvino")
second = Encoder(device="cpu", progress=False, cache_bytes=0, runtime="openvino")
assert first.encode(["a first text"]).shape == second.encode(["a second one"]).shape
del first; gc.collect(); del second; gc.collect()  # let go in the order made
for sig in (signal.SIGINT, signal.SIGTERM):
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(sig, stop)
    try:
        os.kill(os.getpid(), sig)
    except KeyboardInterrupt:
        print("handled", signal.Signals(sig).name, flush=True)
"""


def test_signals_after_two_openvino_encoders_are_let_go_reach_their_python_handlers(cache):
    """Each OpenVINO ``Core`` loads a CPU plugin that points the thread's signal stack at memory of its own and puts
    back what it found when destroyed: two released in the order made left the stack on freed memory, and the next
    signal with a Python handler (Ctrl-C, an orchestrator's SIGTERM) killed the process with SIGSEGV (-11) instead
    of raising in it. In a process of its own: the failure is the process's death."""
    import os
    import subprocess
    import sys

    if not X86:
        pytest.skip("OpenVINO's CPU plugin runs on x86-64 here")
    res = subprocess.run(
        [sys.executable, "-c", _LET_GO_THEN_SIGNALLED],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, ADHERENCE_CACHE_DIR=str(cache)),
    )
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    assert res.stdout.split() == ["handled", "SIGINT", "handled", "SIGTERM"]


def test_the_torch_runtime_without_progress_shows_no_bar_of_transformers(capfd):
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()  # as a fresh process has it
    capfd.readouterr()
    Encoder(device="cpu", progress=False, runtime="torch")
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # given back as it was
    Encoder(device="cpu", progress=True, runtime="torch")
    assert "Loading weights" in capfd.readouterr().err  # the bar this test would catch

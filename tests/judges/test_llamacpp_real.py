"""The openai backend against llama.cpp's real OpenAI-compatible server (``llama-cpp-python[server]``) serving
the bundled GGUF judge as it ships (Q4_1) on 127.0.0.1.

The server lives in its own virtualenv (it builds llama.cpp from source; .ci/run says how): point
``ADHERENCE_LLAMA_CPP_PYTHON`` at that virtualenv's python and run ``pytest -m llamacpp``. Without the
variable these tests are skipped; with it, a server that cannot start fails them.
"""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main
from adherence.data import example_path, read_turn_scores, read_turns
from adherence.judges import JudgeConfig, RoleJudge

from ._server import external_server, free_port, score_while_the_server_dies

pytestmark = pytest.mark.llamacpp
PYTHON = os.environ.get("ADHERENCE_LLAMA_CPP_PYTHON")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not PYTHON:
        pytest.skip("set ADHERENCE_LLAMA_CPP_PYTHON to a python with llama-cpp-python[server] (see .ci/run)")
    from adherence.models import DEFAULT_JUDGE, resolve_model

    judge = resolve_model(DEFAULT_JUDGE)
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    cmd = [
        PYTHON,
        "-m",
        "llama_cpp.server",
        "--model",
        str(judge.path / judge.gguf_file),
        "--model_alias",
        "smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--n_threads",
        "2",
    ]
    with external_server(cmd, url, tmp_path_factory.mktemp("llamacpp") / "server.log", timeout=180) as proc:
        yield proc, url


@pytest.fixture(scope="module")
def reference(smollm_judge):
    """The in-process backend on the same GGUF (de-quantised to fp32): top-k P(yes), as a server gives."""
    return RoleJudge(JudgeConfig(model="bundled", full_vocab=False), backend=smollm_judge).score(
        read_turns(example_path("role"))
    )


def _score(url, out, *extra, src=None):
    return main(
        [
            "score",
            str(src or example_path("role")),
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
            "--concurrency",
            "4",
            *extra,
        ]
    )


def test_continuous_scores_from_the_servers_logprobs(server, reference, tmp_path):
    _, url = server
    out = tmp_path / "served.parquet"
    assert _score(url, out) == 0
    got = read_turn_scores(out)
    assert got.num_rows == 28 and set(got.column("status").to_pylist()) == {"ok"}
    assert set(got.column("p_yes_source").to_pylist()) == {"logprobs"}
    diff = np.abs(np.array(got.column("score").to_pylist()) - np.array(reference["score"]))
    print(f"llama.cpp vs in-process: max |dP(yes)| {diff.max():.4f}, mean {diff.mean():.4f}")
    # Q4_1 weights served vs the same weights de-quantised to fp32 in-process: measured max 0.036
    assert diff.max() < 0.06, diff.max()
    assert np.corrcoef(got.column("score").to_pylist(), reference["score"])[0, 1] > 0.95


def test_request_order_does_not_leak_into_output_order(server, tmp_path):
    _, url = server
    src = read_turns(example_path("role"))
    rev = src.take(pa.array(list(range(src.num_rows - 1, -1, -1))))
    pq.write_table(rev, tmp_path / "rev.parquet")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert _score(url, a) == 0
    assert _score(url, b, "--concurrency", "8", src=tmp_path / "rev.parquet") == 0
    fwd = {(r["conversation_id"], r["turn_index"]): r["score"] for r in read_turn_scores(a).to_pylist()}
    bwd = {(r["conversation_id"], r["turn_index"]): r["score"] for r in read_turn_scores(b).to_pylist()}
    assert fwd.keys() == bwd.keys()
    assert max(abs(fwd[k] - bwd[k]) for k in fwd) < 1e-6  # the server is deterministic at temperature 0


def test_binary_mode_and_reasons(server, tmp_path):
    _, url = server
    out = tmp_path / "binary.parquet"
    rc = _score(url, out, "--output-mode", "binary")
    got = read_turn_scores(out)
    status = got.column("status").to_pylist()
    assert got.num_rows == 28 and set(status) <= {"ok", "unscored"}
    assert rc == (0 if "ok" in status else 1)
    assert {s for s, st in zip(got.column("score").to_pylist(), status) if st == "ok"} <= {0.0, 1.0}
    conv = tmp_path / "conv.parquet"
    _score(url, conv, "--granularity", "conversation", "--include-reason", "--output-mode", "binary")
    got = read_turn_scores(conv)
    assert got.num_rows == 28 and set(got.column("status").to_pylist()) <= {"ok", "unscored"}


def test_a_server_that_dies_mid_run_fails_the_job(server, tmp_path):
    proc, url = server
    rc, got, status, errors = score_while_the_server_dies(proc, url, tmp_path, after_s=4.0)
    assert rc == 1
    assert got.num_rows == 168 and status.count("error") > 0 and status.count("ok") > 0
    assert all(e.startswith("judge server:") for e in errors)

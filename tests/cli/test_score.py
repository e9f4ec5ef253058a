import json

import pytest

from adherence.cli.main import main
from adherence.data import example_path, metadata_path, read_session_scores, read_turn_scores


def test_score_then_evaluate(tmp_path, capsys):
    out = tmp_path / "scores.parquet"
    assert (
        main(
            [
                "score",
                str(example_path("role")),
                "-o",
                str(out),
                "--method",
                "cosine",
                "--no-progress",
                "--bootstrap",
                "50",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "28 turns" in text and "ok 28" in text
    scores = read_turn_scores(out)
    assert scores.num_rows == 28 and "rater_score" in scores.column_names  # extra columns pass through
    sessions = read_session_scores(tmp_path / "scores.sessions.parquet")
    assert sessions.num_rows == 8
    meta = json.loads(metadata_path(out).read_text())
    assert meta["config"]["method"] == "cosine" and meta["models"]["encoder"]["source"] == "bundled"
    assert (
        main(
            [
                "evaluate",
                str(out),
                "--score",
                "score",
                "--label",
                "label",
                "--positive",
                "adherent",
                "--prediction",
                "prediction",
                "--json",
                "--bootstrap",
                "0",
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    assert res["n"] == 28 and res["auc"] > 0.5


def test_score_jsonl_output_and_bad_method(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert main(["score", str(example_path("role")), "-o", str(out), "--method", "kl", "--no-progress"]) == 0
    assert len(out.read_text().splitlines()) == 28
    assert (tmp_path / "s.sessions.jsonl").exists()


def test_llm_judge_is_the_default_method_and_uses_the_cache(tmp_path, capsys, tiny_llama_dir):
    out = tmp_path / "judge.parquet"
    cache = tmp_path / "judge.sqlite"
    args = [
        "score",
        str(example_path("role")),
        "-o",
        str(out),
        "--judge-model",
        str(tiny_llama_dir),
        "--judge-cache",
        str(cache),
        "--no-progress",
        "--bootstrap",
        "0",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    scores = read_turn_scores(out)
    assert set(scores.column("method").to_pylist()) == {"llm_judge"}
    assert set(scores.column("status").to_pylist()) == {"ok"}
    assert set(scores.column("p_yes_source").to_pylist()) == {"full_vocab"}
    meta = json.loads(metadata_path(out).read_text())
    assert (
        meta["config"]["judge"]["model"] == str(tiny_llama_dir) and meta["models"]["judge"]["backend"] == "transformers"
    )
    capsys.readouterr()
    # A random-weight judge writes no YES/NO: every turn is unscored, the output is still published
    # (every row with its status), and the job exits 1 so an orchestrator sees that nothing was scored.
    assert main(args + ["--output-mode", "binary"]) == 1
    captured = capsys.readouterr()
    assert "unscored 28" in captured.out and "no turn was scored" in captured.err
    assert set(read_turn_scores(out).column("status").to_pylist()) == {"unscored"}
    assert main(["score", str(example_path("role")), "-o", str(out), "--backend", "openai", "--judge-model", "m"]) == 2
    assert "--base-url" in capsys.readouterr().err


def test_main_called_in_process_puts_the_process_state_back(tmp_path, capsys):
    """A job calling main() keeps its own SIGTERM handler and warning format, on success and on error."""
    import signal
    import warnings

    def own_handler(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, own_handler)
    own_format = warnings.formatwarning
    try:
        assert (
            main(
                ["score", str(example_path("role")), "-o", str(tmp_path / "s.jsonl"), "--method", "kl", "--no-progress"]
            )
            == 0
        )
        assert signal.getsignal(signal.SIGTERM) is own_handler and warnings.formatwarning is own_format
        assert (
            main(
                [
                    "score",
                    str(tmp_path / "missing.csv"),
                    "-o",
                    str(tmp_path / "t.jsonl"),
                    "--method",
                    "kl",
                    "--no-progress",
                ]
            )
            == 2
        )
        assert signal.getsignal(signal.SIGTERM) is own_handler and warnings.formatwarning is own_format
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine where CUDA sees no GPU")
def test_device_cuda_without_cuda_stops_before_any_work_in_one_line(tmp_path, capsys):
    import time

    from adherence.cli.main import main
    from adherence.data import example_path

    start = time.perf_counter()
    rc = main(
        [
            "score",
            str(example_path("role")),
            "-o",
            str(tmp_path / "o.parquet"),
            "--method",
            "cosine",
            "--device",
            "cuda",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("adherence score: error: --device cuda, but CUDA sees no GPU on this machine")
    assert time.perf_counter() - start < 30 and not list(tmp_path.iterdir())  # nothing loaded, nothing written


def test_no_method_and_no_judge_named_lists_the_choices_and_runs_nothing(tmp_path):
    """The bundled judge is a smoke test: it never runs as a silent default (half an hour on 2 cores for a log a
    user's first run is made of); the one line names every way to score."""
    import subprocess
    import sys

    out = tmp_path / "o.parquet"
    p = subprocess.run(
        [sys.executable, "-m", "adherence", "score", str(example_path("role")), "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    for choice in ("--method scope", "--method classifier --classifier FILE", "--method cosine", "--judge-model MODEL",
                   "--base-url URL", "--judge-model bundled:SmolLM2-135M-Instruct"):  # fmt: skip
        assert choice in p.stderr
    assert not list(tmp_path.iterdir())


def test_naming_a_judge_means_llm_judge_and_the_bundled_one_still_warns():
    import argparse

    from adherence.cli.score import NO_METHOD, _method

    def ns(**kw):
        base = {"method": None, "judge_model": None, "base_url": None, "backend": "transformers", "dry_run": False}
        return argparse.Namespace(**{**base, **kw})

    assert _method(ns(judge_model="/models/judge")) == "llm_judge"
    assert _method(ns(base_url=["http://127.0.0.1:8000/v1"])) == "llm_judge"
    assert _method(ns(backend="vllm")) == "llm_judge"
    assert _method(ns(method="scope", judge_model="x")) == "scope"
    with pytest.raises(Exception, match="name what scores the turns") as e:
        _method(ns())
    assert str(e.value) == NO_METHOD
    from adherence.judges._judge import is_bundled_judge

    assert is_bundled_judge("bundled:SmolLM2-135M-Instruct") and is_bundled_judge(None)
    assert is_bundled_judge("HuggingFaceTB/SmolLM2-135M-Instruct") and not is_bundled_judge("/models/judge")

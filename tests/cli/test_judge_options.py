"""The judge's options through the CLI, a job file and the Python API, on a real (tiny, random-weight) judge."""

import json
import re
import time

import numpy as np
import pytest

from adherence.cli.main import main
from adherence.data import example_path, metadata_path, read_turn_scores, read_turns
from adherence.judges import JudgeCache, JudgeConfig, RoleJudge, turn_requests


def _score(tmp_path, tiny_llama_dir, name, *extra):
    out = tmp_path / f"{name}.parquet"
    args = [
        "score",
        str(example_path("role")),
        "-o",
        str(out),
        "--judge-model",
        str(tiny_llama_dir),
        "--no-progress",
        "--bootstrap",
        "0",
        "--device",
        "cpu",
        *extra,
    ]
    return main(args), out


def _scores(path):
    return np.array(read_turn_scores(path).column("score").to_pylist(), dtype=float)


def test_job_file_sets_options_and_flags_override_it(tmp_path, tiny_llama_dir, capsys):
    out = tmp_path / "job.parquet"
    job = tmp_path / "job.yaml"
    job.write_text(
        f"input: {example_path('role')}\noutput: {out}\njudge-model: {tiny_llama_dir}\n"
        "session_mode: threshold_mean\nthreshold: 0.9\nno-progress: true\nbootstrap: 0\ndevice: cpu\n"
        "yes-tokens: [yes, true, on]\n"
    )
    assert main(["score", "--config", str(job), "--threshold", "0.1"]) == 0  # the flag wins over the file
    meta = json.loads(metadata_path(out).read_text())
    assert meta["config"]["threshold"] == 0.1 and meta["config"]["session_mode"] == "threshold_mean"
    assert [t.lower() for t in meta["config"]["judge"]["yes_tokens"]] == ["yes", "true", "on"]  # text, not booleans
    assert meta["job"]["config_file"] == str(job) and "judge_model" in meta["job"]["from_config_file"]
    sessions = read_turn_scores(out)
    assert sessions.num_rows == 28
    capsys.readouterr()
    job.write_text("judge_modle: x\n")
    assert main(["score", "--config", str(job)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(job) in err and "did you mean 'judge-model'" in err
    job.write_text("session-mode: median\n")
    assert main(["score", "--config", str(job)]) == 2
    assert "not one of mean, threshold_mean" in capsys.readouterr().err
    job.write_text("- a list\n")
    assert main(["score", "--config", str(job)]) == 2


@pytest.mark.slow
def test_dry_run_counts_what_the_run_uses(tmp_path, tiny_llama_dir, capsys):
    from adherence.judges._dryrun import judge_plan
    from adherence.judges._transformers import TransformersBackend
    from adherence.role import RoleConfig

    turns = read_turns(example_path("role"))
    for jc in (JudgeConfig(model=str(tiny_llama_dir)), JudgeConfig(model=str(tiny_llama_dir), max_history=1)):
        plan = judge_plan(turns, RoleConfig(judge=jc))
        backend = TransformersBackend(str(tiny_llama_dir), device="cpu", progress=False)
        judge = RoleJudge(jc, backend=backend)
        judge.score(turns)
        assert plan["judge_calls"] == judge.stats["calls"] == 28
        assert plan["prompt_tokens"] == judge.stats["prompt_tokens"]
        assert plan["forward_tokens"] == judge.stats["forward_tokens"] < plan["prompt_tokens"]
    out = tmp_path / "never.parquet"
    rc = main(
        [
            "score",
            str(example_path("role")),
            "-o",
            str(out),
            "--judge-model",
            str(tiny_llama_dir),
            "--dry-run",
            "--max-history",
            "1",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "28 judge calls" in text and f"{plan['forward_tokens']:,} forward tokens" in text
    assert not out.exists()


def test_usage_is_in_the_summary_and_the_cache_is_counted(tmp_path, tiny_llama_dir, capsys):
    cache = str(tmp_path / "c.sqlite")
    for expect_hits in (0, 28):
        rc, out = _score(tmp_path, tiny_llama_dir, f"u{expect_hits}", "--judge-cache", cache)
        assert rc == 0
        usage = json.loads(metadata_path(out).read_text())["summary"]["judge_usage"]
        assert usage["cache_hits"] == expect_hits and usage["calls"] == 28 - expect_hits
        assert f"{28 - expect_hits} judge calls ({expect_hits} from the cache)" in capsys.readouterr().out


@pytest.mark.slow
def test_yes_tokens_template_system_and_layout_change_the_prompts_and_scores(tmp_path, tiny_llama_dir, capsys):
    rc, base = _score(tmp_path, tiny_llama_dir, "base")
    assert rc == 0
    rc, wider = _score(tmp_path, tiny_llama_dir, "wider", "--yes-tokens", "yes", "the", "a")
    assert rc == 0 and (_scores(wider) > _scores(base)).all()  # more yes mass, the same no mass
    tpl = tmp_path / "t.txt"
    tpl.write_text("Role: {role}\nEarlier:\n{history}\nUser: {user}\nReply: {assistant}\nIn role? YES or NO.")
    rc, templ = _score(tmp_path, tiny_llama_dir, "tpl", "--judge-template", str(tpl))
    assert rc == 0 and not np.allclose(_scores(templ), _scores(base))
    rc, system = _score(tmp_path, tiny_llama_dir, "sys", "--judge-layout", "system")
    assert rc == 0 and not np.allclose(_scores(system), _scores(base))
    tpl.write_text("Role: {rolee} {assistant}")
    capsys.readouterr()
    rc, _ = _score(tmp_path, tiny_llama_dir, "bad", "--judge-template", str(tpl))
    assert rc == 2 and "unknown field {rolee}" in capsys.readouterr().err


def test_request_layouts_and_history_window():
    users, assistants = ["u1", "u2", "u3"], ["a1", "a2", "a3"]
    reqs = turn_requests("c", "Be a bank bot.", users, assistants, max_history=1, system="You audit chatbots.")
    assert [len(r.pieces) for r in reqs] == [2, 3, 3]  # head + at most one earlier exchange + tail
    assert "a1" not in reqs[2].content and "a2" in reqs[2].content
    assert all(r.messages()[0] == {"role": "system", "content": "You audit chatbots."} for r in reqs)
    sys_layout = turn_requests("c", "Be a bank bot.", users, assistants, layout="system")
    m = sys_layout[2].messages()
    assert m[0]["role"] == "system" and "a1" in m[0]["content"] and "YES or NO" in m[1]["content"]
    with pytest.raises(ValueError, match="drop `system`"):
        JudgeConfig(layout="system", system="x")


def test_self_consistency_samples(tmp_path, tiny_llama_dir):
    from adherence.judges._transformers import TransformersBackend

    turns = read_turns(example_path("role")).slice(0, 6)
    backend = TransformersBackend(str(tiny_llama_dir), device="cpu", progress=False)
    with pytest.raises(ValueError, match="temperature > 0"):
        JudgeConfig(output_mode="binary", samples=3)
    with pytest.raises(ValueError, match="exact and deterministic"):
        RoleJudge(JudgeConfig(samples=3, temperature=0.5), backend=backend)
    cache = tmp_path / "s.sqlite"
    judge = RoleJudge(
        JudgeConfig(model="tiny", output_mode="binary", samples=3, temperature=1.0, cache=str(cache)), backend=backend
    )
    cols = judge.score(turns)
    assert len(JudgeCache(cache)) == 3 * 6  # the sample index is part of the key
    for s, st, agree, n, err in zip(cols["score"], cols["status"], cols["agreement"], cols["samples"], cols["error"]):
        if n is None:
            assert st == "unscored" and err.startswith("unparseable")
            continue
        assert 1 <= n <= 3 and agree >= 0.5
        if st == "ok":
            assert s in (0.0, 1.0) and agree > 0.5
        else:
            assert "tied vote" in err and agree == 0.5


@pytest.mark.slow
def test_judge_dtype_reaches_the_model_and_the_metadata(tmp_path, tiny_llama_dir):
    rc, fp32 = _score(tmp_path, tiny_llama_dir, "fp32")
    assert rc == 0
    rc, bf16 = _score(tmp_path, tiny_llama_dir, "bf16", "--judge-dtype", "bfloat16")
    assert rc == 0
    metas = [json.loads(metadata_path(p).read_text())["models"]["judge"] for p in (fp32, bf16)]
    assert [m["dtype"] for m in metas] == ["float32", "bfloat16"]
    assert all(m["tree_attention"] and m["prefix_sharing"] and m["device"] == "cpu" for m in metas)
    a, b = _scores(fp32), _scores(bf16)
    assert 0 < np.abs(a - b).max() < 0.05  # really ran in bf16: close to fp32, not equal


@pytest.mark.slow
def test_float8_judge_and_chained_layout_from_the_command_line(tmp_path, tiny_llama_dir):
    rc, bf16 = _score(tmp_path, tiny_llama_dir, "bf16", "--judge-dtype", "bfloat16")
    assert rc == 0
    rc, f8 = _score(tmp_path, tiny_llama_dir, "f8", "--judge-dtype", "float8")
    assert rc == 0
    rc, chained = _score(tmp_path, tiny_llama_dir, "chained", "--judge-layout", "chained")
    assert rc == 0
    meta = json.loads(metadata_path(f8).read_text())
    judge = meta["models"]["judge"]
    assert judge["dtype"] == "float8" and "per token" in judge["quantization"] and judge["lm_head"] == "float32 rows"
    a, b = _scores(bf16), _scores(f8)
    assert 0 < np.abs(a - b).max() < 0.05  # really ran in float8: close to bf16, not equal
    assert json.loads(metadata_path(chained).read_text())["config"]["judge"]["layout"] == "chained"
    c = _scores(chained)
    assert np.isfinite(c).all() and not np.allclose(c, _scores(_score(tmp_path, tiny_llama_dir, "user")[1]))


@pytest.mark.slow
def test_job_file_paths_resolve_beside_it_and_an_alias_bomb_is_refused(tmp_path, capsys, monkeypatch):
    import time

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "role.txt").write_text("You are the cooking assistant of a recipe site.")
    chats = jobs / "chats.jsonl"
    chats.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! What shall we cook?"},
                ]
            }
        )
        + "\n"
    )
    job = jobs / "job.yaml"
    job.write_text("input: chats.jsonl\nrole-file: role.txt\ndry-run: true\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # started from another directory: the job file's paths still mean its neighbours
    assert main(["score", "--config", str(job)]) == 0
    captured = capsys.readouterr()
    assert f"input={chats}" in captured.err and f"role-file={jobs / 'role.txt'}" in captured.err  # shown, resolved
    assert captured.out.startswith("dry run: 1 turns (0 with input errors)")  # the one turn of chats.jsonl
    # a 500-byte billion-laughs: refused at once, no memory blow-up
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} " + "[" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)
    ]
    job.write_text("\n".join(bomb) + "\nthreshold: 0.5\n")
    t0 = time.perf_counter()
    assert main(["score", "--config", str(job)]) == 2
    err = capsys.readouterr().err.strip()
    assert "anchors and aliases" in err and "line 1" in err and len(err.splitlines()) == 1
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--samples", "3"], "exact and deterministic"),
        (["--judge-layout", "pygaussia", "--judge-system", "x"], "drop `system`"),
        (
            ["--judge-layout", "pygaussia", "--granularity", "conversation", "--output-mode", "binary"],
            "one turn per call",
        ),
        (["--granularity", "conversation"], "output_mode='binary'"),
    ],
)
def test_options_that_cannot_combine_are_refused_before_any_model_loads(tmp_path, flags, message):
    import subprocess
    import sys

    out = tmp_path / "o.parquet"
    t0 = time.perf_counter()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "adherence",
            "score",
            str(example_path("role")),
            "-o",
            str(out),
            "--method",
            "llm_judge",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.perf_counter() - t0
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())
    assert elapsed < 20, elapsed  # 0.3 s here: no model, no torch import


@pytest.mark.slow
def test_dry_run_estimates_the_time_from_timed_conversations(tiny_llama_dir, capsys):
    """--estimate N times N samples of the input with the judge after a warm-up: the estimate is the mean seconds per
    forward token times the job's forward tokens, and its interval Student's t interval of that mean (checked
    against statsmodels)."""
    from statsmodels.stats.weightstats import DescrStatsW

    from adherence.judges._dryrun import judge_plan
    from adherence.role import RoleConfig
    from adherence.role._dryrun import time_estimate

    turns = read_turns(example_path("role"))
    config = RoleConfig(judge=JudgeConfig(model=str(tiny_llama_dir), backend_options={"device": "cpu"}))
    total = judge_plan(turns, config)["forward_tokens"]
    est = time_estimate(turns, config, samples=3, total_tokens=total)
    x = est["seconds_per_token"]
    assert est["samples"] == len(x) and 2 <= len(x) <= 3 and 0 < est["turns"] < turns.num_rows
    low, high = DescrStatsW(x).tconfint_mean(alpha=0.05)
    assert est["seconds"] == pytest.approx(total * sum(x) / len(x))
    assert est["low"] == pytest.approx(max(0.0, total * low)) and est["high"] == pytest.approx(total * high)
    assert est["low"] <= est["seconds"] <= est["high"]

    args = ["score", str(example_path("role")), "--judge-model", str(tiny_llama_dir), "--dry-run"]
    assert main(args) == 0
    assert "add --estimate 4" in capsys.readouterr().out
    assert main([*args, "--estimate", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"estimated time on this machine, one worker: \d+ s \(95% interval \d+ s to \d+ s\), "
                     r"from [23] samples \(\d+ turns, [\d.]+ turns/s\)", out), out  # fmt: skip
    assert main(["score", str(example_path("role")), "-o", "x.parquet", "--estimate", "3"]) == 2

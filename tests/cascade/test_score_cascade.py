"""`adherence score --cascade`: later stages score only the turns left, with the history a full run gives them; the
decisions are `cascade apply`'s on full runs; passes survive a resume; what a cascade cannot run is refused."""

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main
from adherence.data import example_path

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _signed(doc: dict) -> dict:
    """A cascade file edited here on purpose (thresholds that route turns, options left out) and signed again as
    `cascade fit` signs it: an edit that is not signed is refused (tests/stats/test_cascade.py)."""
    from adherence.cascade._file import cascade_digest

    doc["digest"] = cascade_digest(doc)
    return doc


def _score(tmp_path, name, *extra):
    out = tmp_path / f"{name}.parquet"
    assert main(["score", str(example_path("role")), "-o", str(out), "--no-progress", *extra]) == 0
    return out


def _by_key(path, *cols):
    t = pq.read_table(path).to_pylist()
    return {(str(r["conversation_id"]), r["turn_index"]): tuple(r[c] for c in cols) for r in t}


@pytest.fixture(scope="module")
def stages(tmp_path_factory, tiny_llama_dir):
    """KL (cheap) then the tiny random-weight judge over the bundled example, each on every turn, and a cascade
    whose thresholds make KL decide some turns, the judge some, and leave some undecided."""
    tmp = tmp_path_factory.mktemp("stages")
    kl = _score(tmp, "kl", "--method", "kl")
    judge = _score(tmp, "judge", "--judge-model", str(tiny_llama_dir), "--device", "cpu")
    cascade = tmp / "cascade.json"
    assert main(["cascade", "fit", str(kl), str(judge), "--alpha", "0.3", "--delta", "0.3", "-o", str(cascade)]) == 0
    doc = json.loads(cascade.read_text())
    for st, path in zip(doc["stages"], (kl, judge)):  # each stage accepts the upper half of its confidences
        s = pq.read_table(path).column("score").to_numpy()
        st["threshold"] = float(np.median(np.abs(s - st["score_threshold"])))
    cascade.write_text(json.dumps(_signed(doc)))
    return {"kl": kl, "judge": judge, "cascade": cascade, "dir": tmp}


@pytest.mark.slow
def test_later_stages_score_only_the_turns_left_as_a_full_run_would(tmp_path, capsys, stages):
    out = tmp_path / "cascade.parquet"
    assert main(["score", str(example_path("role")), "-o", str(out), "--cascade", str(stages["cascade"])]) == 0
    printed = capsys.readouterr().out
    got = _by_key(out, "status", "decided_by", "prediction", "stage1_score", "stage2_score", "method")
    # the same decisions as `cascade apply` on full runs of both stages
    applied = tmp_path / "applied.parquet"
    assert main(["cascade", "apply", str(stages["kl"]), str(stages["judge"]), "--cascade", str(stages["cascade"]),
                 "-o", str(applied)]) == 0  # fmt: skip
    want = _by_key(applied, "status", "decided_by", "prediction")
    assert set(got) == set(want) and len(got) == 28
    assert {k: v[:3] for k, v in got.items()} == want
    counts = {s: sum(v[0] == s for v in got.values()) for s in ("ok", "abstained")}
    assert counts["ok"] > 0 and counts["abstained"] > 0  # the thresholds leave work for every outcome
    assert {v[1] for v in got.values()} == {1, 2, None}
    full_kl, full_judge = _by_key(stages["kl"], "score"), _by_key(stages["judge"], "score")
    for key, (_, decided, _, s1, s2, method) in got.items():
        assert method == "cascade"
        assert s1 == pytest.approx(full_kl[key][0])
        if decided == 1:
            assert s2 is None  # never sent to the judge
        else:  # scored in the second pass with its conversation's history: the full run's P(yes)
            assert s2 == pytest.approx(full_judge[key][0], abs=1e-5)
    meta = json.loads((tmp_path / "cascade.parquet.meta.json").read_text())
    s = meta["summary"]
    judged = sum(1 for v in got.values() if v[1] != 1)
    assert s["stages"][1]["turns"] == judged and s["stages"][1]["judge_usage"]["calls"] == judged
    assert s["stages"][0]["decided"] + s["stages"][1]["decided"] == s["ok"]
    assert s["abstained"] == counts["abstained"] and s["error"] == 0
    cost = s["cost_vs_last_stage"]
    assert cost["escalated_to_last"] == judged and cost["estimated_calls"] == 28 and cost["cascade_calls"] == judged
    assert meta["config"]["cascade"]["alpha"] == 0.3 and meta["config"]["cascade"]["digest"].startswith("sha256:")
    assert f"scored {judged} turns" in printed and "reached the last stage" in printed
    assert not (tmp_path / "cascade.parquet.work").exists()  # removed after success
    sessions = pq.read_table(tmp_path / "cascade.sessions.parquet").to_pylist()
    # a session's score is the share of its decided turns found adherent
    for row in sessions:
        mine = [v[2] for k, v in got.items() if k[0] == str(row["conversation_id"]) and v[0] == "ok"]
        assert row["score"] == (pytest.approx(np.mean(mine)) if mine else None)


@pytest.mark.slow
def test_a_resumed_cascade_reuses_finished_passes(tmp_path, capsys, stages):
    out = tmp_path / "c.parquet"
    args = ["score", str(example_path("role")), "-o", str(out), "--cascade", str(stages["cascade"]), "--no-progress"]
    assert main([*args, "--keep-work-dir"]) == 0
    first = pq.read_table(out)
    work = tmp_path / "c.parquet.work" / "cascade"
    # as if the job had stopped during the judge's pass: its output and its work are gone, the first pass's kept
    for p in work.glob("stage2*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    again = pq.read_table(out)
    assert again.equals(first)
    s = json.loads((tmp_path / "c.parquet.meta.json").read_text())["summary"]["stages"]
    assert s[0]["turns_reused"] == 28 and s[0]["turns_scored"] == 0  # KL's pass was not run again
    assert s[1]["turns_scored"] > 0
    assert not (tmp_path / "c.parquet.work").exists()


def test_context_rows_are_history_not_scored(tmp_path, tiny_llama_dir):
    """`score_turn` false: the row is in the later turns' prompts but gets no call and status=skipped."""
    t = pq.read_table(example_path("role")) if str(example_path("role")).endswith(".parquet") else None
    from adherence.data import read_table

    t = read_table(example_path("role"))
    mark = np.arange(t.num_rows) % 2 == 0
    src = tmp_path / "marked.parquet"
    pq.write_table(t.append_column("score_turn", pa.array(mark)), src)
    out, full = tmp_path / "m.parquet", tmp_path / "full.parquet"
    for path, inp in ((out, src), (full, example_path("role"))):
        assert main(["score", str(inp), "-o", str(path), "--no-progress", "--judge-model", str(tiny_llama_dir),
                     "--device", "cpu"]) == 0  # fmt: skip
    got, want = _by_key(out, "status", "score", "error"), _by_key(full, "score")
    marked = dict(zip(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()), mark))
    for key, (status, score, error) in got.items():
        if marked[key]:
            assert status == "ok" and score == pytest.approx(want[key][0], abs=1e-5)
        else:
            assert status == "skipped" and score is None and error is None
    s = json.loads((tmp_path / "m.parquet.meta.json").read_text())["summary"]
    assert s["skipped"] == int((~mark).sum()) and s["judge_usage"]["calls"] == int(mark.sum())
    sess = pq.read_table(tmp_path / "m.sessions.parquet").to_pylist()
    assert sum(r["n_turns"] for r in sess) == int(mark.sum())  # context rows are not a session's turns


def test_an_unscorable_turn_is_an_error_not_an_abstention(tmp_path, stages):
    from adherence.data import read_table

    t = read_table(example_path("role"))
    assistant = t.column("assistant").to_pylist()
    assistant[3] = "   "
    src = tmp_path / "bad.parquet"
    pq.write_table(t.set_column(t.schema.get_field_index("assistant"), "assistant", pa.array(assistant)), src)
    out = tmp_path / "c.parquet"
    rc = main(["score", str(src), "-o", str(out), "--cascade", str(stages["cascade"]), "--no-progress"])
    assert rc == 0
    rows = pq.read_table(out).to_pylist()
    assert rows[3]["status"] == "error" and rows[3]["error"].startswith("stage 2: ")
    assert rows[3]["prediction"] is None and rows[3]["decided_by"] is None


def test_what_a_cascade_cannot_run_is_refused_in_one_line(tmp_path, capsys, stages):
    out = str(tmp_path / "c.parquet")
    base = ["score", str(example_path("role")), "-o", out, "--cascade", str(stages["cascade"])]
    assert main([*base, "--method", "cosine"]) == 2
    assert "--method: with --cascade each stage's scoring options come from the cascade file" in capsys.readouterr().err
    doc = json.loads(stages["cascade"].read_text())
    doc["stages"][1]["options"] = None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_signed(doc)))
    assert main(["score", str(example_path("role")), "-o", out, "--cascade", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "stage 2" in err and "no recorded scoring options" in err and len(err.strip().splitlines()) == 1
    bad.write_text("{}")
    assert main(["score", str(example_path("role")), "-o", out, "--cascade", str(bad)]) == 2
    assert "not a cascade file" in capsys.readouterr().err
    assert not (tmp_path / "c.parquet").exists()


@pytest.mark.slow
def test_a_stage_may_be_a_judge_endpoint(tmp_path, monkeypatch, tiny_yes_no_judge):
    """The second stage is an OpenAI-compatible server: its recorded options (with the API key redacted) run it
    again; the key comes from the environment and is written nowhere."""
    from tests.judges._server import ChatServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with ChatServer(tiny_yes_no_judge) as server:
        kl = _score(tmp_path, "kl", "--method", "kl")
        judge = _score(tmp_path, "judge", "--backend", "openai", "--judge-model", "tiny", "--base-url", server.url,
                       "--api-key", "sk-secret-flag")  # fmt: skip
        cascade = tmp_path / "cascade.json"
        assert (
            main(["cascade", "fit", str(kl), str(judge), "--alpha", "0.3", "--delta", "0.3", "-o", str(cascade)]) == 0
        )
        doc = json.loads(cascade.read_text())
        assert "sk-secret-flag" not in cascade.read_text()
        s = pq.read_table(kl).column("score").to_numpy()
        doc["stages"][0]["threshold"] = float(np.median(np.abs(s - 0.5)))
        doc["stages"][1]["threshold"] = 0.0
        cascade.write_text(json.dumps(_signed(doc)))
        out = tmp_path / "c.parquet"
        assert (
            main(["score", str(example_path("role")), "-o", str(out), "--cascade", str(cascade), "--no-progress"]) == 0
        )
    got = _by_key(out, "decided_by", "stage2_score")
    full = _by_key(judge, "score")
    sent = [k for k, (d, _) in got.items() if d == 2]
    assert sent and all(got[k][1] == pytest.approx(full[k][0], abs=1e-6) for k in sent)
    for text in (out.with_name("c.parquet.meta.json").read_text(), cascade.read_text()):
        assert "sk-secret-flag" not in text and "sk-from-env" not in text


@pytest.mark.slow
def test_a_signal_during_a_later_pass_publishes_nothing_and_resume_goes_on(tmp_path, tiny_yes_no_judge):
    """SIGTERM while the second stage (a judge endpoint held on its first call) runs: exit 143, no output, the one
    line names the kept work dir (the first pass's committed output is the job's work, not its output); --resume
    then reuses the first pass and publishes what an uninterrupted run does."""
    import subprocess
    import sys
    import threading
    import time

    from tests.judges._server import ChatServer

    held, release = threading.Event(), threading.Event()

    def hold(n):
        held.set()
        release.wait(60)  # answered normally once the test lets it go
        return None

    with ChatServer(tiny_yes_no_judge, after_preflight=hold) as server:
        kl = _score(tmp_path, "kl", "--method", "kl")
        release.set()  # the stage's own scoring answers at once
        judge = _score(tmp_path, "judge", "--backend", "openai", "--judge-model", "tiny", "--base-url", server.url)
        cascade = tmp_path / "cascade.json"
        assert (
            main(["cascade", "fit", str(kl), str(judge), "--alpha", "0.3", "--delta", "0.3", "-o", str(cascade)]) == 0
        )
        doc = json.loads(cascade.read_text())
        s = pq.read_table(kl).column("score").to_numpy()
        doc["stages"][0]["threshold"] = float(np.median(np.abs(s - 0.5)))
        doc["stages"][1]["threshold"] = 0.0
        cascade.write_text(json.dumps(_signed(doc)))
        ref = tmp_path / "ref.parquet"
        assert (
            main(["score", str(example_path("role")), "-o", str(ref), "--cascade", str(cascade), "--no-progress"]) == 0
        )
        held.clear()
        release.clear()
        out = tmp_path / "c.parquet"
        cmd = [sys.executable, "-m", "adherence", "score", str(example_path("role")), "-o", str(out), "--cascade",
               str(cascade), "--no-progress"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert held.wait(120), "the second stage never called its judge"
        time.sleep(0.3)
        proc.terminate()
        _, err = proc.communicate(timeout=120)
        release.set()
        assert proc.returncode == 143, err[-2000:]
        assert err.strip().splitlines()[-1].startswith("adherence: terminated; nothing partial was published")
        assert "c.parquet.work" in err and "--resume" in err and not out.exists()
        assert (tmp_path / "c.parquet.work" / "cascade" / "stage1.parquet").exists()
        res = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert pq.read_table(out).equals(pq.read_table(ref))
    stages = json.loads((tmp_path / "c.parquet.meta.json").read_text())["summary"]["stages"]
    assert stages[0]["turns_scored"] == 0 and stages[0]["turns_reused"] == 28

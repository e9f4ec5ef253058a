"""Checkpoints within a shard: what an interrupt or a kill costs is minutes of work, not a shard.

The worker commits a shard's scored conversations about every ``checkpoint_every`` seconds; a later try scores
only what they do not hold. Scores do not depend on where the checkpoints fall.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from adherence.data import write_table
from adherence.engine import Engine, _worker
from adherence.judges import JudgeConfig


def _same(got, want):
    keys = ["conversation_id", "turn_index", "status"]
    assert got.select(keys).equals(want.select(keys))  # same rows, same order
    assert got.column("score").to_pylist() == pytest.approx(want.column("score").to_pylist(), abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["cosine", "kl", "mahalanobis", "llm_judge"])
def test_scores_do_not_depend_on_where_checkpoints_fall(tmp_path, synthetic, method, monkeypatch, tiny_llama_dir):
    turns = synthetic(9)
    kw = {"method": method, "shard_size": 10_000, "n_bootstrap": 0, "progress": False}
    if method == "llm_judge":
        kw["judge"] = JudgeConfig(model=str(tiny_llama_dir), backend_options={"device": "cpu", "progress": False})
    whole = Engine(checkpoint_every=0, **kw).run(turns, tmp_path / "whole.parquet")
    monkeypatch.setattr(_worker, "FIRST_CHECKPOINT_ROWS", 1)
    saved = []
    save = _worker.Checkpoints.save
    monkeypatch.setattr(_worker.Checkpoints, "save", lambda self, t, a, b: (saved.append((a, b)), save(self, t, a, b)))
    # every conversation its own checkpoint
    chunked = Engine(checkpoint_every=1e-9, **kw).run(turns, tmp_path / "chunked.parquet")
    assert saved == [(i, i + 1) for i in range(8)]  # the ninth conversation is the shard's output itself
    assert whole.summary["shards"] == chunked.summary["shards"] == 1
    _same(pq.read_table(tmp_path / "chunked.parquet"), pq.read_table(tmp_path / "whole.parquet"))
    assert not list((tmp_path / "chunked.parquet.work").glob("*"))  # removed with the work dir after success


def _interrupt_after(monkeypatch, k: int) -> list:
    """Ctrl-C as the worker starts its (k+1)-th piece of scoring (the one fault a real run cannot be made to
    produce at a chosen point); returns the row counts of the pieces scored before it."""
    real = _worker.score_turns
    scored: list = []

    def interrupted(table, *a, **kw):
        if len(scored) == k:
            raise KeyboardInterrupt
        scored.append(table.num_rows)
        return real(table, *a, **kw)

    monkeypatch.setattr(_worker, "score_turns", interrupted)
    return scored


@pytest.mark.slow
def test_an_interrupted_shard_resumes_from_its_checkpoints(tmp_path, synthetic, monkeypatch):
    """An interrupt in the third checkpoint of the only shard: the resumed job scores only what the first two
    do not hold, counts them as reused, and its output equals an uninterrupted run's."""
    turns = synthetic(12)
    kw = {"method": "cosine", "shard_size": 10_000, "n_bootstrap": 0, "progress": False}
    reference = Engine(**kw).run(turns, tmp_path / "ref.parquet")
    monkeypatch.setattr(_worker, "FIRST_CHECKPOINT_ROWS", 1)
    real = _worker.score_turns
    scored = _interrupt_after(monkeypatch, 2)
    out = tmp_path / "out.parquet"
    with pytest.raises(KeyboardInterrupt):
        Engine(checkpoint_every=1e-9, **kw).run(turns, out)
    assert not out.exists()
    records = sorted((tmp_path / "out.parquet.work" / "checkpoints").glob("*.json"))
    assert len(records) == 2 and [json.loads(r.read_text())["rows"] for r in records] == scored

    rescored = []
    monkeypatch.setattr(
        _worker, "score_turns", lambda table, *a, **k: (rescored.append(table.num_rows), real(table, *a, **k))[1]
    )
    res = Engine(checkpoint_every=1e-9, resume=True, **kw).run(turns, out)
    assert res.summary["turns_reused"] == sum(scored)
    assert res.summary["turns_scored"] == sum(rescored) == turns.num_rows - sum(scored)
    _same(pq.read_table(out), pq.read_table(tmp_path / "ref.parquet"))
    assert reference.summary["turns"] == res.summary["turns"]


@pytest.mark.slow
def test_a_checkpoint_that_does_not_match_is_scored_again(tmp_path, synthetic, monkeypatch):
    """A checkpoint whose data was changed after it was written is not trusted, nor any after it."""
    turns = synthetic(6)
    kw = {"method": "cosine", "shard_size": 10_000, "n_bootstrap": 0, "progress": False}
    Engine(**kw).run(turns, tmp_path / "ref.parquet")
    monkeypatch.setattr(_worker, "FIRST_CHECKPOINT_ROWS", 1)
    real = _worker.score_turns
    calls = _interrupt_after(monkeypatch, 3)
    out = tmp_path / "out.parquet"
    with pytest.raises(KeyboardInterrupt):
        Engine(checkpoint_every=1e-9, **kw).run(turns, out)
    second = sorted((tmp_path / "out.parquet.work" / "checkpoints").glob("*.parquet"))[1]
    first = sorted((tmp_path / "out.parquet.work" / "checkpoints").glob("*.parquet"))[0]
    second.write_bytes(first.read_bytes())  # a complete, readable Parquet file -- but not the one recorded
    monkeypatch.setattr(_worker, "score_turns", real)
    res = Engine(checkpoint_every=1e-9, resume=True, **kw).run(turns, out)
    assert res.summary["turns_reused"] == calls[0]  # only the first checkpoint was trusted
    _same(pq.read_table(out), pq.read_table(tmp_path / "ref.parquet"))


def _score_cmd(src, out, *extra):
    return [sys.executable, "-m", "adherence", "score", str(src), "-o", str(out), "--method", "cosine",
            "--bootstrap", "0", *extra]  # fmt: skip


@pytest.mark.slow
def test_a_kill_mid_shard_loses_at_most_about_one_checkpoint_interval(tmp_path, synthetic):
    """SIGKILL in the middle of the only shard of a job with --checkpoint-every 1: the work lost (from the last
    checkpoint to the kill) is measured, and the resumed job reuses every checkpoint and equals a whole run."""
    every = 1.0
    # 893 turns, about 2.5x what is scored by the time of the kill (the rate sizes the checkpoints, so a loaded
    # machine's slower rate does not move the kill towards the end)
    turns = synthetic(250)
    src = write_table(turns, tmp_path / "in.parquet")
    Engine(method="cosine", n_bootstrap=0, progress=False).run(turns, tmp_path / "ref.parquet")
    out = tmp_path / "out.parquet"
    proc = subprocess.Popen(
        _score_cmd(src, out, "--no-progress", "--checkpoint-every", str(every)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    folder = tmp_path / "out.parquet.work" / "checkpoints"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and len(list(folder.glob("*.json"))) < 3:
        time.sleep(0.02)
    time.sleep(every * 0.8)  # somewhere between two checkpoints
    assert proc.poll() is None, "the job finished before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    killed_at = time.time()
    proc.wait()
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    lost = killed_at - max(r["written_at"] for r in records)
    committed = sum(r["rows"] for r in records)
    # at most about one interval of work is lost (slack for a loaded machine: the rate that sized the
    # checkpoint can drop while it is scored)
    assert lost <= 2.5 * every, (lost, [r["rows"] for r in records])

    res = subprocess.run(_score_cmd(src, out, "--resume"), check=True, capture_output=True, text=True)
    reused = int(re.search(r"(\d+) reused", res.stdout + res.stderr).group(1))
    assert reused == committed
    _same(pq.read_table(out), pq.read_table(tmp_path / "ref.parquet"))


@pytest.mark.slow
def test_progress_lines_in_a_log_and_models_on_their_own_line(tmp_path, synthetic):
    """Standard error not a terminal (a scheduler's log): plain lines with rows scored within the shard,
    turns/s, ETA and shards, never a carriage-return bar; model loading is a line of its own, before them."""
    turns = synthetic(60)
    src = write_table(turns, tmp_path / "in.parquet")
    res = subprocess.run(
        _score_cmd(src, tmp_path / "o.parquet", "--checkpoint-every", "0.05", "--progress-every", "0.01"),
        capture_output=True,
        text=True,
        check=True,
    )
    err = res.stderr
    assert "\r" not in err
    lines = err.splitlines()
    loading = next(i for i, ln in enumerate(lines) if ln.startswith("loading models (cosine)"))
    progress = [(i, ln) for i, ln in enumerate(lines) if ln.startswith("scoring (cosine): ")]
    assert progress and loading < progress[0][0]
    n = turns.num_rows
    counts = [int(re.match(rf"scoring \(cosine\): (\d+)/{n} turns", ln).group(1)) for _, ln in progress]
    assert any(0 < c < n for c in counts), counts  # rows within the shard, before it finished
    assert counts == sorted(counts) and counts[-1] == n
    assert re.search(r"turns/s, ETA \d+:\d\d", err) and "shards 0/1 done" in err and "shards 1/1 done" in err


@pytest.mark.slow
def test_a_judge_job_in_a_log_shows_the_jobs_progress_and_no_other_bar(tmp_path, synthetic, tiny_llama_dir):
    """The judge's own per-batch bar (and any model's) stays off inside a job: in a log it was a line of carriage
    returns under the job's lines, on a terminal it overwrote the job's bar."""
    src = write_table(synthetic(40), tmp_path / "in.parquet")
    res = subprocess.run(
        [sys.executable, "-m", "adherence", "score", str(src), "-o", str(tmp_path / "j.parquet"), "--judge-model",
         str(tiny_llama_dir), "--bootstrap", "0", "--progress-every", "0.01", "--checkpoint-every", "0.5"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "\r" not in res.stderr and "judging" not in res.stderr, res.stderr[-2000:]
    assert re.search(r"scoring \(llm_judge\): \d+/\d+ turns", res.stderr)


@pytest.mark.slow
def test_the_bundled_judge_loads_without_a_bar_of_its_own(tmp_path):
    """The bundled GGUF judge's de-quantizing bar (a plain tqdm bar of transformers') is off while models load: the
    job's `loading models` / `models ready` lines say it, and a log gets no carriage returns. tqdm is imported
    before the job starts, as it is when an earlier pass (a cascade's first stage) loaded a model. A fresh cache:
    the GGUF file is read (once per machine) and its checkpoint kept there."""
    from adherence.data import example_path, read_turns

    src = write_table(read_turns(example_path("role")).slice(0, 4), tmp_path / "four.jsonl")
    argv = [
        "adherence",
        "score",
        str(src),
        "-o",
        str(tmp_path / "j.parquet"),
        "--bootstrap",
        "0",
        "--judge-model",
        "bundled:SmolLM2-135M-Instruct",
    ]
    code = f"import sys, tqdm.auto; sys.argv = {argv!r}; from adherence.cli.main import console_main; console_main()"
    env = dict(os.environ, ADHERENCE_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "\r" not in res.stderr and "de-quantizing" not in res.stderr, res.stderr[-2000:]
    assert len(list((tmp_path / "cache" / "judges").glob("*/model.safetensors"))) == 1  # read once, kept
    assert re.search(r"models ready in [\d.]+ s", res.stderr)


def test_progress_lines_keep_their_cadence_between_reports():
    """A line every `every` seconds even while no worker reports (reports come with checkpoints: the first of a
    slow judge can take minutes, and the log said nothing meanwhile)."""
    import io
    import time

    from adherence.engine._messages import ShardProgress
    from adherence.engine._progress import JobProgress

    stream = io.StringIO()
    progress = JobProgress("scoring (x)", total=10, shards=1, every=0.1, stream=stream)
    time.sleep(0.75)  # no report at all
    silent = stream.getvalue().splitlines()
    progress.within(ShardProgress(0, 4))
    progress.shard_done(0, 10)
    progress.close()
    assert 5 <= len(silent) <= 10, silent  # the first line, then about one every 0.1 s
    assert all(ln.startswith("scoring (x): 0/10 turns") for ln in silent)
    assert stream.getvalue().splitlines()[-1].startswith("scoring (x): 10/10 turns (100.0%)")
    n = len(stream.getvalue())
    time.sleep(0.3)
    assert len(stream.getvalue()) == n  # closed: nothing more


@pytest.mark.slow
def test_progress_counts_turns_scored_between_checkpoints(tmp_path, synthetic, monkeypatch):
    """The issue's repro: the bar sat still for 86 s because workers reported only with checkpoints. Now a shard is
    scored in parts of about PART_SECONDS, each reported; checkpoints stay every --checkpoint-every (the first part
    is one at once), holding every part scored since the one before."""
    turns = synthetic(8)
    kw = {"method": "cosine", "shard_size": 10_000, "n_bootstrap": 0, "progress": False}
    monkeypatch.setattr(_worker, "FIRST_CHECKPOINT_ROWS", 1)
    monkeypatch.setattr(_worker, "PART_SECONDS", 1e-9)  # each conversation a part
    reports, saved = [], []
    report, save = _worker.ShardWorker._report, _worker.Checkpoints.save
    monkeypatch.setattr(_worker.ShardWorker, "_report", lambda self, s, rows, reused: (reports.append(rows),
                                                                                       report(self, s, rows, reused)))  # fmt: skip
    monkeypatch.setattr(_worker.Checkpoints, "save", lambda self, t, a, b: (saved.append((a, b, t.num_rows)),
                                                                            save(self, t, a, b)))  # fmt: skip
    res = Engine(checkpoint_every=3600, **kw).run(turns, tmp_path / "out.parquet")
    sizes = turns.group_by("conversation_id").aggregate([("turn_index", "count")])
    assert len(reports) == 1 + 8 and reports[0] == 0 and reports[-1] == turns.num_rows  # the start, each part
    assert reports == sorted(reports) and len(set(reports)) == 9
    assert [(a, b) for a, b, _ in saved] == [(0, 1)]  # the first part at once; no other within the hour
    assert res.summary["turns"] == turns.num_rows == sum(sizes.column("turn_index_count").to_pylist())


def test_a_resumed_bar_counts_only_new_work_in_its_rate():
    """Turns reused from an earlier run's checkpoints move the bar but never its rate or ETA (the issue's repro:
    '15732/30003 [00:26<00:34, 416 turn/s]' with 7 minutes left)."""
    import io

    from adherence.engine._messages import ShardProgress
    from adherence.engine._progress import JobProgress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    progress = JobProgress("scoring (x)", total=30_000, shards=2, stream=Tty())
    bar = progress._bar
    progress.within(ShardProgress(0, 15_000, reused=15_000))  # a resumed shard: all of it from checkpoints
    assert bar.n == 15_000 and progress.scored == 0 and progress.reused == 15_000
    d = bar.format_dict
    rate = d["rate"] if d["rate"] is not None else (d["n"] - d["initial"]) / max(d["elapsed"], 1e-9)
    assert rate == 0  # nothing scored by this run yet
    time.sleep(0.05)
    progress.within(ShardProgress(1, 100))
    d = bar.format_dict
    assert d["n"] - d["initial"] == 100  # the rate's numerator: this run's turns only
    progress.close()

"""Work dirs and outputs on object storage, against a real S3-compatible server on 127.0.0.1 (moto in
server mode): the same results as a local run, atomic publish, ownership, leases, a kill and a resume. (Ray
workers on S3: test_ray.py, with the other Ray tests.)"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from adherence.data import DataError, write_table
from adherence.data._storage import Remote
from adherence.engine import Engine, EngineError
from adherence.engine._commit import RemoteLease

pytest.importorskip("moto")

pytestmark = pytest.mark.slow  # a moto S3 server per module, jobs against it

from ._s3 import read_remote, same_scores  # noqa: E402


def test_outputs_and_work_dir_on_s3_equal_a_local_run(s3, local_reference):
    src, ref, ref_sessions = local_reference
    out = f"{s3}/t1/scores.parquet"
    res = Engine(method="cosine", shard_size=10, progress=False, n_bootstrap=0).run(src, out)
    assert res.output == out and res.sessions_output == f"{s3}/t1/scores.sessions.parquet"
    same_scores(read_remote(out), ref)
    assert read_remote(res.sessions_output).column("score").to_pylist() == pytest.approx(
        ref_sessions.column("score").to_pylist()
    )
    meta = json.loads(Remote(out + ".meta.json").read_bytes())
    assert meta["published"] is True and meta["engine"]["work_dir"] == out + ".work"
    assert meta["outputs"]["digests"][out] == Remote(out).digest()  # the commit record names the data it commits
    assert Remote(f"{s3}/t1").listdir() == [
        "scores.parquet",
        "scores.parquet.meta.json",
        "scores.sessions.parquet",
        "scores.sessions.parquet.meta.json",
    ]
    # A second run replaces what the first one wrote (its metadata says it is ours).
    Engine(method="cosine", shard_size=10, progress=False, n_bootstrap=0).run(src, out)
    same_scores(read_remote(out), ref)


def test_local_output_with_a_work_dir_on_s3_and_kept(s3, local_reference, tmp_path):
    src, ref, _ = local_reference
    work = f"{s3}/t2/work"
    res = Engine(
        method="knn",
        reference_pool="dataset",
        shard_size=10,
        progress=False,
        n_bootstrap=0,
        work_dir=work,
        keep_work_dir=True,
    ).run(src, tmp_path / "knn.parquet")
    assert res.summary["shards"] >= 2
    names = Remote(work).walk()
    assert "job.json" in names and "references.json" in names  # the job-wide pool the workers read from S3
    assert sum(n.endswith(".done.json") for n in names) == res.summary["shards"]
    assert "lock" not in names
    assert ".adherence-work.json" in names  # the marker that lets a later run (or --resume) use and clear it
    local = Engine(method="knn", reference_pool="dataset", shard_size=10, progress=False, n_bootstrap=0).run(
        src, tmp_path / "knn-local.parquet"
    )
    same_scores(pq.read_table(res.output), pq.read_table(local.output))


def test_foreign_objects_are_never_overwritten(s3, local_reference):
    src, _, _ = local_reference
    foreign = Remote(f"{s3}/t3/scores.parquet")
    foreign.write_bytes(b"someone else's data")
    with pytest.raises(DataError, match=r"was not written by adherence.*refusing to overwrite"):
        Engine(method="cosine", progress=False).run(src, foreign.uri)
    assert foreign.read_bytes() == b"someone else's data"

    work = Remote(f"{s3}/t3/work")
    (work / "notes.txt").write_bytes(b"keep me")
    with pytest.raises(DataError, match=r"holds objects adherence did not write \(notes.txt"):
        Engine(method="cosine", progress=False, work_dir=work.uri).run(src, f"{s3}/t3/other.parquet")
    assert (work / "notes.txt").read_bytes() == b"keep me"
    assert not Remote(f"{s3}/t3/other.parquet").exists()

    # Names prove nothing: a prefix holding only names the engine uses, but no marker of ours, is not cleared.
    lookalike = Remote(f"{s3}/t3/lookalike")
    (lookalike / "job.json").write_bytes(b'{"theirs": true}')
    (lookalike / "out" / "shard-00000.parquet").write_bytes(b"their shard")
    with pytest.raises(DataError, match=r"holds objects adherence did not write .*no \.adherence-work\.json of ours"):
        Engine(method="cosine", progress=False, work_dir=lookalike.uri).run(src, f"{s3}/t3/other.parquet")
    assert (lookalike / "job.json").read_bytes() == b'{"theirs": true}'
    assert (lookalike / "out" / "shard-00000.parquet").read_bytes() == b"their shard"
    assert not Remote(f"{s3}/t3/other.parquet").exists()

    with pytest.raises(DataError, match="must be one file"):
        Engine(method="cosine", progress=False).run(src, f"{s3}/t3/dataset")


def test_a_live_lease_refuses_a_second_job_and_a_released_one_does_not(s3, local_reference):
    src, ref, _ = local_reference
    out = f"{s3}/t4/scores.parquet"
    lease = RemoteLease(Remote(out + ".work") / "lock", "the work directory").acquire()
    try:
        with pytest.raises(EngineError, match=rf"in use by another adherence job \(host .*pid {os.getpid()}"):
            Engine(method="cosine", progress=False).run(src, out)
        assert not Remote(out).exists()
    finally:
        lease.release()
    Engine(method="cosine", progress=False, n_bootstrap=0, shard_size=10).run(src, out)
    same_scores(read_remote(out), ref)


def test_an_unpublished_output_left_by_a_kill_is_ours_to_replace(s3, local_reference):
    src, ref, _ = local_reference
    out = Remote(f"{s3}/t5/scores.parquet")
    # What a kill between the metadata's first write and the data upload leaves behind.
    out.with_name("scores.parquet.meta.json").write_bytes(
        json.dumps({"producer": "adherence", "published": False}).encode()
    )
    out.write_bytes(b"PAR1 half an upload never shows, but an older object may")
    Engine(method="cosine", progress=False, n_bootstrap=0, shard_size=10).run(src, out.uri)
    same_scores(read_remote(out.uri), ref)
    assert json.loads(out.with_name("scores.parquet.meta.json").read_bytes())["published"] is True


def _cmd(src, out, *extra):
    return [
        sys.executable,
        "-m",
        "adherence",
        "score",
        str(src),
        "-o",
        out,
        "--method",
        "cosine",
        "--shard-size",
        "12",
        "--no-progress",
        "--bootstrap",
        "0",
        *extra,
    ]


@pytest.mark.slow
def test_sigkill_then_resume_on_s3(s3, tmp_path, synthetic):
    turns = synthetic(40)
    src = write_table(turns, tmp_path / "in.parquet")
    # the same job run whole on local disk, in this process (no interpreter to start)
    Engine(method="cosine", shard_size=12, progress=False, n_bootstrap=0).run(turns, tmp_path / "ref.parquet")
    want = pq.read_table(tmp_path / "ref.parquet")

    out = f"{s3}/t6/scores.parquet"
    done = Remote(out + ".work") / "out"
    proc = subprocess.Popen(_cmd(src, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600  # generous: a loaded machine is slow, a hang still ends
    while time.time() < deadline and proc.poll() is None:
        if sum(n.endswith(".done.json") for n in done.listdir()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the job finished before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = sum(n.endswith(".done.json") for n in done.listdir())
    assert finished >= 2 and not Remote(out).exists()
    assert (Remote(out + ".work") / "lock").exists()  # the killed job's lease: its pid is gone, so it is taken over

    res = subprocess.run(_cmd(src, out, "--resume"), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    resumed = int(re.search(r"(\d+) resumed", res.stdout + res.stderr).group(1))
    assert resumed >= finished  # shards finished before the kill were not scored again
    got = read_remote(out)
    keys = list(zip(got.column("conversation_id").to_pylist(), got.column("turn_index").to_pylist()))
    assert len(keys) == len(set(keys)) == turns.num_rows  # every turn exactly once
    same_scores(got, want)
    assert not Remote(out + ".work").walk()  # the work dir's objects are gone after success


# ---------------------------------------------------------------------------- what the commit protocol guarantees


def _engine(**kw):
    return Engine(method="cosine", shard_size=10, progress=False, n_bootstrap=0, **kw)


def test_a_foreign_object_written_at_the_output_key_while_the_job_runs_is_never_overwritten(
    s3, local_reference, monkeypatch
):
    from adherence.engine import _engine

    src, _, _ = local_reference
    out = Remote(f"{s3}/c1/scores.parquet")
    original = _engine.Engine._finalize

    def someone_writes_first(self, *a, **k):  # another writer puts an object at the key while the shards run
        out.write_bytes(b"someone else's data")
        return original(self, *a, **k)

    monkeypatch.setattr(_engine.Engine, "_finalize", someone_writes_first)
    with pytest.raises(EngineError, match="changed while the job ran"):
        _engine.Engine(method="cosine", shard_size=10, progress=False, n_bootstrap=0).run(src, out.uri)
    assert out.read_bytes() == b"someone else's data"
    assert not out.with_name("scores.parquet.meta.json").exists()
    assert not Remote(f"{s3}/c1/scores.sessions.parquet").exists()


def test_a_signal_during_the_upload_is_an_interrupted_job_and_resume_finishes_the_publish(
    s3, local_reference, monkeypatch, capsys
):
    from adherence.cli.main import main

    src, ref, _ = local_reference
    out = Remote(f"{s3}/c2/scores.parquet")
    real = Remote.upload

    def interrupted(self, local):  # SIGINT arrives while the output's data goes up
        if self.name == "scores.parquet":
            raise KeyboardInterrupt()
        real(self, local)

    monkeypatch.setattr(Remote, "upload", interrupted)
    argv = ["score", str(src), "-o", out.uri, "--method", "cosine", "--shard-size", "10", "--no-progress"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "nothing partial was published" in err and "complete" not in err
    meta = json.loads(out.with_name("scores.parquet.meta.json").read_bytes())
    assert meta["published"] is False  # the commit record says the data is not (yet) the output
    assert not Remote(f"{s3}/c2/scores.sessions.parquet").exists()

    monkeypatch.setattr(Remote, "upload", real)
    assert main(argv + ["--resume"]) == 0
    meta = json.loads(out.with_name("scores.parquet.meta.json").read_bytes())
    assert meta["published"] is True and meta["summary"]["shards_resumed"] == meta["summary"]["shards"]
    assert json.loads(Remote(f"{s3}/c2/scores.sessions.parquet.meta.json").read_bytes())["published"] is True
    same_scores(read_remote(out.uri), ref)


def test_a_job_that_lost_its_lease_publishes_nothing(s3, local_reference, monkeypatch, capsys):
    from adherence.cli.main import main
    from adherence.engine import _engine

    src, _, _ = local_reference
    out = Remote(f"{s3}/c3/scores.parquet")
    original = _engine.Engine._finalize

    def stopped_past_the_lease(self, *a, **k):
        # What another job does when this one was stopped (SIGSTOP) longer than the lease's ttl: it takes
        # the lapsed lease over by writing its own record.
        lock = out.with_name(".scores.parquet.lock")
        taken = {"token": "f" * 32, "host": "other-host", "pid": 4242, "heartbeat": time.time(), "ttl": 60.0}
        lock.write_bytes(json.dumps(taken).encode())
        return original(self, *a, **k)

    monkeypatch.setattr(_engine.Engine, "_finalize", stopped_past_the_lease)
    argv = ["score", str(src), "-o", out.uri, "--method", "cosine", "--shard-size", "10", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "lost the lease on the output" in err and "pid 4242" in err and len(err.splitlines()) == 1
    assert not out.exists() and not out.with_name("scores.parquet.meta.json").exists()
    # The lease is the other job's: never released (deleted) by the job that lost it.
    assert json.loads(out.with_name(".scores.parquet.lock").read_bytes())["pid"] == 4242


def test_a_busy_output_is_named_by_its_object(s3, local_reference):
    src, _, _ = local_reference
    out = f"{s3}/c4/scores.parquet"
    lease = RemoteLease(Remote(f"{s3}/c4/.scores.parquet.lock"), "the output", subject=out).acquire()
    try:
        with pytest.raises(EngineError, match=rf"^the output {re.escape(out)} is in use by another adherence job") as e:
            _engine().run(src, out)
        assert "output output" not in str(e.value)
    finally:
        lease.release()


def test_staging_left_by_a_killed_job_is_removed_and_a_job_leaves_none(s3, local_reference, tmp_path):
    import tempfile

    src, _, _ = local_reference
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    left = Path(tempfile.gettempdir()) / f"adherence-staging-{pid}-abc123"
    (left / "work" / "shards").mkdir(parents=True)
    (left / "work" / "shards" / "input-00000.arrow").write_bytes(b"a killed job's shard")
    someone = Path(tempfile.gettempdir()) / f"adherence-staging-{pid}-theirs"
    someone.mkdir()
    (someone / "notes.txt").write_text("not a job's staging")  # named like one, holding something else: kept
    try:
        _engine().run(src, f"{s3}/c5/scores.parquet")
        assert not left.exists() and (someone / "notes.txt").exists()
        assert not list(Path(tempfile.gettempdir()).glob(f"adherence-staging-{os.getpid()}-*"))
    finally:
        shutil.rmtree(left, ignore_errors=True)
        shutil.rmtree(someone, ignore_errors=True)


def test_a_job_that_fails_early_leaves_no_trace_in_an_object_storage_work_dir(s3, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"conversation_id": "a", "turn_index": 0, "role": "r", "assistant": "x"})
        + "\n"
        + json.dumps({"conversation_id": "a", "turn_index": "zero", "role": "r", "assistant": "y"})
        + "\n"
    )
    work = Remote(f"{s3}/c6/work")
    with pytest.raises(DataError, match="turn_index"):
        Engine(method="kl", progress=False, work_dir=work.uri).run(bad, tmp_path / "o.parquet")
    assert work.walk() == []  # as on a local disk: nothing worth resuming, so nothing left behind

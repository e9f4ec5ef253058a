"""A job killed with SIGKILL mid-run and restarted ends with every input turn exactly once and the same scores."""

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from adherence.data import write_table
from adherence.engine import Engine


def _cmd(src, out, *extra):
    return [
        sys.executable,
        "-m",
        "adherence",
        "score",
        str(src),
        "-o",
        str(out),
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
def test_sigkill_then_resume(tmp_path, synthetic):
    turns = synthetic(40)
    src = write_table(turns, tmp_path / "in.parquet")
    reference = tmp_path / "ref.parquet"  # the same job run whole, in this process (no interpreter to start)
    Engine(method="cosine", shard_size=12, progress=False, n_bootstrap=0).run(turns, reference)

    out = tmp_path / "out.parquet"
    proc = subprocess.Popen(_cmd(src, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done_dir = tmp_path / "out.parquet.work" / "out"
    deadline = time.time() + 600  # generous: a loaded machine is slow, a hang still ends
    while time.time() < deadline and proc.poll() is None:
        if done_dir.exists() and len(list(done_dir.glob("*.done.json"))) >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the job finished before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = len(list(done_dir.glob("*.done.json")))
    assert not out.exists() and 2 <= finished

    res = subprocess.run(_cmd(src, out, "--resume"), check=True, capture_output=True, text=True)
    import re

    resumed = int(re.search(r"(\d+) resumed", res.stdout).group(1))
    assert resumed >= finished  # finished shards were not scored again
    got, want = pq.read_table(out), pq.read_table(reference)
    keys = list(zip(got.column("conversation_id").to_pylist(), got.column("turn_index").to_pylist()))
    assert len(keys) == len(set(keys)) == turns.num_rows  # every turn exactly once
    assert got.select(["conversation_id", "turn_index", "status"]).equals(
        want.select(["conversation_id", "turn_index", "status"])
    )
    assert got.column("score").to_pylist() == pytest.approx(want.column("score").to_pylist(), abs=1e-6)

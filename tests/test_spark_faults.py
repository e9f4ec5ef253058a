"""What the Spark path survives: a Python worker killed (SIGKILL) in the middle of scoring is retried by
Spark (``local[N,F]``: up to F attempts per task) and the output still holds every row once, with the
engine's scores."""

import os
import signal
import sys
import threading
import time

import pytest

import adherence
from tests._platforms import spark_session

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _scoring_workers(daemon_pids: set) -> list:
    """PySpark's forked Python workers (children of its ``pyspark.daemon``), each running a task."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "pyspark.daemon" in cmd:
            daemon_pids.add(proc.pid)
    for pid in daemon_pids:
        try:
            found.extend(psutil.Process(pid).children())
        except psutil.NoSuchProcess:
            pass
    return found


def test_a_python_worker_killed_mid_task_is_retried_and_no_row_is_lost(tmp_path):
    pytest.importorskip("pyspark")
    pytest.importorskip("psutil")
    from adherence.spark import score_dataframe

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))
    from conftest import synthetic_turns

    turns = synthetic_turns(40)
    want = adherence.score(turns, method="cosine", n_bootstrap=0)
    spark = spark_session("local[2,4]", "adherence-faults", 2)
    killed: list = []

    def kill_one_mid_task():
        daemons: set = set()
        deadline = time.monotonic() + 600  # generous: a loaded machine is slow, a hang still ends
        while time.monotonic() < deadline:
            workers = _scoring_workers(daemons)
            if workers:
                time.sleep(1.0)  # inside the task: loading the encoder or scoring
                try:
                    workers[0].send_signal(signal.SIGKILL)
                    killed.append(workers[0].pid)
                except Exception:  # noqa: BLE001 - it finished first; try the next one
                    continue
                return
            time.sleep(0.05)

    try:
        killer = threading.Thread(target=kill_one_mid_task, daemon=True)
        killer.start()
        sc = spark.sparkContext
        sc.setJobGroup("scoring", "scoring under a fault")
        out = score_dataframe(
            spark.createDataFrame(turns.to_pandas()), method="cosine", chunk_rows=16, num_partitions=2
        )
        got = out.toPandas()
        killer.join()
        tracker = sc.statusTracker()
        stages = [s for j in tracker.getJobIdsForGroup("scoring") for s in (tracker.getJobInfo(j).stageIds or [])]
        failed_tasks = sum(info.numFailedTasks for info in map(tracker.getStageInfo, stages) if info is not None)
    finally:
        spark.stop()
    assert killed, "no Python worker was seen running a task"
    assert failed_tasks >= 1  # the kill hit a running task, and Spark ran it again
    assert len(got) == turns.num_rows
    keys = list(zip(got["conversation_id"], got["turn_index"]))
    assert len(set(keys)) == len(keys)  # nothing twice
    ref = dict(
        zip(
            zip(want.column("conversation_id").to_pylist(), want.column("turn_index").to_pylist()),
            want.column("score").to_pylist(),
        )
    )
    assert set(keys) == set(ref)  # nothing lost
    for k, score in zip(keys, got["score"]):
        assert score == pytest.approx(ref[k], abs=1e-6)

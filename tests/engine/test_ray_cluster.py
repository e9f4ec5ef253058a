"""The Ray executor on real multi-node clusters on 127.0.0.1 (``ray.cluster_utils.Cluster``): a node lost
mid-run, every node lost then ``--resume``, more workers than CPUs, relative paths, a work dir one node
cannot see (a node in its own mount namespace), fake GPUs that CUDA cannot use."""

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

from ray._private import ray_constants  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from adherence.engine import Engine, EngineError, EngineOptions, RayExecutor  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

LOOPBACK = "127.0.0.1"  # every node and every connection stays on this machine
# Lost nodes are noticed within seconds, not the default half minute.
FAST_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_failure_threshold": 3}


@pytest.fixture
def cluster(monkeypatch):
    made = []

    def make(head_cpus, *worker_cpus, head_gpus=0):
        c = Cluster(
            initialize_head=True,
            connect=False,
            head_node_args={
                "num_cpus": head_cpus,
                "num_gpus": head_gpus,
                "include_dashboard": False,
                "node_ip_address": LOOPBACK,
                "_system_config": FAST_HEALTH,
            },
        )
        made.append(c)
        # ray.init(address="127.0.0.1:...") would swap in the machine's address: connect on loopback
        with monkeypatch.context() as m:
            m.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
            ray.init(address=c.address, log_to_driver=False)
        nodes = [
            c.add_node(**({"num_cpus": n} if isinstance(n, (int, float)) else n), node_ip_address=LOOPBACK)
            for n in worker_cpus
        ]
        c.wait_for_nodes()
        return c, nodes

    yield make
    ray.shutdown()
    for c in made:
        c.shutdown()


def _local(turns, tmp_path, method="kl", **kw):
    Engine(method=method, progress=False, n_bootstrap=20, **kw).run(turns, tmp_path / "local.parquet")
    return pq.read_table(tmp_path / "local.parquet")


def _kill_when_a_shard_is_done(cluster, node, work: Path):
    """Kill ``node`` (no goodbye) as soon as the first shard's result is on disk: mid-run."""

    def watch():
        deadline = time.monotonic() + 600  # generous: a loaded machine is slow, a hang still ends
        while time.monotonic() < deadline and not list((work / "out").glob("*.done.json")):
            time.sleep(0.05)
        cluster.remove_node(node, allow_graceful=False)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


@pytest.fixture(scope="module")
def long_job(synthetic, tmp_path_factory):
    """Cosine over the turns of 60 conversations in shards of 40: each shard is a second or so of encoder work on
    two busy cores, so that a job runs long enough to lose a node in it. The turns and their local run's output,
    made once for the module's fault tests (before any of its clusters starts)."""
    turns = synthetic(60)
    return turns, _local(turns, tmp_path_factory.mktemp("local"), "cosine", shard_size=40)


def test_a_node_lost_mid_run_moves_its_shard_and_the_output_equals_a_local_run(tmp_path, long_job, cluster):
    turns, want = long_job
    c, (worker,) = cluster(1, 1)
    work = tmp_path / "w"
    killer = _kill_when_a_shard_is_done(c, worker, work)
    start = time.perf_counter()
    # stall_timeout: long enough that a loaded machine's slow pings never cost the surviving worker
    res = Engine(
        method="cosine",
        progress=False,
        n_bootstrap=20,
        shard_size=40,
        executor="ray",
        num_workers=2,
        stall_timeout=20,
        work_dir=work,
    ).run(turns, tmp_path / "r.parquet")
    killer.join()
    assert pq.read_table(tmp_path / "r.parquet").equals(want)  # no row lost or duplicated
    s = res.summary
    # the lost node's shard went to the other worker; its actor could not be placed again (no free CPU)
    assert s["retried_shards"] >= 1 and s["failed_shards"] == [] and s["workers_lost"] <= 1, s
    assert time.perf_counter() - start < 450


def test_every_node_lost_fails_in_bounded_time_naming_the_resources_then_resume_finishes(tmp_path, long_job, cluster):
    turns, want = long_job
    c, (worker,) = cluster(0, 2)
    work = tmp_path / "w"
    killer = _kill_when_a_shard_is_done(c, worker, work)
    start = time.perf_counter()
    kw = dict(
        method="cosine",
        progress=False,
        n_bootstrap=20,
        shard_size=40,
        executor="ray",
        num_workers=2,
        stall_timeout=6,
        work_dir=work,
    )
    with pytest.raises(
        EngineError,
        match=r"no Ray worker could run for 6 s \(each worker needs 1 CPU; .*"
        r"rerun with --resume",
    ):
        Engine(**kw).run(turns, tmp_path / "r.parquet")
    killer.join()
    assert time.perf_counter() - start < 300
    assert not (tmp_path / "r.parquet").exists() and (work / "job.json").exists()  # nothing published, work kept
    done_before = len(list((work / "out").glob("*.done.json")))
    assert done_before >= 1
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    # the resume's workers start on the new node while other work may load the machine: a stall there is not
    # what this step checks (the timeout is cosmetic, so every finished shard is still reused)
    res = Engine(resume=True, **{**kw, "stall_timeout": 120}).run(turns, tmp_path / "r.parquet")
    assert pq.read_table(tmp_path / "r.parquet").equals(want)
    assert res.summary["shards_resumed"] == done_before


def test_more_workers_than_cpus_run_as_fewer_and_relative_paths_are_absolute_for_workers(
    tmp_path, synthetic, cluster, monkeypatch
):
    """Two 1-CPU nodes: six workers asked for run as two, with a warning; then, from another directory than the
    one the nodes started in, relative output and work-dir paths are made absolute for the workers."""
    turns = synthetic(8)
    want = _local(turns, tmp_path, shard_size=5)
    cluster(1, 1)
    with pytest.warns(UserWarning, match=r"6 Ray workers x 1 CPU do not fit the cluster's 2 CPUs; running 2"):
        res = Engine(method="kl", progress=False, n_bootstrap=20, shard_size=5, executor="ray", num_workers=6).run(
            turns, tmp_path / "r.parquet"
        )
    assert pq.read_table(tmp_path / "r.parquet").equals(want)
    assert len({(w["host"], w["pid"]) for w in res.summary["workers"]}) <= 2

    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the workers were started in another directory
    Engine(
        method="kl", progress=False, n_bootstrap=20, shard_size=5, executor="ray", num_workers=2, work_dir="rel/work"
    ).run(turns, "rel/r.parquet")
    assert pq.read_table(elsewhere / "rel" / "r.parquet").equals(want)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_work_dir_one_node_cannot_see_is_refused_before_any_work(tmp_path, synthetic, cluster):
    private = tmp_path / "private"
    private.mkdir()
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {private}"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"mount namespaces are not available here: {probe.stderr.decode().strip()}")
    c, _ = cluster(1)
    helper = Path(__file__).with_name("_ray_node.py")
    # A node whose view of `private` is its own empty tmpfs, as a node without the shared mount would have.
    node = subprocess.Popen(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {private} && exec {sys.executable} {helper} {c.address} 1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while sum(n["Alive"] for n in ray.nodes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert sum(n["Alive"] for n in ray.nodes()) == 2
        with pytest.raises(
            ValueError,
            match=r"the work dir .*private/w cannot be read from Ray node\(s\) 127\.0\.0\.1 "
            r".*it must be on storage every node reaches",
        ):
            Engine(method="kl", progress=False, executor="ray", num_workers=1, work_dir=private / "w").run(
                synthetic(2), tmp_path / "r.parquet"
            )
        assert not (tmp_path / "r.parquet").exists()
        # the same job with the work dir where both nodes see it runs
        Engine(method="kl", progress=False, n_bootstrap=20, executor="ray", num_workers=2, work_dir=tmp_path / "w").run(
            synthetic(2), tmp_path / "r.parquet"
        )
        assert pq.read_table(tmp_path / "r.parquet").num_rows == synthetic(2).num_rows
    finally:
        node.terminate()
        node.wait(30)


def test_gpu_workers_default_to_one_per_gpu_and_stop_at_once_when_cuda_cannot_see_it(tmp_path, synthetic, cluster):
    cluster(4, head_gpus=2)  # a node that advertises two GPUs CUDA cannot use (the CPU build of torch)
    assert RayExecutor(EngineOptions(executor="ray", gpus_per_worker=1)).num_workers == 2
    assert RayExecutor(EngineOptions(executor="ray", gpus_per_worker=0.5)).num_workers == 4
    start = time.perf_counter()
    with pytest.raises(
        EngineError,
        match=r"^worker on .* was given GPU \[\d\] but CUDA sees none .*no shard was "
        r"scored there$",
    ):
        Engine(method="kl", progress=False, executor="ray", gpus_per_worker=1, max_retries=3).run(
            synthetic(2), tmp_path / "g.parquet"
        )
    assert time.perf_counter() - start < 240  # no retries
    assert not (tmp_path / "g.parquet").exists()


def test_ray_data_survives_a_node_lost_mid_run(long_job, cluster):
    """Ray Data's own fault tolerance: the lost node's scoring actor is restarted and its task retried; every
    row comes back once, with the engine's scores."""
    import pyarrow as pa
    import ray.data

    from adherence.ray_data import score_dataset

    turns, want = long_job
    c, (worker,) = cluster(2, 2)
    ds = score_dataset(ray.data.from_arrow(turns), method="cosine", concurrency=2, num_cpus=1, rows_per_call=40)
    batches, start = [], time.perf_counter()
    for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        if not batches:
            c.remove_node(worker, allow_graceful=False)  # mid-run: after the first scored batch
        batches.append(batch)
    got = pa.concat_tables(batches, promote_options="permissive")
    assert time.perf_counter() - start < 450

    def by_key(t):
        return dict(
            zip(
                zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()),
                zip(t.column("status").to_pylist(), t.column("score").to_pylist()),
            )
        )

    a, b = by_key(got), by_key(want)
    assert got.num_rows == turns.num_rows and a.keys() == b.keys()  # nothing lost, nothing twice
    for k, (status, score) in b.items():
        assert a[k][0] == status and a[k][1] == pytest.approx(score, abs=1e-6)
    assert len(batches) > 1 and sum(n["Alive"] for n in ray.nodes()) == 1  # the rest came after the loss


def _vllm_judge_config():
    from adherence.judges import JudgeConfig
    from adherence.role import RoleConfig

    return RoleConfig(method="llm_judge", judge=JudgeConfig(model="/models/judge-70b", backend="vllm"))


def test_tensor_parallel_replicas_are_placement_groups_whose_every_gpu_is_checked(tmp_path, synthetic, cluster):
    """--judge-tensor-parallel 2 on a node advertising 4 GPUs that CUDA cannot use: two replicas, each one
    placement group of 2 GPU bundles on one node; each replica probes every GPU of its group before any
    shard, so the job stops at once in one line (the model is never loaded)."""
    from ray.util import placement_group_table

    cluster(2, head_gpus=4)
    config = _vllm_judge_config()
    ex = RayExecutor(EngineOptions(executor="ray", tensor_parallel=2))
    try:
        assert ex.num_workers == 2 and ex.gpus_per_worker == 2  # one replica per 2 GPUs of the cluster
        ex.start(config)
        groups = [g for g in placement_group_table().values() if g["state"] != "REMOVED"]
        assert len(groups) == 2
        for g in groups:
            assert g["strategy"] == "STRICT_PACK"
            assert [b.get("GPU") for b in g["bundles"].values()] == [1.0, 1.0]
        (ref,) = list(ex._prepares)[:1]
        with pytest.raises(Exception, match=r"GPU bundle \d of 2\): worker on node .* CUDA sees none"):
            ray.get(ref, timeout=120)
    finally:
        ex.close()
    assert not [g for g in placement_group_table().values() if g["state"] != "REMOVED"]  # groups given back

    turns = synthetic(2)
    start = time.perf_counter()
    with pytest.raises(
        EngineError,
        match=r"^tensor-parallel replica \(placement group \w+, GPU bundle \d of 2\): "
        r"worker on node .* was given GPU \[\d\] but CUDA sees none",
    ):
        Engine(config=config, executor="ray", tensor_parallel=2, progress=False).run(turns, tmp_path / "r.parquet")
    assert time.perf_counter() - start < 300 and not (tmp_path / "r.parquet").exists()


def test_a_tensor_parallel_replica_that_cannot_be_placed_fails_naming_it(tmp_path, synthetic, cluster):
    """Two nodes with one GPU each hold 2 GPUs, but no node holds a 2-GPU replica: the job fails after
    --stall-timeout in one line, instead of waiting forever on a placement group."""
    cluster(1, {"num_cpus": 1, "num_gpus": 1}, {"num_cpus": 1, "num_gpus": 1})
    start = time.perf_counter()
    with pytest.raises(
        EngineError,
        match=r"no Ray worker could run for 5 s \(each worker needs 1 CPU \+ 2 GPU in "
        r"one placement group of 2 GPUs on a single node; the cluster has",
    ):
        Engine(config=_vllm_judge_config(), executor="ray", tensor_parallel=2, stall_timeout=5, progress=False).run(
            synthetic(2), tmp_path / "r.parquet"
        )
    assert time.perf_counter() - start < 240

import pyarrow.parquet as pq
import pytest

pytest.importorskip("ray")

from adherence.data import example_path  # noqa: E402
from adherence.engine import Engine, EngineError  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


@pytest.mark.ray
def test_ray_equals_local(tmp_path, synthetic, ray_cluster):
    turns = synthetic(6)
    local = Engine(method="kl", shard_size=7, progress=False, n_bootstrap=50).run(turns, tmp_path / "l.parquet")
    remote = Engine(method="kl", shard_size=7, progress=False, n_bootstrap=50, executor="ray", num_workers=2).run(
        turns, tmp_path / "r.parquet"
    )
    a, b = pq.read_table(tmp_path / "l.parquet"), pq.read_table(tmp_path / "r.parquet")
    assert a.equals(b)  # same rows, same order, same scores
    assert pq.read_table(local.sessions_output).equals(pq.read_table(remote.sessions_output))
    assert remote.summary["executor"] == "ray" and remote.summary["shards"] == local.summary["shards"]


@pytest.mark.ray
def test_ray_worker_that_cannot_load_its_models_stops_the_job_at_once(tmp_path, ray_cluster):
    import time

    engine = Engine(
        method="cosine", encoder="/nonexistent/model", executor="ray", num_workers=1, max_retries=3, progress=False
    )
    start = time.perf_counter()
    with pytest.raises(EngineError, match=r"^worker on .* could not load its models: ModelNotFoundError") as e:
        engine.run(example_path("role"), tmp_path / "o.parquet")
    assert "\n" not in str(e.value) and time.perf_counter() - start < 300  # one line; no stall-timeout wait (300 s)
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.ray
def test_gpus_the_cluster_lacks_fail_fast(tmp_path, ray_cluster):
    import time

    start = time.perf_counter()
    engine = Engine(method="kl", executor="ray", num_workers=4, gpus_per_worker=1, progress=False)
    with pytest.raises(ValueError, match=r"4 GPUs requested, but the Ray cluster has 0"):
        engine.run(example_path("role"), tmp_path / "g.parquet")
    assert time.perf_counter() - start < 240 and not (tmp_path / "g.parquet").exists()

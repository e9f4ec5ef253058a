import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("ray")

from adherence.data import example_path  # noqa: E402
from adherence.engine import Engine, EngineError  # noqa: E402

from ._s3 import read_remote, same_scores  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster(s3):
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
def test_a_job_under_one_shard_is_split_so_every_worker_has_work(tmp_path, synthetic, ray_cluster):
    """Fewer rows than ``shard_size`` made one shard, so one of two Ray workers scored the whole job while the
    other idled (0.54x the in-process engine on 2 CPUs): the plan now holds a shard per worker, the same scores
    (rows in shard order, so compared by key; float32 sums in other batches)."""
    turns = synthetic(6)
    local = Engine(method="cosine", progress=False, n_bootstrap=0).run(turns, tmp_path / "l.parquet")
    remote = Engine(method="cosine", progress=False, n_bootstrap=0, executor="ray", num_workers=2).run(
        turns, tmp_path / "r.parquet"
    )
    assert local.summary["shards"] == 1 and remote.summary["shards"] == 2
    keys = [("conversation_id", "ascending"), ("turn_index", "ascending")]
    a, b = (pq.read_table(tmp_path / f"{x}.parquet").sort_by(keys) for x in "lr")
    assert a.drop_columns(["score"]).equals(b.drop_columns(["score"])) and a.num_rows == turns.num_rows
    np.testing.assert_allclose(a["score"].to_numpy(), b["score"].to_numpy(), atol=1e-6)  # other batches


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


@pytest.mark.ray
def test_max_qps_is_the_jobs_rate_over_all_ray_workers(tmp_path, synthetic, ray_cluster, tiny_yes_no_judge):
    """--max-qps caps the requests of the whole job: two Ray workers share it (each ran at the full rate, so two
    workers at 10/s sent 19/s)."""
    import threading
    import time

    from adherence.judges import JudgeConfig
    from tests.judges._server import ChatServer

    times, lock = [], threading.Lock()

    def record(n):
        with lock:
            times.append(time.monotonic())
        return None  # answer normally

    with ChatServer(tiny_yes_no_judge, after_preflight=record) as server:
        judge = JudgeConfig(
            model="tiny",
            backend="openai",
            backend_options={"base_url": server.url, "max_qps": 4.0, "concurrency": 8, "request_timeout": 30},
        )
        res = Engine(
            method="llm_judge", judge=judge, shard_size=12, progress=False, n_bootstrap=0, executor="ray",
            num_workers=2,
        ).run(synthetic(8), tmp_path / "q.parquet")  # fmt: skip
    assert res.summary["ok"] == res.summary["turns"] and res.summary["shards"] >= 2
    assert len({w["pid"] for w in res.summary["workers"]}) == 2  # both workers scored
    times.sort()
    window = times[-1] - times[0]
    assert len(times) >= 20 and (len(times) - 1) / window <= 4.0 * 1.25, (len(times), window)


@pytest.mark.ray
def test_ray_workers_read_and_write_shards_on_s3(s3, local_reference, ray_cluster):
    """Shards read and written by Ray workers on object storage (a moto S3 server on loopback) equal a local run."""
    if s3 is None:
        pytest.skip("the S3 server is moto's (a test requirement): pip install -e '.[test]'")
    src, ref, _ = local_reference
    out = f"{s3}/t7/scores.parquet"
    res = Engine(method="cosine", executor="ray", num_workers=2, shard_size=10, progress=False, n_bootstrap=0).run(
        src, out
    )
    assert res.summary["executor"] == "ray" and res.summary["shards"] >= 2
    same_scores(read_remote(out), ref)


@pytest.mark.ray
def test_a_fine_tuned_classifier_scores_on_ray_workers_as_in_process(tmp_path, ray_cluster):
    """The tuned encoder travels as the file beside the classifier: each worker unpacks it by its digest and scores
    as the in-process engine does, the training turns with their recorded out-of-fold scores."""
    import random

    from adherence.cli.main import main
    from adherence.data import read_turns
    from tests.cli.test_fine_tuned import LOG, TRUTH, _labels, _tiny_encoder

    _tiny_encoder(tmp_path / "tiny")
    rows = list(TRUTH)
    random.Random(3).shuffle(rows)
    _labels(tmp_path / "l.jsonl", rows[:50])
    assert main(["classifier", "fit", str(LOG), "--labels", str(tmp_path / "l.jsonl"), "-o", str(tmp_path / "c.json"),
                 "--learner", "fine-tuned", "--pairs-per-turn", "1", "--folds", "2", "--encoder",
                 str(tmp_path / "tiny"), "--no-progress"]) == 0  # fmt: skip
    turns = read_turns(LOG)
    kw = {"method": "classifier", "classifier": str(tmp_path / "c.json"), "progress": False, "n_bootstrap": 0}
    Engine(**kw, shard_size=80).run(turns, tmp_path / "l.parquet")
    remote = Engine(**kw, shard_size=80, executor="ray", num_workers=2).run(turns, tmp_path / "r.parquet")
    assert remote.summary["executor"] == "ray" and remote.summary["shards"] == 3
    keys = [("conversation_id", "ascending"), ("turn_index", "ascending")]
    a, b = (pq.read_table(tmp_path / f"{x}.parquet").sort_by(keys) for x in "lr")
    assert a.num_rows == b.num_rows == turns.num_rows
    assert a["classifier_fold"].equals(b["classifier_fold"]) and a["classifier_fold"].null_count == turns.num_rows - 50
    np.testing.assert_allclose(a["score"].to_numpy(), b["score"].to_numpy(), atol=1e-5)

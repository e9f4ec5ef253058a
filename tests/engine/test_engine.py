import json
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.data import example_path, read_table, read_turns, write_table
from adherence.engine import Engine, plan_job, score
from adherence.role import score_turns


def _by_key(t: pa.Table, col="score"):
    return dict(
        zip(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()), t.column(col).to_pylist())
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,opts",
    [("cosine", {}), ("knn", {"reference_pool": "dataset"}), ("mahalanobis", {}), ("pca_mahalanobis", {}), ("kl", {})],
)
def test_sharded_job_equals_one_pass(tmp_path, method, opts):
    turns = read_turns(example_path("role"))
    direct = score_turns(turns, method, progress=False, **opts)
    res = Engine(method=method, shard_size=6, progress=False, n_bootstrap=0, **opts).run(turns, tmp_path / "s.parquet")
    out = pq.read_table(tmp_path / "s.parquet")
    assert res.summary["shards"] > 1 and out.num_rows == turns.num_rows
    a, b = _by_key(out), _by_key(direct)
    assert a.keys() == b.keys()
    np.testing.assert_allclose([a[k] for k in b], [b[k] for k in b], atol=1e-6)  # job-wide references and alpha
    assert "_row" not in out.column_names


def test_plan_never_splits_a_conversation(tmp_path, synthetic):
    t = synthetic(12)
    path = write_table(t, tmp_path / "in.parquet")
    plan = plan_job(path, tmp_path / "work", shard_size=10, batch_size=7)
    seen = {}
    for s in plan.shards:
        with pa.ipc.open_stream(s.path) as r:
            shard = r.read_all()
        assert shard.num_rows == s.rows
        for cid in set(shard.column("conversation_id").to_pylist()):
            assert cid not in seen
            seen[cid] = s.shard_id
    assert sum(s.rows for s in plan.shards) == t.num_rows == plan.total_rows
    assert plan_job(path, tmp_path / "work", shard_size=10).shards == plan.shards  # reused


@pytest.mark.parametrize("name", ["s.jsonl", "s.csv", "sdir"])
def test_output_formats_keep_every_row(tmp_path, name):
    res = Engine(method="kl", shard_size=5, progress=False, n_bootstrap=0).run(example_path("role"), tmp_path / name)
    out = read_table(tmp_path / name)
    assert out.num_rows == 28 and res.summary["sessions"] == 8
    assert read_table(res.sessions_output).num_rows == 8


def test_in_memory_score_and_deterministic_order(synthetic):
    t = synthetic(6)
    a = score(t, method="kl", shard_size=9)
    b = score(t, method="kl", shard_size=9)
    assert a.equals(b) and a.num_rows == t.num_rows


def test_resume_skips_finished_shards_and_changed_jobs_start_over(tmp_path, synthetic):
    src = write_table(synthetic(10), tmp_path / "in.parquet")
    first = Engine(method="kl", shard_size=8, progress=False, n_bootstrap=0, keep_work_dir=True).run(
        src, tmp_path / "o.parquet"
    )
    first_table = pq.read_table(tmp_path / "o.parquet")
    out_dir = tmp_path / "o.parquet.work" / "out"
    (out_dir / "shard-00001.done.json").unlink()
    for name in ("o.parquet", "o.sessions.parquet"):  # as a job killed before it published leaves it
        (tmp_path / name).rename(tmp_path / f"{name}.first")
        (tmp_path / f"{name}.meta.json").unlink()
    again = Engine(method="kl", shard_size=8, progress=False, n_bootstrap=0, resume=True, keep_work_dir=True).run(
        src, tmp_path / "o.parquet"
    )
    assert again.summary["shards_resumed"] == first.summary["shards"] - 1
    assert pq.read_table(tmp_path / "o.parquet").equals(first_table)
    assert pq.read_table(tmp_path / "o.parquet.first").equals(first_table)
    # Throughput is this run's work: the rows an earlier run scored are counted apart, not in turns/s.
    redone = again.summary["turns_scored"]
    assert 0 < redone < again.summary["turns"] and again.summary["turns_reused"] == again.summary["turns"] - redone
    assert again.summary["turns_per_s"] == pytest.approx(redone / again.summary["elapsed_s"])
    from adherence.cli.score import _summary

    assert f"({again.summary['turns_reused']} reused from an earlier run, {redone} scored now)" in _summary(
        again.summary
    )
    other = Engine(method="kl", kl_beta=2.0, shard_size=8, progress=False, n_bootstrap=0, resume=True).run(
        src, tmp_path / "o.parquet"
    )
    assert other.summary["shards_resumed"] == 0


def test_resume_on_a_published_output_scores_nothing_unless_the_input_or_options_changed(tmp_path, synthetic):
    src = write_table(synthetic(6), tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    first = Engine(method="kl", shard_size=8, progress=False, n_bootstrap=0).run(src, out)
    before = (out.stat().st_ino, out.stat().st_mtime_ns, out.with_name("o.parquet.meta.json").read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "scored again" warning
        again = Engine(method="kl", shard_size=4, progress=False, n_bootstrap=0, resume=True).run(src, out)
    assert again.summary["already_published"] and again.summary["turns_scored"] == 0
    assert again.summary["turns_reused"] == first.summary["turns"] and again.summary["ok"] == first.summary["ok"]
    assert (out.stat().st_ino, out.stat().st_mtime_ns, out.with_name("o.parquet.meta.json").read_bytes()) == before
    # an option that decides scores changed: scored again, and one line says why
    with pytest.warns(UserWarning, match=r"is published but is scored again: options that decide scores changed "
                                         r"\(kl_beta 1.0 -> 2.0\)"):  # fmt: skip
        other = Engine(method="kl", kl_beta=2.0, progress=False, n_bootstrap=0, resume=True).run(src, out)
    assert other.summary["turns_scored"] == first.summary["turns"] and "already_published" not in other.summary
    # the input's content changed
    write_table(synthetic(7), src)
    with pytest.warns(UserWarning, match="is published but is scored again: the input's content changed"):
        Engine(method="kl", kl_beta=2.0, progress=False, n_bootstrap=0, resume=True).run(src, out)
    # the output no longer whole (its sessions file gone): scored again, said
    out.with_name("o.sessions.parquet").unlink()
    with pytest.warns(UserWarning, match="missing or no longer whole; it is scored again"):
        last = Engine(method="kl", kl_beta=2.0, progress=False, n_bootstrap=0, resume=True).run(src, out)
    assert last.summary["turns_scored"] == last.summary["turns"] > 0


def test_a_failing_shard_does_not_take_the_job_down(tmp_path, synthetic, monkeypatch):
    import adherence.engine._worker as worker

    real = worker.score_turns

    def flaky(table, *a, **k):
        if any(c.endswith("-3") for c in table.column("conversation_id").to_pylist()):
            raise RuntimeError("disk on fire")
        return real(table, *a, **k)

    monkeypatch.setattr(worker, "score_turns", flaky)
    t = synthetic(8)
    assistants = t.column("assistant").to_pylist()
    assistants[0] = " "  # and one bad row
    t = t.set_column(t.column_names.index("assistant"), "assistant", pa.array(assistants))
    res = Engine(method="kl", shard_size=4, progress=False, n_bootstrap=0).run(t, tmp_path / "o.parquet")
    out = pq.read_table(tmp_path / "o.parquet")
    assert out.num_rows == t.num_rows and res.summary["turns"] == t.num_rows
    status = dict(zip(out.column("conversation_id").to_pylist(), out.column("status").to_pylist()))
    errors = out.filter(pa.compute.equal(out.column("status"), "error")).column("error").to_pylist()
    assert any("disk on fire" in e for e in errors) and any(e == "empty assistant turn" for e in errors)
    assert res.summary["ok"] > 0 and res.summary["error"] == len(errors)
    assert all(v == "error" for k, v in status.items() if k.endswith("-3"))
    assert len(res.summary["failed_shards"]) == 1 and "disk on fire" in res.summary["failure"]


def test_configuration_errors_stop_the_job(tmp_path):
    from adherence.models import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="not a local directory"):
        Engine(method="cosine", encoder="/nonexistent/model", progress=False).run(
            example_path("role"), tmp_path / "o.parquet"
        )


def test_run_metadata_names_the_engine(tmp_path):
    res = Engine(method="kl", shard_size=10, progress=False, n_bootstrap=0).run(
        example_path("role"), tmp_path / "o.parquet"
    )
    meta = json.loads((tmp_path / "o.parquet.meta.json").read_text())
    assert meta["engine"]["executor"] == "local" and meta["engine"]["shards"] == res.summary["shards"]
    assert 1 < res.summary["shards"] <= 3  # ceil(28 / 10) hash buckets, empty ones dropped
    assert meta["summary"]["turns"] == 28 and meta["seed"] == 42
    # the input is hashed once, by the plan, and that digest is what the metadata records
    from adherence.data import file_digest

    assert meta["inputs"][0]["digest"] == file_digest(example_path("role"), "sha256")
    assert meta["engine"]["input_fingerprint"]["content"] == meta["inputs"][0]["digest"]


def test_judge_tensor_parallel_needs_the_vllm_backend_and_reaches_its_engine():
    from adherence.judges import JudgeConfig
    from adherence.role import RoleConfig

    with pytest.raises(ValueError, match="needs the vllm judge backend"):
        Engine(method="cosine", tensor_parallel=2)
    with pytest.raises(ValueError, match=r"needs the vllm judge backend \(--backend vllm\), got 'transformers'"):
        Engine(
            config=RoleConfig(method="llm_judge", judge=JudgeConfig(model="m", backend="transformers")),
            tensor_parallel=2,
        )
    vllm = RoleConfig(
        method="llm_judge", judge=JudgeConfig(model="m", backend="vllm", backend_options={"dtype": "bf16"})
    )
    local = Engine(config=vllm, tensor_parallel=4)
    assert local.config.judge.backend_options == {"dtype": "bf16", "tensor_parallel_size": 4}
    assert vllm.judge.backend_options == {"dtype": "bf16"}  # the caller's config is not changed
    on_ray = Engine(config=vllm, tensor_parallel=2, executor="ray")
    assert on_ray.config.judge.backend_options["distributed_executor_backend"] == "ray"
    assert on_ray.executor_kwargs["tensor_parallel"] == 2

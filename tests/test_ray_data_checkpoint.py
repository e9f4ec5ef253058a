"""Ray Data's own checkpointing with ``score_dataset``: a rerun scores only the rows the first run did not write.

Its own module: the cluster here has 3 CPUs (a resumed run's checkpoint filter actor holds one, the scoring actor
one, the grouping shuffle needs the third), the other Ray Data tests run on 2.
"""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import adherence
from adherence.data import example_path, read_turns


@pytest.fixture(scope="module")
def ray3():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _scores(t: pa.Table) -> dict:
    return {f"{r['conversation_id']}#{r['turn_index']}": (r["status"], r["score"]) for r in t.to_pylist()}


@pytest.mark.ray
def test_a_checkpointed_rerun_scores_only_what_is_left(ray3, tmp_path):
    import ray.data
    from ray.data.checkpoint import CheckpointConfig

    from adherence.ray_data import score_dataset

    turns = read_turns(example_path("role"))
    ids = [
        f"{c}#{i}" for c, i in zip(turns.column("conversation_id").to_pylist(), turns.column("turn_index").to_pylist())
    ]
    turns = turns.append_column("turn_id", pa.array(ids))
    parts = [turns.slice(0, 10), turns.slice(10, 10), turns.slice(20)]
    every, first = tmp_path / "all", tmp_path / "first"
    every.mkdir()
    first.mkdir()
    for k, part in enumerate(parts):
        pq.write_table(part, every / f"part-{k}.parquet")
        if k < 2:
            pq.write_table(part, first / f"part-{k}.parquet")

    ctx = ray.data.DataContext.get_current()
    ctx.checkpoint_config = CheckpointConfig(
        id_column="turn_id", checkpoint_path=str(tmp_path / "ckpt"), delete_checkpoint_on_success=False
    )
    try:
        # The first run got through two of the three files; the rerun reads all three.
        score_dataset(ray.data.read_parquet(str(first)), method="cosine", concurrency=1).write_parquet(
            str(tmp_path / "out1")
        )
        score_dataset(ray.data.read_parquet(str(every)), method="cosine", concurrency=1).write_parquet(
            str(tmp_path / "out2")
        )
    finally:
        ctx.checkpoint_config = None

    out1, out2 = pq.read_table(tmp_path / "out1"), pq.read_table(tmp_path / "out2")
    assert sorted(out1.column("turn_id").to_pylist()) == sorted(ids[:20])
    assert sorted(out2.column("turn_id").to_pylist()) == sorted(ids[20:])  # only what was left, once
    ref = adherence.score(turns, method="cosine", n_bootstrap=0)
    want = _scores(ref)
    got = {**_scores(out1), **_scores(out2)}
    assert got.keys() == want.keys()
    for k, (status, score) in want.items():
        assert got[k][0] == status
        assert got[k][1] == pytest.approx(score, abs=1e-6), k


@pytest.mark.ray
def test_the_documented_recipe_run_twice_never_duplicates_a_row(ray3, tmp_path):
    """docs/platforms.md's checkpoint recipe, as written there, run twice into the same output directory: every
    input row is in the output once (with Ray's default, delete_checkpoint_on_success=True, the second run
    wrote every row again)."""
    import ray.data
    from ray.data.checkpoint import CheckpointConfig

    from adherence.ray_data import score_dataset

    turns = read_turns(example_path("role"))
    ids = [
        f"{c}#{i}" for c, i in zip(turns.column("conversation_id").to_pylist(), turns.column("turn_index").to_pylist())
    ]
    (tmp_path / "turns").mkdir()
    pq.write_table(turns.append_column("turn_id", pa.array(ids)), tmp_path / "turns" / "part-0.parquet")
    ctx = ray.data.DataContext.get_current()
    try:
        for run in range(2):
            ray.data.DataContext.get_current().checkpoint_config = CheckpointConfig(
                id_column="turn_id",
                checkpoint_path=str(tmp_path / "ckpt"),
                delete_checkpoint_on_success=False,
            )
            try:
                score_dataset(ray.data.read_parquet(str(tmp_path / "turns")), method="cosine").write_parquet(
                    str(tmp_path / "scores")
                )
            except Exception as exc:  # noqa: BLE001 - the documented failure of a rerun with nothing left
                assert run == 1 and "Invalid sort key column" in str(exc), exc
    finally:
        ctx.checkpoint_config = None
    out = pq.read_table(tmp_path / "scores")
    assert sorted(out.column("turn_id").to_pylist()) == sorted(ids)
    # Why the recipe keeps the checkpoint: with Ray's default the same two runs write every row twice.
    try:
        for _ in range(2):
            ctx.checkpoint_config = CheckpointConfig(id_column="turn_id", checkpoint_path=str(tmp_path / "ckpt2"))
            score_dataset(ray.data.read_parquet(str(tmp_path / "turns")), method="cosine").write_parquet(
                str(tmp_path / "scores2")
            )
    finally:
        ctx.checkpoint_config = None
    assert pq.read_table(tmp_path / "scores2").num_rows == 2 * len(ids)

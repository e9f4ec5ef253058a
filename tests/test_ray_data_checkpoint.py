"""Ray Data's own checkpointing with ``score_dataset``: a rerun scores only the rows no run has written.

Its own module: the cluster here has 3 CPUs (a resumed run's checkpoint filter actor holds one, the scoring actor
one, the grouping shuffle needs the third), the other Ray Data tests run on 2.
"""

from pathlib import Path

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


def _files(folder: Path, pattern: str = "*.parquet") -> set:
    """The names of the files under ``folder`` (none where it is missing or empty)."""
    return {p.name for p in folder.rglob(pattern) if p.is_file()}


@pytest.mark.ray
def test_the_documented_recipe_rerun_scores_only_what_is_left_and_never_duplicates_a_row(ray3, tmp_path):
    """docs/platforms.md's checkpoint recipe, as written there, into one output directory: a run that got through
    two of three files, then a rerun over all three, writes only the third's rows (the engine's scores); a third
    run has nothing left to write. With Ray's default (delete_checkpoint_on_success=True) a successful run leaves
    no checkpoint, so the same script run again scores every row again: why the recipe keeps it."""
    import ray.data
    from ray.data.checkpoint import CheckpointConfig

    from adherence.ray_data import score_dataset

    turns = read_turns(example_path("role"))
    ids = [
        f"{c}#{i}" for c, i in zip(turns.column("conversation_id").to_pylist(), turns.column("turn_index").to_pylist())
    ]
    turns = turns.append_column("turn_id", pa.array(ids))
    every, first, scores = tmp_path / "all", tmp_path / "first", tmp_path / "scores"
    every.mkdir()
    first.mkdir()
    for k, part in enumerate([turns.slice(0, 10), turns.slice(10, 10), turns.slice(20)]):
        pq.write_table(part, every / f"part-{k}.parquet")
        if k < 2:
            pq.write_table(part, first / f"part-{k}.parquet")

    ctx = ray.data.DataContext.get_current()

    def run(src: Path, out: Path, checkpoint: str, scored: bool = True, **options) -> None:
        ctx.checkpoint_config = CheckpointConfig(
            id_column="turn_id", checkpoint_path=str(tmp_path / checkpoint), **options
        )
        try:
            ds = ray.data.read_parquet(str(src))
            (score_dataset(ds, method="cosine") if scored else ds).write_parquet(str(out))
        finally:
            ctx.checkpoint_config = None

    recipe = {"checkpoint": "ckpt", "delete_checkpoint_on_success": False}  # docs/platforms.md's
    run(first, scores, **recipe)
    after_first = _files(scores)
    run(every, scores, **recipe)
    added = _files(scores) - after_first
    try:
        run(every, scores, **recipe)
    except Exception as exc:  # noqa: BLE001 - the documented failure of a rerun with nothing left
        assert "Invalid sort key column" in str(exc), exc

    firsts = pq.read_table([scores / n for n in sorted(after_first)])
    seconds = pq.read_table([scores / n for n in sorted(added)])
    assert sorted(firsts.column("turn_id").to_pylist()) == sorted(ids[:20])
    assert sorted(seconds.column("turn_id").to_pylist()) == sorted(ids[20:])  # only what was left, once
    out = pq.read_table(scores)
    assert sorted(out.column("turn_id").to_pylist()) == sorted(ids)  # the third run added no row
    want = _scores(adherence.score(turns, method="cosine", n_bootstrap=0))
    got = _scores(out)
    assert got.keys() == want.keys()
    for k, (status, score) in want.items():
        assert got[k][0] == status
        assert got[k][1] == pytest.approx(score, abs=1e-6), k

    # Ray's default: the successful run deletes its checkpoint, so nothing tells a rerun what was written. Ray's
    # own behaviour, the same for every pipeline: seen on a plain copy of the rows (no scoring actor to start),
    # beside the same copy with the recipe's setting, which keeps it.
    assert _files(tmp_path / "ckpt", "*"), "the kept checkpoint records the rows written"
    for keep in (False, True):
        run(every, tmp_path / f"copy-{keep}", f"ckpt-{keep}", scored=False, delete_checkpoint_on_success=not keep)
        assert pq.read_table(tmp_path / f"copy-{keep}").num_rows == len(ids)
        assert bool(_files(tmp_path / f"ckpt-{keep}", "*")) == keep, keep

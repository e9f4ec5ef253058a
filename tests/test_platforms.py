"""Ray Data gives the engine's scores on the same input, and refuses what it cannot do (Spark: test_spark.py); a
platform worker's scoring call marks its own rows' errors."""

from collections import Counter

import pyarrow as pa
import pytest

import adherence
from adherence.data import example_path, read_turns
from adherence.role import RoleConfig
from tests._platforms import assert_same_scores, by_key, judge_config


@pytest.fixture(scope="module")
def turns():
    return read_turns(example_path("role"))


# --------------------------------------------------------------------------- Ray Data


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _collect(ray, ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()), promote_options="permissive")


@pytest.mark.ray
def test_ray_data_equals_the_engine(ray_local, turns, tiny_llama_dir):
    import ray.data

    from adherence.ray_data import score_dataset

    ref = adherence.score(turns, method="cosine", n_bootstrap=0)
    got = _collect(ray_local, score_dataset(ray.data.from_arrow(turns), method="cosine", concurrency=1))
    assert_same_scores(got, ref)
    assert got.num_rows == turns.num_rows and set(got.column("method").to_pylist()) == {"cosine"}
    judge = judge_config(tiny_llama_dir)
    ref = adherence.score(turns, config=RoleConfig(method="llm_judge", judge=judge), n_bootstrap=0)
    got = _collect(ray_local, score_dataset(ray.data.from_arrow(turns), method="llm_judge", judge=judge))
    assert_same_scores(got, ref)


@pytest.mark.ray
@pytest.mark.parametrize("strategy", ["default", "sort_shuffle_pull_based"])
def test_ray_data_calls_hold_whole_conversations_in_even_partitions(ray_local, strategy):
    """Conversations spread over many input blocks come back each inside one block (one scoring call), under
    Ray Data's default (hash) shuffle and its sort shuffle, and the hash shuffle's partitions are even: a few
    crc32 buckets hashed onto as many partitions once put half the rows in one partition while the other actor
    idled."""
    import uuid

    import ray.data

    from adherence.ray_data import _whole_conversation_blocks

    n_conv, turns_each, n_blocks = 2000, 5, 20
    rows = [{"conversation_id": f"c{c}", "turn_index": t} for t in range(turns_each) for c in range(n_conv)]
    blocks = [pa.Table.from_pylist(rows[i::n_blocks]) for i in range(n_blocks)]  # every block holds many ids
    ctx = ray.data.DataContext.get_current()
    before = ctx.shuffle_strategy
    try:
        if strategy != "default":
            ctx.shuffle_strategy = strategy
        ds = _whole_conversation_blocks(ray.data.from_arrow(blocks), 8)

        def call(batch: pa.Table) -> pa.Table:
            return batch.select(["conversation_id"]).append_column("call", pa.array([uuid.uuid4().hex] * len(batch)))

        got = _collect(ray_local, ds.map_batches(call, batch_size=None, batch_format="pyarrow")).to_pylist()
    finally:
        ctx.shuffle_strategy = before
    assert len(got) == n_conv * turns_each
    calls_of: dict = {}
    for r in got:
        calls_of.setdefault(r["conversation_id"], set()).add(r["call"])
    assert len(calls_of) == n_conv and all(len(c) == 1 for c in calls_of.values())
    sizes = Counter(r["call"] for r in got).values()
    assert len(sizes) >= 6, sorted(sizes)
    if strategy == "default":  # a sort's ranges follow its sampled boundaries: whole conversations, not even
        assert max(sizes) <= 1.3 * len(got) / len(sizes), sorted(sizes)


@pytest.mark.ray
def test_ray_data_refuses_job_wide_methods(ray_local, turns):
    import ray.data

    from adherence.ray_data import RoleScorer, score_dataset

    with pytest.raises(ValueError, match="needs the whole job's ground truths"):
        score_dataset(ray.data.from_arrow(turns), method="kl")
    with pytest.raises(ValueError, match="needs the whole job's ground truths"):
        RoleScorer(method="knn", reference_pool="dataset")
    with pytest.raises(ValueError, match="leave none for the grouping shuffle"):  # instead of waiting forever
        score_dataset(ray.data.from_arrow(turns), method="cosine", concurrency=2)


@pytest.mark.ray
def test_ray_data_counts_the_checkpoint_filter_cpus(ray_local, turns, tmp_path):
    # With Ray Data's checkpointing on, a resumed run starts filter actors that hold a CPU each for the whole
    # run: one scoring actor on this 2-CPU cluster would then starve the grouping shuffle, so it is refused
    # up front (without checkpointing the same call is accepted, see the test above).
    import ray.data
    from ray.data.checkpoint import CheckpointConfig

    from adherence.ray_data import score_dataset

    ctx = ray.data.DataContext.get_current()
    ctx.checkpoint_config = CheckpointConfig(id_column="turn_id", checkpoint_path=str(tmp_path / "ckpt"))
    try:
        with pytest.raises(ValueError, match="checkpoint filter actors hold"):
            score_dataset(ray.data.from_arrow(turns), method="cosine", concurrency=1)
    finally:
        ctx.checkpoint_config = None
    score_dataset(ray.data.from_arrow(turns), method="cosine", concurrency=1)  # planned, not refused


def test_a_scoring_call_that_raises_marks_its_rows_and_the_next_call_scores(turns, monkeypatch):
    """A one-off exception inside a platform worker's scoring costs that call's rows (status=error with the
    reason), not the pipeline; the worker keeps its models and scores the next call."""
    from adherence.role import _platform

    scorer = _platform.ConversationScorer(RoleConfig(method="cosine", progress=False))
    original, calls = _platform.score_turns, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return original(*a, **k)

    monkeypatch.setattr(_platform, "score_turns", flaky)
    first = scorer(turns.slice(0, 4)).to_pylist()
    assert [r["status"] for r in first] == ["error"] * 4
    assert first[0]["error"].startswith("scoring failed: RuntimeError: CUDA error")
    assert [r["conversation_id"] for r in first] == turns.slice(0, 4).column("conversation_id").to_pylist()
    second = scorer(turns.slice(0, 4)).to_pylist()
    assert [r["status"] for r in second] == ["ok"] * 4


@pytest.mark.ray
def test_ray_data_bad_ids_are_their_rows_errors_and_an_empty_input_is_an_empty_output(ray_local, turns):
    """A null conversation_id, ids Ray reads as numbers in one block and as text in another, and an empty
    dataset: the bad rows say why, the others are the engine's scores, nothing raises in Ray."""
    import ray.data

    from adherence.ray_data import score_dataset

    rows = turns.to_pylist()
    orphan = dict(rows[5], conversation_id=None)
    texts = pa.Table.from_pylist(rows + [orphan], schema=turns.schema)
    numbers = pa.table(
        {
            "conversation_id": pa.array([901, 901, 902], pa.int64()),  # another block's ids, typed as numbers
            "turn_index": pa.array([0, 1, 0], pa.int32()),
            "role": pa.array([rows[0]["role"]] * 3),
            "assistant": pa.array([rows[0]["assistant"], rows[1]["assistant"], rows[2]["assistant"]]),
            "ground_truth_assistant": pa.array([rows[0]["ground_truth_assistant"]] * 3),
        }
    )
    ds = ray.data.from_arrow([texts, numbers])
    got = _collect(ray_local, score_dataset(ds, method="cosine", concurrency=1)).to_pylist()
    assert len(got) == len(rows) + 1 + 3
    errors = [r for r in got if r["status"] == "error"]
    assert len(errors) == 1 and "null conversation_id" in errors[0]["error"]
    assert {r["conversation_id"] for r in got if r["conversation_id"] in ("901", "902")} == {"901", "902"}
    assert all(r["status"] == "ok" for r in got if r["conversation_id"] in ("901", "902"))
    ref = by_key(adherence.score(turns, method="cosine", n_bootstrap=0))
    got_by_key = {(r["conversation_id"], r["turn_index"]): r for r in got}
    for k, w in ref.items():
        assert got_by_key[k]["score"] == pytest.approx(w["score"], abs=1e-6), k

    empty = score_dataset(ray.data.from_arrow(turns.slice(0, 0)), method="cosine")
    assert empty.count() == 0 and {"score", "status", "error"} <= set(empty.schema().names)


def test_a_turn_index_out_of_int32_is_that_rows_error_not_its_calls(turns):
    """One turn_index that cannot be the contract's int32 marks that row only (it marked every row of its
    Spark chunk or Ray Data call)."""
    from adherence.role._platform import ConversationScorer

    idx = turns.column("turn_index").cast(pa.int64()).to_pylist()
    idx[2], idx[5] = 2**40, -(2**33)
    dirty = turns.set_column(turns.column_names.index("turn_index"), "turn_index", pa.array(idx, pa.int64()))
    out = ConversationScorer(RoleConfig(method="cosine", progress=False))(dirty).to_pylist()
    bad = [i for i, r in enumerate(out) if r["status"] == "error"]
    assert bad == [2, 5] and "is not a 32-bit integer" in out[2]["error"]
    assert all(r["status"] == "ok" for i, r in enumerate(out) if i not in bad)

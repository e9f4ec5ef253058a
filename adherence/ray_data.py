"""Score turns inside a Ray Data pipeline.

``RoleScorer`` is a callable class for ``Dataset.map_batches`` / ``map_groups``: each actor loads
its models once and scores batches that hold whole conversations. ``score_dataset`` groups the
rows by ``conversation_id`` first, so the judge's history and prefix sharing see whole
conversations, and returns the turn scores as a new dataset.

Example::

    import ray, adherence.ray_data as ard
    ds = ray.data.read_parquet("turns/")
    scores = ard.score_dataset(ds, method="cosine", concurrency=4)             # CPU actors
    scores = ard.score_dataset(ds, judge=JudgeConfig(model="/models/judge"), num_gpus=1, concurrency=8)
    scores.write_parquet("scores/")
"""

from __future__ import annotations

from typing import Any, Optional

import pyarrow as pa

from ._errors import OptionError
from ._optional import require

__all__ = ["RoleScorer", "score_dataset"]


class RoleScorer:
    """``Dataset.map_batches(RoleScorer, fn_constructor_kwargs={...}, batch_format="pyarrow")``.

    Args:
        **options: the options of ``adherence.score`` (``method``, ``encoder``, ``judge``,
            ``threshold``, ... or ``config``). Methods that need the whole job's ground truths are
            refused (use the engine for those).

    Every batch must hold whole conversations (``score_dataset`` arranges that).
    """

    def __init__(self, **options: Any) -> None:
        from .role import ConversationScorer, platform_config

        self._scorer = ConversationScorer(platform_config(options, "a Ray Data map"))

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not isinstance(batch, pa.Table):
            raise TypeError("RoleScorer takes pyarrow batches: pass batch_format='pyarrow'")
        if _KEY in batch.column_names:  # score_dataset's grouping key, not the user's
            batch = batch.drop_columns([_KEY])
        return self._scorer(batch)


_KEY = "__adherence_key"


def _add_key(batch: pa.Table) -> pa.Table:
    """A grouping key per row: the crc32 of its ``conversation_id`` (the engine's shard hash), the same for every
    turn of a conversation and spread over 2**32 values, so hashing or range-partitioning it balances partitions.

    The id is read as text (the turns contract's type), so blocks whose ids Ray inferred as numbers and blocks
    of strings group together; a row with a null id gets key 0 and lands in some partition, where the scorer
    marks that row (and only it) as an error.
    """
    from .engine import conversation_hash

    cid = batch.column("conversation_id").combine_chunks()
    if not pa.types.is_string(cid.type):
        cid = cid.cast(pa.string())
        batch = batch.set_column(batch.column_names.index("conversation_id"), "conversation_id", cid)
    return batch.append_column(_KEY, pa.array(conversation_hash(cid), pa.int64()))


def _whole_conversation_blocks(ds, n_partitions: int):
    """``ds`` shuffled into about ``n_partitions`` blocks, every conversation inside one block.

    The way ``GroupedData.map_groups`` co-locates a key: a keyed hash repartition (no block splitting) under
    Ray Data's hash shuffles, a sort by the key (range partitions) under its sort shuffles. Unlike
    ``map_groups``, the scorer then gets each block in one call: the key has 2**32 values, so the hash shuffle's
    partitions are even (a sort's follow the boundaries it samples; a few keys of equal weight hashed onto as many
    partitions collide: one partition held half of a run's rows while the other actor idled) and each call is as
    large as a partition, which the encoder's length batching needs (a scoring call of 150 turns cost 1.3x per
    turn what one of 4,000 did).
    """
    from ray.data.context import ShuffleStrategy

    keyed = ds.map_batches(_add_key, batch_format="pyarrow")
    sort_based = (ShuffleStrategy.SORT_SHUFFLE_PULL_BASED, ShuffleStrategy.SORT_SHUFFLE_PUSH_BASED)
    if keyed.context.shuffle_strategy in sort_based:
        # a sort makes as many range partitions as it gets blocks; equal keys never straddle a boundary
        return keyed.repartition(n_partitions).sort(_KEY)
    return keyed.repartition(n_partitions, keys=[_KEY])


def _checkpoint_filter_cpus() -> float:
    """CPUs held by Ray Data's checkpoint filter when the current ``DataContext`` checkpoints: a resumed run
    starts an actor pool of at least ``checkpoint_actor_pool_min_size`` one-CPU actors that live as long
    as the scoring actors. 0 without checkpointing."""
    from ray.data import DataContext

    config = getattr(DataContext.get_current(), "checkpoint_config", None)
    if config is None:
        return 0.0
    return float(getattr(config, "checkpoint_actor_pool_min_size", 1) or 1)


def score_dataset(
    ds,
    *,
    concurrency: int = 1,
    num_gpus: Optional[float] = None,
    num_cpus: Optional[float] = None,
    num_partitions: Optional[int] = None,
    rows_per_call: int = 8192,
    **options: Any,
):
    """Turn scores of a Ray ``Dataset`` of turns, whole conversations per scoring call.

    Rows are shuffled into partitions of whole conversations (by the crc32 of ``conversation_id``, about
    ``rows_per_call`` turns each, at least 4 per actor), and each partition is one scoring call: batched
    like the engine's shards, not one call per conversation.

    Args:
        ds: a ``ray.data.Dataset`` with the turns contract's columns.
        concurrency: scoring actors (each loads the models once).
        num_gpus: GPUs per actor (``num_gpus=1``: one actor per GPU).
        num_cpus: CPUs per actor.
        num_partitions: partitions of the shuffle that groups conversations, each one scoring call
            (default: rows / ``rows_per_call``, at least 4 per actor).
        rows_per_call: turns per scoring call, about.
        **options: as ``adherence.score`` (``method``, ``judge``, ``encoder``, ...).

    Returns:
        a ``ray.data.Dataset`` with the input columns plus ``method, score, prediction, status,
        error, reason, p_yes_source, truncated, yes_no_mass``.
    """
    require("ray", "ray", "adherence.ray_data")
    from ray.data import ActorPoolStrategy

    from .role import platform_config

    if concurrency < 1 or rows_per_call < 1:
        raise OptionError(f"`concurrency` and `rows_per_call` must be >= 1, got {concurrency} and {rows_per_call}")
    platform_config(options, "a Ray Data map")  # refuse bad options on the driver, before any actor starts
    import ray

    if ray.is_initialized():
        total = ray.cluster_resources().get("CPU", 0.0)
        need = concurrency * (1.0 if num_cpus is None else num_cpus)
        held = _checkpoint_filter_cpus()
        if total and need + held >= total:
            # Actors hold their CPUs for the whole run; the grouping shuffle would wait forever.
            also = (
                f" with the {held:g} CPU(s) Ray Data's checkpoint filter actors hold when a checkpointed run "
                "is resumed (DataContext.checkpoint_config is set)"
                if held
                else ""
            )
            raise OptionError(
                f"{concurrency} actor(s) x {need / concurrency:g} CPU would take all {total:g} CPUs of the "
                f"Ray cluster{also} and leave none for the grouping shuffle: lower `concurrency` or `num_cpus`"
            )
    kwargs: dict = {
        "fn_constructor_kwargs": options,
        "batch_format": "pyarrow",
        "compute": ActorPoolStrategy(size=concurrency),
    }
    if num_gpus is not None:
        kwargs["num_gpus"] = num_gpus
    if num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    n_rows = ds.count()  # Parquet: the count comes from metadata
    if n_rows == 0:  # nothing to group or score: an empty output with the scores' columns
        from .role import output_schema

        schema = ds.schema()
        base = getattr(schema, "base_schema", schema)
        return ray.data.from_arrow(output_schema(base if isinstance(base, pa.Schema) else pa.schema([])).empty_table())
    n_partitions = num_partitions or max(4 * concurrency, -(-n_rows // rows_per_call))
    # batch_size=None: each block (whole conversations) is one call
    return _whole_conversation_blocks(ds, n_partitions).map_batches(RoleScorer, batch_size=None, **kwargs)

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

from ._optional import require

__all__ = ["RoleScorer", "score_dataset"]


class RoleScorer:
    """``Dataset.map_batches(RoleScorer, fn_constructor_kwargs={...}, batch_format="pyarrow")``.

    Args:
        **options: the options of :func:`adherence.score` (``method``, ``encoder``, ``judge``,
            ``threshold``, ... or ``config``). Methods that need the whole job's ground truths are
            refused (use the engine for those).

    Every batch must hold whole conversations (``score_dataset`` arranges that).
    """

    def __init__(self, **options: Any) -> None:
        from .role._platform import ConversationScorer, platform_config

        self._scorer = ConversationScorer(platform_config(options, "a Ray Data map"))

    def __call__(self, batch: pa.Table) -> pa.Table:
        if not isinstance(batch, pa.Table):
            raise TypeError("RoleScorer takes pyarrow batches: pass batch_format='pyarrow'")
        return self._scorer(batch)


def score_dataset(ds, *, concurrency: int = 1, num_gpus: Optional[float] = None, num_cpus: Optional[float] = None,
                  num_partitions: Optional[int] = None, **options: Any):
    """Turn scores of a Ray ``Dataset`` of turns, one conversation per scoring call.

    Args:
        ds: a ``ray.data.Dataset`` with the turns contract's columns.
        concurrency: scoring actors (each loads the models once).
        num_gpus, num_cpus: resources per actor (``num_gpus=1``: one actor per GPU).
        num_partitions: partitions of the shuffle that groups conversations (default: 4 per actor).
        **options: as :func:`adherence.score` (``method``, ``judge``, ``encoder``, ...).

    Returns:
        a ``ray.data.Dataset`` with the input columns plus ``method, score, prediction, status,
        error, reason, p_yes_source, truncated, yes_no_mass``.
    """
    require("ray", "ray", "adherence.ray_data")
    from ray.data import ActorPoolStrategy

    from .role._platform import platform_config

    if concurrency < 1:
        raise ValueError(f"`concurrency` must be >= 1, got {concurrency}")
    platform_config(options, "a Ray Data map")  # refuse bad options on the driver, before any actor starts
    import ray

    if ray.is_initialized():
        total = ray.cluster_resources().get("CPU", 0.0)
        need = concurrency * (1.0 if num_cpus is None else num_cpus)
        if total and need >= total:
            # Actors hold their CPUs for the whole run; the grouping shuffle would wait forever.
            raise ValueError(f"{concurrency} actor(s) x {need / concurrency:g} CPU would take all {total:g} CPUs of the "
                             "Ray cluster and leave none for the grouping shuffle: lower `concurrency` or `num_cpus`")
    kwargs: dict = {"fn_constructor_kwargs": options, "batch_format": "pyarrow",
                    "compute": ActorPoolStrategy(size=concurrency)}
    if num_gpus is not None:
        kwargs["num_gpus"] = num_gpus
    if num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    return ds.groupby("conversation_id", num_partitions=num_partitions or 4 * concurrency).map_groups(RoleScorer, **kwargs)

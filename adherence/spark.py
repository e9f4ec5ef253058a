"""Score turns in Spark: Arrow batches, whole conversations, models loaded once per Python worker.

``score_dataframe`` hash-partitions the turns by ``conversation_id``, orders each partition by
conversation and turn, and scores it with ``mapInArrow``: rows are buffered up to a conversation
boundary, so every scoring call sees whole conversations, in chunks of about ``chunk_rows`` turns.

Example::

    from adherence.spark import score_dataframe
    turns = spark.read.parquet("s3://logs/turns/")
    scores = score_dataframe(turns, method="cosine", chunk_rows=4096)
    scores.write.parquet("s3://logs/scores/")
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import pyarrow as pa

from ._errors import OptionError
from ._optional import require

__all__ = ["score_dataframe"]


def _score_partition(config, arrow_schema: pa.Schema, chunk_rows: int):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from adherence.role import cached_scorer

        scorer = None
        pending: list[pa.Table] = []
        held = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            pending.append(pa.Table.from_batches([batch]))
            held += batch.num_rows
            if held < chunk_rows:
                continue
            table = pa.concat_tables(pending)
            # Score up to the start of the last conversation (it may continue in the next batch).
            ids = table.column("conversation_id").to_pylist()
            cut = len(ids)
            while cut > 0 and ids[cut - 1] == ids[-1]:
                cut -= 1
            if cut == 0:
                continue  # one conversation so far: keep reading
            scorer = scorer or cached_scorer(config)
            yield from scorer(table.slice(0, cut), arrow_schema).to_batches()
            pending, held = [table.slice(cut)], table.num_rows - cut
        if held:
            scorer = scorer or cached_scorer(config)
            yield from scorer(pa.concat_tables(pending), arrow_schema).to_batches()

    return run


def score_dataframe(df, *, chunk_rows: int = 4096, num_partitions: Optional[int] = None, **options: Any):
    """Turn scores of a Spark ``DataFrame`` of turns.

    Args:
        df: turns (the turns contract's columns; others pass through).
        chunk_rows: turns per scoring call (whole conversations; a longer conversation is one call).
        num_partitions: partitions of the hash repartition by ``conversation_id`` (default: Spark's).
        **options: as ``adherence.score`` (``method``, ``judge``, ``encoder``, ...). Methods that need
            the whole job's ground truths are refused.

    Returns:
        a DataFrame with the input columns plus ``method, score, prediction, status, error, reason,
        p_yes_source, truncated, yes_no_mass``.
    """
    require("pyspark", "spark", "adherence.spark")
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    from .role import SCORE_FIELDS, platform_config

    if chunk_rows < 1:
        raise OptionError(f"`chunk_rows` must be >= 1, got {chunk_rows}")
    config = platform_config(options, "a Spark job")
    names = {f.name for f in SCORE_FIELDS}
    clash = [c for c in df.columns if c in names]
    if clash:
        raise OptionError(f"input column {clash[0]!r} would be replaced by the scores; rename or drop it")
    arrow_schema = pa.schema(list(to_arrow_schema(df.schema)) + list(SCORE_FIELDS))
    parts = df.repartition(num_partitions, "conversation_id") if num_partitions else df.repartition("conversation_id")
    parts = parts.sortWithinPartitions("conversation_id", "turn_index")
    return parts.mapInArrow(_score_partition(config, arrow_schema, chunk_rows), from_arrow_schema(arrow_schema))

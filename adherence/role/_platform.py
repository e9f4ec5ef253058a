"""Scoring whole conversations inside other platforms' workers (Ray Data, Spark): one config, one schema."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pyarrow as pa

from ..data._validate import conform_schema
from ._base import Resources, RoleConfig, get_method
from ._score import score_turns

__all__ = ["platform_config", "SCORE_FIELDS", "output_schema", "ConversationScorer"]

#: Columns every scored row gets on the platform paths (a method's other diagnostics are left out).
SCORE_FIELDS = (pa.field("method", pa.string()), pa.field("score", pa.float64()), pa.field("prediction", pa.int8()),
                pa.field("status", pa.string()), pa.field("error", pa.string()), pa.field("reason", pa.string()),
                pa.field("p_yes_source", pa.string()), pa.field("truncated", pa.bool_()),
                pa.field("yes_no_mass", pa.float64()))


def platform_config(options: dict, where: str) -> RoleConfig:
    """A :class:`RoleConfig` from ``adherence.score``-style options, refusing job-wide methods.

    Methods whose scale depends on the whole job's ground truths (the ``dataset`` reference pool,
    Mahalanobis, PCA+Mahalanobis, KL, idf-weighted BERTScore) need the engine's job-wide pass.
    """
    options = dict(options)
    config = options.pop("config", None)
    method = options.pop("method", None)
    options.pop("progress", None)
    if config is None:
        config = RoleConfig(method=method or "llm_judge", progress=False, **options)
    else:
        config = dataclasses.replace(config, method=method or config.method, progress=False, **options)
    if get_method(config.method).uses_dataset_references(config):
        raise ValueError(f"method {config.method!r} with these options needs the whole job's ground truths, which {where} "
                         "does not see at once; score it with the engine (adherence.score / adherence score, "
                         "--executor ray for a cluster)")
    return config


def output_schema(input_schema: pa.Schema) -> pa.Schema:
    """The input columns (minus any named like a score column) followed by :data:`SCORE_FIELDS`."""
    names = {f.name for f in SCORE_FIELDS}
    return pa.schema([f for f in input_schema if f.name not in names] + list(SCORE_FIELDS))


class ConversationScorer:
    """Loads a config's models once, then scores tables that hold whole conversations."""

    def __init__(self, config: RoleConfig) -> None:
        self.config = config
        self.resources = Resources(config)
        get_method(config.method).prepare(config, self.resources)

    def __call__(self, table: pa.Table, schema: Optional[pa.Schema] = None) -> pa.Table:
        schema = schema or output_schema(table.schema)
        if table.num_rows == 0:
            return schema.empty_table()
        scored = score_turns(table, self.config.method, config=self.config, resources=self.resources)
        return conform_schema(scored, schema)


_SCORERS: dict[Any, ConversationScorer] = {}


def cached_scorer(config: RoleConfig) -> ConversationScorer:
    """One scorer per config and process (a Spark Python worker is reused across tasks)."""
    key = repr(config)
    if key not in _SCORERS:
        _SCORERS.clear()
        _SCORERS[key] = ConversationScorer(config)
    return _SCORERS[key]

"""Scoring whole conversations inside other platforms' workers (Ray Data, Spark): one config, one schema."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pyarrow as pa

from .._errors import OptionError
from ..data import conform_schema
from ._base import Resources, RoleConfig, get_method
from ._score import score_turns

__all__ = ["platform_config", "SCORE_FIELDS", "output_schema", "ConversationScorer"]

#: Columns every scored row gets on the platform paths (a method's other diagnostics are left out).
SCORE_FIELDS = (
    pa.field("method", pa.string()),
    pa.field("score", pa.float64()),
    pa.field("prediction", pa.int8()),
    pa.field("status", pa.string()),
    pa.field("error", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("p_yes_source", pa.string()),
    pa.field("truncated", pa.bool_()),
    pa.field("yes_no_mass", pa.float64()),
)


def platform_config(options: dict, where: str) -> RoleConfig:
    """A ``RoleConfig`` from ``adherence.score``-style options, refusing job-wide methods.

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
        raise OptionError(
            f"method {config.method!r} with these options needs the whole job's ground truths, which {where} "
            "does not see at once; score it with the engine (adherence.score / adherence score, "
            "--executor ray for a cluster)"
        )
    return config


def output_schema(input_schema: pa.Schema) -> pa.Schema:
    """The input columns (minus any named like a score column) followed by ``SCORE_FIELDS``."""
    names = {f.name for f in SCORE_FIELDS}
    return pa.schema([f for f in input_schema if f.name not in names] + list(SCORE_FIELDS))


class ConversationScorer:
    """Loads a config's models once, then scores tables that hold whole conversations."""

    def __init__(self, config: RoleConfig) -> None:
        self.config = config
        self.resources = Resources(config)
        get_method(config.method).prepare(config, self.resources)

    def __call__(self, table: pa.Table, schema: Optional[pa.Schema] = None) -> pa.Table:
        """Score ``table``; a row with a null or repeated key, and every row of a call whose scoring raised,
        comes back with ``status=error`` and the reason (as in the engine) instead of failing the pipeline."""
        schema = schema or output_schema(table.schema)
        if table.num_rows == 0:
            return schema.empty_table()
        problems = _key_problems(table)
        good = [i for i in range(table.num_rows) if i not in problems]
        parts, order = [], []
        if good:
            subset = table if len(good) == table.num_rows else table.take(pa.array(good, pa.int64()))
            try:
                scored = score_turns(subset, self.config.method, config=self.config, resources=self.resources)
                parts.append(conform_schema(scored, schema))
            except (KeyboardInterrupt, MemoryError):
                raise
            except Exception as exc:  # noqa: BLE001 - the rows carry the failure, the pipeline goes on
                reason = f"scoring failed: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
                parts.append(_error_rows(subset, schema, [reason] * subset.num_rows, self.config.method))
            order += good
        if problems:
            idx = sorted(problems)
            parts.append(
                _error_rows(
                    table.take(pa.array(idx, pa.int64())), schema, [problems[i] for i in idx], self.config.method
                )
            )
            order += idx
        out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        if order != list(range(table.num_rows)):  # back to the input's row order
            out = out.take(pa.array(sorted(range(len(order)), key=order.__getitem__), pa.int64()))
        return out


def _key_problems(table: pa.Table) -> dict:
    """Row -> why its key is unusable: a null conversation_id or turn_index, or a key seen earlier."""
    names = table.column_names
    cids = table.column("conversation_id").to_pylist() if "conversation_id" in names else [None] * table.num_rows
    idxs = table.column("turn_index").to_pylist() if "turn_index" in names else [None] * table.num_rows
    out: dict[int, str] = {}
    seen: dict[tuple[Any, Any], int] = {}
    for i, key in enumerate(zip(cids, idxs)):
        if key[0] is None or key[1] is None:
            out[i] = f"null {'conversation_id' if key[0] is None else 'turn_index'}: the turn cannot be placed"
        elif _not_int32(key[1]):
            out[i] = (
                f"turn_index {key[1]!r} is not a 32-bit integer (the turns contract's int32): the turn cannot be placed"
            )
        elif key in seen:
            out[i] = f"duplicate key (conversation_id={key[0]!r}, turn_index={key[1]!r}); first at row {seen[key] + 1}"
        else:
            seen[key] = i
    return out


def _not_int32(v: Any) -> bool:
    """A number that cannot be the contract's int32 turn index (other values are left to the schema's cast)."""
    if isinstance(v, float):
        return not (v.is_integer() and -(2**31) <= v < 2**31)
    return isinstance(v, int) and not isinstance(v, bool) and not -(2**31) <= v < 2**31


def _error_rows(table: pa.Table, schema: pa.Schema, reasons: list, method: str) -> pa.Table:
    n = table.num_rows
    cols = {f.name: table.column(f.name) for f in schema if f.name in table.column_names}
    filled = {
        "method": pa.array([method] * n, pa.string()),
        "status": pa.array(["error"] * n, pa.string()),
        "error": pa.array(reasons, pa.string()),
    }
    arrays = [filled.get(f.name, cols.get(f.name, pa.nulls(n, f.type))) for f in schema]
    return pa.Table.from_arrays(
        [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, schema)], schema=schema
    )


_SCORERS: dict[Any, ConversationScorer] = {}


def cached_scorer(config: RoleConfig) -> ConversationScorer:
    """One scorer per config and process (a Spark Python worker is reused across tasks)."""
    key = repr(config)
    if key not in _SCORERS:
        _SCORERS.clear()
        _SCORERS[key] = ConversationScorer(config)
    return _SCORERS[key]

"""The merger: the shard outputs checked (every input row exactly once), rescaled where the method's scale
depends on the whole job, written as the output and the sessions file under the publisher's temporaries, and the
job's typed summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._errors import EngineError
from ..data import conform_schema
from ..role import RoleConfig, aggregate_sessions, get_method
from ._commit import Publisher
from ._messages import ShardResult
from ._options import EngineOptions
from ._safety import output_format
from ._sink import TableSink

__all__ = ["JobSummary", "Merged", "merge_shards", "summarise", "verify_rows"]


class JobSummary(TypedDict, total=False):
    """A job's summary (``JobResult.summary``, the metadata's ``summary``): counts, timing and where rows went."""

    method: str
    turns: int
    ok: int
    error: int
    unscored: int
    skipped: int
    sessions: Optional[int]
    shards: Optional[int]
    shards_resumed: int
    failed_shards: list
    elapsed_s: float
    turns_scored: int
    turns_reused: int
    turns_per_s: Optional[float]  # this run's work only: rows an earlier run scored cost it nothing
    executor: str
    retried_shards: int
    workers_lost: int
    workers: list
    judge_usage: dict
    shard_phases_s: dict
    skipped_records: Optional[dict]
    bad_rows: dict
    failure: str
    already_published: bool
    # a cascade's
    abstained: int
    stages: list
    guarantee: Any
    cost_vs_last_stage: dict


@dataclass(frozen=True)
class Merged:
    """What the merge wrote: rows in the output (read back from it) and sessions."""

    rows: int
    sessions: int


def verify_rows(shard_files: list[Path], total: int) -> None:
    """Every input row exactly once across the shard outputs, or an ``EngineError`` (nothing is published)."""
    seen = np.zeros(total, dtype=bool)
    count = 0
    for f in shard_files:
        try:
            rows = pq.read_table(f, columns=["_row"]).column("_row").to_numpy()
        except (OSError, pa.ArrowInvalid, KeyError) as exc:
            raise EngineError(
                f"shard output {f} is unreadable ({exc}); rerun with --resume to score it again"
            ) from None
        if len(rows) and (
            rows.min() < 0 or rows.max() >= total or seen[rows].any() or len(np.unique(rows)) != len(rows)
        ):
            raise EngineError(f"shard output {f} holds rows outside its shard or twice; nothing was published")
        seen[rows] = True
        count += len(rows)
    if count != total or not seen.all():
        raise EngineError(
            f"the shard outputs hold {count} of the {total} input rows; nothing was published (rerun with --resume)"
        )


def _rescaler(config: RoleConfig, shard_files: list[Path]):
    """The method's rescaling of every shard, when its scores' scale depends on the whole job (else None)."""

    def column(name: str) -> np.ndarray:
        return np.concatenate(
            [pq.read_table(f, columns=[name]).column(name).to_numpy(zero_copy_only=False) for f in shard_files]
        )

    return get_method(config.method).job_rescaler(config, column)


def merge_shards(
    plan, work: Path, publisher: Publisher, finals: tuple, paths: tuple, config: RoleConfig, options: EngineOptions
) -> Merged:
    """Write the shard outputs (verified, rescaled) as the output and the sessions file: temporaries the
    publisher holds for ``finals`` (output, sessions), in the formats of ``paths``. Raises ``EngineError``
    (nothing published) when a row is missing or doubled."""
    shard_files = [work / "out" / f"shard-{s.shard_id:05d}.parquet" for s in plan.shards]
    verify_rows(shard_files, plan.total_rows)
    rescale = _rescaler(config, shard_files)
    schema = pa.unify_schemas([pq.read_schema(f) for f in shard_files], promote_options="permissive")
    schema = pa.schema([f for f in schema if f.name != "_row"])
    # Conversation ids are text inside the job; an input that wrote them as integers gets integers back.
    id_type = pa.type_for_alias(plan.conversation_id_type) if plan.conversation_id_type else None
    out_schema = schema
    if id_type is not None:
        out_schema = schema.set(schema.get_field_index("conversation_id"), pa.field("conversation_id", id_type))
    out_final, sessions_final = finals
    out_path, sessions_path = paths
    sink = TableSink(publisher.temporary(out_final), output_format(out_path), out_schema)
    publisher.add(sink.path, out_final)
    sessions_sink = None
    n_sessions = 0
    for f in shard_files:
        t = pq.read_table(f)
        if rescale is not None:
            t = rescale(t)
        t = conform_schema(t.drop_columns(["_row"]), schema)
        sink.write(conform_schema(t, out_schema) if id_type is not None else t)
        sessions = aggregate_sessions(
            t,
            threshold=config.threshold,
            strict_mode=config.strict_mode,
            session_mode=config.session_mode,
            n_bootstrap=options.n_bootstrap,
            seed=options.seed,
        )
        if id_type is not None:
            sessions = sessions.set_column(0, "conversation_id", sessions.column("conversation_id").cast(id_type))
        if sessions_sink is None:
            sessions_sink = TableSink(
                publisher.temporary(sessions_final), output_format(sessions_path), sessions.schema
            )
            publisher.add(sessions_sink.path, sessions_final)
        sessions_sink.write(sessions)
        n_sessions += sessions.num_rows
    sink.close()
    if sessions_sink is None:
        raise EngineError("the plan has no shards, so no sessions were written; nothing was published")
    sessions_sink.close()
    written = sink.count_rows()
    if written != plan.total_rows:
        raise EngineError(f"the output holds {written} rows, the input {plan.total_rows}; nothing was published")
    return Merged(written, n_sessions)


def summarise(
    method: str, plan, results: dict[int, ShardResult], merged: Merged, elapsed: float, executor: str, stats
) -> JobSummary:
    """The job's summary from its shards' results (``stats``: the executor's counts, if it keeps them)."""
    totals = {k: sum(getattr(r, k) for r in results.values()) for k in ("rows", "ok", "error", "unscored", "skipped")}
    # finished by an earlier run: whole shards, and the checkpoints of shards it left half done
    reused = sum(r.rows if r.resumed else r.reused for r in results.values())
    failed = sorted(r.shard_id for r in results.values() if r.failed)
    summary: JobSummary = {
        "method": method,
        "turns": totals["rows"],
        "ok": totals["ok"],
        "error": totals["error"],
        "unscored": totals["unscored"],
        "skipped": totals["skipped"],
        "sessions": merged.sessions,
        "shards": len(plan.shards),
        "shards_resumed": sum(1 for r in results.values() if r.resumed),
        "failed_shards": failed,
        "elapsed_s": elapsed,
        "turns_scored": totals["rows"] - reused,
        "turns_reused": reused,
        "turns_per_s": (totals["rows"] - reused) / elapsed if elapsed > 0 else None,
        "executor": executor,
    }
    if stats:
        summary["retried_shards"] = stats["retried_shards"]
        summary["workers_lost"] = stats["workers_lost"]
        summary["workers"] = sorted(stats["workers"].values(), key=lambda w: (w.get("host"), w.get("pid")))
    # this run's work only: resumed shards were paid for earlier
    fresh = [r for r in results.values() if not r.resumed]
    usage = _summed(r.judge_usage for r in fresh)
    if usage:
        summary["judge_usage"] = usage
    phases = _summed(r.phases for r in fresh)  # the workers' CPU seconds reading, scoring, writing
    if phases:
        summary["shard_phases_s"] = phases
    if failed:
        summary["failure"] = next(r.failed for r in results.values() if r.failed)
    return summary


def _summed(dicts: Iterable[dict]) -> dict:
    """Key-wise sums of per-shard counters (judge calls and tokens, seconds per phase)."""
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out

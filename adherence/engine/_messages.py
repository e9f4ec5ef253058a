"""The messages between the engine and its workers: a shard to score, how far a worker is within it, what scoring
it gave, and the record that vouches for each checkpoint a worker commits.

Both travel to Ray actors and back (pickled) and a result is kept as the shard's ``done`` record (JSON),
which a resumed job reads back: ``ShardResult.from_json`` refuses a record it cannot trust, and the shard
is then scored again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["CheckpointRecord", "ShardProgress", "ShardResult", "ShardTask"]


@dataclass(frozen=True)
class ShardTask:
    """One shard to score: its input (an Arrow IPC stream) and where its Parquet output goes (local
    paths are absolute; on object storage, URIs).

    ``checkpoints`` is the folder where the worker commits the shard's scored conversations as it goes, about
    every ``checkpoint_every`` seconds of scoring (None or 0: the shard is committed whole); a later try of the
    shard scores only what they do not hold.
    """

    shard_id: int
    input: str
    output: str
    checkpoints: Optional[str] = None
    checkpoint_every: float = 0.0

    def __str__(self) -> str:
        return f"shard {self.shard_id} ({self.input})"


@dataclass(frozen=True)
class ShardResult:
    """What scoring one shard gave: row counts by status (``skipped``: context rows, not scored), the output's content digest, and who scored it.

    ``failed`` is the one-line reason when scoring the shard raised (its rows are then kept as
    ``status=error`` and ``--resume`` scores it again); ``resumed`` marks a result read back from an
    earlier run's ``done`` record, and ``reused`` counts the rows an earlier try committed as checkpoints
    (not scored again). ``phases`` holds the worker thread's CPU seconds reading the shard's input
    (``input_s``), scoring it (``score_s``) and writing its output (``write_s``).
    """

    shard_id: int
    rows: int
    ok: int
    error: int
    unscored: int
    digest: str
    failed: Optional[str] = None
    seconds: float = 0.0
    pid: int = 0
    worker: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    judge_usage: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)
    resumed: bool = False
    reused: int = 0
    skipped: int = 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Any) -> Optional[ShardResult]:
        """The result a ``done`` record holds, or None when it is not one (unknown or missing fields, wrong
        types): such a shard is scored again rather than trusted."""
        if not isinstance(d, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        if set(d) - names:
            return None
        try:
            res = cls(**d)
        except TypeError:
            return None
        ints = (res.shard_id, res.rows, res.ok, res.error, res.unscored, res.reused, res.skipped)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
            return None
        if not isinstance(res.digest, str) or not res.digest:
            return None
        return res


@dataclass(frozen=True)
class ShardProgress:
    """How far a worker is within shard ``shard_id``: ``rows`` done, ``reused`` of them from an earlier try's
    checkpoints (sent after each checkpoint; a Ray worker answers it to the driver's pings)."""

    shard_id: int
    rows: int
    reused: int = 0


@dataclass(frozen=True)
class CheckpointRecord:
    """The record beside a checkpoint's data (``<prefix><k>.json``): the shard input's digest, the conversations
    ``[start, stop)`` the data holds, its rows and content digest. A checkpoint is trusted only when its record
    reads back whole (``from_json``), continues the one before it and matches the data."""

    input: str
    start: int
    stop: int
    rows: int
    digest: str
    written_at: float = 0.0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Any) -> Optional[CheckpointRecord]:
        """The record ``d`` holds, or None when it is not one (missing fields or wrong types)."""
        if not isinstance(d, dict):
            return None
        try:
            rec = cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})
        except TypeError:
            return None
        ints = (rec.start, rec.stop, rec.rows)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            return None
        if not isinstance(rec.input, str) or not isinstance(rec.digest, str):
            return None
        return rec

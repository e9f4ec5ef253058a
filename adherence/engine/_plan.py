"""Plan a job: shard the input by conversation, streaming, and spill each shard to disk once.

Pass 1 streams only ``conversation_id`` (and the ground truths when the method
needs the whole job's reference pool) to count each conversation's turns;
conversations are assigned to shards greedily in order of first appearance
(a conversation never splits). Pass 2 streams the validated input in record
batches and appends each row to its shard's Arrow IPC file, with ``_row``,
its position in the input. The plan is written atomically and reused by a
resumed job whose input and shard size are unchanged.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..data import TURNS, iter_batches
from ..data._readers import _blank_text

__all__ = ["Plan", "ShardInfo", "plan_job", "input_fingerprint"]


@dataclass
class ShardInfo:
    shard_id: int
    path: str
    rows: int
    conversations: int


@dataclass
class Plan:
    input: str
    fingerprint: dict
    shard_size: int
    total_rows: int
    shards: list
    reference_file: Optional[str] = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["shards"] = [asdict(s) if isinstance(s, ShardInfo) else s for s in self.shards]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Plan":
        d = dict(d)
        d["shards"] = [ShardInfo(**s) for s in d["shards"]]
        return cls(**d)


def input_fingerprint(source) -> dict:
    """Cheap identity of an input: path, size and modification time of its files."""
    p = Path(source)
    files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    return {"path": str(p.resolve()), "bytes": sum(f.stat().st_size for f in files),
            "mtime_ns": max(f.stat().st_mtime_ns for f in files), "files": len(files)}


def _write_json_atomic(path: Path, obj) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def plan_job(source, work_dir: Path, *, shard_size: int, batch_size: int = 65_536,
             collect_references: bool = False) -> Plan:
    """Shard ``source`` into ``work_dir/shards/*.arrow`` (or reuse a matching earlier plan)."""
    if shard_size < 1:
        raise ValueError(f"`shard_size` must be >= 1, got {shard_size}")
    work_dir.mkdir(parents=True, exist_ok=True)
    plan_path = work_dir / "plan.json"
    fingerprint = input_fingerprint(source)
    if plan_path.exists():
        old = Plan.from_json(json.loads(plan_path.read_text()))
        if (old.fingerprint == fingerprint and old.shard_size == shard_size
                and all(Path(s.path).exists() for s in old.shards)
                and (old.reference_file is not None or not collect_references)):
            return old
    # Pass 1: conversation sizes in order of first appearance (+ the reference pool if needed).
    counts: dict[str, int] = {}
    references: list[str] = []
    for batch in iter_batches(source, TURNS, batch_size=batch_size):
        cids = batch.column("conversation_id")
        uniq, first = np.unique(np.asarray(cids.to_pylist(), dtype=object), return_index=True)
        vc = pc.value_counts(cids)
        batch_counts = {v["values"]: v["counts"] for v in vc.to_pylist()}
        for cid in uniq[np.argsort(first)]:
            counts[cid] = counts.get(cid, 0) + batch_counts[cid]
        if collect_references and "ground_truth_assistant" in batch.column_names:
            references.extend(g for g in batch.column("ground_truth_assistant").to_pylist() if not _blank_text(g))
    shard_of: dict[str, int] = {}
    sizes: list[list[int]] = []  # [rows, conversations] per shard
    for cid, n in counts.items():
        if not sizes or (sizes[-1][0] + n > shard_size and sizes[-1][0] > 0):
            sizes.append([0, 0])
        shard_of[cid] = len(sizes) - 1
        sizes[-1][0] += n
        sizes[-1][1] += 1
    shard_dir = work_dir / "shards"
    shard_dir.mkdir(exist_ok=True)
    paths = [shard_dir / f"input-{i:05d}.arrow" for i in range(len(sizes))]
    tmp_paths = [p.with_name(f".{p.name}.tmp") for p in paths]
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    keys = pa.array(list(shard_of.keys()), pa.string())
    values = np.fromiter(shard_of.values(), dtype=np.int64, count=len(shard_of))
    schema: Optional[pa.Schema] = None
    offset = 0
    try:
        # Pass 2: route every validated row to its shard.
        for batch in iter_batches(source, TURNS, batch_size=batch_size):
            batch = batch.append_column("_row", pa.array(np.arange(offset, offset + batch.num_rows), pa.int64()))
            offset += batch.num_rows
            if schema is None:
                schema = batch.schema
            else:
                batch = batch.cast(schema) if batch.schema != schema else batch
            shard_ids = values[pc.index_in(batch.column("conversation_id"), value_set=keys).to_numpy()]
            for sid in np.unique(shard_ids):
                part = batch.filter(pa.array(shard_ids == sid))
                w = writers.get(int(sid))
                if w is None:
                    w = writers[int(sid)] = pa.ipc.new_stream(str(tmp_paths[sid]), schema)
                w.write_table(part)
    finally:
        for w in writers.values():
            w.close()
    for tmp, final in zip(tmp_paths, paths):
        os.replace(tmp, final)
    reference_file = None
    if collect_references:
        reference_file = str(work_dir / "references.json")
        _write_json_atomic(Path(reference_file), references)
    plan = Plan(str(source), fingerprint, shard_size, offset,
                [ShardInfo(i, str(p), r, c) for i, (p, (r, c)) in enumerate(zip(paths, sizes))], reference_file)
    _write_json_atomic(plan_path, plan.to_json())
    return plan

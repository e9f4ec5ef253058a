"""Plan a job: shard the input by conversation, streaming, and spill each shard to disk once.

The number of shards is ceil(rows / shard_size), at least one per worker (Parquet metadata gives
the row count; other formats are counted in a fast raw pass). One validating pass
then streams the input in record batches and appends each row to the Arrow IPC
file of shard crc32(conversation_id) mod n_shards, with ``_row``, its position
in the input: a conversation never splits, memory stays flat whatever the
input size (no per-conversation table is kept; the duplicate-key check keeps 8
bytes per row while streaming and about 17 at its end, tests/data/test_key_tracker.py),
and the assignment is stable across processes and resumes.
Ground truths are collected on the way when the method needs the whole job's
reference pool. The plan is written atomically and reused by a resumed job
whose input content (a streamed hash, not size and mtime) and shard size are
unchanged and whose shard files still hash to what was written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa

from .._atomic import temp_path, write_json_atomic, write_text_atomic
from .._errors import OptionError
from ..data import TURNS, blank_text, file_digest, iter_batches

__all__ = [
    "Plan",
    "ShardInfo",
    "plan_job",
    "conversation_hash",
    "input_fingerprint",
    "job_fingerprint",
    "content_digest",
    "same_input",
]


@dataclass
class ShardInfo:
    shard_id: int
    path: str
    rows: int
    digest: Optional[str] = None


@dataclass
class Plan:
    input: str
    fingerprint: dict
    shard_size: int
    total_rows: int
    shards: list
    reference_file: Optional[str] = None
    skipped: list = field(default_factory=list)
    # Rows with a ground truth / a references list (None in plans written before they were counted), and
    # the keys of a --ground-truth file that matched no turn.
    ground_truths: Optional[int] = None
    reference_rows: Optional[int] = None
    ground_truth_unmatched: int = 0
    # The rows left out under --bad-rows skip, one JSON object per line (None: none were)
    quarantine: Optional[str] = None
    quarantined: int = 0
    # The type the input wrote its conversation ids in when it was an integer type (given back in the outputs)
    conversation_id_type: Optional[str] = None
    # Records read, good and bad: transcripts (or trace records) where the input holds them, else rows
    records: int = 0

    def to_json(self) -> dict:
        d = asdict(self)
        d["shards"] = [asdict(s) if isinstance(s, ShardInfo) else s for s in self.shards]
        return d

    @classmethod
    def from_json(cls, d: dict) -> Plan:
        d = dict(d)
        d["shards"] = [ShardInfo(**s) for s in d["shards"]]
        return cls(**d)


def content_digest(path) -> str:
    """``sha256:<hex>`` of a file's (or a directory's files') bytes, streamed (about 1.2 GB/s on one core
    with SHA extensions); the same digest the run metadata records for the input."""
    return file_digest(path, "sha256")


def input_fingerprint(source) -> dict:
    """Identity of an input by content: a streamed hash of its files (names and bytes), with their count and size.

    Resuming trusts this, never size and modification time: an in-place edit that keeps both
    still changes the hash, so no stale shard is reused.
    """
    p = Path(source)
    files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    return {
        "path": str(p.resolve()),
        "bytes": sum(f.stat().st_size for f in files),
        "files": len(files),
        "content": content_digest(p),
    }


def job_fingerprint(source, transcripts=None, ground_truth=None) -> dict:
    """What a job reads, by content: the input's fingerprint, how it is read (transcript options) and the reference
    file's fingerprint. A plan is reused, and a published output is left as it is on ``--resume``, only when this is
    ``same_input`` as what was recorded."""
    fingerprint = input_fingerprint(source)
    if transcripts is not None:  # how the input is read is part of what was planned
        fingerprint["read"] = {
            "input_format": transcripts.input_format,
            "role": transcripts.role,
            "bad_rows": transcripts.bad_rows,
            **({"columns": transcripts.columns} if transcripts.columns else {}),
        }
    if ground_truth is not None:
        fingerprint["ground_truth"] = input_fingerprint(ground_truth)
    return fingerprint


def same_input(a: Any, b: Any) -> bool:
    """Whether two input fingerprints name the same content read the same way, wherever the files lie (the
    recorded paths are left out: the same bytes moved or copied elsewhere are the same input)."""

    def content(fp):
        if not isinstance(fp, dict):
            return fp
        return {k: content(v) for k, v in fp.items() if k != "path"}

    return content(a) == content(b)


def conversation_hash(ids) -> np.ndarray:
    """The crc32 of each row's conversation id (string values, UTF-8), as int64; 0 for a null id. A shard is
    this mod the shard count; Ray Data's ``score_dataset`` partitions by it too. Hashed once per distinct id."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    enc = ids.dictionary_encode()
    of_value = [zlib.crc32(v.encode("utf-8")) for v in enc.dictionary.to_pylist()]
    codes = enc.indices.fill_null(len(of_value)).to_numpy(zero_copy_only=False)  # a null -> the trailing 0
    return np.array(of_value + [0], dtype=np.int64)[codes]


def _count_rows(source, batch_size: int, transcripts=None) -> int:
    """Rows in the input: from Parquet metadata, else a raw (unvalidated) streaming count."""
    import pyarrow.parquet as pq

    from ..data import DataError, check_file, detect_format, parquet_files, raw_batches, transcript_source

    path = check_file(source)
    fmt = detect_format(path)
    # The same reading, recording nothing: counting must not quarantine a bad row a second time.
    probe = None if transcripts is None else transcripts.probe()
    if fmt == "parquet" and (probe is None or transcript_source(path, fmt, probe) is None):
        try:
            return sum(pq.ParquetFile(f).metadata.num_rows for f in (parquet_files(path) if path.is_dir() else [path]))
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"not a readable Parquet file ({exc})", file=path) from None
    if fmt == "jsonl" and (probe is None or transcript_source(path, fmt, probe) is None):
        # flat turns: a row per non-blank line (a bad line is found, and named, by the validating pass)
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.strip())
    return sum(b.num_rows for b in raw_batches(path, fmt, None, batch_size, probe))


def _reusable(plan_path: Path, fingerprint: dict, shard_size: int, collect_references: bool) -> Optional[Plan]:
    try:
        old = Plan.from_json(json.loads(plan_path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None  # unreadable plan: plan again
    if (
        not same_input(old.fingerprint, fingerprint)
        or old.shard_size != shard_size
        or (old.reference_file is None and collect_references)
        or (old.reference_file is not None and not Path(old.reference_file).exists())
        or (old.quarantine is not None and not Path(old.quarantine).exists())
    ):
        return None
    for s in old.shards:
        if not Path(s.path).exists() or s.digest is None or content_digest(s.path) != s.digest:
            return None
    return old


def _integer_type(written: Optional[set]) -> Optional[str]:
    """The integer type the input wrote its conversation ids in (``int64`` when batches differ), else None."""
    if not written:
        return None
    try:
        types = [pa.type_for_alias(t) for t in written]
    except (ValueError, KeyError):
        return None
    if not all(pa.types.is_integer(t) for t in types):
        return None
    return str(types[0]) if len(set(types)) == 1 else "int64"


def _fill_ground_truth(batch: pa.Table, keyed: dict, matched: set) -> pa.Table:
    """``batch`` with empty ground truths / references filled from ``keyed`` (keys used go into ``matched``)."""
    n = batch.num_rows
    cids = batch.column("conversation_id").to_pylist()
    idxs = batch.column("turn_index").to_pylist()
    names = batch.column_names
    gt = batch.column("ground_truth_assistant").to_pylist() if "ground_truth_assistant" in names else [None] * n
    refs = batch.column("references").to_pylist() if "references" in names else [None] * n
    for i, key in enumerate(zip(cids, idxs)):
        hit = keyed.get(key)
        if hit is None:
            continue
        matched.add(key)
        if blank_text(gt[i]) and not blank_text(hit[0]):
            gt[i] = hit[0]
        if not refs[i] and hit[1]:
            refs[i] = hit[1]
    for name, values, typ in (("ground_truth_assistant", gt, pa.string()), ("references", refs, pa.list_(pa.string()))):
        arr = pa.array(values, typ)
        batch = batch.set_column(names.index(name), name, arr) if name in names else batch.append_column(name, arr)
        names = batch.column_names
    return batch


def _records_read(transcripts, rows: int) -> int:
    """Records the read saw, good and bad: transcript records (and the lines that were not even JSON) for a file of
    transcripts, else rows."""
    if transcripts is None:
        return rows
    if transcripts.records:
        return transcripts.records + sum(1 for where, _ in transcripts.skipped if not where.startswith("record"))
    return rows + len(transcripts.quarantine)


def plan_job(
    source,
    work_dir: Path,
    *,
    shard_size: int,
    min_shards: int = 1,
    batch_size: int = 65_536,
    collect_references: bool = False,
    check_columns: Optional[Callable[[list], None]] = None,
    transcripts=None,
    ground_truth: Optional[str] = None,
    fingerprint: Optional[dict] = None,
) -> Plan:
    """Shard ``source`` into ``work_dir/shards/*.arrow`` (or reuse a matching earlier plan).

    ``fingerprint``: the job's ``job_fingerprint``, when the caller has hashed the input already.

    ``check_columns`` sees the input's column names with the first batch (before anything is
    written) and raises to refuse them. ``ground_truth`` is a file of reference replies keyed by
    ``(conversation_id, turn_index)`` (``adherence.data.read_ground_truth``); it fills each turn
    whose own ``ground_truth_assistant`` / ``references`` is empty. ``min_shards``: at least this many
    shards where the rows allow (one per worker, so a job under ``shard_size`` rows still keeps every worker
    busy); a resumed job keeps its plan's shards whatever it is now.
    """
    if shard_size < 1:
        raise OptionError(f"`shard_size` must be >= 1, got {shard_size}")
    work_dir.mkdir(parents=True, exist_ok=True)
    plan_path = work_dir / "plan.json"
    if fingerprint is None:
        fingerprint = job_fingerprint(source, transcripts, ground_truth)
    keyed: Optional[dict] = None
    if ground_truth is not None:
        from ..data import read_ground_truth

        keyed = read_ground_truth(ground_truth)
    if plan_path.exists():
        old = _reusable(plan_path, fingerprint, shard_size, collect_references)
        if old is not None:
            return dataclasses.replace(old, fingerprint=fingerprint)  # the same content, named where it lies now
    n_rows = _count_rows(source, batch_size, transcripts)
    n_shards = max(1, -(-n_rows // shard_size), min(min_shards, n_rows))
    shard_dir = work_dir / "shards"
    shard_dir.mkdir(exist_ok=True)
    paths = [shard_dir / f"input-{i:05d}.arrow" for i in range(n_shards)]
    tmp_paths = [temp_path(p) for p in paths]
    rows = np.zeros(n_shards, dtype=np.int64)
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    references: list[str] = []
    schema: Optional[pa.Schema] = None
    offset = 0
    n_truths = n_refs = 0
    matched: set = set()
    done = False
    try:
        for batch in iter_batches(source, TURNS, batch_size=batch_size, transcripts=transcripts):
            if schema is None and check_columns is not None:
                check_columns(batch.column_names)
            if keyed is not None:
                batch = _fill_ground_truth(batch, keyed, matched)
            if "ground_truth_assistant" in batch.column_names:
                n_truths += sum(not blank_text(g) for g in batch.column("ground_truth_assistant").to_pylist())
            if "references" in batch.column_names:
                n_refs += sum(bool(r) for r in batch.column("references").to_pylist())
            batch = batch.append_column("_row", pa.array(np.arange(offset, offset + batch.num_rows), pa.int64()))
            offset += batch.num_rows
            if schema is None:
                schema = batch.schema
            elif batch.schema != schema:
                batch = batch.cast(schema)
            shard_ids = conversation_hash(batch.column("conversation_id")) % n_shards
            for sid in np.unique(shard_ids):
                part = batch.filter(pa.array(shard_ids == sid))
                w = writers.get(int(sid))
                if w is None:
                    w = writers[int(sid)] = pa.ipc.new_stream(str(tmp_paths[sid]), schema)
                w.write_table(part)
                rows[sid] += part.num_rows
            if collect_references and "ground_truth_assistant" in batch.column_names:
                references.extend(g for g in batch.column("ground_truth_assistant").to_pylist() if not blank_text(g))
        done = True
    finally:
        for w in writers.values():
            w.close()
        if not done:
            for t in tmp_paths:
                if t.exists():
                    t.unlink()
    for sid in writers:
        os.replace(tmp_paths[sid], paths[sid])
    shards = [ShardInfo(int(i), str(paths[i]), int(rows[i]), content_digest(paths[i])) for i in sorted(writers)]
    for i, sh in enumerate(shards):  # dense ids: empty hash buckets leave no shard
        sh.shard_id = i
    reference_file = None
    if collect_references:
        reference_file = str(work_dir / "references.json")
        write_json_atomic(Path(reference_file), references)
    skipped = [list(x) for x in transcripts.skipped] if transcripts is not None else []
    quarantine = None
    if transcripts is not None and transcripts.quarantine:
        quarantine = str(work_dir / "bad-rows.jsonl")
        write_text_atomic(
            Path(quarantine),
            "".join(json.dumps(q, ensure_ascii=False, default=repr) + "\n" for q in transcripts.quarantine),
        )
    plan = Plan(
        str(source),
        fingerprint,
        shard_size,
        offset,
        shards,
        reference_file,
        skipped,
        n_truths,
        n_refs,
        0 if keyed is None else len(keyed) - len(matched),
        quarantine,
        len(transcripts.quarantine) if transcripts is not None else 0,
        _integer_type(transcripts.source_types.get("conversation_id") if transcripts is not None else None),
        records=_records_read(transcripts, offset),
    )
    write_json_atomic(plan_path, plan.to_json())
    return plan

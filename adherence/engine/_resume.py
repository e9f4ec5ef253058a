"""What a job may reuse: its manifest (what decides its scores), the earlier work in its work directory, and an
output already published from the same input with the same score options (``--resume``)."""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import write_json_atomic
from .._fingerprint import score_fingerprint, score_hash
from ..data import metadata_path
from ..role import RoleConfig
from ._area import JobArea
from ._commit import store_of
from ._plan import same_input
from ._safety import output_format
from ._sink import say

__all__ = ["job_manifest", "check_job_manifest", "published_already"]


def job_manifest(config: RoleConfig, fingerprint: Optional[dict], shard_size: Optional[int]) -> dict:
    """What decides a job's scores: the options' hash and the options themselves (for saying what changed),
    the input's fingerprint, and the shard size (checkpoints are per shard)."""
    options = json.loads(json.dumps(score_fingerprint(config), sort_keys=True, default=repr))
    if isinstance(options.get("calibration"), dict):  # named by its digests, not copied knot by knot
        options["calibration"].pop("map", None)
        options["calibration"].pop("training", None)
    return {"config": score_hash(config), "fingerprint": fingerprint, "shard_size": shard_size, "options": options}


def published_already(config: RoleConfig, area: JobArea, fingerprint: dict, start: float) -> Optional[dict]:
    """For ``--resume``: when the output is already published by a job with these score options from this
    input (its metadata says so and both outputs are there whole), the summary of a run that scored nothing;
    a line says so. When an output of ours is there but differs, a line says why the job scores again."""
    final = area.commit.output
    store = store_of(final)
    meta = store.read_json(metadata_path(final))
    engine = (meta.get("engine") or {}) if isinstance(meta, dict) else {}
    recorded = engine.get("score")
    if not isinstance(meta, dict) or not isinstance(recorded, dict) or meta.get("published") is False:
        return None  # nothing of ours published there: an ordinary resume
    name = area.names["turns"]
    job = job_manifest(config, fingerprint, None)
    old = dict(recorded, fingerprint=engine.get("input_fingerprint"), shard_size=None)
    if old.get("config") != job["config"] or not same_input(old["fingerprint"], fingerprint):
        warnings.warn(f"--resume: {name} is published but is scored again: {why_not_reused(old, job)}",
                      stacklevel=5)  # fmt: skip
        return None
    recorded_summary = meta.get("summary")
    summary: dict = recorded_summary if isinstance(recorded_summary, dict) else {}
    if summary.get("failed_shards"):
        return None  # published with shards that failed as a whole: those are scored again from the work dir
    rows = (meta.get("outputs") or {}).get("rows")
    try:
        whole = all(store.kind(t) == "file" for t in (final, area.commit.sessions)) and (
            not isinstance(final, Path) or output_format(final) != "parquet" or pq.read_metadata(final).num_rows == rows
        )
    except (OSError, pa.ArrowException):
        whole = False
    if not whole:
        warnings.warn(f"--resume: {name} is published from this input with these options, but it or its "
                      "sessions file is missing or no longer whole; it is scored again", stacklevel=5)  # fmt: skip
        return None
    say(f"--resume: {name} is already published from this input with these options: nothing scored "
        "(drop --resume, or give another -o, to score again)")  # fmt: skip
    turns = summary.get("turns", rows)
    return dict(summary, elapsed_s=time.perf_counter() - start, turns_scored=0, turns_reused=turns,
                turns_per_s=None, failed_shards=[], shards_resumed=summary.get("shards", 0),
                already_published=True)  # fmt: skip


def check_job_manifest(config: RoleConfig, work: Path, plan, resume: bool) -> bool:
    """Write the job's manifest; True when an earlier, different job's shard outputs were cleared (with
    ``--resume``, a warning says on one line why its work could not be reused)."""
    manifest = work / "job.json"
    cleared = False
    job = job_manifest(config, plan.fingerprint, plan.shard_size)
    if manifest.exists():
        try:
            old = json.loads(manifest.read_text())
        except ValueError:
            old = None
        if (
            not isinstance(old, dict)
            or old.get("config") != job["config"]
            or old.get("shard_size") != job["shard_size"]
            or not same_input(old.get("fingerprint"), job["fingerprint"])
        ):
            # Different job in the same place: its shard outputs must not be mixed with ours.
            shutil.rmtree(work / "out", ignore_errors=True)
            shutil.rmtree(work / "checkpoints", ignore_errors=True)
            cleared = True
            if resume:
                warnings.warn(
                    f"--resume: the earlier work in {work} is not reused: {why_not_reused(old, job)}", stacklevel=5
                )
    write_json_atomic(manifest, job)
    return cleared


def _flat(d: Any, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def why_not_reused(old: Any, job: dict) -> str:
    """What differs between an earlier job's manifest and this job's, in a few words."""
    if not isinstance(old, dict):
        return "its manifest (job.json) is unreadable"
    if not same_input(old.get("fingerprint"), job["fingerprint"]):
        return "the input's content changed"
    if old.get("shard_size") != job["shard_size"]:
        return f"the shard size changed ({old.get('shard_size')} -> {job['shard_size']})"
    if "options" not in old:
        return "it was made by an older version, which recorded no options"
    a, b = _flat(old["options"]), _flat(job["options"])
    changed = [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
    return "options that decide scores changed (" + ", ".join(changed[:4]) + more + ")"

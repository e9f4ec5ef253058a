"""Checks before any work: output formats and paths, the columns the scores add, dead temporaries.

Ownership, locks, the work directory and publishing are the commit protocol's (``_commit``); this module
holds what a job checks about its paths before it takes any of them.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Optional

from .._atomic import temporary_of
from ..data import TURN_SCORES, TURNS, DataError, Remote, is_uri, metadata_path
from ._commit import check_replaceable, pid_alive
from ._files import same_file

__all__ = [
    "OUTPUT_FORMATS",
    "output_format",
    "check_outputs",
    "output_columns",
    "reserved_columns",
    "remove_dead_staging",
    "remove_dead_temporaries",
    "STAGING_PREFIX",
]

#: A job with outputs or a work dir on object storage stages its bookkeeping in ``<tmp>/<prefix><pid>-<random>``.
STAGING_PREFIX = "adherence-staging-"


OUTPUT_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
# Columns every scored row gets (the turn-scores contract's, past the turn's key); an input column of the same name
# would be silently replaced. ``_row`` is the engine's own row number while a job runs.
_OUTPUT_COLUMNS = tuple(c.name for c in TURN_SCORES.columns if c.name not in TURNS.key and c.added_when is None) + (
    "_row",
)


def output_format(path: Path) -> str:
    """``parquet`` | ``jsonl`` | ``csv`` | ``directory`` (no suffix), or a one-line error."""
    if not path.suffix:
        return "directory"
    fmt = OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(
            f"cannot write scores as {path.suffix!r}; use .parquet, .jsonl, .csv or a directory "
            "(no extension) for a Parquet dataset",
            file=path,
        )
    return fmt


def output_columns(method: str, config=None) -> tuple:
    """The columns a run of ``method`` adds: the always-present ones, ``calibrated_score`` with a calibration (the
    turn-scores contract's columns added in some jobs), and ``<method>_*`` for its own diagnostics (a judge's
    self-consistency ``llm_judge_agreement`` and ``llm_judge_samples`` among them)."""
    when = {"calibration": config is not None and bool(getattr(config, "calibration", None))}
    extra = tuple(c.name for c in TURN_SCORES.columns if when.get(c.added_when or "", False))
    return tuple(c for c in _OUTPUT_COLUMNS if c != "_row") + extra + (f"{method}_*",)


def reserved_columns(method: str, columns, config=None) -> list[str]:
    """Input columns that the scores would replace (``score``, ``status``, ``<method>_*`` ...)."""
    added = set(output_columns(method, config)) | {"_row"}
    return [c for c in columns if c in added or c.startswith(f"{method}_")]


def _inside(child: Path, parent: Path) -> bool:
    c, p = child.resolve(), parent.resolve()
    return c == p or p in c.parents


def check_outputs(source, output, sessions, work) -> None:
    """Refuse, before any work, every output that would destroy data or collide with another: the one check of a
    job's targets, each a local ``Path`` or an object on object storage (a ``Remote``).

    Raises:
        DataError: one line naming the path and what is wrong.
    """
    for what, t in (("the output", output), ("the sessions output", sessions)):
        if isinstance(t, Remote):
            if output_format(Path(t.name)) == "directory":
                raise DataError(
                    f"{what} on object storage must be one file (.parquet, .jsonl or .csv), not a directory",
                    file=str(t),
                )
        else:
            output_format(t)
    if _same_target(output, sessions):
        raise DataError(
            "the sessions output is the same path as the turn output; give --sessions-output another path",
            file=str(sessions),
        )
    written = {"output": output, "sessions output": sessions}
    for what, t in (("output metadata", output), ("sessions metadata", sessions)):
        if isinstance(t, Path):  # an object's metadata lies beside it, under the same prefix
            written[what] = metadata_path(t)
    local = {what: p for what, p in written.items() if isinstance(p, Path)}
    if isinstance(source, (str, os.PathLike)) and not is_uri(source):
        src = Path(source)
        for what, p in local.items():
            if same_file(p, src) or (src.is_dir() and _inside(p, src)):
                raise DataError(f"the {what} would overwrite the input {src}; choose another path", file=p)
        if isinstance(work, Path) and (_inside(work, src) if src.is_dir() else same_file(work, src)):
            raise DataError(f"the work directory lies in the input {src}; pass another --work-dir", file=work)
    for what, p in written.items():
        if _target_inside(p, work):
            raise DataError(
                f"the {what} lies inside the work directory {work}, which is cleared after the job; "
                "choose another path",
                file=str(p),
            )
    for what, p in local.items():
        if p.parent.exists() and not os.access(p.parent, os.W_OK | os.X_OK):
            raise DataError(f"cannot write the {what}: directory {p.parent} is not writable", file=p)
    check_replaceable(output, "the output", "scores")
    check_replaceable(sessions, "the sessions output", "sessions")


def _same_target(a, b) -> bool:
    if isinstance(a, Path) and isinstance(b, Path):
        return same_file(a, b)
    return str(a) == str(b)


def _target_inside(child, parent) -> bool:
    """``child`` is ``parent`` or lies below it: local paths resolved, objects by their URI's prefix."""
    if isinstance(child, Path) and isinstance(parent, Path):
        return _inside(child, parent)
    if isinstance(child, Path) or isinstance(parent, Path):
        return False
    base = str(parent).split("?", 1)[0].rstrip("/") + "/"
    return str(child).split("?", 1)[0].startswith(base)


def remove_dead_temporaries(targets) -> list[str]:
    """Remove the temporaries an earlier, killed job left beside ``targets`` (called holding their locks).

    Only ``.<name>.<pid>-<8 hex>.tmp`` beside a target ``<name>`` (what ``temp_path`` makes) whose
    process is gone: a live process's temporaries are left alone. A temporary directory is removed only
    if it holds nothing but Parquet parts. Returns the names removed.
    """
    removed = []
    for target in targets:
        target = Path(target)
        try:
            entries = list(target.parent.iterdir())
        except OSError:
            continue
        for q in entries:
            pid = temporary_of(target, q.name)
            if pid is None or pid_alive(pid):
                continue
            try:
                if q.is_symlink() or q.is_file():
                    q.unlink()
                elif q.is_dir() and all(
                    re.match(r"^(part-\d{5}\.parquet|\..*\.tmp)$", r.name) and r.is_file() for r in q.iterdir()
                ):
                    shutil.rmtree(q)
                else:
                    continue
            except OSError:
                continue
            removed.append(q.name)
    return removed


def remove_dead_staging(tmp: Optional[Path] = None) -> list[str]:
    """Remove the local staging directories that killed object-storage jobs left in ``tmp`` (the system's
    temporary directory): only ``adherence-staging-<pid>-*`` of a process that no longer exists, holding
    nothing but a job's ``work`` and ``publish`` folders. Returns the names removed."""
    import tempfile

    base = Path(tmp or tempfile.gettempdir())
    pattern = re.compile(rf"^{re.escape(STAGING_PREFIX)}(\d+)-[A-Za-z0-9_]+$")
    removed: list[str] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for q in entries:
        m = pattern.match(q.name)
        if m is None or pid_alive(int(m.group(1))) or q.is_symlink() or not q.is_dir():
            continue
        try:
            if {r.name for r in q.iterdir()} <= {"work", "publish"}:
                shutil.rmtree(q)
                removed.append(q.name)
        except OSError:
            continue
    return removed

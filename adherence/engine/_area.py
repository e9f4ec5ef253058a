"""A job's work area: the frame that ``score`` and the cascade both run inside.

Before any work a job resolves its targets (the output, the sessions output and the work directory: local paths or
object-storage URIs), checks them once (``check_outputs``), takes the locks on its outputs, records what each target
is (publish replaces a target only while it is still that) and opens its work directory, with the object-storage
mirror behind the same ``WorkDir`` interface. The job's body runs with that ``JobArea``; what it publishes goes
through ``JobArea.commit`` and ``JobArea.publish``. After a body that left no failed shard the work directory is
removed (unless kept); the staging directory of object-storage targets always is.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

import pyarrow as pa
import pyarrow.parquet as pq

from .._errors import EngineError
from ..data import Remote, as_target, check_file, metadata_path, redact_secrets
from ._commit import Commit, Publisher, WorkDir, check_quarantine, quarantine_of, store_of
from ._options import EngineOptions
from ._safety import STAGING_PREFIX, check_outputs, remove_dead_staging, remove_dead_temporaries

__all__ = ["Job", "JobArea", "JobResult", "JobTargets", "run_job"]

Target = Union[Path, str]  # a local path, or an object-storage URI


@dataclass
class JobResult:
    """What a job produced: paths (or the table for in-memory runs) and its summary."""

    output: Union[Path, str, None]  # a str is an object-storage URI
    sessions_output: Union[Path, str, None]
    summary: dict
    table: Optional[pa.Table] = None
    sessions: Optional[pa.Table] = None


@dataclass
class JobTargets:
    """Where a job writes, as given (absolute local paths, or URIs), and where each is written on this machine:
    a local target as it is, an object-storage one staged under ``staging`` (a directory named by this process,
    so a later job removes what a killed one left)."""

    output: Target
    sessions: Target
    work: Target
    staging: Optional[Path] = None
    remote: dict[str, Remote] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        output: Union[str, os.PathLike],
        sessions_output: Union[str, os.PathLike, None],
        work_dir: Union[str, os.PathLike, None],
    ) -> JobTargets:
        # Absolute from here on (Ray workers run in other directories and on other nodes), or URIs.
        out_t = as_target(output)
        sessions_t = _beside(out_t, "sessions") if sessions_output is None else as_target(sessions_output)
        work_t = as_target(work_dir) if work_dir else _beside(out_t, "work")
        remote = {
            k: Remote(t)
            for k, t in (("output", out_t), ("sessions", sessions_t), ("work", work_t))
            if isinstance(t, str)
        }
        staging = None
        if remote:
            remove_dead_staging()
            staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-"))
        return cls(out_t, sessions_t, work_t, staging, remote)

    def local(self, key: str) -> Path:
        """``output``, ``sessions`` or ``work`` on this machine: the path, or the staged copy of an object."""
        t = getattr(self, key)
        if isinstance(t, Path):
            return t
        if self.staging is None:  # pragma: no cover - resolve stages every URI target
            raise EngineError(f"{t} is on object storage but no staging directory was made for it")
        return self.staging / ("work" if key == "work" else "publish") / self.remote[key].name

    def final(self, key: str) -> Union[Path, Remote]:
        """Where ``output`` or ``sessions`` is committed: the local path, or the object."""
        return self.remote.get(key, self.local(key))

    @property
    def names(self) -> dict:
        """The targets as the metadata and messages name them."""
        return {"turns": str(self.output), "sessions": str(self.sessions), "work": str(self.work)}

    def cleanup(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)


@dataclass
class JobArea:
    """A job's targets, taken: the commit its outputs are published through, its local work directory and, for a
    work directory on object storage, the remote one mirrored."""

    targets: JobTargets
    commit: Commit
    work: Path
    remote_work: Optional[Remote]
    replace_quarantine: bool  # an earlier run's bad-rows file is there (checked ours): replaced on publish
    _dirs: tuple = ()

    @property
    def out_path(self) -> Path:
        return self.targets.local("output")

    @property
    def sessions_path(self) -> Path:
        return self.targets.local("sessions")

    @property
    def names(self) -> dict:
        return self.targets.names

    def publisher(self) -> Publisher:
        return self.commit.publisher()

    def publish(
        self, publisher: Publisher, meta: dict, summary: dict, rows: int, *, engine: dict, job: Optional[dict]
    ) -> None:
        """Complete the run metadata (how the job ran: ``engine``; its summary; the caller's options: ``job``; the
        outputs), write it beside both outputs with secrets redacted, and publish everything ``publisher`` holds."""
        meta["engine"] = dict(engine)
        meta["summary"] = summary
        if job:
            meta["job"] = job
        from ..data import command_name

        meta["outputs"] = {"turns": self.names["turns"], "sessions": self.names["sessions"], "rows": rows,
                           "command": command_name()}  # fmt: skip
        meta = redact_secrets(meta)  # an API key given as a flag or option never reaches disk
        text = json.dumps(meta, indent=2, ensure_ascii=False, default=repr) + "\n"
        for final in (self.commit.output, self.commit.sessions):
            publisher.add_text(metadata_path(final), text)
        publisher.publish()

    def remove_work(self) -> None:
        for d in self._dirs:
            d.remove()


@contextlib.contextmanager
def _taken(source, targets: JobTargets, options: EngineOptions, intermediate: bool):
    """Check the targets, take their locks and the work directory; yields the ``JobArea``."""
    out_path, sessions_path, work = targets.local("output"), targets.local("sessions"), targets.local("work")
    finals = {"output": targets.final("output"), "sessions": targets.final("sessions")}
    if isinstance(source, (str, os.PathLike)):
        check_file(source)  # a missing file, a FIFO, an unreadable or empty input: one line, before anything
    check_outputs(source, finals["output"], finals["sessions"], targets.remote.get("work", work))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sessions_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        # The sessions file is an output too: a job writing it as its turn output must wait.
        locks = tuple(
            stack.enter_context(store_of(t).lock(t.with_name(f".{t.name}.lock"), f"the {what}", subject=str(t)))
            for t, what in ((finals["output"], "output"), (finals["sessions"], "sessions output"))
        )
        # A job killed while publishing left its temporaries here; they are ours to remove now.
        remove_dead_temporaries([t for f in finals.values() if isinstance(f, Path) for t in (f, metadata_path(f))])
        # What the targets are now, checked: publish replaces them only if they are still that.
        checked = [t for f in finals.values() for t in (f, metadata_path(f))]
        replace_quarantine = False
        if options.bad_rows != "fail":  # a row left out is kept there: none vanishes unrecorded
            check_quarantine(finals["output"])
            q = quarantine_of(finals["output"])
            checked.append(q)
            # an earlier run's (checked ours) is replaced even when this run leaves nothing out
            replace_quarantine = store_of(q).kind(q) != "missing"
        commit = Commit(
            finals["output"],
            finals["sessions"],
            {t: store_of(t).identity(t) for t in checked},
            locks,
            targets.staging,
            final=not intermediate,
        )
        remote = targets.remote.get("work")
        remote_dir = stack.enter_context(WorkDir(remote, resume=options.resume)) if remote is not None else None
        local_dir = stack.enter_context(WorkDir(work, resume=options.resume))
        if remote_dir is not None:
            commit.locks += (remote_dir.lock,)
            if options.resume:
                remote_dir.pull(work)
        dirs = (local_dir,) if remote_dir is None else (local_dir, remote_dir)
        yield JobArea(targets, commit, work, remote, replace_quarantine, dirs)


def run_job(
    source,
    output: Optional[Union[str, os.PathLike]],
    sessions_output: Optional[Union[str, os.PathLike]],
    options: EngineOptions,
    body: Callable[[Any, JobArea, float], dict],
    *,
    intermediate: bool = False,
) -> JobResult:
    """Run ``body(source, area, start)`` inside the job's work area and return what it produced.

    With no ``output`` the job writes to a temporary directory and the result holds the tables. Nothing the job did
    not create is deleted or overwritten: the targets are checked before any work, and the output, the sessions file
    and their metadata are published together by the body, only once complete. A failure or an interrupt leaves
    earlier files untouched; the work directory is kept after a failed shard (``--resume`` scores only that shard).
    """
    start = time.perf_counter()
    tmp_ctx = None
    target: Union[str, os.PathLike] = Path() if output is None else output
    if output is None:
        tmp_ctx = tempfile.TemporaryDirectory(prefix="adherence-")
        target = Path(tmp_ctx.name) / "scores.parquet"
    targets: Optional[JobTargets] = None
    try:
        targets = JobTargets.resolve(target, sessions_output, options.work_dir)
        with _taken(source, targets, options, intermediate) as area:
            summary = body(source, area, start)
            if not options.keep_work_dir and not summary["failed_shards"]:
                area.remove_work()
        result = JobResult(targets.output if output is not None else None, targets.sessions, summary)
        if output is None:
            result.table = pq.read_table(targets.local("output"))
            result.sessions = pq.read_table(targets.local("sessions"))
            result.sessions_output = None
        return result
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
        if targets is not None:
            targets.cleanup()


class Job:
    """A job that runs inside the work area (``Engine``, ``CascadeEngine``): ``run`` checks what it can before any
    target is taken (``_before``), runs ``_body`` in the area and releases what it started (``_after``)."""

    options: EngineOptions
    intermediate = False  # a pass of a larger job: its outputs are that job's work

    def run(
        self,
        source,
        output: Optional[Union[str, os.PathLike]] = None,
        *,
        sessions_output: Optional[Union[str, os.PathLike]] = None,
    ) -> JobResult:
        """Score ``source`` (a path or an Arrow table) into ``output`` (Parquet file or directory, JSONL, CSV).

        With no ``output`` the result is returned in memory (``JobResult.table``).

        Nothing the job did not create is deleted or overwritten: every output path is checked
        before any work (``check_outputs``), and the output, the sessions file and their
        metadata are published together, only once complete and verified (every input row
        exactly once). A failure or an interrupt leaves earlier files untouched.
        """
        self._before()
        try:
            return run_job(source, output, sessions_output, self.options, self._body, intermediate=self.intermediate)
        finally:
            self._after()

    def _before(self) -> None:
        pass

    def _after(self) -> None:
        pass

    def _body(self, source, area: JobArea, start: float) -> dict:
        raise NotImplementedError


def _beside(target: Target, what: str) -> Target:
    """``scores.parquet`` -> ``scores.sessions.parquet`` (``what="sessions"``) or ``scores.parquet.work``."""
    if isinstance(target, Path):
        if what == "work":
            return target.with_name(target.name + ".work")
        return target.with_name(f"{target.stem}.sessions{target.suffix or '.parquet'}")
    obj = Remote(target)
    if what == "work":
        return str(obj.with_name(obj.name + ".work"))
    stem, dot, suffix = obj.name.rpartition(".")
    return str(obj.with_name(f"{stem}.sessions.{suffix}" if dot else f"{obj.name}.sessions.parquet"))

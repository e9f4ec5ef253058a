"""What a job may touch: output checks before any work, ownership of existing files, locks, work-dir hygiene.

The rule is simple: a job never deletes or overwrites anything it did not
create. An existing output is replaced only when the run metadata beside it
(``<output>.meta.json``) says adherence wrote it; a work directory is reused
or cleared only when it holds nothing but the engine's own entries; two jobs
never share an output or a work directory (an exclusive ``flock`` on each).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import socket
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import Optional

from .._atomic import temporary_of
from .._errors import EngineError
from ..data import DataError, metadata_path
from ..data._storage import Remote

__all__ = [
    "OUTPUT_FORMATS",
    "output_format",
    "check_outputs",
    "check_replaceable",
    "WorkDir",
    "PathLock",
    "RemoteLease",
    "RemoteWorkDir",
    "output_columns",
    "reserved_columns",
    "remove_dead_temporaries",
    "is_adherence_output",
    "PRODUCER",
]

PRODUCER = "adherence"
OUTPUT_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
# Columns every scored row gets; an input column of the same name would be silently replaced.
_OUTPUT_COLUMNS = (
    "method",
    "score",
    "prediction",
    "status",
    "error",
    "reason",
    "p_yes_source",
    "truncated",
    "yes_no_mass",
    "_row",
)

# Entries of a work directory, and what may live inside its folders. A work directory is the engine's only
# when its marker says so (written when a job made or adopted it): entries named like these in any other
# directory are the user's.
WORK_MARKER = ".adherence-work.json"
_WORK_FILES = {"job.json", "plan.json", "references.json", "input.parquet", "lock", WORK_MARKER}
_WORK_DIRS = {
    "shards": re.compile(r"^(input-\d{5}\.arrow|\..*\.tmp)$"),
    "out": re.compile(r"^(shard-\d{5}\.(parquet|done\.json)|\..*\.tmp)$"),
}
_TMP = re.compile(r"^\..*\.tmp$")


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
    """The columns a run of ``method`` adds (``<method>_*`` stands for its own): the always-present ones,
    ``calibrated_score`` with a calibration, ``agreement``/``samples`` with self-consistency samples."""
    extra: tuple = ()
    if config is not None and getattr(config, "calibration", None):
        extra += ("calibrated_score",)
    judge = getattr(config, "judge", None) if config is not None else None
    if judge is not None and getattr(judge, "samples", 1) > 1:
        extra += ("agreement", "samples")
    return tuple(c for c in _OUTPUT_COLUMNS if c != "_row") + extra + (f"{method}_*",)


def reserved_columns(method: str, columns, config=None) -> list[str]:
    """Input columns that the scores would replace (``score``, ``status``, ``<method>_*`` ...)."""
    added = set(output_columns(method, config)) | {"_row"}
    return [c for c in columns if c in added or c.startswith(f"{method}_")]


def _read_meta(path: Path) -> Optional[dict]:
    try:
        meta = json.loads(metadata_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def is_adherence_output(path: Path) -> bool:
    """True when ``path``'s run metadata says adherence wrote it (so a new run may replace it)."""
    return _written_by_adherence(_read_meta(path))


def _written_by_adherence(meta: Optional[dict]) -> bool:
    """True when run metadata names adherence as the producer (or, from older runs, among the versions)."""
    return meta is not None and (meta.get("producer") == PRODUCER or "adherence" in (meta.get("versions") or {}))


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def _inside(child: Path, parent: Path) -> bool:
    c, p = child.resolve(), parent.resolve()
    return c == p or p in c.parents


def check_replaceable(path: Path, what: str) -> None:
    """Refuse (one line) to replace ``path`` unless adherence wrote it and nothing else lives in it."""
    meta = metadata_path(path)
    if path.exists() or path.is_symlink():
        if not (path.is_file() or path.is_dir()) or path.is_symlink():
            raise DataError(f"{what} exists and is not a regular file or directory; refusing to replace it", file=path)
        if not is_adherence_output(path):
            raise DataError(
                f"{what} exists and was not written by adherence (no {meta.name} of ours beside it); "
                "refusing to overwrite it: remove it or choose another path",
                file=path,
            )
        if path.is_dir():
            foreign = [
                p.name
                for p in path.iterdir()
                if not re.match(r"^part-\d{5}\.parquet$", p.name) or p.is_symlink() or not p.is_file()
            ]  # a user's folder named part-00001.parquet is not ours
            if foreign:
                raise DataError(
                    f"{what} is a directory holding files adherence did not write ({foreign[0]!r}, ...); "
                    "refusing to replace it",
                    file=path,
                )
    elif meta.exists() and not is_adherence_output(path):
        raise DataError(f"{meta.name} exists and was not written by adherence; refusing to overwrite it", file=meta)


def check_outputs(source, output: Path, sessions: Path, work: Path) -> None:
    """Refuse, before any work, every output that would destroy data or collide with another.

    Raises:
        DataError: one line naming the path and what is wrong.
    """
    output_format(output)
    output_format(sessions)
    if _same(output, sessions):
        raise DataError(
            "the sessions output is the same path as the turn output; give --sessions-output another path",
            file=sessions,
        )
    written = {
        "output": output,
        "sessions output": sessions,
        "output metadata": metadata_path(output),
        "sessions metadata": metadata_path(sessions),
    }
    if isinstance(source, (str, os.PathLike)):
        src = Path(source)
        for what, p in written.items():
            if _same(p, src) or (src.is_dir() and _inside(p, src)):
                raise DataError(f"the {what} would overwrite the input {src}; choose another path", file=p)
        if _inside(work, src) if src.is_dir() else _same(work, src):
            raise DataError(f"the work directory lies in the input {src}; pass another --work-dir", file=work)
    for what, p in written.items():
        if _inside(p, work):
            raise DataError(
                f"the {what} lies inside the work directory {work}, which is cleared after the job; "
                "choose another path",
                file=p,
            )
        if not p.parent.exists():
            continue
        if not os.access(p.parent, os.W_OK | os.X_OK):
            raise DataError(f"cannot write the {what}: directory {p.parent} is not writable", file=p)
    check_replaceable(output, "the output")
    check_replaceable(sessions, "the sessions output")


class PathLock:
    """An exclusive, non-blocking ``flock`` on a lock file; a second job gets a one-line error.

    The lock file is opened without following symlinks (``O_NOFOLLOW``) and must be a regular file: a
    symlink or anything else planted at its path is refused, never written through. Holding the
    ``flock`` is not enough on its own, because the holder removes the file when it is done: a second
    process may have opened the old file just before, and would then lock a file no longer at the path
    while a third locks the new one. So after ``flock`` succeeds the lock checks that the path still
    names the very file it locked (same device and inode) and otherwise starts again; the holder
    unlinks the path while it still holds the ``flock`` and closes after. Together no two processes
    ever hold the same path.
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what = path, what
        self.fd: Optional[int] = None

    def _open(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise DataError(
                    f"the lock file of {self.what} is a symbolic link; refusing to follow it "
                    "(remove it if no adherence job is running)",
                    file=self.path,
                ) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise DataError(f"the lock file of {self.what} is not a regular file; refusing to use it", file=self.path)
        return fd

    def acquire(self) -> PathLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    try:
                        holder = self.path.read_text().strip() or "?"
                    except OSError:
                        holder = "?"
                    raise EngineError(
                        f"{self.what} {self.path.parent} is in use by another adherence job (pid "
                        f"{holder}); wait for it or choose another path"
                    ) from None
                raise
            try:
                now = os.lstat(self.path)
            except FileNotFoundError:
                now = None
            st = os.fstat(fd)
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
                self.fd = fd
                return self
            os.close(fd)  # the holder removed it after we opened it: lock the file now at the path
        raise EngineError(f"could not lock {self.what} {self.path.parent}: its lock file keeps being replaced")

    def __enter__(self) -> PathLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self, remove: bool = True) -> None:
        """Drop the lock; with ``remove`` the lock file goes first, while still held (see the class docstring)."""
        if self.fd is None:
            return
        if remove:
            try:
                st, now = os.fstat(self.fd), os.lstat(self.path)
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    self.path.unlink()
            except OSError:
                pass
        os.close(self.fd)  # closing drops the flock
        self.fd = None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RemoteLease:
    """A lock on object storage: a lease object naming its holder, refreshed while the job runs.

    A second job refuses while the lease is fresher than ``ttl`` seconds, and takes it over once it
    has lapsed (the holder was killed), or at once when the holder is a process of this host that no
    longer exists. Two jobs that start within the same instant both write the lease; each reads it
    back and the one whose write did not survive backs off.
    """

    def __init__(self, obj: Remote, what: str, ttl: float = 60.0) -> None:
        self.obj, self.what, self.ttl = obj, what, ttl
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _record(self) -> bytes:
        return json.dumps(
            {
                "token": self.token,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "heartbeat": time.time(),
                "ttl": self.ttl,
            }
        ).encode()

    def _holder(self) -> Optional[dict]:
        try:
            held = json.loads(self.obj.read_bytes())
        except (OSError, ValueError):
            return None
        return held if isinstance(held, dict) else None

    def _refuse(self, held: dict) -> None:
        age = time.time() - float(held.get("heartbeat", 0))
        raise EngineError(
            f"{self.what} {self.obj.parent} is in use by another adherence job (host "
            f"{held.get('host', '?')}, pid {held.get('pid', '?')}, lease renewed {age:.0f} s ago); "
            f"wait for it, or for its lease to lapse ({self.ttl:.0f} s after its last renewal)"
        )

    def acquire(self) -> RemoteLease:
        held = self._holder()
        if held and held.get("token") != self.token:
            fresh = time.time() - float(held.get("heartbeat", 0)) < float(held.get("ttl", self.ttl))
            dead = held.get("host") == socket.gethostname() and not _pid_alive(int(held.get("pid", -1)))
            if fresh and not dead:
                self._refuse(held)
        self.obj.write_bytes(self._record())
        time.sleep(0.2)
        held = self._holder()
        if not held or held.get("token") != self.token:
            self._refuse(held or {})
        self._thread = threading.Thread(target=self._renew, daemon=True, name="adherence-lease")
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                self.obj.write_bytes(self._record())
            except OSError:
                pass  # the next renewal tries again; a lapse lets another job in, never loses data

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            held = self._holder()
            if held and held.get("token") == self.token:
                self.obj.delete()

    def __enter__(self) -> RemoteLease:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _write_marker(path: Path, obj: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(obj, fh)


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
            if pid is None or _pid_alive(pid):
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


class WorkDir:
    """The job's work directory: locked while in use, holding only the engine's entries.

    Args:
        path: the directory.
        resume: keep earlier entries (finished shards) instead of clearing them.
    """

    def __init__(self, path: Path, *, resume: bool) -> None:
        self.path, self.resume = path, resume
        self.created = False
        self.ours = False  # made by an adherence job (this one or an earlier one): removed when done
        self.adopted = False  # an empty directory someone else made: its contents are ours, itself is not
        self.lock = PathLock(path / "lock", "the work directory")

    def _marker(self) -> Optional[dict]:
        q = self.path / WORK_MARKER
        if q.is_symlink() or not q.is_file():
            return None
        try:
            m = json.loads(q.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return m if isinstance(m, dict) and m.get("producer") == PRODUCER else None

    def __enter__(self) -> WorkDir:
        p = self.path
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            raise DataError("the work directory path exists and is not a directory", file=p)
        if not p.exists():
            p.mkdir(parents=True)
            self.created = True
        marker = self._marker()
        if not self.created and marker is None:
            entries = sorted(q.name for q in p.iterdir())
            if entries:
                # Names prove nothing: a user's input.parquet or job.json is not ours to clear.
                raise DataError(
                    f"the work directory holds files adherence did not write ({entries[0]}, ...; no "
                    f"{WORK_MARKER} of ours); refusing to use or clear it: pass another --work-dir",
                    file=p,
                )
            self.adopted = True
        self.ours = self.created or (marker is not None and bool(marker.get("created")))
        foreign = self.foreign_entries()
        if foreign:
            raise DataError(
                f"the work directory holds files adherence did not write ({foreign[0]}, ...); "
                "refusing to use or clear it: pass another --work-dir",
                file=p,
            )
        self.lock.acquire()
        if marker is None:
            try:
                _write_marker(p / WORK_MARKER, {"producer": PRODUCER, "created": self.created, "pid": os.getpid()})
            except FileExistsError:  # another job adopted it between our look and our lock, and is done
                pass
        if not self.resume:
            self.clear(keep_lock=True)
        else:
            for stale in [q for q in p.iterdir() if _TMP.match(q.name)]:
                stale.unlink()
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is not None and (self.created or self.adopted) and not any((self.path / "out").glob("*.done.json")):
            self.clear(keep_lock=True)  # nothing worth resuming: leave no trace of a job that failed early
            self.lock.release()
            try:
                (self.path / WORK_MARKER).unlink()
            except OSError:
                pass
            if self.created:
                try:
                    self.path.rmdir()
                except OSError:
                    pass
            return
        self.lock.release()

    def foreign_entries(self) -> list[str]:
        out = []
        for q in self.path.iterdir():
            if q.name in _WORK_FILES or _TMP.match(q.name):
                continue
            pattern = _WORK_DIRS.get(q.name)
            if pattern is None or not q.is_dir():
                out.append(q.name)
                continue
            out.extend(f"{q.name}/{r.name}" for r in q.iterdir() if not pattern.match(r.name))
        return out

    def clear(self, keep_lock: bool = False) -> None:
        """Remove the engine's own entries (never anything else: foreign entries were refused on entry); the
        marker stays until ``remove``."""
        for q in list(self.path.iterdir()):
            if (keep_lock and q.name == "lock") or q.name == WORK_MARKER:
                continue
            if q.name in _WORK_DIRS and q.is_dir():
                shutil.rmtree(q)
            elif q.name in _WORK_FILES or _TMP.match(q.name):
                q.unlink()

    def remove(self) -> None:
        """After success: clear, unlock, and remove the directory itself if an adherence job made it
        (an empty directory someone else made for the job stays)."""
        self.clear(keep_lock=True)
        self.lock.release(remove=True)
        try:
            (self.path / WORK_MARKER).unlink()
        except OSError:
            pass
        if self.ours:
            try:
                self.path.rmdir()
            except OSError:
                pass


# ---------------------------------------------------------------------------- object storage


def _remote_meta(obj) -> Optional[dict]:
    meta_obj = obj.with_name(obj.name + ".meta.json")
    try:
        meta = json.loads(meta_obj.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def check_remote_output(obj, what: str) -> None:
    """The object-storage form of the output checks: a single file format, and an existing object
    replaced only when the metadata beside it says adherence wrote it."""
    if output_format(Path(obj.name)) == "directory":
        raise DataError(
            f"{what} on object storage must be one file (.parquet, .jsonl or .csv), not a directory", file=obj.uri
        )
    meta = _remote_meta(obj)
    ours = _written_by_adherence(meta)
    if obj.is_dir():
        raise DataError(f"{what} is a prefix holding other objects; refusing to replace it", file=obj.uri)
    if obj.exists() and not ours:
        raise DataError(
            f"{what} exists and was not written by adherence (no {obj.name}.meta.json of ours beside "
            "it); refusing to overwrite it: remove it or choose another path",
            file=obj.uri,
        )
    if not obj.exists() and meta is None and obj.with_name(obj.name + ".meta.json").exists():
        raise DataError(
            f"{obj.name}.meta.json exists and was not written by adherence; refusing to overwrite it", file=obj.uri
        )


class RemoteWorkDir:
    """A work dir on object storage: leased while in use, holding only the engine's entries.

    The driver keeps a local staging copy of the bookkeeping; this side holds what the workers and a
    later ``--resume`` (from any machine) need: shard inputs, shard outputs, their ``done`` records,
    the job manifest and the reference pool. As on a local disk, names prove nothing: a prefix that
    holds objects is used (and cleared) only when it holds the ``.adherence-work.json`` marker an
    adherence job wrote there.
    """

    def __init__(self, obj, *, resume: bool, ttl: float = 60.0) -> None:
        self.obj, self.resume = obj, resume
        self.lease = RemoteLease(obj / "lock", "the work directory", ttl=ttl)

    def foreign_entries(self) -> list[str]:
        out = []
        for rel in self.obj.walk():
            top, _, rest = rel.partition("/")
            if not rest:
                if top in _WORK_FILES or _TMP.match(top) or top.startswith(".reachable-"):
                    continue
                out.append(top)
                continue
            pattern = _WORK_DIRS.get(top)
            if pattern is None or "/" in rest or not pattern.match(rest):
                out.append(rel)
        return out

    def _marker(self) -> Optional[dict]:
        q = self.obj / WORK_MARKER
        try:
            m = json.loads(q.read_bytes().decode("utf-8")) if q.is_file() else None
        except (OSError, ValueError):
            return None
        return m if isinstance(m, dict) and m.get("producer") == PRODUCER else None

    def __enter__(self) -> RemoteWorkDir:
        if self.obj.is_file():
            raise DataError("the work directory is an object, not a prefix", file=self.obj.uri)
        marker = self._marker()
        entries = [rel for rel in self.obj.walk() if rel != "lock"]  # a lone lease: the lease decides
        if entries and marker is None:
            # Names prove nothing: someone's job.json or out/shard-00000.parquet is not ours to clear.
            raise DataError(
                f"the work directory holds objects adherence did not write ({entries[0]}, ...; no "
                f"{WORK_MARKER} of ours); refusing to use or clear it: pass another --work-dir",
                file=self.obj.uri,
            )
        foreign = self.foreign_entries()
        if foreign:
            raise DataError(
                f"the work directory holds objects adherence did not write ({foreign[0]}, ...); "
                "refusing to use or clear it: pass another --work-dir",
                file=self.obj.uri,
            )
        self.lease.acquire()
        if not self.resume:
            self.clear()
        if marker is None:
            (self.obj / WORK_MARKER).write_bytes(
                json.dumps({"producer": PRODUCER, "created": True, "pid": os.getpid()}).encode("utf-8")
            )
        return self

    def __exit__(self, *exc) -> None:
        self.lease.release()

    def clear(self, *, keep_marker: bool = True) -> None:
        """Remove the engine's own entries (foreign ones were refused on entry), the lease excepted, and
        the marker too when ``keep_marker`` is False."""
        for rel in self.obj.walk():
            if rel != "lock" and (rel != WORK_MARKER or not keep_marker):
                (self.obj / rel).delete()
        for name in _WORK_DIRS:
            try:
                (self.obj / name).delete_tree()
            except OSError:
                pass

    def pull(self, work: Path) -> None:
        """Copy what an earlier run left (the job manifest, finished shard outputs and their records)
        into the local staging ``work`` dir, where the usual resume checks judge it."""
        if (self.obj / "job.json").is_file():
            (self.obj / "job.json").download(work / "job.json")
        out = work / "out"
        out.mkdir(parents=True, exist_ok=True)
        names = set((self.obj / "out").listdir())
        for name in sorted(names):
            if name.endswith(".done.json") and name.replace(".done.json", ".parquet") in names:
                (self.obj / "out" / name.replace(".done.json", ".parquet")).download(
                    out / name.replace(".done.json", ".parquet")
                )
                (self.obj / "out" / name).download(out / name)

    def remove(self) -> None:
        """After success: every engine entry, the lease, and the prefix itself once nothing else is under it."""
        self.clear(keep_marker=False)
        self.lease.release()
        if not self.obj.walk():
            try:
                self.obj.delete_tree()  # the empty directory markers some stores keep
            except OSError:
                pass

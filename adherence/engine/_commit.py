"""One commit protocol for every store: what a job may touch, how it holds it, and how it publishes.

The policy is written once here, for local paths and for object storage alike (any ``pyarrow.fs`` URI:
``s3://``, ``gs://``, ``hdfs://``); what differs per store is a ``Store`` of a few primitives (what is at a
path, list, create, delete, the identity of a path, upload or rename, and the lock):

- **ownership** (``check_replaceable``): an existing output is replaced only when the run metadata beside
  it says adherence wrote it; a work directory is used or cleared only when it holds the marker an
  adherence job wrote there and nothing but the engine's own entries (``WorkDir``);
- **locks, injected** (``Store.lock``): an exclusive ``flock`` on a local lock file (``PathLock``), a lease
  object on object storage (``RemoteLease``: renewed while the job runs; a job that finds another
  holder in it has lost it and publishes nothing);
- **publish** (``Publisher``, the commit): every output is written complete under a temporary name, then,
  after checking the locks are still held and every target is still what the job's start-up check saw
  (nothing appeared or was replaced since), committed: locally by renames with SIGINT/SIGTERM held back;
  on object storage by one upload per object, each output's metadata first marked
  ``"published": false``, then the data, then the metadata with the data's digests and
  ``"published": true``. Only then does the job count as published (``published()``, which the command
  line reads when a signal arrives); a signal before that is an interrupted job, and ``--resume``
  publishes from the finished shards;
- **cleanup**: a work directory is removed after success, kept after a failure that left finished
  shards, and removed again (with the directory itself when the job made it) after a failure that left
  none.

Object stores have no rename and no ``flock``: the re-check just before each upload leaves a window (the
time of one upload) in which a foreign object written at the same key is still replaced; the lease is
read back before every renewal and before publishing, so a job stopped past its lease's lapse finds out
before it writes anything.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import stat
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from .._atomic import temp_path
from .._errors import EngineError
from ..data import METADATA_SUFFIX, DataError, Remote, as_target, file_digest, metadata_path

__all__ = [
    "PRODUCER",
    "WORK_MARKER",
    "Commit",
    "LocalStore",
    "ObjectStore",
    "PathLock",
    "Publisher",
    "RemoteLease",
    "Store",
    "WorkDir",
    "bad_rows_header",
    "check_replaceable",
    "pid_alive",
    "published",
    "store_of",
]

PRODUCER = "adherence"
# Entries of a work directory, and what may live inside its folders. A work directory is the engine's only
# when its marker says so (written when a job made or adopted it): entries named like these elsewhere are
# the user's.
WORK_MARKER = ".adherence-work.json"
_WORK_FILES = {"job.json", "plan.json", "references.json", "bad-rows.jsonl", "input.parquet", "lock", WORK_MARKER}
_WORK_DIRS = {
    "shards": re.compile(r"^(input-\d{5}\.arrow|\..*\.tmp)$"),
    "out": re.compile(r"^(shard-\d{5}\.(parquet|done\.json)|\..*\.tmp)$"),
    "checkpoints": re.compile(r"^(shard-\d{5}-\d{5}\.(parquet|json)|\..*\.tmp)$"),
    # a cascade's passes: each stage's work dir, output, sessions, metadata and locks, and the next pass's input
    "cascade": re.compile(r"^(\.?stage\d+([-.].*)?|\..*\.tmp)$"),
}
_TMP = re.compile(r"^\..*\.tmp$")
_PROBE = re.compile(r"^\.reachable-[0-9a-f]{32}$")  # the token a Ray job's reachability check writes

Target = Union[Path, Remote]

# Every output committed in this process (the command line reads it when a signal arrives: after the commit
# the output is complete, and the job did not fail).
_PUBLISHED: list = []
# Work dirs a failed or interrupted job kept for --resume (the command line names them).
_KEPT: list = []


def published() -> list:
    """The outputs committed in this process so far (paths or URIs), oldest first."""
    return _PUBLISHED


def kept_for_resume() -> list:
    """Work dirs that jobs of this process left for ``--resume`` when they failed or were interrupted."""
    return _KEPT


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------- locks


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

    def check(self) -> None:
        """A ``flock`` held is never taken away: nothing to check."""

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


class RemoteLease:
    """A lock on object storage: a lease object naming its holder, renewed while the job runs.

    A second job refuses while the lease is fresher than ``ttl`` seconds, and takes it over once it has
    lapsed (the holder was killed or stopped), or at once when the holder is a process of this host that
    no longer exists. Two jobs that start within the same instant both write the lease; each reads it back
    and the one whose write did not survive backs off. Before every renewal, and in ``check``, the holder
    reads the lease back: when another job's token is there the lease was lost (this job was stopped
    longer than ``ttl``) -- it stops renewing, and ``check`` raises, so the job publishes nothing.
    """

    def __init__(self, obj: Remote, what: str, ttl: float = 60.0, subject: Optional[str] = None) -> None:
        self.obj, self.what, self.ttl = obj, what, ttl
        self.subject = subject or str(obj.parent)  # what the lease guards, as a message names it
        self.token = uuid.uuid4().hex
        self.lost: Optional[dict] = None  # the record of the job that took the lease over
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
            f"{self.what} {self.subject} is in use by another adherence job (host {held.get('host', '?')}, "
            f"pid {held.get('pid', '?')}, lease renewed {age:.0f} s ago); wait for it, or for its lease to "
            f"lapse ({self.ttl:.0f} s after its last renewal)"
        )

    def acquire(self) -> RemoteLease:
        held = self._holder()
        if held and held.get("token") != self.token:
            fresh = time.time() - float(held.get("heartbeat", 0)) < float(held.get("ttl", self.ttl))
            dead = held.get("host") == socket.gethostname() and not pid_alive(int(held.get("pid", -1)))
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

    def _still_held(self) -> bool:
        held = self._holder()
        if held is not None and held.get("token") not in (None, self.token):
            self.lost = held
            return False
        return True

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                if not self._still_held():
                    return  # another job holds it now: never write over its lease
                self.obj.write_bytes(self._record())
            except OSError:
                pass  # the next renewal tries again; a lapse lets another job in, and check() then stops this one

    def check(self) -> None:
        """Raise ``EngineError`` when another job holds the lease now (this job must not publish)."""
        if self.lost is None:
            try:
                self._still_held()
            except OSError:
                return  # unreadable now: the renewal thread decides, and the next check reads again
        if self.lost is not None:
            held = self.lost
            raise EngineError(
                f"lost the lease on {self.what} {self.subject} to another adherence job (host "
                f"{held.get('host', '?')}, pid {held.get('pid', '?')}): this job was stopped longer than the "
                f"lease's {self.ttl:.0f} s; nothing was published"
            )

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


# ---------------------------------------------------------------------------- stores


class Store(ABC):
    """The primitives a store gives the commit protocol; the policy above them is written once."""

    #: how a message names its entries ("files" | "objects")
    entries = "files"

    @abstractmethod
    def kind(self, t: Any) -> str:
        """``missing`` | ``file`` | ``dir`` | ``other`` (a symbolic link, a FIFO, ...) -- never following a link."""

    @abstractmethod
    def names(self, t: Any) -> list[str]:
        """The entries directly under ``t``, sorted (none when it is not a directory)."""

    @abstractmethod
    def read_json(self, t: Any) -> Optional[dict]:
        """The JSON object at ``t``, or None (missing, unreadable, not an object, or a link)."""

    @abstractmethod
    def create(self, t: Any, data: bytes) -> None:
        """A new file or object at ``t``; ``FileExistsError`` where the store can tell one is there."""

    @abstractmethod
    def delete(self, t: Any) -> None:
        """Remove a file or object (nothing when it is gone)."""

    @abstractmethod
    def delete_tree(self, t: Any) -> None:
        """Remove a directory and everything under it."""

    @abstractmethod
    def remove_dir(self, t: Any) -> None:
        """Remove ``t`` when nothing is left under it."""

    @abstractmethod
    def make_dir(self, t: Any) -> None:
        """Make ``t`` (and its parents) where the store has directories."""

    @abstractmethod
    def identity(self, t: Any) -> Any:
        """What is at ``t`` now, compared before publishing over it."""

    @abstractmethod
    def lock(self, t: Any, what: str, subject: Optional[str] = None) -> Any:
        """A lock (``acquire``, ``check``, ``release``) stored at ``t``."""

    @abstractmethod
    def put(self, local: Path, t: Any) -> None:
        """Commit the complete local temporary ``local`` as ``t``."""


class LocalStore(Store):
    """A local file system: links are never followed, renames are atomic."""

    def kind(self, t: Path) -> str:
        try:
            mode = os.lstat(t).st_mode
        except FileNotFoundError:
            return "missing"
        return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"

    def names(self, t: Path) -> list[str]:
        try:
            return sorted(q.name for q in t.iterdir()) if self.kind(t) == "dir" else []
        except OSError:
            return []

    def read_json(self, t: Path) -> Optional[dict]:
        if self.kind(t) != "file":
            return None
        try:
            d = json.loads(t.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

    def create(self, t: Path, data: bytes) -> None:
        fd = os.open(t, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    def delete(self, t: Path) -> None:
        t.unlink(missing_ok=True)

    def delete_tree(self, t: Path) -> None:
        if self.kind(t) == "dir":
            shutil.rmtree(t)

    def remove_dir(self, t: Path) -> None:
        with contextlib.suppress(OSError):  # not empty, or gone: left as it is
            t.rmdir()

    def make_dir(self, t: Path) -> None:
        t.mkdir(parents=True, exist_ok=True)

    def identity(self, t: Path) -> tuple:
        """Its (device, inode, type) or None, and its directory's (device, inode) through any links (a
        directory swapped for a link elsewhere changes it)."""
        try:
            st = os.lstat(t)
            own: Optional[tuple] = (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode))
        except FileNotFoundError:
            own = None
        try:
            pst = os.stat(t.parent)
            parent: Optional[tuple] = (pst.st_dev, pst.st_ino)
        except OSError:
            parent = None
        return own, parent

    def lock(self, t: Path, what: str, subject: Optional[str] = None) -> PathLock:
        return PathLock(t, what)

    def put(self, local: Path, t: Path) -> None:
        if self.kind(t) == "dir":
            # An earlier directory output (checked to be ours): swap it out, then remove it.
            old = temp_path(t)
            os.replace(t, old)
            os.replace(local, t)
            shutil.rmtree(old)
        else:
            os.replace(local, t)


class ObjectStore(Store):
    """Object storage through ``pyarrow.fs``: every object appears whole or not at all; no rename, no lock."""

    entries = "objects"

    @staticmethod
    def _kind(info) -> str:
        from pyarrow import fs as pafs

        kinds = {pafs.FileType.NotFound: "missing", pafs.FileType.File: "file", pafs.FileType.Directory: "dir"}
        return kinds.get(info.type, "other")

    def kind(self, t: Remote) -> str:
        return self._kind(t.fs.get_file_info(t.path))

    def names(self, t: Remote) -> list[str]:
        return t.listdir()

    def read_json(self, t: Remote) -> Optional[dict]:
        try:
            d = json.loads(t.read_bytes().decode("utf-8"))
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

    def create(self, t: Remote, data: bytes) -> None:
        if self.kind(t) != "missing":
            raise FileExistsError(str(t))
        t.write_bytes(data)

    def delete(self, t: Remote) -> None:
        t.delete()

    def delete_tree(self, t: Remote) -> None:
        try:
            t.delete_tree()
        except OSError:
            pass

    def remove_dir(self, t: Remote) -> None:
        if not t.walk():
            self.delete_tree(t)  # the empty directory markers some stores keep

    def make_dir(self, t: Remote) -> None:
        """Prefixes need no making."""

    def identity(self, t: Remote) -> tuple:
        """(kind, size, modification time): the store's own listing of the key (no ETag through ``pyarrow.fs``)."""
        info = t.fs.get_file_info(t.path)  # one listing gives the kind, size and time together
        kind = self._kind(info)
        return (kind, info.size, info.mtime_ns) if kind == "file" else (kind, None, None)

    def lock(self, t: Remote, what: str, subject: Optional[str] = None) -> RemoteLease:
        return RemoteLease(t, what, subject=subject)

    def put(self, local: Path, t: Remote) -> None:
        t.upload(local)


def store_of(t: Any) -> Store:
    """The store a target lives on: a ``Remote`` on object storage, anything else local."""
    return _OBJECT if isinstance(t, Remote) else _LOCAL


_LOCAL, _OBJECT = LocalStore(), ObjectStore()


def quarantine_of(t: Target) -> Target:
    """Where the rows a ``--bad-rows skip`` job left out are written: ``<output>.bad-rows.jsonl``."""
    return t.with_name(t.name + ".bad-rows.jsonl")


#: The first line of a bad-rows file: whose it is (the output it belongs to, and the run that wrote it).
BAD_ROWS_HEADER = "adherence_bad_rows"


def bad_rows_header(output: Target) -> str:
    """The header line a job writes first in ``<output>.bad-rows.jsonl``: it owns the file by its content."""
    import datetime as _dt

    run = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return json.dumps({BAD_ROWS_HEADER: {"output": str(output), "run": run}}) + "\n"


def check_quarantine(output: Target) -> None:
    """Refuse a job whose ``<output>.bad-rows.jsonl`` exists unless its first line is the header a job writes for
    this output: it is then an earlier run's, replaced with the output. Anything else -- a user's notes put there
    after the file was deleted, a file of another output -- is not ours to overwrite (ownership by content, not by a
    path an earlier run's metadata recorded)."""
    q = quarantine_of(output)
    store = store_of(q)
    if store.kind(q) == "missing":
        return
    try:
        first = (q.read_bytes() if isinstance(q, Remote) else Path(q).read_bytes()).split(b"\n", 1)[0]
        head = json.loads(first.decode("utf-8")).get(BAD_ROWS_HEADER)
    except (OSError, ValueError, AttributeError):
        head = None
    if not (isinstance(head, dict) and head.get("output") == str(output)):
        raise DataError(
            "exists and is not the bad-rows file of this output's earlier run (its first line is not the header a "
            "job writes); refusing to overwrite it: move it away or write the output elsewhere",
            file=str(q),
        )


def _written_by_adherence(meta: Optional[dict]) -> bool:
    """True when run metadata names adherence as the producer (or, from older runs, among the versions)."""
    return meta is not None and (meta.get("producer") == PRODUCER or "adherence" in (meta.get("versions") or {}))


def _target(t: Any) -> Target:
    if isinstance(t, (Path, Remote)):
        return t
    a = as_target(t)
    return Remote(a) if isinstance(a, str) else a


#: What each kind of file adherence writes is called in a refusal.
FILE_KINDS = {
    "scores": "a score output",
    "sessions": "a score job's sessions file",
    "labels": "a labels file (human work)",
    "page": "an HTML page",
    "result": "a result file",
    "calibration": "a calibration file",
    "cascade": "a cascade file",
    "decided": "a cascade's decided turns",
    "classifier": "a classifier file",
    "export": "an export",
    "metrics": "an audit's metrics",
    "rubric": "an audit rubric",
    "judgments": "an audit's judgments",
}
# what an older release's file was, from the command that wrote it (its -o)
_LEGACY_KINDS = {"calibrate": "calibration", "cascade fit": "cascade", "cascade apply": "decided",
                 "classifier fit": "classifier", "export": "export", "audit run": "metrics"}  # fmt: skip


def _legacy_command(meta: dict) -> str:
    argv = [str(a) for a in (meta.get("command") or [])][1:]
    words: list[str] = []
    for a in argv:
        if a.startswith("-") or "/" in a or "." in a or len(words) == 2:
            break
        words.append(a)
    return " ".join(words) or "api"


def written_kind(meta: dict, t: Any) -> tuple:
    """``(kind, command)`` of an existing file of ours at ``t``, from its run metadata: what it is (``FILE_KINDS``, or
    ``"unknown"``) and the command that wrote it."""
    out = meta.get("outputs") or {}
    command = str(out.get("command") or _legacy_command(meta))
    if out.get("kind"):
        return str(out["kind"]), command
    name = getattr(t, "name", str(t).rstrip("/").rsplit("/", 1)[-1])
    for key, kind in (("turns", "scores"), ("sessions", "sessions")):
        if out.get(key) and str(out[key]).rstrip("/").rsplit("/", 1)[-1] == name:
            return kind, command
    argv = [str(a) for a in (meta.get("command") or [])]
    for flag, value in zip(argv, argv[1:]):  # an older page: the path followed --html
        if flag in ("--html", "--export-html") and value.rstrip("/").rsplit("/", 1)[-1] == name:
            return "page", command
    if _holds_labels(t):
        return "labels", command
    return _LEGACY_KINDS.get(
        command, "result" if command in ("evaluate", "estimate", "compare") else "unknown"
    ), command


def _holds_labels(t: Any) -> bool:
    """Whether ``t`` is a labels file: its first line is the viewer's sample record."""
    from ..data import LABELS_HEADER

    if isinstance(t, Remote):
        return False
    try:
        with open(t, "rb") as fh:
            first = fh.readline(1 << 20)
    except OSError:
        return False
    return f'"{LABELS_HEADER}"'.encode() in first


def check_replaceable(t: Any, what: str, kind: Optional[str] = None) -> None:
    """Refuse (one line) to replace ``t`` unless adherence wrote it and nothing else lives in it; with ``kind``, also
    unless it is a file of that kind that the same command wrote (a score output is never replaced by a page, a
    calibration by an estimate, ...), and never a labels file: labels are human work.

    Raises:
        DataError: naming the path and what is wrong.
    """
    from ..data import command_name

    t = _target(t)
    store = store_of(t)
    meta = metadata_path(t)
    kind_here = store.kind(t)
    where = str(t)
    if kind_here != "missing" and kind is not None:
        have = store.read_json(meta)
        if (
            have is not None
            and _written_by_adherence(have)
            and not (have.get("published") is False and not have.get("outputs"))
        ):
            # (an object-storage output whose upload a kill cut short is no finished file of any kind: replaceable)
            was, by = written_kind(have, t)
            now = command_name()

            def who(c: str) -> str:
                return "through the Python API" if c == "api" else f"by `adherence {c}`"

            if was == "labels":
                raise DataError(
                    f"{what} would replace a labels file (human work, written {who(by)}); adherence never replaces "
                    "labels: choose another path",
                    file=where,
                )
            if was != kind or (by != now and "api" not in (by, now)):
                raise DataError(
                    f"{what} would replace {FILE_KINDS.get(was, 'a file')} written {who(by)}; a command replaces only "
                    f"{FILE_KINDS.get(kind, 'a file of its own kind')} that it wrote itself: choose another path",
                    file=where,
                )
    kind = kind_here
    if kind == "other":
        raise DataError(f"{what} exists and is not a regular file or directory; refusing to replace it", file=where)
    if kind == "dir" and isinstance(t, Remote):
        raise DataError(f"{what} is a prefix holding other objects; refusing to replace it", file=where)
    if kind != "missing":
        if not _written_by_adherence(store.read_json(meta)):
            raise DataError(
                f"{what} exists and was not written by adherence (no {meta.name} of ours beside it); "
                "refusing to overwrite it: remove it or choose another path",
                file=where,
            )
        recorded = ((store.read_json(meta) or {}).get("outputs") or {}).get("digest")
        if recorded and kind == "file" and isinstance(t, Path) and file_digest(t, "sha256") != recorded:
            raise DataError(
                f"{what} would replace a file that was changed after adherence wrote it (edited by hand?); refusing "
                "to overwrite it: choose another path, or move it away",
                file=where,
            )
        if kind == "dir":  # a Parquet dataset of ours holds parts only (a user's folder named like one is not ours)
            foreign = [
                n for n in store.names(t) if not re.match(r"^part-\d{5}\.parquet$", n) or store.kind(t / n) != "file"
            ]
            if foreign:
                raise DataError(
                    f"{what} is a directory holding {store.entries} adherence did not write ({foreign[0]!r}, ...); "
                    "refusing to replace it",
                    file=where,
                )
    elif store.kind(meta) != "missing" and not _written_by_adherence(store.read_json(meta)):
        raise DataError(
            f"{meta.name} exists and was not written by adherence; refusing to overwrite it", file=str(meta)
        )


# ---------------------------------------------------------------------------- the work directory


class WorkDir:
    """The job's work directory, on any store: locked while in use, holding only the engine's entries.

    Args:
        t: the directory (a local path or a ``Remote`` prefix).
        resume: keep earlier entries (finished shards) instead of clearing them.
    """

    def __init__(self, t: Any, *, resume: bool) -> None:
        self.path = _target(t)
        self.store = store_of(self.path)
        self.resume = resume
        self.created = False
        self.ours = False  # made by an adherence job (this one or an earlier one): removed when done
        self.adopted = False  # an empty directory someone else made: its contents are ours, itself is not
        self.lock = self.store.lock(self.path / "lock", "the work directory", subject=str(self.path))

    def _marker(self) -> Optional[dict]:
        m = self.store.read_json(self.path / WORK_MARKER)
        return m if m is not None and m.get("producer") == PRODUCER else None

    def _refuse(self, detail: str) -> None:
        raise DataError(
            f"the work directory holds {self.store.entries} adherence did not write ({detail}, ...); refusing to use "
            "or clear it: pass another --work-dir",
            file=str(self.path),
        )

    def __enter__(self) -> WorkDir:
        store, p = self.store, self.path
        kind = store.kind(p)
        if kind in ("file", "other"):
            raise DataError("the work directory path exists and is not a directory", file=str(p))
        if kind == "missing":
            store.make_dir(p)
            self.created = True
        marker = self._marker()
        if not self.created and marker is None:
            entries = [n for n in store.names(p) if n != "lock" or isinstance(p, Path)]  # a lone lease: it decides
            if entries:
                # Names prove nothing: a user's input.parquet or job.json is not ours to clear.
                self._refuse(f"{entries[0]}; no {WORK_MARKER} of ours")
            self.adopted = True
        self.ours = self.created or (marker is not None and bool(marker.get("created")))
        foreign = self.foreign_entries()
        if foreign:
            self._refuse(foreign[0])
        self.lock.acquire()
        if marker is None:
            record = {"producer": PRODUCER, "created": self.created, "pid": os.getpid()}
            try:
                store.create(p / WORK_MARKER, json.dumps(record).encode("utf-8"))
            except FileExistsError:  # another job adopted it between our look and our lock, and is done
                pass
        if not self.resume:
            self.clear(keep_lock=True)
        else:
            for name in store.names(p):
                if _TMP.match(name):
                    store.delete(p / name)
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is not None and (self.created or self.adopted) and not self._finished_shards():
            self.clear(keep_lock=True)  # nothing worth resuming: leave no trace of a job that failed early
            self.lock.release()
            self.store.delete(self.path / WORK_MARKER)
            if self.created:
                self.store.remove_dir(self.path)
            return
        if exc_type is not None:
            _KEPT.append(str(self.path))
        self.lock.release()

    def _finished_shards(self) -> bool:
        """Finished shards, or checkpoints of a shard half done: work a ``--resume`` would reuse."""
        return (
            any(n.endswith(".done.json") for n in self.store.names(self.path / "out"))
            or any(n.endswith(".json") for n in self.store.names(self.path / "checkpoints"))
            or bool(self.store.names(self.path / "cascade"))  # a cascade's passes (each keeps its own work)
        )

    def foreign_entries(self) -> list[str]:
        store, out = self.store, []
        for name in store.names(self.path):
            if name in _WORK_FILES or _TMP.match(name) or _PROBE.match(name):
                continue
            pattern = _WORK_DIRS.get(name)
            if pattern is None or store.kind(self.path / name) != "dir":
                out.append(name)
                continue
            out.extend(f"{name}/{n}" for n in store.names(self.path / name) if not pattern.match(n))
        return out

    def clear(self, keep_lock: bool = False) -> None:
        """Remove the engine's own entries (never anything else: foreign entries were refused on entry); the
        marker stays until ``remove``."""
        store = self.store
        for name in store.names(self.path):
            if (keep_lock and name == "lock") or name == WORK_MARKER:
                continue
            if name in _WORK_DIRS and store.kind(self.path / name) == "dir":
                store.delete_tree(self.path / name)
            elif name in _WORK_FILES or _TMP.match(name) or _PROBE.match(name):
                store.delete(self.path / name)

    def remove(self) -> None:
        """After success: clear, unlock, and remove the directory itself if an adherence job made it
        (an empty directory someone else made for the job stays)."""
        self.clear(keep_lock=True)
        self.lock.release()
        self.store.delete(self.path / WORK_MARKER)
        if self.ours:
            self.store.remove_dir(self.path)

    def pull(self, local: Path) -> None:
        """Copy what an earlier run left on object storage (the job manifest, finished shard outputs and their
        records) into the local staging dir ``local``, where the usual resume checks judge it."""
        if not isinstance(self.path, Remote):
            return
        if (self.path / "job.json").is_file():
            (self.path / "job.json").download(local / "job.json")
        out = local / "out"
        out.mkdir(parents=True, exist_ok=True)
        names = set((self.path / "out").listdir())
        for name in sorted(names):
            if name.endswith(".done.json") and name.replace(".done.json", ".parquet") in names:
                (self.path / "out" / name.replace(".done.json", ".parquet")).download(
                    out / name.replace(".done.json", ".parquet")
                )
                (self.path / "out" / name).download(out / name)


# ---------------------------------------------------------------------------- the commit


@dataclass
class Commit:
    """What a job commits to, fixed when it takes its outputs: the final ``output`` and ``sessions`` targets,
    the identity of each target (and its metadata) at that moment, the locks held on them, and the local
    staging directory of targets on object storage. ``final``: False for a pass of a larger job (a cascade's
    stage), whose outputs are that job's work, not what the command publishes."""

    output: Any
    sessions: Any
    targets: dict
    locks: tuple = ()
    staging: Optional[Path] = None
    final: bool = True

    def publisher(self) -> Publisher:
        return Publisher(self.targets, locks=self.locks, staging=self.staging, final=self.final)


class Publisher:
    """Outputs written complete under temporary names, committed together (see the module docs).

    Args:
        targets: final target -> its identity when the job checked it (``Store.identity``): publish
            replaces a target only while it is still that.
        locks: the job's locks and leases; each is checked (``check``) before anything is committed.
        staging: a local directory for the temporaries of targets on object storage.
        final: the command's own outputs (``published()`` lists them; a signal after they are committed finds the
            job done); False for the intermediate outputs of a pass.
    """

    def __init__(
        self, targets: Optional[dict] = None, *, locks: tuple = (), staging: Optional[Path] = None, final: bool = True
    ) -> None:
        self.moves: list[tuple[Path, Target]] = []
        self.targets = targets or {}
        self.locks = locks
        self.staging = staging
        self.final = final

    def temporary(self, final: Target) -> Path:
        """Where the temporary of ``final`` is written: beside it locally, in the staging dir for an object."""
        if isinstance(final, Remote):
            if self.staging is None:
                raise EngineError(f"{final} is on object storage but no staging directory was made for it")
            (self.staging / "publish").mkdir(parents=True, exist_ok=True)
            return temp_path(self.staging / "publish" / final.name)
        return temp_path(final)

    def add(self, tmp: Path, final: Target) -> None:
        self.moves.append((tmp, final))

    def add_text(self, final: Target, text: str) -> None:
        tmp = self.temporary(final)
        self.moves.append((tmp, final))
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    def _recheck(self) -> None:
        """The locks are still held, and every target is still what the start-up check saw (under the job's
        locks): nothing that appeared, was replaced, or had its directory swapped since is ever overwritten."""
        for lock in self.locks:
            lock.check()
        for _, final in self.moves:
            self._unchanged(final, "nothing was published")
            if store_of(final).kind(final) == "dir":
                check_replaceable(final, "the output")

    def publish(self) -> None:
        local = [(tmp, f) for tmp, f in self.moves if not isinstance(f, Remote)]
        remote = [(tmp, f) for tmp, f in self.moves if isinstance(f, Remote)]
        main = threading.current_thread() is threading.main_thread()
        held = {signal.SIGINT, signal.SIGTERM}
        if main:
            signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            self._recheck()
            for tmp, final in local:
                _LOCAL.put(tmp, final)
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
        if remote:
            self._commit_objects(remote)
        self.moves = []
        # From here a signal finds the job's outputs complete (local renames and the objects' commit records).
        if self.final:
            _PUBLISHED.extend(str(f) for _, f in local + remote)

    def _commit_objects(self, moves: list) -> None:
        """Object storage, in the protocol's order: each output's metadata marked unpublished, the data (each
        upload preceded by a re-check of its key), then the metadata with the data's digests, published."""
        metas = {str(f): (tmp, f) for tmp, f in moves if f.name.endswith(METADATA_SUFFIX)}
        data = [(tmp, f) for tmp, f in moves if not f.name.endswith(METADATA_SUFFIX)]
        digests = {str(f): file_digest(tmp, "sha256") for tmp, f in data}
        docs = {}
        for key, (tmp, f) in metas.items():
            docs[key] = json.loads(tmp.read_text(encoding="utf-8"))
            self._recheck_one(f)
            f.write_bytes(json.dumps(dict(docs[key], published=False), indent=2, default=repr).encode("utf-8"))
            self.targets[f] = _OBJECT.identity(f)
        for tmp, f in data:
            self._recheck_one(f)
            _OBJECT.put(tmp, f)
        for key, (_, f) in metas.items():
            meta = docs[key]
            meta.setdefault("outputs", {})["digests"] = digests
            self._recheck_one(f)
            text = json.dumps(dict(meta, published=True), indent=2, ensure_ascii=False, default=repr) + "\n"
            f.write_bytes(text.encode("utf-8"))

    def _recheck_one(self, f: Remote) -> None:
        """Just before an upload: the lease is still ours and the key still holds what the job last saw there."""
        for lock in self.locks:
            lock.check()
        self._unchanged(f, "nothing more was published")

    def _unchanged(self, final: Target, published: str) -> None:
        """Raise when ``final`` is no longer what the job saw there (``published``: what the job has put out)."""
        if final in self.targets and store_of(final).identity(final) != self.targets[final]:
            how = (
                "another writer put an object there"
                if isinstance(final, Remote)
                else ("created, replaced, or its directory swapped")
            )
            raise EngineError(
                f"{final} changed while the job ran ({how}); refusing to replace it: {published} and the finished "
                "shards are kept for --resume"
            )

    def discard(self) -> None:
        for tmp, _ in self.moves:
            if tmp.is_dir() and not tmp.is_symlink():
                shutil.rmtree(tmp, ignore_errors=True)
            elif tmp.exists():
                tmp.unlink()
        self.moves = []

"""Atomic local writes: the one helper every writer of the package uses.

A file (or directory) is written under a temporary sibling name and renamed into place once complete,
so a reader never sees half of it and a killed writer leaves only a temporary. Every temporary has the
one name scheme ``.<name>.<pid>-<8 hex>.tmp``: unique per process and call (two jobs never share one),
and recognisable, with the writer's pid, by the sweep that removes what a killed job left
(``temporary_of``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional, Union

__all__ = ["atomic_path", "temp_path", "temporary_of", "write_bytes_atomic", "write_json_atomic", "write_text_atomic"]

PathLike = Union[str, os.PathLike]


def temp_path(path: PathLike) -> Path:
    """A temporary sibling of ``path``: ``.<name>.<pid>-<8 hex>.tmp``."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def temporary_of(target: PathLike, name: str) -> Optional[int]:
    """The pid of the writer when ``name`` is a temporary of ``target`` (see ``temp_path``), else None."""
    m = re.match(rf"^\.{re.escape(Path(target).name)}\.(\d+)-[0-9a-f]{{8}}\.tmp$", name)
    return int(m.group(1)) if m else None


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write (a file or a directory); when the block ends without
    an error it is renamed to ``path`` (replacing a file there), otherwise removed.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> with atomic_path(d / "a.txt") as tmp:
        ...     _ = tmp.write_text("done")
        >>> (d / "a.txt").read_text(), sorted(p.name for p in d.iterdir())
        ('done', ['a.txt'])
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists() or tmp.is_symlink():
            _remove(tmp)


def write_bytes_atomic(path: PathLike, data: bytes, *, fsync: bool = False) -> None:
    """``data`` at ``path``, whole or not at all (``fsync``: on disk before the rename)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())


def write_text_atomic(path: PathLike, text: str, *, fsync: bool = False) -> None:
    """``text`` (UTF-8) at ``path``, whole or not at all."""
    write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync)


def write_json_atomic(path: PathLike, obj: Any, *, indent: Optional[int] = None, fsync: bool = False) -> None:
    """``obj`` as JSON (UTF-8, non-ASCII kept; a trailing newline when indented) at ``path``, atomically."""
    text = json.dumps(obj, ensure_ascii=False, indent=indent, default=repr)
    write_text_atomic(path, text + ("\n" if indent is not None else ""), fsync=fsync)

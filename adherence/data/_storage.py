"""Work dirs and outputs on object storage: any URI that ``pyarrow.fs`` understands (``s3://``, ``gs://``,
``hdfs://``; ``file://`` is a local path).

Object stores have no rename, no ``flock`` and no directories, so a job whose work dir or output is a
URI keeps its own bookkeeping in a local staging directory on the driver and uses the store for what
must outlive the driver or reach the workers:

- every object is written in one upload (a buffer, then one put or a multipart upload completed on
  close), so it appears whole or not at all: a killed writer leaves no partial object;
- shard inputs, shard outputs and their ``done`` records live under the work dir URI, so a job resumed
  from any machine finds what earlier runs finished (checked by content, as on a local disk);
- outputs are published in a fixed order: each output's metadata first, marked ``"published": false``,
  then the data objects, then the metadata again with the data's digests and ``"published": true``.
  The metadata is the commit record: an output whose metadata does not say ``published`` with its
  digest is incomplete (a kill mid-publish), and a rerun may replace it because the metadata is ours;
- a lease object stands in for a lock: it names its holder (host, pid) and is refreshed every
  ``ttl / 4`` seconds; a second job refuses while the lease is fresh and takes over once it lapses
  (or at once when its holder is a dead process on the same host).

Credentials and endpoints come from the usual environment on every node (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL``, ...) or from the URI's query (``?endpoint_override=host:port&scheme=http``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Union
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from .._atomic import atomic_path, write_json_atomic
from .._errors import OptionError

__all__ = [
    "Remote",
    "is_uri",
    "as_target",
    "read_arrow_stream",
    "write_parquet",
    "read_parquet",
    "digest",
    "exists",
    "remove",
    "read_json",
    "write_json",
]


def is_uri(path) -> bool:
    """True for ``scheme://...`` other than ``file://`` (a local path)."""
    if not isinstance(path, str) or "://" not in path:
        return False
    scheme = path.split("://", 1)[0].lower()
    return scheme.isidentifier() and scheme != "file"


def as_target(path: Union[str, os.PathLike]) -> Union[Path, str]:
    """A local path made absolute (``file://`` stripped), or a URI kept as it is."""
    if isinstance(path, str) and path.lower().startswith("file://"):
        return Path(unquote(urlsplit(path).path)).absolute()
    if is_uri(path):
        return str(path).rstrip("/")
    return Path(path).absolute()


class Remote:
    """One object (or prefix) on a ``pyarrow.fs`` filesystem, named by its URI (query kept for children)."""

    def __init__(self, uri: str, _fs=None) -> None:
        from pyarrow import fs as pafs

        parts = urlsplit(uri)
        self.uri = uri
        self._query = f"?{parts.query}" if parts.query else ""
        if _fs is None:
            try:
                _fs, _ = pafs.FileSystem.from_uri(uri)
            except (pa.ArrowInvalid, OSError, ValueError) as exc:
                raise OptionError(f"cannot open {uri}: {exc}".splitlines()[0]) from None
        self.fs = _fs
        self.path = (parts.netloc + unquote(parts.path)).rstrip("/")

    # -------------------------------------------------------------- naming

    def __truediv__(self, name: str) -> Remote:
        base = self.uri.split("?", 1)[0].rstrip("/")
        return Remote(f"{base}/{name}{self._query}", self.fs)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent(self) -> Remote:
        base = self.uri.split("?", 1)[0].rstrip("/")
        return Remote(base.rsplit("/", 1)[0] + self._query, self.fs)

    def with_name(self, name: str) -> Remote:
        return self.parent / name

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"Remote({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Remote) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    # -------------------------------------------------------------- queries

    def _type(self):
        return self.fs.get_file_info(self.path).type

    def exists(self) -> bool:
        from pyarrow import fs as pafs

        return self._type() != pafs.FileType.NotFound

    def is_file(self) -> bool:
        from pyarrow import fs as pafs

        return self._type() == pafs.FileType.File

    def is_dir(self) -> bool:
        from pyarrow import fs as pafs

        return self._type() == pafs.FileType.Directory

    def listdir(self) -> list[str]:
        """Names directly under this prefix (objects and sub-prefixes); empty when there are none."""
        from pyarrow import fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True, recursive=False))
        except (OSError, pa.ArrowInvalid):
            return []
        return sorted(i.path.rstrip("/").rsplit("/", 1)[-1] for i in infos)

    def walk(self) -> list[str]:
        """Paths of every object under this prefix, relative to it."""
        from pyarrow import fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True, recursive=True))
        n = len(self.path) + 1
        return sorted(i.path[n:] for i in infos if i.type == pafs.FileType.File)

    # -------------------------------------------------------------- bytes

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as fh:
            return fh.read()

    def write_bytes(self, data: bytes) -> None:
        """One upload: the object appears whole once it completes, or not at all."""
        with self.fs.open_output_stream(self.path) as fh:
            fh.write(data)

    def upload(self, local: Union[str, os.PathLike]) -> None:
        from pyarrow import fs as pafs

        pafs.copy_files(
            str(Path(local).absolute()),
            self.path,
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=self.fs,
        )

    def download(self, local: Union[str, os.PathLike]) -> None:
        """Into ``local`` through a temporary sibling renamed into place (never a partial file)."""
        from pyarrow import fs as pafs

        with atomic_path(local) as tmp:
            pafs.copy_files(
                self.path, str(tmp.absolute()), source_filesystem=self.fs, destination_filesystem=pafs.LocalFileSystem()
            )

    def delete(self) -> None:
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            pass

    def delete_tree(self) -> None:
        if self.is_dir():
            self.fs.delete_dir(self.path)

    def digest(self, algorithm: str = "sha256") -> str:
        """The same ``algorithm:hex`` that ``adherence.data.file_digest`` gives for a local copy."""
        h = hashlib.new(algorithm)
        with self.fs.open_input_stream(self.path) as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
        return f"{algorithm}:{h.hexdigest()}"


Target = Union[str, os.PathLike, Remote]


def _where(path: Target) -> Union[Path, Remote]:
    """An object-storage URI as a ``Remote``, anything else as a local ``Path``."""
    if isinstance(path, Remote):
        return path
    if isinstance(path, str) and is_uri(path):
        return Remote(path)
    return Path(path)


def read_arrow_stream(path: Target) -> pa.Table:
    """An Arrow IPC stream file, local or on object storage."""
    r = _where(path)
    if isinstance(r, Path):
        with pa.ipc.open_stream(str(r)) as reader:
            return reader.read_all()
    with r.fs.open_input_stream(r.path) as fh, pa.ipc.open_stream(fh) as reader:
        return reader.read_all()


def read_parquet(path: Target, columns=None) -> pa.Table:
    import pyarrow.parquet as pq

    r = _where(path)
    if isinstance(r, Path):
        return pq.read_table(r, columns=columns)
    return pq.read_table(r.path, filesystem=r.fs, columns=columns)


def write_parquet(table: pa.Table, path: Target) -> None:
    """Parquet written atomically: locally a temporary renamed into place, on object storage one upload."""
    import pyarrow.parquet as pq

    r = _where(path)
    if isinstance(r, Path):
        with atomic_path(r) as tmp:
            pq.write_table(table, tmp)
        return
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    r.write_bytes(buf.getvalue().to_pybytes())


def digest(path: Target) -> str:
    r = _where(path)
    if isinstance(r, Path):
        from ._metadata import file_digest

        return file_digest(r, "sha256")
    return r.digest()


def exists(path: Target) -> bool:
    return _where(path).exists()


def remove(path: Target) -> None:
    """Delete a file or an object; nothing when it is not there."""
    r = _where(path)
    if isinstance(r, Path):
        r.unlink(missing_ok=True)
    else:
        r.delete()


def read_json(path: Target):
    r = _where(path)
    if isinstance(r, Path):
        return json.loads(r.read_text(encoding="utf-8"))
    return json.loads(r.read_bytes().decode("utf-8"))


def write_json(path: Target, obj) -> None:
    r = _where(path)
    if isinstance(r, Path):
        write_json_atomic(r, obj)
    else:
        r.write_bytes(json.dumps(obj, ensure_ascii=False, default=repr).encode("utf-8"))

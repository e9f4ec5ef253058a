"""The one reader of score outputs and the one writer of every file an analysis command makes.

``open_scores`` is how ``evaluate``, ``calibrate``, ``estimate``, ``compare``, ``cascade``, ``view`` and ``export``
open a score output: readable (a corrupt or truncated file is one line naming it), ours when the command needs
ours, published (an object-storage output whose metadata says ``"published": false`` is refused unless asked
for), one row per key, NaN and infinite scores read as "no score".

``write_owned`` is how they write (HTML pages, JSON results, calibration / cascade / classifier files, exports):
through the commit protocol's ownership rule (an existing file is replaced only when the run metadata beside it
says the same command wrote a file of the same kind there, and a labels file never), never onto one of the
command's inputs, complete or not at all, with run metadata
beside it, locally or on object storage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from ..data import SCORE_COLUMNS, STAGE_SCORE, DataError, Remote, command_name, metadata_path
from ._commit import Publisher, _target, _written_by_adherence, check_replaceable, store_of

__all__ = [
    "ScoreOutput",
    "check_key_types",
    "check_score_types",
    "check_writable",
    "check_unique_keys",
    "first_line",
    "inspect_output",
    "open_scores",
    "same_file",
    "training_turns",
    "write_owned",
]

Target = Union[Path, Remote]


def same_file(a: Union[str, os.PathLike, Remote], b: Union[str, os.PathLike, Remote]) -> bool:
    """Whether two paths (or URIs) name the same file: the same inode locally, the same URI remotely."""
    ta, tb = _target(a), _target(b)
    if isinstance(ta, Remote) or isinstance(tb, Remote):
        return str(ta) == str(tb)
    try:
        if ta.exists() and tb.exists():
            return os.path.samefile(ta, tb)
    except OSError:
        pass
    return ta.resolve() == tb.resolve()


def _inside(child: Target, parent: Target) -> bool:
    if isinstance(child, Remote) or isinstance(parent, Remote):
        return str(child).startswith(str(parent).rstrip("/") + "/")
    return parent.resolve() in child.resolve().parents


# ---------------------------------------------------------------------------- the writer

#: The kind of file each writer's ``what`` is (``engine._commit.FILE_KINDS``): recorded beside it, and a command
#: replaces only a file of its own kind that the same command wrote.
_KIND_OF = {
    "the HTML page": "page",
    "the calibration file": "calibration",
    "the cascade file": "cascade",
    "the decided turns": "decided",
    "the classifier file": "classifier",
    "the export": "export",
    "the audit's metrics": "metrics",
    "the labels file": "labels",
    "the rubric": "rubric",
    "the audit's judgments": "judgments",
    "the benchmark JSON": "benchmark",
}


def write_owned(
    path: Union[str, os.PathLike, Remote],
    data: Union[bytes, str],
    *,
    what: str = "the output",
    inputs: Sequence[Any] = (),
    config: Optional[dict] = None,
    kind: Optional[str] = None,
) -> Target:
    """Write ``data`` at ``path`` as the commit protocol publishes a score output; returns where it went.

    Refused (one-line ``DataError``, nothing written) when ``path`` is one of ``inputs`` (or inside an input
    directory), or already holds something adherence did not write (no run metadata of ours beside it). The data
    and its run metadata (``<path>.meta.json``: producer, command, inputs, ``config``) are written under temporary
    names and committed together; on object storage, in the protocol's order (metadata marked unpublished, the
    data, the metadata published).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = write_owned(d / "r.json", "{}")
        >>> _ = write_owned(d / "r.json", '{"again": 1}')  # ours: replaced
        >>> (d / "user.txt").write_text("mine") and None
        >>> write_owned(d / "user.txt", "x")
        Traceback (most recent call last):
        ...
        adherence._errors.DataError: ...user.txt: the output exists and was not written by adherence ...
    """
    import shutil
    import tempfile

    from ..data import run_metadata

    t = _target(path)
    kind = check_writable(path, what=what, inputs=inputs, kind=kind)
    store = store_of(t)
    if not isinstance(t, Remote):
        t.parent.mkdir(parents=True, exist_ok=True)
    seen = {x: store.identity(x) for x in (t, metadata_path(t))}
    body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    local_inputs = [str(x) for x in inputs if x is not None and not isinstance(_target(x), Remote)]
    meta = run_metadata(config=config or {}, inputs=[p for p in local_inputs if Path(p).is_file()], hash_inputs=False)
    import hashlib

    # the bytes written, by digest (as ``file_digest`` reads it): a file changed after this is never replaced
    meta["outputs"] = {
        "file": str(t),
        "kind": kind,
        "command": command_name(),
        "digest": f"sha256:{hashlib.sha256(body).hexdigest()}",
    }
    staging = Path(tempfile.mkdtemp(prefix="adherence-write-")) if isinstance(t, Remote) else None
    pub = Publisher(seen, staging=staging)
    try:
        tmp = pub.temporary(t)
        with open(tmp, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        pub.add(tmp, t)
        import json

        pub.add_text(metadata_path(t), json.dumps(meta, indent=2, ensure_ascii=False, default=repr) + "\n")
        pub.publish()
    except BaseException:
        pub.discard()
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return t


def check_writable(
    path: Union[str, os.PathLike, Remote], *, what: str = "the output", inputs: Sequence[Any] = (),
    kind: Optional[str] = None,
) -> str:  # fmt: skip
    """What ``write_owned`` checks before it writes, alone: a command calls it before any work, so a path it may not
    write is refused at once, not after a long fit. Returns the file's kind."""
    t = _target(path)
    for src in inputs:
        if src is None:
            continue
        s = _target(src)
        if same_file(t, s) or same_file(metadata_path(t), s) or _inside(t, s):
            raise DataError(f"{what} would overwrite the input {src}; choose another path", file=str(t))
    kind = kind or _KIND_OF.get(what, "result")
    check_replaceable(t, what, kind)
    return kind


# ---------------------------------------------------------------------------- the reader


@dataclass
class ScoreOutput:
    """A score output opened by ``open_scores``.

    Attributes:
        path: what was opened (as given).
        table: its rows, scores that were NaN or infinite read as null.
        meta: the run metadata beside it (None for a table adherence did not write).
        ours: whether adherence wrote it (its run metadata says so).
        published: False for an object-storage output whose metadata says it was never published.
        notes: what the reader changed or noticed, one line each (NaN scores read as null, ...).
    """

    path: str
    table: pa.Table
    meta: Optional[dict]
    ours: bool
    published: bool = True
    notes: list = field(default_factory=list)

    @property
    def method(self) -> Optional[str]:
        """The scoring method the output's metadata names (None when it names none)."""
        cfg = (self.meta or {}).get("config") or {}
        if cfg.get("method"):
            return str(cfg["method"])
        if "method" in self.table.column_names:
            methods = {m for m in self.table.column("method").to_pylist() if m is not None}
            if len(methods) == 1:
                return methods.pop()
        return None


def _read_meta(t: Target) -> Optional[dict]:
    try:
        meta = store_of(t).read_json(metadata_path(t))
    except Exception:  # an unreadable metadata file is the same as none: the table is not taken as ours
        return None
    return meta if isinstance(meta, dict) else None


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first line (a library's multi-line error as one line of ours)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _read(t: Target, fmt: Optional[str]) -> pa.Table:
    from ..data import read_parquet, read_table

    try:
        if isinstance(t, Remote):
            if not t.exists():
                raise DataError("no such object", file=str(t))
            return read_parquet(t)
        if not t.exists():
            raise DataError("no such file or directory", file=str(t))
        return read_table(t, format=fmt)
    except DataError:
        raise
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(
            f"cannot read it as a score output ({first_line(exc)}); is it a complete Parquet/JSONL/CSV file?",
            file=str(t),
        ) from None


def check_score_types(
    schema: pa.Schema,
    file: str,
    score_columns: Sequence[str] = SCORE_COLUMNS,
    *,
    text_scores: bool = False,
) -> None:
    """A score output's columns of the types it is read by: scores (and a cascade's per-stage scores) numbers,
    ``turn_index`` an integer. Anything else is one ``DataError`` naming the file and the column (a score column of
    words made every command fail inside its arithmetic). ``text_scores``: a text score column passes here (a CSV's
    numbers read as text): its values are then parsed one by one, a word named by its row (``open_scores``)."""

    def numeric(t: pa.DataType) -> bool:
        if text_scores and (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return True
        return pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_null(t)

    for col in schema:
        if col.name in score_columns or STAGE_SCORE.fullmatch(col.name):
            if not numeric(col.type):
                raise DataError(
                    f"column {col.name!r} holds {col.type}, not numbers: not a score output as written",
                    file=file,
                    column=col.name,
                )
        elif col.name == "turn_index" and not (pa.types.is_integer(col.type) or pa.types.is_null(col.type)):
            raise DataError(
                f"column 'turn_index' holds {col.type}, not integers: not a score output as written",
                file=file,
                column="turn_index",
            )


#: A finite score beyond this magnitude is no method's (they are probabilities, similarities, distances): read as
#: no score, like NaN and infinity. Left in, a few such values overflow every sum and mean (1e308 + 1e308 = inf).
SCORE_LIMIT = 1e100


def _clean_scores(table: pa.Table, columns: Sequence[str], file: str = "<table>") -> tuple[pa.Table, list]:
    """Score columns as float64 with NaN, infinities and magnitudes beyond ``SCORE_LIMIT`` made null; a note per
    column that had any. A text column is parsed as numbers; the first value that is not one is a ``DataError``
    naming its row."""
    notes = []
    for name in columns:
        if name not in table.column_names:
            continue
        col = table.column(name)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            try:
                col = col.cast(pa.float64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                parsed = []
                for i, v in enumerate(col.to_pylist()):
                    try:
                        parsed.append(float(v) if v is not None and v.strip() else None)  # a blank is no score
                    except ValueError:
                        raise DataError(f"expected a number, got {v!r}", file=file, row=i + 1, column=name) from None
                col = pa.chunked_array([pa.array(parsed, pa.float64())])
        if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type) or pa.types.is_decimal(col.type)):
            continue
        values = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            mask = ~(np.abs(values) <= SCORE_LIMIT)  # NaN, infinite, huge, or null
        bad = mask & ~np.asarray(col.is_null().to_numpy(zero_copy_only=False))
        if bad.any():
            notes.append(f"{int(bad.sum())} {name!r} value(s) were NaN, infinite or beyond ±{SCORE_LIMIT:g}: "
                         "read as no score")  # fmt: skip
        table = table.set_column(
            table.column_names.index(name), name, pa.array(np.where(mask, 0.0, values), pa.float64(), mask=mask)
        )
    return table, notes


def check_key_types(table: pa.Table, file: str) -> None:
    """The columns every command joins and decides on, of the types they are read as: ``conversation_id`` text or
    an integer, ``turn_index`` a non-negative int32, ``prediction`` 0 or 1, ``label`` text, a boolean or an integer.
    Anything else is one ``DataError`` naming the file, the column and (for a value) the first row -- a list-typed id
    or a text prediction made commands fail inside their arithmetic ("internal error")."""
    import pyarrow.compute as pc

    def first(mask) -> int:
        return int(np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))[0]) + 1

    def text_or_int(t: pa.DataType) -> bool:
        if pa.types.is_dictionary(t):
            t = t.value_type
        return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t) or pa.types.is_null(t)

    cols = table.column_names
    twice = sorted({c for c in cols if cols.count(c) > 1})
    if twice:
        raise DataError(f"column {twice[0]!r} appears more than once", file=file, column=twice[0])
    if "conversation_id" in cols and not text_or_int(table.schema.field("conversation_id").type):
        raise DataError(f"column 'conversation_id' holds {table.schema.field('conversation_id').type}: a "
                        "conversation id is text or an integer", file=file, column="conversation_id")  # fmt: skip
    if "turn_index" in cols and table.num_rows and pa.types.is_integer(table.schema.field("turn_index").type):
        ti = table.column("turn_index")
        bad = pc.fill_null(pc.or_(pc.less(ti, 0), pc.greater(ti, 2**31 - 1)), False)
        if pc.any(bad).as_py():
            row = first(bad)
            raise DataError(f"turn_index {ti[row - 1].as_py()} is not a turn's index (0 to 2^31 - 1)", file=file,
                            row=row, column="turn_index")  # fmt: skip
    if "prediction" in cols:
        typ = table.schema.field("prediction").type
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)
                or pa.types.is_null(typ)):  # fmt: skip
            raise DataError(f"column 'prediction' holds {typ}: a prediction is 0 or 1", file=file, column="prediction")
        if table.num_rows and not pa.types.is_boolean(typ) and not pa.types.is_null(typ):
            p = table.column("prediction").cast(pa.float64())
            bad = pc.and_(pc.and_(pc.is_valid(p), pc.invert(pc.is_nan(p))),
                          pc.invert(pc.is_in(p, value_set=pa.array([0.0, 1.0]))))  # fmt: skip
            bad = pc.fill_null(bad, False)  # null and NaN are "no prediction"
            if pc.any(bad).as_py():
                row = first(bad)
                raise DataError(f"prediction {p[row - 1].as_py()!r} is not 0 or 1", file=file, row=row,
                                column="prediction")  # fmt: skip
    if "label" in cols:
        typ = table.schema.field("label").type
        if pa.types.is_dictionary(typ):
            typ = typ.value_type
        if not (text_or_int(typ) or pa.types.is_boolean(typ)):
            raise DataError(f"column 'label' holds {typ}: a label is text, a boolean or an integer", file=file,
                            column="label")  # fmt: skip


def check_unique_keys(table: pa.Table, file: str, keys: Sequence[str] = ("conversation_id", "turn_index")) -> None:
    """One row per key (with ``method`` in the key when the table holds several methods); the first repeated key
    is a ``DataError`` naming the file and row. Counted in Arrow; rows are walked only to name a repeat."""
    import pyarrow.compute as pc

    if not all(k in table.column_names for k in keys):
        return
    cols = list(keys)
    if "method" in table.column_names and pc.count_distinct(table.column("method")).as_py() > 1:
        cols.append("method")
    joined = pc.binary_join_element_wise(*(pc.cast(table.column(c), pa.string()) for c in cols), "\x00")
    if pc.count_distinct(joined, mode="all").as_py() == table.num_rows:
        return
    seen: dict = {}
    for i, key in enumerate(zip(*(table.column(c).to_pylist() for c in cols))):
        if key in seen:
            raise DataError(
                f"key {', '.join(f'{c}={v!r}' for c, v in zip(cols, key))} appears twice (rows {seen[key] + 1} and "
                f"{i + 1}): a score output has one row per turn",
                file=file,
                row=i + 1,
            )
        seen[key] = i


def inspect_output(
    path: Union[str, os.PathLike],
    *,
    require_ours: bool = False,
    allow_unpublished: bool = False,
    what: str = "score output",
) -> tuple:
    """``(meta, ours, published)`` of a score output, from its run metadata alone (the viewer, which scans the data
    where it lies, checks this much before it queries; ``open_scores`` reads the rows too). Raises as
    ``open_scores`` does for a foreign output where ours is required and for an unpublished one."""
    t = _target(path)
    meta = _read_meta(t)
    ours = _written_by_adherence(meta)
    if require_ours and not ours:
        raise DataError(
            f"not a {what} of adherence (no run metadata {metadata_path(t).name} of ours beside it); give an "
            "`adherence score` output",
            file=str(t),
        )
    published = not (isinstance(meta, dict) and meta.get("published") is False)
    if not published and not allow_unpublished:
        raise DataError(
            "this output was never published (its metadata says published: false: the job that wrote it did not "
            "finish); run it again with --resume, or open it anyway where the command offers it",
            file=str(t),
        )
    return meta, ours, published


#: What an analysis command says of a score table adherence did not write (docs/engine.md: its minimal columns).
FOREIGN_NOTE = (
    "no run metadata of adherence beside it: read as a score table from elsewhere (conversation_id, turn_index, "
    "score; prediction, status and method where present)"
)


def open_scores(
    path: Union[str, os.PathLike],
    *,
    format: Optional[str] = None,
    require_ours: bool = False,
    allow_unpublished: bool = False,
    score_columns: Sequence[str] = SCORE_COLUMNS,
    what: str = "score output",
) -> ScoreOutput:
    """Open a score output for an analysis command: the one place every command reads one.

    Args:
        path: a local file or directory, or an ``s3://`` / ``gs://`` Parquet output.
        format: override the format (``parquet``, ``jsonl``, ``csv``, ``json``).
        require_ours: refuse a table without adherence's run metadata beside it (``compare``, ``cascade``).
        allow_unpublished: open an object-storage output whose metadata says it was never published (the
            returned ``published`` is then False, for a banner).
        score_columns: columns whose NaN / infinite values are read as null.

    Raises:
        DataError: one line naming the file: missing, unreadable or truncated, not ours when that is required,
            unpublished, or a key repeated.
    """
    t = _target(path)
    meta, ours, published = inspect_output(
        path, require_ours=require_ours, allow_unpublished=allow_unpublished, what=what
    )
    table = _read(t, format)
    check_score_types(table.schema, str(t), tuple(score_columns) or SCORE_COLUMNS, text_scores=True)
    check_key_types(table, str(t))
    check_unique_keys(table, str(t))
    table, notes = _clean_scores(table, score_columns, str(t))
    if not ours:  # said once the command has done its work: a refusal of the table stays one line
        from .._notes import after_success

        after_success(f"{path}: {FOREIGN_NOTE}")
    trained = training_turns(table)
    if trained:
        notes.append(f"{trained} turn(s) trained the classifier that scored it: their scores are out of fold (each "
                     "from the model fit without its fold), never in-sample")  # fmt: skip
    return ScoreOutput(str(path), table, meta, ours, published, notes)


#: The column a classifier's score output marks its training turns with (their fold; null for every other turn).
TRAINING_FOLD = "classifier_fold"


def training_turns(table: pa.Table) -> int:
    """How many rows of a score output a classifier was trained on (``classifier_fold`` set)."""
    if TRAINING_FOLD not in table.column_names:
        return 0
    return table.num_rows - table.column(TRAINING_FOLD).null_count

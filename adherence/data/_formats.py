"""The file formats, below every adapter: detection, checks and one streaming reader per format.

Every reader checks the file before trusting it (empty file, non-UTF-8 text, unparseable lines).
Errors name file, row and column (``DataError``). Nothing here knows about adapters or chat
transcripts: ``adherence.data._io`` dispatches between them, above.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ._contracts import Contract
from ._errors import DataError
from ._validate import cast_column, cast_values

PathLike = Union[str, os.PathLike]
Source = Union[PathLike, pa.Table, pa.RecordBatch]

__all__ = ["CSV_PARSE", "FORMATS", "check_utf8", "detect_format", "load_json", "records_to_table"]

FORMATS = ("parquet", "jsonl", "csv", "json", "personachat", "arrow", "hf_dataset", "otlp_proto")
_EXTENSIONS = {
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".json": "json",
    ".txt": "personachat",
    ".binpb": "otlp_proto",  # OTLP protobuf, as the Collector's file exporter writes it (format: proto)
    ".pb": "otlp_proto",
}
DEFAULT_BATCH_SIZE = 65_536
# Conversation text spans lines inside quoted CSV fields.
CSV_PARSE = pacsv.ParseOptions(newlines_in_values=True)


def detect_format(path: PathLike, format: Optional[str] = None) -> str:
    """The format of ``path``: ``format`` if given, else from the extension (a directory is Parquet)."""
    if format is not None:
        if format not in FORMATS:
            raise DataError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}", file=path)
        return format
    p = Path(path)
    if p.is_dir():
        # A Hugging Face `Dataset.save_to_disk` directory: Arrow stream files + state.json.
        return "hf_dataset" if (p / "state.json").is_file() else "parquet"
    fmt = _EXTENSIONS.get(p.suffix.lower())
    if fmt is None:
        raise DataError(
            f"cannot tell the format from the extension {p.suffix!r}; use one of "
            f"{', '.join(sorted(_EXTENSIONS))} or pass format=",
            file=path,
        )
    if fmt == "jsonl" and p.is_file() and _pretty_first_line(p):
        return "json"  # pretty-printed documents one after another, whatever the file is called
    if fmt == "json" and p.is_file() and _json_per_line(p):
        return "jsonl"  # one JSON document a line whatever the file is called (the Collector's file exporter)
    return fmt


def _pretty_first_line(p: Path) -> bool:
    """Whether a file's first non-blank line is a lone ``{`` (a pretty-printed document, not one a line)."""
    try:
        with open(p, "rb") as fh:
            for line in fh:
                if line.strip():
                    return line.strip() == b"{"
    except OSError:
        return False
    return False


def _json_per_line(p: Path) -> bool:
    """Whether a ``.json`` file holds one JSON object a line: its first non-blank line is a whole object and another
    line follows (a pretty-printed document's first line is not a whole object; a one-line document has no other
    line)."""
    try:
        with open(p, "rb") as fh:
            first = b""
            while not first.strip():
                first = fh.readline()
                if not first:
                    return False
            if not first.lstrip().startswith(b"{"):
                return False
            json.loads(first)
            second = b""
            while not second.strip():
                second = fh.readline()
                if not second:
                    return False
            return second.lstrip().startswith(b"{")
    except (OSError, ValueError, UnicodeDecodeError):
        return False


def check_file(path: PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError("no such file or directory", file=path)
    if not (p.is_file() or p.is_dir()):
        # A FIFO or device would block or stream forever; only regular files and directories are read.
        raise DataError("not a regular file or directory (a pipe, socket or device cannot be read as input)", file=path)
    if not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0)):
        raise DataError("permission denied: the input is not readable", file=path)
    if p.is_file() and p.stat().st_size == 0:
        raise DataError("file is empty", file=path)
    if p.is_dir() and not (p / "state.json").is_file() and not any(parquet_files(p)):
        raise DataError(
            "the directory holds no .parquet files (nor a Hugging Face dataset saved with save_to_disk)", file=path
        )
    return p


def parquet_files(directory: Path) -> list[Path]:
    """Data files of a Parquet dataset directory (hidden and ``_``-prefixed entries are not data)."""
    return sorted(
        q
        for q in directory.rglob("*")
        if q.is_file() and not any(part.startswith((".", "_")) for part in q.relative_to(directory).parts)
    )


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _check_surrogates(record: dict, *, file, row: int, line: int) -> None:
    """A lone UTF-16 surrogate (``"\\ud800"``) decodes into Python but cannot be stored as UTF-8 text."""

    def walk(value, column):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise DataError(
                    "text holds a lone UTF-16 surrogate escape (e.g. \\ud800), which is not valid Unicode text",
                    file=file,
                    row=row,
                    line=line,
                    column=column,
                ) from None
        elif isinstance(value, dict):
            for v in value.values():
                walk(v, column)
        elif isinstance(value, list):
            for v in value:
                walk(v, column)

    for key, value in record.items():
        walk(value, key)


def check_utf8(path: PathLike, chunk_size: int = 1 << 24) -> None:
    """Raise ``DataError`` naming the line of the first byte that is not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(chunk_size)
            final = not chunk
            try:
                decoder.decode(chunk, final=final)
            except UnicodeDecodeError as exc:
                # exc.start is relative to the decoder's buffered input; the buffer holds at most
                # 3 pending bytes, so locating within this chunk is exact enough to name the line.
                pos = max(0, exc.start - len(exc.object) + len(chunk))
                line += chunk[:pos].count(b"\n")
                raise DataError(
                    f"not valid UTF-8 text (byte 0x{exc.object[exc.start]:02x}); re-encode the file as UTF-8",
                    file=path,
                    line=line,
                ) from None
            if final:
                return
            line += chunk.count(b"\n")


# --------------------------------------------------------------------------- raw readers


MAX_LINE_BYTES = 256 * 2**20  # one JSONL record; a longer line is refused before it is held in memory


def _json_fault(exc: json.JSONDecodeError, text: str) -> str:
    """Where a line's JSON breaks, by character of the line (1-based), and a line that was cut short."""
    at = "" if exc.msg.endswith(" at") else " at"
    fault = f"{exc.msg}{at} character {exc.pos + 1}"
    if exc.msg.startswith("Unterminated") or exc.pos >= len(text.rstrip()) - 1:
        fault += f"; the line ends at character {len(text)}: cut short?"
    return fault


def _jsonl_records(path: Path, opts=None, flat: bool = True) -> Iterator[tuple[int, int, Any]]:
    """``(row, line, record)`` per non-blank line (1-based), with errors naming both.

    ``opts`` (``TranscriptOptions``) decides what a line that cannot be read does: stop the read, or be left
    out and kept in its quarantine (``flat``: a turn; else a transcript)."""
    row = 0

    def bad(error: DataError, raw: bytes) -> None:
        if opts is None:
            raise error
        opts.reject(error, text=raw.decode("utf-8", errors="replace").rstrip("\r\n"), flat=flat)

    with open(path, "rb") as fh:
        for line_no, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise DataError(
                    f"a line longer than {MAX_LINE_BYTES // 2**20} MiB; one JSONL record per line is "
                    "expected (is this a JSON array or a dump without newlines?)",
                    file=path,
                    row=row + 1,
                    line=line_no,
                )
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte-order mark (what some Windows tools write) is not data
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                row += 1
                bad(
                    DataError(
                        f"not valid UTF-8 text (byte 0x{raw[exc.start]:02x}); re-encode the file as UTF-8",
                        file=path,
                        row=row,
                        line=line_no,
                    ),
                    raw,
                )
                continue
            if not text.strip():
                continue
            row += 1
            text = text.rstrip("\r\n")  # a fault at the end of the line is placed on it, not on the next
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                bad(DataError(f"invalid JSON ({_json_fault(exc, text)})", file=path, row=row, line=line_no), raw)
                continue
            except RecursionError:
                bad(DataError("JSON nested too deeply to read", file=path, row=row, line=line_no), raw)
                continue
            if _SURROGATE.search(raw):
                try:
                    _check_surrogates(record, file=path, row=row, line=line_no)
                except DataError as error:
                    bad(error, raw)
                    continue
            if flat and not isinstance(record, dict):
                bad(
                    DataError(
                        f"expected a JSON object per line, got {type(record).__name__}",
                        file=path,
                        row=row,
                        line=line_no,
                    ),
                    raw,
                )
                continue
            yield row, line_no, record


def _jsonl_batches(path: Path, contract: Optional[Contract], batch_size: int, opts=None) -> Iterator[pa.Table]:
    records: list[dict] = []
    where: list[tuple[int, int]] = []  # (row, line) of each record
    for row, line_no, record in _jsonl_records(path, opts):
        records.append(record)
        where.append((row, line_no))
        if len(records) >= batch_size:
            table = _typed_records(records, where, contract, str(path), opts)
            if table.num_rows:
                yield table
            records, where = [], []
    if records:
        table = _typed_records(records, where, contract, str(path), opts)
        if table.num_rows:
            yield table


def _typed_records(records: list, where: list, contract, file: str, opts) -> pa.Table:
    """``records_to_table``, a value that cannot be typed named by its row and line; under the skip policy
    that record is left out (and quarantined) and the rest is built again."""
    while records:
        try:
            return records_to_table(
                records, contract, file=file, source_types=None if opts is None else opts.source_types
            )
        except DataError as error:
            i = None if error.row is None else error.row - 1
            if i is None or not 0 <= i < len(records):
                raise
            located = DataError(error.reason, file=file, row=where[i][0], column=error.column, line=where[i][1])
            if opts is None:
                raise located from None
            opts.reject(located, text=json.dumps(records[i], ensure_ascii=False, default=repr))
            del records[i], where[i]
    return pa.table({})


def records_to_table(
    records: list[dict],
    contract: Optional[Contract] = None,
    *,
    file: Optional[str] = None,
    row_offset: int = 0,
    source_types: Optional[dict] = None,
) -> pa.Table:
    """Build a table from dict records; contract columns get their types, others are inferred.

    Values that cannot be put in one typed column produce a ``DataError``
    naming the row and column. ``source_types`` (column -> set of type names) records the type each
    contract column had as written, before it was cast (``None`` when its values do not share one).
    """
    names: dict[str, None] = {}
    for r in records:
        for k in r:
            names.setdefault(k, None)
    arrays, fields = [], []
    for name in names:
        values = [r.get(name) for r in records]
        target = None
        if contract is not None and name in contract.names:
            target = contract.column(name).type
            if source_types is not None:
                try:
                    written = str(pa.array(values).type)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                    written = "None"
                source_types.setdefault(name, set()).add(written)
        arr = _array_from_values(values, target, column=name, file=file, row_offset=row_offset)
        arrays.append(arr)
        fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _array_from_values(values: list, target, *, column: str, file, row_offset: int) -> pa.Array:
    if target is not None:
        # Infer first and cast safely, so 1.5 is not truncated into an int32 column.
        try:
            inferred = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            inferred = None
        if inferred is not None:
            return cast_column(inferred, target, column=column, file=file, row_offset=row_offset)
        return cast_values(values, target, column=column, file=file, row_offset=row_offset)
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        first = next((v for v in values if v is not None), None)

        def numbers(v) -> bool:  # ints and floats mix in one float column
            return isinstance(v, (int, float)) and isinstance(first, (int, float)) and not isinstance(v, bool)

        odd = next(
            (i for i, v in enumerate(values) if v is not None and type(v) is not type(first) and not numbers(v)), None
        )
        if odd is not None:
            kinds = f"{type(first).__name__} earlier, {type(values[odd]).__name__} here"
            raise DataError(
                f"mixed types in one column: {kinds}", file=file, row=row_offset + odd + 1, column=column
            ) from None
        # Same Python type but Arrow still refuses (e.g. nested dicts with differing keys): keep as JSON text.
        return pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in values], type=pa.string())


_DELIMITERS = (",", ";", "\t", "|")


def csv_delimiter(path: Path) -> str:
    """The delimiter of a CSV file, from its header line: a comma when the header has one outside quotes, else
    the most frequent of ``;`` (European spreadsheet exports), tab and ``|``; a comma when it has none."""
    with open(path, "rb") as fh:
        head = fh.read(1 << 16).split(b"\n", 1)[0].decode("utf-8", errors="replace")
    counts = dict.fromkeys(_DELIMITERS, 0)
    quoted = False
    for ch in head:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in counts:
            counts[ch] += 1
    if counts[","]:
        return ","
    best = max(_DELIMITERS[1:], key=lambda d: counts[d])
    return best if counts[best] else ","


def _csv_batches(path: Path, contract: Optional[Contract], batch_size: int, opts=None) -> Iterator[pa.Table]:
    check_utf8(path)
    bad_rows: list = []
    search = {"from": 0}

    def line_of(text: str) -> Optional[int]:
        """The line where a bad row's text starts (searched forward from the previous one's)."""
        with open(path, "rb") as fh:
            data = fh.read()
        at = data.find(text.encode("utf-8"), search["from"])
        if at < 0:
            return None
        search["from"] = at + 1
        return data.count(b"\n", 0, at) + 1

    def on_invalid(row) -> str:
        error = DataError(
            f"expected {row.expected_columns} fields, got {row.actual_columns}", file=path, line=line_of(row.text)
        )
        if opts is None or not opts.skips():
            bad_rows.append(error)
            return "error"
        opts.reject(error, text=row.text)
        return "skip"

    parse = pacsv.ParseOptions(delimiter=csv_delimiter(path), newlines_in_values=True, invalid_row_handler=on_invalid)
    # Contract columns are read as text and cast by ``conform`` so that a bad value is reported
    # with its row; other columns are inferred by Arrow.
    column_types = {c.name: pa.string() for c in contract.columns} if contract else {}
    read_options = pacsv.ReadOptions(block_size=1 << 24)
    # Only an empty unquoted cell is null: "NA", "N/A", "null", "NaN", "None" are text people write.
    convert = pacsv.ConvertOptions(
        column_types=column_types, strings_can_be_null=True, quoted_strings_can_be_null=False, null_values=[""]
    )

    def failed(exc: Exception) -> DataError:
        return bad_rows[0] if bad_rows else DataError(f"cannot parse CSV: {exc}", file=path)

    try:
        reader = pacsv.open_csv(path, read_options=read_options, parse_options=parse, convert_options=convert)
    except pa.ArrowInvalid as exc:
        raise failed(exc) from None
    names = reader.schema.names
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise DataError(f"the header names column {dup!r} twice", file=path, line=1, column=dup)
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowInvalid as exc:
            raise failed(exc) from None
        table = pa.Table.from_batches([batch])
        for start in range(0, table.num_rows, batch_size):
            yield table.slice(start, batch_size)


def _parquet_batches(path: Path, batch_size: int) -> Iterator[pa.Table]:
    try:
        if path.is_dir():
            import pyarrow.dataset as ds

            files = parquet_files(path)
            schemas = []
            for f in files:
                try:
                    schemas.append(pq.read_schema(f))
                except (pa.ArrowInvalid, OSError) as exc:
                    raise DataError(f"not a readable Parquet file ({exc})", file=f) from None
            try:
                # Files with different columns are read with the union of them (missing values null),
                # never with the first file's columns only.
                schema = pa.unify_schemas(schemas, promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise DataError(
                    f"the Parquet files of this directory have incompatible columns ({exc})", file=path
                ) from None
            batches = ds.dataset([str(f) for f in files], format="parquet", schema=schema).to_batches(
                batch_size=batch_size
            )
        else:
            batches = pq.ParquetFile(path).iter_batches(batch_size=batch_size)
        for batch in batches:
            yield pa.Table.from_batches([batch])
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"not a readable Parquet file ({exc})", file=path) from None


def _arrow_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    try:  # save_to_disk lists its shards in order in state.json
        names = [f["filename"] for f in json.loads((path / "state.json").read_text())["_data_files"]]
        return [path / n for n in names]
    except (OSError, ValueError, KeyError, TypeError):
        return sorted(path.glob("*.arrow"))


def _arrow_batches(path: Path, batch_size: int) -> Iterator[pa.Table]:
    """Arrow IPC files, stream or file format (Hugging Face datasets write streams)."""
    for f in _arrow_files(path):
        try:
            try:
                reader = pa.ipc.open_stream(f)
                batches = iter(reader)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(f)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            for batch in batches:
                t = pa.Table.from_batches([batch])
                for start in range(0, t.num_rows, batch_size):
                    yield t.slice(start, batch_size)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"not a readable Arrow IPC file ({exc})", file=f) from None


def _json_documents(text: str, path: PathLike) -> list:
    """JSON documents written one after another (``ConsoleSpanExporter``'s output), as a list."""
    decoder = json.JSONDecoder()
    out: list = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return out
        try:
            doc, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON ({exc.msg}, character {exc.colno})", file=path, line=exc.lineno) from None
        out.append(doc)


def load_json(path: PathLike) -> Any:
    """A whole JSON file, checked for UTF-8; a one-line error naming the file and line otherwise."""
    check_utf8(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # documents one after another (a printed stream of spans): a list of them
            return _json_documents(text, path)
        raise DataError(f"invalid JSON ({exc.msg}, character {exc.colno})", file=path, line=exc.lineno) from None
    except RecursionError:
        raise DataError("JSON nested too deeply to read", file=path) from None

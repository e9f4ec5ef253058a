"""Readers and writers for Parquet, JSONL and CSV, streaming in record batches.

The dispatch above the formats (``._formats``), the adapters (``._adapters``) and chat
transcripts (``._transcripts``): a source is detected, read by its format's reader or exploded from
transcripts, and, when given a contract, each batch is cast to it and the contract's key is checked
across the whole stream. Errors name file, row and column (``DataError``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .._atomic import atomic_path
from .._errors import OptionError
from ._adapters import read_json_turns, read_personachat
from ._contracts import Contract
from ._errors import DataError, warn_skipped
from ._formats import (  # noqa: F401 - re-exported: the engine reads files through this module
    CSV_PARSE,
    DEFAULT_BATCH_SIZE,
    FORMATS,
    MAX_LINE_BYTES,
    PathLike,
    Source,
    _arrow_batches,
    _csv_batches,
    _jsonl_batches,
    _jsonl_records,
    _parquet_batches,
    check_file,
    check_utf8,
    detect_format,
    load_json,
    parquet_files,
    records_to_table,
)
from ._transcripts import TranscriptOptions, detect_transcript, explode_transcripts, rename_columns
from ._validate import KeyTracker, conform

__all__ = ["detect_format", "iter_batches", "json_safe", "read_table", "write_table", "FORMATS"]


def _table_transcript_kind(schema: pa.Schema) -> Optional[str]:
    names = set(schema.names)
    if "assistant" in names:
        return None
    if "run_type" in names and ("inputs" in names or "outputs" in names):
        return "langsmith"  # LangSmith's bulk export
    if "context.span_id" in names or ("span_kind" in names and "context" in names):
        return "openinference"  # Phoenix's span dataframe
    if "traceId" in names and "type" in names and ("input" in names or "output" in names):
        return "langfuse"  # an observations table
    return "openai" if "messages" in names else "sharegpt" if "conversations" in names else None


def _transcript_kind(opts, detect) -> Optional[str]:
    """The transcript format to read, or None for flat turns: forced by ``opts.input_format``, else
    ``detect()`` (called only when auto-detecting)."""
    if opts is None or opts.input_format == "turns":
        return None
    return detect() if opts.input_format == "auto" else opts.input_format


def transcript_source(path: Path, fmt: str, opts) -> Optional[tuple[str, Iterator]]:
    """``(kind, records)`` when ``path`` holds transcripts (forced or detected), else None."""
    if opts.input_format == "turns":
        return None
    if fmt == "jsonl":
        kind = _transcript_kind(
            opts, lambda: detect_transcript(next((r for _, _, r in _jsonl_records(path, opts.probe(), False)), None))
        )
        return (kind, _jsonl_records(path, opts, flat=False)) if kind else None
    if fmt == "json":
        obj = load_json(path)
        items = obj if isinstance(obj, list) else [obj]
        kind = _transcript_kind(opts, lambda: detect_transcript(items[0]) if items else None)
        return (kind, ((i, None, r) for i, r in enumerate(items, start=1))) if kind else None
    if fmt == "csv":  # trace tables (Langfuse observations, LangSmith runs, Phoenix spans) exported as CSV

        def header():
            import csv

            # errors="replace": a file that is not UTF-8 is the flat reader's to report, line and all
            with open(path, newline="", encoding="utf-8", errors="replace") as fh:
                names = next(csv.reader(fh), [])
            return _table_transcript_kind(pa.schema([(n, pa.string()) for n in names if n]))

        kind = _transcript_kind(opts, header)
        return (kind, _csv_records(path)) if kind else None
    if fmt in ("parquet", "arrow", "hf_dataset"):

        def first_schema():
            first = next(_parquet_batches(path, 4096) if fmt == "parquet" else _arrow_batches(path, 4096), None)
            return None if first is None else _table_transcript_kind(first.schema)

        kind = _transcript_kind(opts, first_schema)
        if not kind:
            return None

        def records():
            n = 0
            for b in _parquet_batches(path, 4096) if fmt == "parquet" else _arrow_batches(path, 4096):
                for r in b.to_pylist():
                    n += 1
                    yield n, None, r

        return kind, records()
    return None


def _otlp_proto_records(path: Path) -> Iterator[tuple[int, Optional[int], dict]]:
    """The ``ExportTraceServiceRequest`` messages of an OTLP protobuf file, as OTLP JSON-shaped dicts: each
    preceded by its size (4 bytes, big-endian), as the Collector's file exporter writes them, or one message
    alone."""
    from .._optional import require

    require("opentelemetry.proto", "otel", "OTLP protobuf trace files")
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(4)
        framed = len(head) == 4 and 0 < int.from_bytes(head, "big") <= size - 4
        fh.seek(0)
        n = 0
        while True:
            if framed:
                head = fh.read(4)
                if not head:
                    return
                if len(head) < 4:
                    raise DataError(f"a truncated OTLP protobuf file (a size prefix of {len(head)} bytes)", file=path)
                data = fh.read(int.from_bytes(head, "big"))
            else:
                data = fh.read()
            n += 1
            msg = ExportTraceServiceRequest()
            try:
                msg.ParseFromString(data)
            except DecodeError as exc:
                raise DataError(f"message {n} is not an OTLP trace request ({exc})", file=path, row=n) from None
            yield n, None, MessageToDict(msg)
            if not framed:
                return


def _csv_records(path: Path) -> Iterator[tuple[int, Optional[int], dict]]:
    """The rows of a CSV file as dicts (cells that hold JSON objects or arrays read as JSON)."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        for n, row in enumerate(csv.DictReader(fh), start=1):
            out: dict = {}
            for k, v in row.items():
                if isinstance(v, str) and v[:1] in ("{", "["):
                    try:
                        v = json.loads(v)
                    except ValueError:
                        pass
                out[k] = None if v == "" else v
            yield n, n + 1, out


def raw_batches(
    path: Path, fmt: str, contract: Optional[Contract], batch_size: int, transcripts=None
) -> Iterator[pa.Table]:
    if fmt == "otlp_proto":
        from ._traces import explode_traces

        opts = transcripts if transcripts is not None else TranscriptOptions()
        yield from explode_traces(_otlp_proto_records(path), "otel", opts, file=str(path), batch_size=batch_size)
        return
    if transcripts is not None:
        found = transcript_source(path, fmt, transcripts)
        if found is not None:
            yield from explode_transcripts(found[1], found[0], transcripts, file=str(path), batch_size=batch_size)
            return
    if fmt == "parquet":
        yield from _parquet_batches(path, batch_size)
    elif fmt in ("arrow", "hf_dataset"):
        yield from _arrow_batches(path, batch_size)
    elif fmt == "jsonl":
        yield from _jsonl_batches(path, contract, batch_size, transcripts)
    elif fmt == "csv":
        yield from _csv_batches(path, contract, batch_size, transcripts)
    elif fmt == "json":
        table = read_json_turns(path)
        for start in range(0, table.num_rows, batch_size):
            yield table.slice(start, batch_size)
    elif fmt == "personachat":
        table = read_personachat(path).conversations
        for start in range(0, table.num_rows, batch_size):
            yield table.slice(start, batch_size)
    else:  # pragma: no cover - detect_format guards this
        raise DataError(f"unsupported format {fmt!r}", file=path)


# --------------------------------------------------------------------------- public readers


def as_table(source) -> pa.Table:
    """An in-memory source as an Arrow table: a Table or RecordBatch, a pandas DataFrame, or a Hugging
    Face ``datasets.Dataset`` (its select/shuffle/filter index mapping honoured)."""
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    kind = f"{type(source).__module__}.{type(source).__name__}"
    if kind.startswith("datasets.") and hasattr(source, "with_format"):
        return source.with_format("arrow")[:]
    if kind.startswith("pandas.") and hasattr(source, "to_records"):
        return pa.Table.from_pandas(source, preserve_index=False)
    raise TypeError(
        f"cannot read a {kind}: pass a path, a pyarrow Table / RecordBatchReader, a pandas DataFrame "
        "or a datasets.Dataset"
    )


def iter_batches(
    source: Source,
    contract: Optional[Contract] = None,
    *,
    format: Optional[str] = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    allow_empty: bool = False,
    transcripts=None,
) -> Iterator[pa.Table]:
    """Stream ``source`` as Arrow tables of at most ``batch_size`` rows.

    Args:
        source: a path (Parquet file or directory, JSONL, CSV, JSON adapter
            formats, PersonaChat txt) or an in-memory Arrow table.
        contract: when given, every batch is cast to it and its key is checked
            across the whole stream.
        format: override the format detected from the extension.
        batch_size: rows per yielded table.
        allow_empty: yield nothing instead of raising for a source with no rows.
        transcripts: a ``adherence.data.TranscriptOptions``: chat transcripts (OpenAI
            ``messages``, ShareGPT ``conversations``) are exploded into turns. Reading turns
            (``contract`` is ``TURNS``) detects them by default.

    Raises:
        DataError: for any problem, naming file, row and column.

    Example:
        >>> from adherence.data import TURNS, iter_batches, example_path
        >>> sum(b.num_rows for b in iter_batches(example_path("role"), TURNS)) > 0
        True
    """
    if batch_size <= 0:
        raise OptionError(f"`batch_size` must be positive, got {batch_size}")
    if transcripts is None and contract is not None and contract.name == "turns":
        transcripts = TranscriptOptions()
    if isinstance(source, pa.RecordBatchReader):
        source = source.read_all()
    if not isinstance(source, (str, os.PathLike)):
        file = "<table>"
        fmt = None
        table = as_table(source)
        kind = _transcript_kind(transcripts, lambda: _table_transcript_kind(table.schema))

        def open_raw(opts):
            if kind:
                records = ((i, None, r) for i, r in enumerate(table.to_pylist(), start=1))
                return explode_transcripts(records, kind, opts, file=file, batch_size=batch_size)
            return (table.slice(s, batch_size) for s in range(0, table.num_rows, batch_size))
    else:
        path = check_file(source)
        file = str(source)
        fmt = detect_format(path, format)

        def open_raw(opts):
            return raw_batches(path, fmt, contract, batch_size, opts)

    # JSONL rows are typed as they are read (records_to_table records the types as written)
    typed_by_reader = isinstance(source, (str, os.PathLike)) and fmt == "jsonl"
    tracker = None
    if contract is not None and contract.key:
        keyed = contract

        def fetch(rows: list[int], key: list[str]) -> dict:
            """Key values of the given 0-based rows, re-read from the source (only to confirm a duplicate)."""
            wanted, found, offset = set(rows), {}, 0
            probe = transcripts.probe() if transcripts is not None else None  # bad rows left out again, not recorded
            for batch in open_raw(probe):
                batch = _conform_rows(rename_columns(batch, probe.columns if probe else {}, file), keyed, file, offset,
                                      probe)  # fmt: skip
                hit = [r for r in wanted if offset <= r < offset + batch.num_rows]
                if hit:
                    cols = [batch.column(k).to_pylist() for k in key]
                    for r in hit:
                        found[r] = tuple(c[r - offset] for c in cols)
                offset += batch.num_rows
            return found

        tracker = KeyTracker(contract, file=file, fetch=fetch)
    raw: Iterator[pa.Table] = open_raw(transcripts)
    offset = 0
    renames = transcripts.columns if transcripts is not None else {}
    for batch in raw:
        if renames:
            batch = rename_columns(batch, renames, file)
        if contract is not None:
            if transcripts is not None and not typed_by_reader and "conversation_id" in batch.column_names:
                transcripts.source_types.setdefault("conversation_id", set()).add(
                    str(batch.schema.field("conversation_id").type)
                )
            batch = _conform_rows(batch, contract, file, offset, transcripts)
            if not batch.num_rows:
                continue
            if tracker is not None:
                tracker.update(batch, offset)
        offset += batch.num_rows
        yield batch
    if tracker is not None:
        tracker.finish()
    if transcripts is not None:
        transcripts_only = transcripts.records > 0  # a file of transcripts: each bad line is a record left out
        warn_skipped(
            file,
            transcripts.skipped,
            "transcript record" if transcripts_only else "row",
            rest="scored" + (" (a malformed transcript is its whole conversation)" if transcripts_only else ""),
            hint="each is in OUTPUT.bad-rows.jsonl; --bad-rows fail stops at the first one instead, and "
            "--max-bad-rows is the share that may be left out before the job fails",
        )
    if offset == 0 and not allow_empty:
        raise DataError("no rows (the input has no data records)", file=file)


def _conform_rows(batch: pa.Table, contract: Contract, file: str, offset: int, opts) -> pa.Table:
    """``conform``; under the skip policy a row whose value does not fit the contract is left out (and
    quarantined with its values) and the rest is checked again."""
    while True:
        try:
            return conform(batch, contract, file=file, row_offset=offset)
        except DataError as error:
            i = None if error.row is None else error.row - offset - 1
            if opts is None or not opts.skips() or i is None or not 0 <= i < batch.num_rows:
                raise
            row = batch.slice(i, 1).to_pylist()[0]
            opts.reject(error, text=json.dumps(row, ensure_ascii=False, default=repr), where=f"row {error.row}")
            batch = pa.concat_tables([batch.slice(0, i), batch.slice(i + 1)])
            offset += 1  # the rows after it keep their numbers


def read_table(
    source: Source,
    contract: Optional[Contract] = None,
    *,
    format: Optional[str] = None,
    allow_empty: bool = False,
) -> pa.Table:
    """Read a whole table (see ``iter_batches`` for arguments and errors)."""
    batches = list(iter_batches(source, contract, format=format, allow_empty=allow_empty))
    if not batches:
        schema = contract.schema([c for c in contract.required]) if contract else pa.schema([])
        return schema.empty_table()
    if len(batches) == 1:
        return batches[0]
    return pa.concat_tables(batches, promote_options="permissive")


# --------------------------------------------------------------------------- writers


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", errors="replace")
    return str(value)


def json_safe(value: Any) -> Any:
    """``value`` with every NaN and infinity made None, through dicts, lists and tuples: what strict JSON can hold
    (a score that is not a number is no score)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_jsonl(table: pa.Table, fh) -> None:
    for batch in table.to_batches(max_chunksize=8192):
        for record in batch.to_pylist():
            fh.write(json.dumps(json_safe(record), ensure_ascii=False, default=_json_default, allow_nan=False))
            fh.write("\n")


def csv_ready(table: pa.Table) -> pa.Table:
    """CSV has no nested values: list and struct columns are written as JSON text."""
    for i, f in enumerate(table.schema):
        if pa.types.is_nested(f.type):
            text = [None if v is None else json.dumps(v, ensure_ascii=False) for v in table.column(i).to_pylist()]
            table = table.set_column(i, pa.field(f.name, pa.string()), pa.array(text, type=pa.string()))
    return table


def write_table(
    table: pa.Table,
    path: PathLike,
    *,
    format: Optional[str] = None,
    metadata: Optional[dict] = None,
) -> Path:
    """Write ``table`` atomically (temp file + rename) as Parquet, JSONL or CSV.

    With ``metadata``, a run-metadata JSON is written beside the output as
    ``<path>.meta.json`` (see ``adherence.data.write_run_metadata``).
    """
    path = Path(path)
    fmt = detect_format(path, format) if format or path.suffix else "parquet"
    if fmt not in ("parquet", "jsonl", "csv"):
        raise DataError(f"cannot write format {fmt!r}; use .parquet, .jsonl or .csv", file=path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        if fmt == "parquet":
            pq.write_table(table, tmp)
        elif fmt == "jsonl":
            with open(tmp, "w", encoding="utf-8") as fh:
                write_jsonl(table, fh)
        else:
            pacsv.write_csv(csv_ready(table), tmp)
    if metadata is not None:
        from ._metadata import write_run_metadata

        write_run_metadata(path, metadata)
    return path

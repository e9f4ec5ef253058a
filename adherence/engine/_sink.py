"""What a job writes its tables with: a sink streaming into any output format, an in-memory source spilled to
Parquet, and a line on standard error. Shared by the engine's merge and the cascade's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import atomic_path
from .._errors import OptionError
from ..data import as_table

__all__ = ["TableSink", "say", "spill"]


def say(text: str) -> None:
    """A line on standard error (dropped when nobody reads it any more)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError, OSError):
        pass


def spill(source, path: Path) -> None:
    """Write an in-memory source to ``path`` (Parquet, atomically): an Arrow table or batch, a
    RecordBatchReader (streamed), a pandas DataFrame, or a Hugging Face ``datasets.Dataset``."""
    with atomic_path(path) as tmp:
        if isinstance(source, pa.RecordBatchReader):
            with pq.ParquetWriter(tmp, source.schema) as w:
                for batch in source:
                    w.write_batch(batch)
        else:
            pq.write_table(as_table(source), tmp)


class TableSink:
    """Streams tables into one Parquet file, a Parquet directory, JSONL or CSV at ``path`` (a temporary)."""

    def __init__(self, path: Path, fmt: str, schema: pa.Schema) -> None:
        self.path, self.fmt, self.schema = path, fmt, schema
        self.count = 0
        if fmt == "parquet":
            self.writer = pq.ParquetWriter(path, schema)
        elif fmt == "directory":
            path.mkdir(parents=True)
        elif fmt == "jsonl":
            self.fh = open(path, "w", encoding="utf-8")
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            from ..data import csv_ready

            self.csv_ready = csv_ready
            self.csv_schema = csv_ready(schema.empty_table()).schema
            self.writer = pacsv.CSVWriter(str(path), self.csv_schema)
        else:  # pragma: no cover - output_format guards this
            raise OptionError(f"cannot write scores as {fmt!r}")

    def write(self, t: pa.Table) -> None:
        if self.fmt == "parquet":
            self.writer.write_table(t)
        elif self.fmt == "directory":
            pq.write_table(t, self.path / f"part-{self.count:05d}.parquet")
        elif self.fmt == "jsonl":
            from ..data import write_jsonl

            write_jsonl(t, self.fh)
        else:
            self.writer.write_table(self.csv_ready(t).cast(self.csv_schema))
        self.count += 1

    def close(self) -> None:
        if self.fmt in ("parquet", "csv"):
            self.writer.close()
        elif self.fmt == "jsonl":
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()

    def count_rows(self) -> int:
        """Rows in the written file, read back from it (not from what was handed to ``write``)."""
        if self.fmt == "parquet":
            return pq.ParquetFile(self.path).metadata.num_rows
        if self.fmt == "directory":
            return sum(pq.ParquetFile(p).metadata.num_rows for p in self.path.glob("part-*.parquet"))
        if self.fmt == "jsonl":
            n = 0
            with open(self.path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    n += chunk.count(b"\n")
            return n
        import pyarrow.csv as pacsv

        from ..data import CSV_PARSE

        first = self.csv_schema.names[0]
        reader = pacsv.open_csv(
            self.path,
            parse_options=CSV_PARSE,
            convert_options=pacsv.ConvertOptions(include_columns=[first], column_types={first: pa.string()}),
        )
        return sum(b.num_rows for b in reader)

"""``adherence export OUT --format otel|langfuse|phoenix|langsmith -o FILE``: scores read from traces, written as
the records each platform takes, each naming the span (observation, run) it scored."""

from __future__ import annotations

import argparse
import sys

from .._errors import OptionError
from .._options import file_path
from .main import Command


class ExportCommand(Command):
    name = "export"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        from ..data._trace_export import EXPORT_FORMATS

        p.add_argument("input", type=file_path, metavar="OUT", help="an `adherence score` output of traces")
        p.add_argument(
            "--format",
            required=True,
            choices=EXPORT_FORMATS,
            help="otel: OTLP JSON logs of gen_ai.evaluation.result events; langfuse: score records; phoenix: span "
            "annotations; langsmith: feedback records",
        )
        p.add_argument("-o", "--output", type=file_path, required=True, metavar="FILE", help="the records (JSONL)")
        p.add_argument(
            "--name",
            default="role_adherence",
            help="the score's name on the platform (gen_ai.evaluation.name, the Langfuse score or LangSmith key; "
            "default role_adherence)",
        )
        p.add_argument("--score", default="score", help="the column exported as the value (default score)")

    def run(self, args: argparse.Namespace) -> int:
        from pathlib import Path

        import pyarrow as pa

        from .._atomic import write_text_atomic
        from .._version import __version__
        from ..data import DataError, read_table
        from ..data._trace_export import export_records

        t = read_table(args.input)
        for col in ("trace_id", "span_id", args.score):
            if col not in t.column_names:
                why = (
                    "scores go back to the spans they came from: score a trace file (OTLP JSON, Phoenix spans, "
                    "Langfuse observations, LangSmith runs)"
                    if col != args.score
                    else "give --score COLUMN"
                )
                raise DataError(f"the output has no {col} column; {why}", file=str(args.input), column=col)
        if args.score != "score":
            t = t.drop_columns(["score"]).append_column("score", t.column(args.score).cast(pa.float64()))
        keep = [
            c
            for c in ("trace_id", "span_id", "score", "prediction", "reason", "method", "status")
            if c in t.column_names
        ]
        rows = t.select(keep).to_pylist()
        ready = [r for r in rows if r["score"] is not None and r["trace_id"] and r["span_id"]]
        if not ready:
            raise OptionError(f"{args.input}: no scored turn with a trace and span id to export")
        lines = list(export_records(ready, args.format, name=args.name, version=__version__))
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(args.output), "\n".join(lines) + "\n")
        left = len(rows) - len(ready)
        print(
            f"{len(ready)} score(s) written as {args.format} records to {args.output}"
            + (f"; {left} turn(s) without a score or a span id left out" if left else ""),
            file=sys.stderr,
        )
        return 0

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
    writes = {"": "the export"}

    def add_args(self, p: argparse.ArgumentParser) -> None:
        from ..data import EXPORT_FORMATS

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
        p.add_argument(
            "--send",
            metavar="URL",
            help="otel: also send the records to an OTLP/HTTP endpoint (a Collector, Phoenix, Langfuse's OTLP "
            "endpoint: http://HOST:4318 or its /v1/logs URL) as OTLP JSON; exit 1 if any is refused",
        )
        p.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="with --send: an HTTP header (e.g. authorization), repeatable; never printed or recorded",
        )

    def run(self, args: argparse.Namespace) -> int:

        import pyarrow as pa

        from .._version import __version__
        from ..data import DataError, export_records
        from ..engine import open_scores
        from ._common import write_result

        out = open_scores(args.input, score_columns=(args.score,))
        t = out.table
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
        write_result(args.output, "\n".join(lines) + "\n", inputs=[args.input], what=self.output_what())
        if args.send:
            if args.format != "otel":
                raise OptionError("--send goes with --format otel (the other formats are files for their platforms)")
            sent = send_otlp(args.send, lines, dict(_header(h) for h in args.header))
            print(f"sent {sent} record(s) to {args.send}", file=sys.stderr)
        left = len(rows) - len(ready)
        print(
            f"{len(ready)} score(s) written as {args.format} records to {args.output}"
            + (f"; {left} turn(s) without a score or a span id left out" if left else ""),
            file=sys.stderr,
        )
        return 0


def _header(h: str) -> tuple:
    name, eq, value = h.partition("=")
    if not eq or not name.strip():
        raise OptionError("--header takes NAME=VALUE")
    return name.strip(), value


def send_otlp(url: str, lines: list, headers: dict, *, tries: int = 4, timeout: float = 30.0) -> int:
    """POST each ``ExportLogsServiceRequest`` (OTLP JSON) to ``url`` (``/v1/logs`` added when missing); retried on a
    refused connection, 429 and 5xx with backoff; a ``JobError`` in one line when one cannot be delivered or the
    endpoint rejects records (OTLP's partial success). Returns the records delivered."""
    import json
    import time
    import urllib.error
    import urllib.request

    from .._errors import JobError

    target = url.rstrip("/") + ("" if url.rstrip("/").endswith("/v1/logs") else "/v1/logs")
    if not target.startswith(("http://", "https://")):
        raise OptionError(f"--send needs an http:// or https:// URL, got {url!r}")
    delivered = 0
    for n, line in enumerate(lines, start=1):
        records = sum(len(s["logRecords"]) for r in json.loads(line)["resourceLogs"] for s in r["scopeLogs"])
        for attempt in range(tries):
            req = urllib.request.Request(
                target, data=line.encode("utf-8"), method="POST",
                headers={"Content-Type": "application/json", **headers},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    body = resp.read()
                break
            except urllib.error.HTTPError as exc:
                if exc.code not in (429, 502, 503, 504) or attempt == tries - 1:
                    raise JobError(
                        f"{target} refused request {n} of {len(lines)}: HTTP {exc.code} {exc.reason}"
                    ) from None
            except (urllib.error.URLError, OSError) as exc:
                if attempt == tries - 1:
                    raise JobError(
                        f"cannot reach {target} ({getattr(exc, 'reason', exc)}); {delivered} record(s) sent"
                    ) from None
            time.sleep(min(8.0, 0.5 * 2**attempt))
        try:
            partial = (json.loads(body or b"{}") or {}).get("partialSuccess") or {}
        except ValueError:
            partial = {}
        rejected = int(partial.get("rejectedLogRecords") or 0)
        if rejected:
            raise JobError(f"{target} rejected {rejected} of {records} record(s): {partial.get('errorMessage', '')}")
        delivered += records
    return delivered

"""``adherence view OUT [...]``: a local, read-only web viewer over score outputs; ``--export-html`` writes one
self-contained page of the worst conversations instead."""

from __future__ import annotations

import argparse
import sys

from .._errors import OptionError
from .._options import file_path
from .main import Command


class ViewCommand(Command):
    name = "view"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "outputs",
            nargs="+",
            type=file_path,
            metavar="OUT",
            help="score outputs: .parquet (file or directory), .jsonl, .csv, or an s3:// / gs:// Parquet output",
        )
        p.add_argument(
            "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
        )
        p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
        p.add_argument(
            "--export-html",
            type=file_path,
            metavar="FILE",
            help="write one self-contained page of the worst conversations to FILE and exit (no server)",
        )
        p.add_argument(
            "--top", type=int, default=50, metavar="N", help="with --export-html: conversations (default 50)"
        )

    def run(self, args: argparse.Namespace) -> int:
        from ..view import ScoreStore, export_html, serve

        if not 0 <= args.port <= 65535:
            raise OptionError(f"--port must be in [0, 65535], got {args.port}")
        if args.top < 1:
            raise OptionError(f"--top must be >= 1, got {args.top}")
        if args.export_html:
            store = ScoreStore(args.outputs)
            print(f"wrote {export_html(store, args.export_html, top=args.top)}", file=sys.stderr)
            return 0
        try:
            serve(args.outputs, args.host, args.port)
        except KeyboardInterrupt:
            print("adherence view: stopped", file=sys.stderr)
        return 0

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
        p.add_argument(
            "--allow-unpublished",
            action="store_true",
            help="open an output whose job never finished publishing (refused by default; shown with a warning)",
        )
        p.add_argument(
            "--labels",
            type=file_path,
            metavar="FILE",
            help="a labels file (JSONL or CSV: conversation_id, turn_index, label) laid over the outputs' turns: the "
            "label filter offers its values, and each conversation shows its labelled turns and the share whose "
            "prediction agrees",
        )
        p.add_argument(
            "--columns",
            metavar="NAME=COLUMN,...",
            help="the outputs' own names for the columns the viewer reads, for a table named otherwise: e.g. "
            "conversation_id=chat_id,user=question,assistant=answer",
        )
        g = p.add_argument_group("labelling (the page at /label)")
        g.add_argument(
            "--label",
            type=file_path,
            metavar="LABELS.jsonl",
            help="label a sample of the first output's turns into this labels file (created with the sample; "
            "reopened, it resumes where it stopped); every command reads it with --labels",
        )
        g.add_argument("--sample", type=int, metavar="N", help="turns to sample (default 100; a new labels file only)")
        g.add_argument(
            "--design",
            choices=("uniform", "by-score", "by-uncertainty"),
            help="uniform (default: estimates from it are plain), by-score (the same number from each of five "
            "equal-width score ranges) or by-uncertainty (most from the turns scored nearest the decision "
            "threshold, what a classifier learns most from); each turn's weight is recorded so estimates stay "
            "unbiased",
        )
        g.add_argument("--seed", type=int, help="seed of the sample (default 0; recorded in the labels file)")
        g.add_argument(
            "--labeller",
            help="your name, kept on every label (default: the labeller of a reopened file when it has one, else the "
            "login name)",
        )
        g.add_argument(
            "--show-scores",
            action="store_true",
            help="show each turn's score while labelling (hidden by default: a label made looking at the score "
            "agrees with it more than it should)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from ..data import parse_columns
        from ..view import VIEW_COLUMNS, ScoreStore, export_html, serve

        columns = parse_columns(args.columns, tuple(VIEW_COLUMNS))

        if not 0 <= args.port <= 65535:
            raise OptionError(f"--port must be in [0, 65535], got {args.port}")
        if args.top < 1:
            raise OptionError(f"--top must be >= 1, got {args.top}")
        if args.export_html:
            if args.label:
                raise OptionError("--label opens the labelling page: it does not go with --export-html")
            store = ScoreStore(
                args.outputs, allow_unpublished=args.allow_unpublished, labels=args.labels, columns=columns
            )
            print(f"wrote {export_html(store, args.export_html, top=args.top, inputs=args.outputs)}", file=sys.stderr)
            return 0
        session = None
        if args.label:
            session = _label_session(args)
        elif any(v is not None for v in (args.sample, args.design, args.seed, args.labeller)) or args.show_scores:
            raise OptionError("--sample, --design, --seed, --labeller and --show-scores go with --label LABELS.jsonl")
        try:
            serve(args.outputs, args.host, args.port, session=session, allow_unpublished=args.allow_unpublished,
                  labels=args.labels, columns=columns)  # fmt: skip
        except KeyboardInterrupt:
            print("adherence view: stopped", file=sys.stderr)
        return 0


def _label_session(args: argparse.Namespace):
    """The labelling session of ``--label``: the first output's turns through the one reader of score outputs."""
    import numpy as np

    from ..data import DataError
    from ..engine import open_scores
    from ..view import LabelSession

    if not str(args.label).lower().endswith(".jsonl"):
        raise DataError("the viewer writes labels as JSON lines: give a .jsonl file", file=args.label)
    if args.sample is not None and args.sample < 1:
        raise OptionError(f"--sample must be >= 1, got {args.sample}")
    out = open_scores(args.outputs[0])
    t = out.table
    for c in ("conversation_id", "turn_index"):
        if c not in t.column_names:
            raise DataError(f"labelling needs a {c} column", file=args.outputs[0], column=c)
    keys = list(zip((str(c) for c in t.column("conversation_id").to_pylist()),
                    (int(x) for x in t.column("turn_index").to_pylist())))  # fmt: skip
    scores = (
        np.asarray(t.column("score").fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
        if "score" in t.column_names
        else np.full(len(keys), np.nan)
    )
    threshold = ((out.meta or {}).get("config") or {}).get("threshold")
    session = LabelSession(
        args.label, keys, scores, labeller=args.labeller, source=str(args.outputs[0]), sample=args.sample,
        design=args.design, seed=args.seed, show_scores=args.show_scores,
        threshold=float(threshold) if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) else None,
    )  # fmt: skip
    for note in session.notes:
        print(note, file=sys.stderr)
    return session

"""``adherence persona``: EVAL4SIM — simulated persona corpora against a human reference."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._errors import OptionError
from .._options import file_path
from ._common import add_result_outputs
from .main import Command


def _v(x, digits=4) -> str:
    if x is None:
        return "—"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def format_persona(results: dict) -> str:
    """The paper-style table: per dataset and dimension the raw score, similarity, offset and rank."""
    from ..report import adherence_rows, persona_rows

    W = max([24] + [len(n) + 2 for n in results])
    lines = [f"{'dataset':<{W}}{'role':<12}{'dimension':<13}{'raw':>9}{'similarity':>12}{'offset':>10}{'rank':>6}"]
    lines.append("-" * len(lines[0]))
    prev = None
    for name, role, dim, raw, sim, off, rank in persona_rows(results):
        if prev is not None and name != prev:
            lines.append("")
        shown = name if name != prev else ""
        if rank in ("skipped", "error"):
            lines.append(f"{shown:<{W}}{role if shown else '':<12}{dim:<13}{rank:>9}")
        else:
            off_s = "—" if off is None else f"{off:+.4f}"
            lines.append(
                f"{shown:<{W}}{role if shown else '':<12}{dim:<13}{_v(raw):>9}{_v(sim):>12}{off_s:>10}{_v(rank):>6}"
            )
        prev = name
    adh = next((r["adherence"] for r in results.values() if "curves" in (r.get("adherence") or {})), None)
    if adh:
        methods, rows = adherence_rows(results)
        lines += [
            "",
            f"adherence, normalised AUC of the MRR curve per retriever (primary: {adh['method']}; "
            f"similarity to the reference in brackets):",
        ]
        lines.append(f"{'dataset':<{W}}" + "".join(f"{m:>22}" for m in methods))
        for name, *cells in rows:
            lines.append(f"{name:<{W}}" + "".join(f"{c:>22}" for c in cells))
        if adh.get("note"):
            lines.append(f"note: {adh['note']}")
    if any("score" in (r.get("consistency") or {}) for r in results.values()):
        keys = ("f1", "auc", "c_at_1", "f05u", "brier", "score")
        lines += ["", "consistency (test split):", f"{'dataset':<{W}}" + "".join(f"{k:>9}" for k in keys)]
        for name, res in results.items():
            c = res.get("consistency")
            if c and "score" in c:
                lines.append(f"{name:<{W}}" + "".join(f"{c[k]:>9.4f}" for k in keys))
    for res in results.values():
        for dim in ("adherence", "consistency", "naturalness"):
            if isinstance(res.get(dim), dict) and "error" in res[dim]:
                lines.append(f"error: {dim}: {res[dim]['error']}")
    for name, res in results.items():
        sk = res.get("skipped_records")
        if sk:
            lines.append(
                f"warning: {name}: {sk['count']} malformed record(s) skipped ({', '.join(sk['first'])}"
                f"{', ...' if sk['count'] > len(sk['first']) else ''})"
            )
    for res in results.values():
        nat = res.get("naturalness")
        if isinstance(nat, dict) and "skipped" in nat:
            lines += ["", f"naturalness skipped: {nat['skipped']}"]
            break
    return "\n".join(lines)


class PersonaCommand(Command):
    name = "persona"
    writes = {"": "the JSON output"}

    def add_args(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--reference",
            type=file_path,
            required=True,
            help="human corpus: PersonaChat *_self_original.txt, "
            "Synthetic-Persona-Chat CSV, or a directory with conversations.<ext> and personas.<ext>",
        )
        p.add_argument(
            "--simulation",
            type=file_path,
            action="append",
            default=[],
            metavar="SIM",
            help="a simulated corpus in any of those forms (repeat for several)",
        )
        p.add_argument(
            "--name", action="append", metavar="NAME", help="display names, reference first (default: file names)"
        )
        from .._options import add_arguments
        from ..persona import PersonaConfig

        add_arguments(p, PersonaConfig)
        add_result_outputs(p, page="the curves and tables")

    def run(self, args: argparse.Namespace) -> int:
        from .._options import values
        from ..persona import PersonaConfig, evaluate_persona

        cfg = PersonaConfig(
            **values(PersonaConfig, args),
            progress=not (getattr(args, "no_progress", False) or getattr(args, "quiet", False)),
        )
        if args.html and not str(args.html).endswith((".html", ".htm")):
            raise OptionError(f"--html needs a .html path, got {args.html}")
        results = evaluate_persona(args.reference, args.simulation, names=args.name, config=cfg)
        inputs = [args.reference, *args.simulation]
        if args.output:
            from ._common import write_result

            write_result(args.output, results, inputs=inputs, what=self.output_what())
        if args.html:
            from .._optional import require

            require("matplotlib", "report", "the HTML page")
            from ..report import write_persona_html

            Path(args.html).parent.mkdir(parents=True, exist_ok=True)
            about = [
                ["reference", args.reference],
                ["simulations", ", ".join(args.simulation) or "none"],
                ["dimensions", ",".join(cfg.dimensions)],
                ["retrievers", f"{','.join(cfg.methods)} (primary: {cfg.primary})"],
                ["encoder", args.encoder or "bundled:all-MiniLM-L6-v2"],
                ["NLI model", args.nli_model or "none (naturalness skipped)"],
                ["alpha (speaker weight sin(alpha*pi/2))", args.alpha],
                ["pools per query and size", args.repeats],
                ["seed", args.seed],
            ]
            print(f"wrote {write_persona_html(args.html, results, about=about, inputs=inputs)}", file=sys.stderr)
        if args.json:
            print(json.dumps(results, indent=2, allow_nan=False))
        else:
            print(format_persona(results))
        failed = [
            f"{name}: {dim}"
            for name, res in results.items()
            if isinstance(res, dict)
            for dim in ("adherence", "consistency", "naturalness")
            if isinstance(res.get(dim), dict) and "error" in res[dim]
        ]
        if failed:
            print(
                f"adherence persona: failed: {len(failed)} dimension(s) could not be computed ({failed[0]}, ...)",
                file=sys.stderr,
            )
            return 1
        return 0

"""``adherence compare OLD NEW``: two score outputs of the same turns, paired; a gate for CI pipelines."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

from .._errors import OptionError
from .._options import file_path
from ._common import add_json_flag, json_text
from .main import Command

_KEYS = ("conversation_id", "turn_index")


def _read(path: str) -> tuple:
    """``(table, method)``: the output through the one reader of score outputs (ours, published, one row per turn,
    NaN scores as none), narrowed to the columns compared."""
    import sys

    import pyarrow as pa

    from ..data import DataError
    from ..engine._files import open_scores

    out = open_scores(path, require_ours=True)
    for note in out.notes:
        print(f"{path}: {note}", file=sys.stderr)
    t = out.table
    for col in (*_KEYS, "score"):
        if col not in t.column_names:
            raise DataError(f"a score output needs a {col} column", file=str(path), column=col)
    cols = {
        "conversation_id": t.column("conversation_id").cast(pa.string()),
        "turn_index": t.column("turn_index").cast(pa.int64()),
        "score": t.column("score").cast(pa.float64()),
    }
    for extra, typ in (("prediction", pa.float64()), ("status", pa.string()), ("error", pa.string()),
                       ("label", pa.string()), ("role", pa.string())):  # fmt: skip
        if extra in t.column_names:
            cols[extra] = t.column(extra).cast(typ)
    if "status" in cols:
        # a row that is not `ok` decides nothing, whatever score or prediction it still carries
        import pyarrow.compute as pc

        ok = pc.fill_null(pc.equal(cols["status"], "ok"), False)
        for name in ("score", "prediction"):
            if name in cols:
                cols[name] = pc.if_else(ok, cols[name], pa.scalar(None, pa.float64()))
    return pa.table(cols), out.method


def _problems(a, both, old_scored, new_scored) -> dict:
    """What NEW lacks of what OLD scored: turns missing from NEW, error rows, and turns without a score."""
    import numpy as np

    status = both.column("status_new").to_pylist() if "status_new" in both.column_names else [None] * both.num_rows
    err = np.array([s == "error" for s in status])
    return {
        "missing": int(a.num_rows - both.num_rows),
        "error": int((old_scored & err).sum()),
        "unscored": int((old_scored & ~err & ~new_scored).sum()),
    }


def _old_problems(both) -> int:
    """OLD's rows that are `error` or `unscored` where NEW did not fail alike (same status and error): a broken
    baseline, on which no gate can pass. A turn both sides refuse with the same error is the input's, not a scorer's."""
    cols = both.column_names
    if "status_old" not in cols:
        return 0
    so = both.column("status_old").to_pylist()
    sn = both.column("status_new").to_pylist() if "status_new" in cols else [None] * len(so)
    eo = both.column("error_old").to_pylist() if "error_old" in cols else [None] * len(so)
    en = both.column("error_new").to_pylist() if "error_new" in cols else [None] * len(so)
    return sum(1 for a, b, x, y in zip(so, sn, eo, en) if a in ("error", "unscored") and (a, x) != (b, y))


def compare_outputs(old: str, new: str, *, n_bootstrap: int = 2000, seed: int = 0, level: float = 0.95,
                    top: int = 20, by: tuple = ("label", "role"), count_problems: bool = False) -> dict:  # fmt: skip
    """The comparison ``adherence compare`` prints: overall, per label and per role, McNemar, the rows present in
    one output only, what NEW failed to score of what OLD scored (``new_problems``; with ``count_problems`` each such
    turn counts as a violation in NEW), and the turns and conversations that changed most."""
    import numpy as np
    import pyarrow as pa

    from ..stats._compare import compare_paired

    (a, method_old), (b, method_new) = _read(old), _read(new)
    # with count_problems every turn of OLD is compared: one NEW lacks counts as NEW's violation below
    marked = b.append_column("in_new", pa.array(np.ones(b.num_rows, dtype=bool)))
    both = a.join(marked, list(_KEYS), join_type="left outer" if count_problems else "inner", left_suffix="_old",
                  right_suffix="_new")  # fmt: skip
    # counted and listed, never dropped
    only_old = a.join(b.select(list(_KEYS)), list(_KEYS), join_type="left anti").select(list(_KEYS))
    only_new = b.join(a.select(list(_KEYS)), list(_KEYS), join_type="left anti").select(list(_KEYS))

    def col(name: str) -> Optional[np.ndarray]:
        if name not in both.column_names:
            return None
        return both.column(name).cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)

    cid = np.asarray(both.column("conversation_id").to_pylist(), dtype=object)
    so, sn = col("score_old"), col("score_new")
    po, pn = col("prediction_old"), col("prediction_new")
    assert so is not None and sn is not None  # every score output has a score column
    kw: dict[str, Any] = {"n_bootstrap": n_bootstrap, "seed": seed, "level": level}
    present = np.asarray(both.column("in_new").is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    problems = _problems(a, both.filter(pa.array(present)), np.isfinite(so)[present], np.isfinite(sn)[present])
    problems["old_broken"] = _old_problems(both)
    if count_problems and (po is not None and pn is not None):
        # what NEW lost counts against it: a turn OLD decided that NEW failed to score is a violation in NEW
        lost = np.isfinite(po) & ~np.isfinite(sn)
        pn = np.where(lost, 0.0, pn)
    notes = []
    if method_old != method_new:
        notes.append(f"the two sides were scored by different methods ({method_old} and {method_new}): their scores "
                     "are on different scales, so the mean score's difference says little; compare the violation rates")  # fmt: skip
    result: dict = {"old": str(old), "new": str(new), "method_old": method_old, "method_new": method_new,
                    "confidence": level, "n_bootstrap": n_bootstrap, "new_problems": problems, "notes": notes,
                    **compare_paired(cid, so, sn, po, pn, **kw)}  # fmt: skip
    for side, only in (("only_in_old", only_old), ("only_in_new", only_new)):
        first = only.sort_by([(k, "ascending") for k in _KEYS]).slice(0, top)
        result[side] = {"count": only.num_rows, "first": [list(r.values()) for r in first.to_pylist()]}
    groups: dict = {}
    for name in by:
        values = None
        for side in ("", "_old", "_new"):  # a column both carry is joined into name_old / name_new
            if f"{name}{side}" in both.column_names:
                values = both.column(f"{name}{side}").to_pylist()
                break
        if values is None:
            continue
        vals = np.asarray(["(none)" if v is None else str(v) for v in values], dtype=object)
        per: dict = {}
        for v in sorted(set(vals)):
            m = vals == v
            per[v] = compare_paired(cid[m], so[m], sn[m], None if po is None else po[m],
                                    None if pn is None else pn[m], **kw)  # fmt: skip
        groups[name] = per
    result["by"] = groups
    d = sn - so
    fin = np.isfinite(d) & (d != 0)  # only turns that changed are listed as changed
    order = np.argsort(-np.abs(np.where(fin, d, 0)), kind="stable")[: min(top, int(fin.sum()))]
    ti = both.column("turn_index").to_pylist()
    result["changed_turns"] = [
        {"conversation_id": cid[i], "turn_index": ti[i], "old": float(so[i]), "new": float(sn[i]),
         "change": float(d[i])}
        for i in order
    ]  # fmt: skip
    uniq, inverse = np.unique(cid.astype(str), return_inverse=True)
    sums = np.bincount(inverse[fin], weights=d[fin], minlength=len(uniq))
    counts = np.bincount(inverse[fin], minlength=len(uniq))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    corder = np.argsort(-np.abs(np.nan_to_num(mean)), kind="stable")[: min(top, int((counts > 0).sum()))]
    result["changed_conversations"] = [
        {"conversation_id": str(uniq[i]), "turns": int(counts[i]), "mean_change": float(mean[i])} for i in corder
    ]
    return result


def format_compare(r: dict) -> str:
    level = int(round(100 * r["confidence"]))
    lines = [f"{r['n_both_scored']:,} turns scored in both ({level}% intervals resample whole conversations)"]

    def row(name: str, x: Optional[dict]) -> None:
        if not x or x.get("diff") is None:
            return
        lines.append(
            f"  {name:<16}{x['old']:.4f} -> {x['new']:.4f}  difference {x['diff']:+.4f} "
            f"[{x['ci_low']:+.4f}, {x['ci_high']:+.4f}]  ({x['clusters']:,} conversations)"
        )

    for note in r.get("notes") or []:
        lines.append(f"  note: {note}")
    pr = r.get("new_problems") or {}
    if any(v for k, v in pr.items() if k != "old_broken"):
        lines.append(
            f"  NEW failed to score what OLD scored: {pr['missing']} turn(s) missing, {pr['error']} error row(s), "
            f"{pr['unscored']} unscored"
        )
    if pr.get("old_broken"):
        lines.append(f"  OLD itself has {pr['old_broken']} error or unscored row(s) that NEW does not share")
    row("mean score", r.get("score"))
    row("violation rate", r.get("violation_rate"))
    m = r.get("mcnemar")
    if m:
        lines.append(
            f"  McNemar exact: {m['b']} turns adherent -> violation, {m['c']} violation -> adherent, p = {m['p_value']:.4g}"
        )
    for side in ("only_in_old", "only_in_new"):
        o = r[side]
        if o["count"]:
            first = ", ".join(f"{c}#{t}" for c, t in o["first"][:5])
            lines.append(f"  {o['count']} turn(s) {side.replace('_', ' ')}: {first}{', ...' if o['count'] > 5 else ''}")
    for name, per in r.get("by", {}).items():
        lines.append(f"by {name}:")
        for v, x in per.items():
            label = v if len(v) <= 40 else v[:37] + "..."
            vr = x.get("violation_rate") or {}
            what = x["score"] if vr.get("diff") is None else vr
            kind = "violation rate" if vr.get("diff") is not None else "mean score"
            if what.get("diff") is None:
                continue
            lines.append(
                f"  {label:<42}{kind} {what['old']:.4f} -> {what['new']:.4f} ({what['diff']:+.4f} "
                f"[{what['ci_low']:+.4f}, {what['ci_high']:+.4f}], {x['n_both_scored']} turns)"
            )
    if r.get("changed_turns"):
        lines.append("changed most:")
        for t in r["changed_turns"][:5]:
            lines.append(f"  {t['conversation_id']}#{t['turn_index']}: {t['old']:.4f} -> {t['new']:.4f}")
    return "\n".join(lines)


class CompareCommand(Command):
    name = "compare"

    def add_args(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("old", type=file_path, metavar="OLD", help="the earlier score output (the baseline)")
        p.add_argument("new", type=file_path, metavar="NEW", help="the new score output of the same turns")
        p.add_argument(
            "--fail-if-worse-by",
            type=float,
            metavar="D",
            help="a gate: exit 1 unless the new violation rate is shown to be worse by at most D (the interval's "
            "upper bound on new - old is <= D); the reason on one line",
        )
        p.add_argument("--confidence", type=float, default=0.95, help="coverage of the intervals (default 0.95)")
        p.add_argument("--n-bootstrap", type=int, default=2000, metavar="B", help="resamples (default 2000)")
        p.add_argument("--bootstrap", type=int, dest="n_bootstrap", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("--seed", type=int, default=0, help="seed of the resamples (default 0)")
        p.add_argument("--top", type=int, default=20, metavar="N", help="turns and conversations listed (default 20)")
        p.add_argument(
            "--allow-missing",
            action="store_true",
            help="with --fail-if-worse-by: a turn OLD scored that NEW lacks, errored on or left unscored counts as a "
            "violation in NEW instead of failing the gate outright",
        )
        add_json_flag(p, "the result as JSON on standard output")
        p.add_argument("--html", type=file_path, metavar="FILE", help="also write a page with the differences drawn")

    def run(self, args: argparse.Namespace) -> int:
        from ..stats._compare import gate

        if not 0 < args.confidence < 1:
            raise OptionError(f"--confidence must be in (0, 1), got {args.confidence}")
        if args.n_bootstrap < 1 or args.top < 0:
            raise OptionError("--n-bootstrap must be >= 1 and --top >= 0")
        if args.fail_if_worse_by is not None and not 0 <= args.fail_if_worse_by < 1:
            raise OptionError(f"--fail-if-worse-by is a difference of rates in [0, 1), got {args.fail_if_worse_by}")
        result = compare_outputs(
            args.old, args.new, n_bootstrap=args.n_bootstrap, seed=args.seed, level=args.confidence, top=args.top,
            count_problems=args.allow_missing,
        )  # fmt: skip
        reason = None
        if args.fail_if_worse_by is not None:
            pr = result["new_problems"]
            if pr.get("old_broken"):
                reason = (
                    f"OLD has {pr['old_broken']} error or unscored row(s) that NEW does not share: a gate never passes "
                    "on a broken baseline (score OLD again)"
                )
            elif any(v for k, v in pr.items() if k != "old_broken") and not args.allow_missing:
                reason = (
                    f"NEW failed to score what OLD scored ({pr['missing']} turn(s) missing, {pr['error']} error "
                    f"row(s), {pr['unscored']} unscored): a gate never passes on broken input (--allow-missing "
                    "counts them as violations instead)"
                )
            else:
                reason = gate(result, args.fail_if_worse_by)
            result["gate"] = {"fail_if_worse_by": args.fail_if_worse_by, "passed": reason is None, "reason": reason}
        if args.html:
            from ..report import write_compare_html

            print(f"wrote {write_compare_html(args.html, result, inputs=[args.old, args.new])}", file=sys.stderr)
        print(json_text(result) if args.json else format_compare(result))
        if reason is not None:
            print(f"adherence compare: failed: {reason}", file=sys.stderr)
            return 1
        if args.fail_if_worse_by is not None:
            print(f"adherence compare: passed: the violation rate is not worse by more than {args.fail_if_worse_by:g}",
                  file=sys.stderr)  # fmt: skip
        return 0

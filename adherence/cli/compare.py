"""``adherence compare OLD NEW``: two score outputs of the same turns, paired; a gate for CI pipelines."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

from .._errors import OptionError
from .._options import add_arguments, file_path
from ._common import add_json_flag, json_text
from .main import Command

_KEYS = ("conversation_id", "turn_index")


def _read(path: str) -> tuple:
    """``(table, method)``: the output through the one reader of score outputs (published, one row per turn, NaN
    scores as none; a table adherence did not write is read by its columns, and says so), narrowed to the columns
    compared."""
    import sys

    import pyarrow as pa

    from ..data import DataError
    from ..engine import open_scores

    out = open_scores(path)
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
    from ..role import fitted_rows
    from ._labelled import applied_calibration

    applied = applied_calibration(out.meta)
    fitted = fitted_rows(applied, t)
    if fitted is not None and fitted.any():
        # the turns the calibration this output applied was fitted on: its decisions there are in-sample
        cols["calibration_fitted"] = pa.array(fitted)
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
                    top: int = 20, by: tuple = ("label", "role"), count_problems: bool = False,
                    labels: Optional[str] = None, label: Optional[str] = None, positive: Optional[str] = None,
                    label_map: Optional[str] = None, allow_methods: bool = False) -> dict:  # fmt: skip
    """The comparison ``adherence compare`` prints: overall, per label and per role, McNemar, the rows present in
    one output only, what NEW failed to score of what OLD scored (``new_problems``; with ``count_problems`` each such
    turn counts as a violation in NEW), and the turns and conversations that changed most.

    With labels (a ``labels`` file joined on the turns, or a label column OLD carries), ``agreement``: each side's
    share of labelled turns its prediction gets right, the paired difference with a conversation-clustered interval,
    and McNemar's exact test on the turns one side gets right and the other wrong. Two outputs of different methods
    (``scales_comparable`` False) are compared by their decisions only -- no mean score, no score changes -- unless
    ``allow_methods``."""
    import numpy as np
    import pyarrow as pa

    from ..stats import compare_paired

    (a, method_old), (b, method_new) = _read(old), _read(new)
    label_info: Optional[dict] = None
    if labels is not None:
        from ..data import join_labels, read_labels

        a = a.drop_columns([c for c in ("label",) if c in a.column_names])
        a, join = join_labels(a, read_labels(labels), file=str(old))
        for line in join.lines():
            print(line, file=sys.stderr)
        label_info = {"file": str(labels), **join.describe()}
    if "label" in a.column_names and a.column("label").null_count < a.num_rows:
        from ._labelled import map_labels, resolve_columns

        a = map_labels(a, "label", label_map)
        _, _, positive, _ = resolve_columns(a, None, "score", "label", positive, "none", file=str(old))
        label_info = {**(label_info or {"from": "OLD's label column"}), "positive": str(positive)}
    comparable = allow_methods or method_old == method_new
    # with count_problems every turn of OLD is compared: one NEW lacks counts as NEW's violation below
    marked = b.append_column("in_new", pa.array(np.ones(b.num_rows, dtype=bool)))
    # every column named by its side, also one that only one side has (a join suffixes only the shared ones)
    olds = a.rename_columns([c if c in _KEYS else f"{c}_old" for c in a.column_names])
    news = marked.rename_columns([c if c in _KEYS or c == "in_new" else f"{c}_new" for c in marked.column_names])
    both = olds.join(news, list(_KEYS), join_type="left outer" if count_problems else "inner")
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
        notes.append(
            f"the two sides were scored by different methods ({method_old or 'unknown'} and {method_new or 'unknown'}): "
            + ("their scores are on different scales; compared as if on one (--allow-methods)" if allow_methods else
               "their scores are on different scales, so only their decisions are compared")
        )  # fmt: skip
    result: dict = {"old": str(old), "new": str(new), "method_old": method_old, "method_new": method_new,
                    "scales_comparable": comparable, "confidence": level, "n_bootstrap": n_bootstrap,
                    "new_problems": problems, "notes": notes, **compare_paired(cid, so, sn, po, pn, **kw)}  # fmt: skip
    if label_info is not None:
        result["labels"] = label_info
        result["agreement"] = _agreement(both, cid, po, pn, label_info["positive"], kw)
    for side, only in (("only_in_old", only_old), ("only_in_new", only_new)):
        first = only.sort_by([(k, "ascending") for k in _KEYS]).slice(0, top)
        result[side] = {"count": only.num_rows, "first": [list(r.values()) for r in first.to_pylist()]}
    groups: dict = {}
    for name in by:
        values = None
        for side in ("_old", "_new"):  # every column is joined under its side's name
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
    if not comparable:
        # scores of two methods are not on one scale: no mean score, and the turns listed are those whose decision
        # changed
        result.pop("score", None)
        for per in groups.values():
            for x in per.values():
                x.pop("score", None)
        result["changed_turns"] = []
        if po is not None and pn is not None:
            ti = both.column("turn_index").to_pylist()
            flipped = np.flatnonzero(np.isfinite(po) & np.isfinite(pn) & (po != pn))[:top]
            result["changed_turns"] = [
                {"conversation_id": cid[i], "turn_index": ti[i], "old": float(po[i]), "new": float(pn[i]),
                 "change": float(pn[i] - po[i]), "what": "prediction"}
                for i in flipped
            ]  # fmt: skip
        result["changed_conversations"] = []
        return result
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


def _agreement(both, cid, po, pn, positive: str, kw: dict) -> dict:
    """Each side's share of labelled turns its prediction gets right (1 adherent = the label is ``positive``), over
    the labelled turns both sides predicted; the paired difference (new - old) with a conversation-clustered
    interval; McNemar's exact test on right/wrong."""
    import numpy as np

    from ..stats import cluster_bootstrap_diff, mcnemar_exact

    lab = both.column("label_old").to_pylist()  # OLD's labels: its own, or the labels file joined onto it
    has = np.array([v is not None for v in lab])
    fitted = np.zeros(len(lab), dtype=bool)
    for side in ("old", "new"):  # a side's decisions on the turns its calibration was fitted on are in-sample
        if f"calibration_fitted_{side}" in both.column_names:
            fitted |= np.asarray(both.column(f"calibration_fitted_{side}").fill_null(False).to_pylist(), dtype=bool)
    left_out = int((has & fitted).sum())
    has &= ~fitted
    y = np.array([v is not None and str(v) == positive for v in lab], dtype=np.float64)
    nothing = np.full(len(lab), np.nan)
    po_, pn_ = (nothing if p is None else p for p in (po, pn))
    m = has & np.isfinite(po_) & np.isfinite(pn_)
    if not m.any():
        silent = [side for side, p in (("OLD", po_), ("NEW", pn_)) if not np.isfinite(p[has]).any()]
        why = (
            f"every labelled turn ({left_out}) fitted the calibration one side applied: its decisions there are "
            "in-sample; give labels on other turns"
            if left_out and not has.any()
            else f"{' and '.join(silent)} decide{'s' if len(silent) == 1 else ''} nothing on the labelled turns (no "
            "prediction: a method without a threshold, like scope, decides once `adherence calibrate` fits one and "
            "`adherence score --calibration` applies it)"
            if silent
            else "no labelled turn has a prediction in both outputs"
        )
        return {"n": 0, "labelled": int(has.sum()), "left_out_fitted": left_out, "diff": None, "reason": why}
    co, cn = (po_[m] == y[m]).astype(np.float64), (pn_[m] == y[m]).astype(np.float64)
    return {
        "labelled": int(has.sum()),
        "left_out_fitted": left_out,
        "old": float(co.mean()),
        "new": float(cn.mean()),
        **cluster_bootstrap_diff(cn - co, cid[m], **kw),
        "mcnemar": mcnemar_exact(co, cn),
    }


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
    ag = r.get("agreement")
    if ag and ag.get("diff") is not None:
        row("agreement", ag)
        if ag.get("left_out_fitted"):
            lines.append(f"    {ag['left_out_fitted']} labelled turn(s) left out: the calibration a side applied was "
                         "fitted on them (its decisions there are in-sample)")  # fmt: skip
        am = ag.get("mcnemar") or {}
        lines.append(f"    with the labels ({ag['n']:,} labelled turns both predicted): {am.get('b', 0)} right -> wrong, "
                     f"{am.get('c', 0)} wrong -> right, McNemar exact p = {am.get('p_value', 1.0):.4g}")  # fmt: skip
    m = r.get("mcnemar")
    if m and (r.get("violation_rate") or {}).get("n"):
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
            what = (x.get("score") or {}) if vr.get("diff") is None else vr
            kind = "violation rate" if vr.get("diff") is not None else "mean score"
            if what.get("diff") is None:
                continue
            lines.append(
                f"  {label:<42}{kind} {what['old']:.4f} -> {what['new']:.4f} ({what['diff']:+.4f} "
                f"[{what['ci_low']:+.4f}, {what['ci_high']:+.4f}], {x['n_both_scored']} turns)"
            )
    if r.get("changed_turns"):
        decided = r["changed_turns"][0].get("what") == "prediction"
        lines.append("decision changed:" if decided else "changed most:")
        for t in r["changed_turns"][:5]:
            if decided:
                word = {1.0: "adherent", 0.0: "violation"}
                lines.append(f"  {t['conversation_id']}#{t['turn_index']}: {word[t['old']]} -> {word[t['new']]}")
            else:
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
        p.add_argument(
            "--allow-methods",
            action="store_true",
            help="compare the scores of two different methods as if on one scale, and gate two methods on their "
            "violation rates without labels (by default their decisions alone are compared, and the gate needs "
            "--labels)",
        )
        from ._labelled import LabelledOptions

        add_arguments(p, LabelledOptions, ["labels", "label", "positive", "label_map"])
        add_json_flag(p, "the result as JSON on standard output")
        p.add_argument("--html", type=file_path, metavar="FILE", help="also write a page with the differences drawn")

    def run(self, args: argparse.Namespace) -> int:
        if not 0 < args.confidence < 1:
            raise OptionError(f"--confidence must be in (0, 1), got {args.confidence}")
        if args.n_bootstrap < 1 or args.top < 0:
            raise OptionError("--n-bootstrap must be >= 1 and --top >= 0")
        if args.fail_if_worse_by is not None and not 0 <= args.fail_if_worse_by < 1:
            raise OptionError(f"--fail-if-worse-by is a difference of rates in [0, 1), got {args.fail_if_worse_by}")
        result = compare_outputs(
            args.old, args.new, n_bootstrap=args.n_bootstrap, seed=args.seed, level=args.confidence, top=args.top,
            count_problems=args.allow_missing, labels=args.labels, label=args.label, positive=args.positive,
            label_map=args.label_map, allow_methods=args.allow_methods,
        )  # fmt: skip
        reason, refused = None, False
        if args.fail_if_worse_by is not None:
            reason, refused = _gate(result, args.fail_if_worse_by, args.allow_missing, args.allow_methods)
            result["gate"] = {"fail_if_worse_by": args.fail_if_worse_by, "passed": reason is None, "reason": reason,
                              "on": "agreement" if result.get("agreement") else "violation_rate"}  # fmt: skip
        if refused:  # the gate could not be evaluated: no number is printed as if it were a result
            print(f"adherence compare: failed: {reason}", file=sys.stderr)
            return 1
        if args.html:
            from ..report import write_compare_html

            print(f"wrote {write_compare_html(args.html, result, inputs=[args.old, args.new])}", file=sys.stderr)
        print(json_text(result) if args.json else format_compare(result))
        if reason is not None:
            print(f"adherence compare: failed: {reason}", file=sys.stderr)
            return 1
        if args.fail_if_worse_by is not None:
            what = "agreement with the labels" if result.get("agreement") else "the violation rate"
            print(f"adherence compare: passed: {what} is not worse by more than {args.fail_if_worse_by:g}",
                  file=sys.stderr)  # fmt: skip
        return 0


def _gate(result: dict, worse_by: float, allow_missing: bool, allow_methods: bool) -> tuple:
    """``(reason, refused)``: why the gate fails (None: it passes), and whether it could not be evaluated at all
    (broken input on either side, no paired decision, two methods without labels) rather than measured worse."""
    from ..stats import gate

    pr = result["new_problems"]
    if pr.get("old_broken"):
        return (f"OLD has {pr['old_broken']} error or unscored row(s) that NEW does not share: a gate never passes on a "
                "broken baseline (score OLD again)"), True  # fmt: skip
    if any(v for k, v in pr.items() if k != "old_broken") and not allow_missing:
        return (f"NEW failed to score what OLD scored ({pr['missing']} turn(s) missing, {pr['error']} error row(s), "
                f"{pr['unscored']} unscored): a gate never passes on broken input (--allow-missing counts them as "
                "violations instead)"), True  # fmt: skip
    ag = result.get("agreement")
    if ag is not None:
        if ag.get("diff") is None:
            return f"cannot gate on agreement with the labels: {ag['reason']}", True
        if ag["ci_low"] < -worse_by:
            return (f"agreement with the labels may be worse by more than {worse_by:g}: {ag['old']:.4f} -> "
                    f"{ag['new']:.4f}, difference {ag['diff']:+.4f} [{ag['ci_low']:+.4f}, {ag['ci_high']:+.4f}] "
                    f"(lower bound below -{worse_by:g}, {ag['n']} labelled turns)"), False  # fmt: skip
        return None, False
    if not result.get("scales_comparable", True) and not allow_methods:
        return (f"OLD and NEW were scored by different methods ({result['method_old'] or 'unknown'} and "
                f"{result['method_new'] or 'unknown'}): their violation rates say how often each flags, not how "
                "often it is right, so a method that flags less would pass; give --labels FILE to gate on agreement "
                "with labels (or --allow-methods to gate on the violation rate anyway)"), True  # fmt: skip
    v = result.get("violation_rate")
    return gate(result, worse_by), v is None or v.get("ci_high") is None  # without paired decisions: gate's refusal

"""The bundled judge's P(yes) under each prompt layout and dtype, side by side, on the labelled bundled example.

    python tools/judge_variants.py --out benchmarks/results/2026-11-26-cpu-judge-variants.json
    python tools/judge_variants.py --table     # print docs/judge.md's table from the newest JSON
    python tools/judge_variants.py --write     # replace the table between the markers in docs/judge.md
    python tools/judge_variants.py --check     # exit 1 when the page differs from the JSON

Each variant is one ``adherence score adherence/examples/role_calibration.jsonl`` run, as a user runs it, with
``--judge-layout`` (``user``, the default, or ``chained``) and ``--judge-dtype`` (``float32``, ``bfloat16``,
``float8``) on the CPU. Reported per variant: every turn's P(yes), the AUC of P(yes) for ``adherent`` against the
other labels (beside the trivial baselines' AUCs on the same rows: reply length, the reply's word overlap with
the role and with the user message), the judge's forward tokens after prefix sharing, the wall time, and the mean / max |difference| of
P(yes) from the float32 run of the same layout (what a lower precision costs on a trained judge) and, between the
two layouts in float32, how far the scores move and how well they agree in rank (Spearman). The bundled judge is
SmolLM2-135M-Instruct, a smoke-test judge: its AUCs say little about judging, its differences say what a layout or
a dtype changes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pages import between, table_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "judge.md"
START, END = "<!-- judge-variants:start -->", "<!-- judge-variants:end -->"
EXAMPLE = ROOT / "adherence" / "examples" / "role_calibration.jsonl"
LAYOUTS = ("user", "chained")
DTYPES = ("float32", "bfloat16", "float8")


def _run(layout: str, dtype: str, out_dir: Path) -> dict:
    import pyarrow.parquet as pq

    out = out_dir / f"{layout}-{dtype}.parquet"
    cmd = [sys.executable, "-m", "adherence", "score", str(EXAMPLE), "-o", str(out), "--judge-layout", layout]
    cmd += ["--judge-dtype", dtype, "--device", "cpu", "--no-progress", "--bootstrap", "0"]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t
    table = pq.read_table(out).to_pylist()
    meta = json.loads(out.with_name(out.name + ".meta.json").read_text())
    usage = meta["summary"].get("judge_usage") or {}
    if any(r["status"] != "ok" for r in table):
        raise SystemExit(f"{layout}/{dtype}: not every turn scored")
    return {
        "layout": layout,
        "dtype": dtype,
        "wall_s": wall,
        "forward_tokens": usage.get("forward_tokens"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "judge": meta["models"]["judge"],
        "turns": [(r["conversation_id"], r["turn_index"]) for r in table],
        "labels": [r["label"] for r in table],
        "texts": {k: [r[k] for r in table] for k in ("assistant", "role", "user")},
        "p_yes": [r["score"] for r in table],
    }


def multi_turn_tokens() -> dict:
    """Forward tokens of each layout on the bundled multi-turn example (``role_turns.jsonl``), counted by the
    bundled judge's planner (its tokenizer; no weights): the calibration set's conversations are one or two
    turns long, so they share little in either layout."""
    import itertools

    from adherence.data import example_path, read_turns
    from adherence.judges import turn_requests
    from adherence.judges._planner import PromptPlanner

    rows = read_turns(example_path("role")).to_pylist()
    planner = PromptPlanner.from_model()
    out = {"example": "adherence/examples/role_turns.jsonl", "turns": len(rows)}
    for layout in LAYOUTS:
        reqs = []
        for cid, grp in itertools.groupby(rows, key=lambda r: r["conversation_id"]):
            grp = list(grp)
            users, assistants = [g["user"] for g in grp], [g["assistant"] for g in grp]
            reqs += turn_requests(cid, grp[0]["role"], users, assistants, layout=layout)
        planner.prefix_sharing = True
        shared = planner.count_tokens(reqs)
        planner.prefix_sharing = False
        separate = planner.count_tokens(reqs)
        out[layout] = {
            "forward_tokens": shared["forward_tokens"],
            "separate_forward_tokens": separate["forward_tokens"],
        }
    out["forward_token_ratio"] = out["user"]["forward_tokens"] / out["chained"]["forward_tokens"]
    return out


def measure() -> dict:
    from scipy.stats import spearmanr

    from adherence.bench._hardware import cpu_info
    from adherence.stats import roc_auc_score
    from adherence.stats._baselines import text_baselines

    with tempfile.TemporaryDirectory() as tmp:
        runs = {f"{layout}/{dtype}": _run(layout, dtype, Path(tmp)) for layout in LAYOUTS for dtype in DTYPES}
    first = next(iter(runs.values()))
    if any(r["turns"] != first["turns"] for r in runs.values()):
        raise SystemExit("the runs' rows differ")
    y = np.array([label == "adherent" for label in first["labels"]], dtype=int)
    for r in runs.values():
        p = np.array(r["p_yes"])
        r["auc"] = float(roc_auc_score(y, p))
        base = np.array(runs[f"{r['layout']}/float32"]["p_yes"])
        r["vs_float32"] = {"mean_abs": float(np.mean(np.abs(p - base))), "max_abs": float(np.max(np.abs(p - base)))}
    texts = first["texts"]
    for r in runs.values():
        del r["texts"]
    baselines = {k: float(roc_auc_score(y, v)) for k, v in text_baselines(texts).items()}
    a, b = np.array(runs["user/float32"]["p_yes"]), np.array(runs["chained/float32"]["p_yes"])
    return {
        "bench": "judge-variants",
        "example": str(EXAMPLE.relative_to(ROOT)),
        "turns": len(y),
        "adherent": int(y.sum()),
        "device": "cpu",
        "cpu": cpu_info(),
        "versions": {"python": platform.python_version(), "torch": __import__("torch").__version__},
        "variants": runs,
        "trivial_baselines_auc": baselines,
        "layouts_float32": {
            "mean_abs": float(np.mean(np.abs(a - b))),
            "max_abs": float(np.max(np.abs(a - b))),
            "spearman": float(spearmanr(a, b).statistic),
        },
        "multi_turn": multi_turn_tokens(),
    }


def newest() -> tuple:
    files = sorted(RESULTS.glob("????-??-??-cpu-judge-variants.json"))
    return files[-1].name, json.loads(files[-1].read_text())


def render(res: tuple | None = None) -> str:
    name, r = res or newest()
    lines = [
        "| layout | dtype | AUC (adherent vs violation) | P(yes) mean / max \\|Δ\\| from float32 | forward tokens |",
        "|---|---|---|---|---|",
    ]
    for v in r["variants"].values():
        d = v["vs_float32"]
        diff = "—" if v["dtype"] == "float32" else f"{d['mean_abs']:.4f} / {d['max_abs']:.4f}"
        lines.append(f"| `{v['layout']}` | {v['dtype']} | {v['auc']:.3f} | {diff} | {v['forward_tokens']:,} |")
    lf, mt = r["layouts_float32"], r["multi_turn"]
    lines.append("")
    lines.append(
        f"Between the layouts in float32: P(yes) mean \\|Δ\\| {lf['mean_abs']:.3f} (max {lf['max_abs']:.3f}), "
        f"Spearman {lf['spearman']:.3f}. Trivial baselines on the same rows (AUC): "
        + ", ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in r["trivial_baselines_auc"].items())
        + f". {r['turns']} labelled turns ({r['adherent']} adherent; conversations of one "
        f"or two turns, so either layout shares little there), bundled SmolLM2-135M-Instruct on the CPU. On the "
        f"multi-turn example ({mt['turns']} turns) the chained layout runs {mt['chained']['forward_tokens']:,} forward "
        f"tokens with prefix sharing against the default layout's {mt['user']['forward_tokens']:,} "
        f"({mt['forward_token_ratio']:.2f}× fewer; {mt['user']['separate_forward_tokens']:,} without sharing). "
        f"`{name}`"
    )
    return "\n".join(lines)


def page_table(text: str) -> str:
    return between(text, START, END)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="measure and write the JSON here")
    ap.add_argument("--table", action="store_true", help="print the docs table from the newest JSON")
    ap.add_argument("--write", action="store_true", help="rewrite the table in docs/judge.md")
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/judge.md differs from the JSON")
    args = ap.parse_args(argv)
    if args.out:
        res = measure()
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(res, indent=1) + "\n")
        os.replace(tmp, args.out)
        print(render((args.out.name, res)))
        return 0
    return table_command(PAGE, START, END, render(), write=args.write, check=args.check, tool="tools/judge_variants.py")


if __name__ == "__main__":
    sys.exit(main())

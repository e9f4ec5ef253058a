"""The CPU encoder tables of docs/encoders.md, rendered from the newest committed cpu-encoder JSON.

python tools/encoder_table.py            # print the tables
python tools/encoder_table.py --write    # replace them between the markers in docs/encoders.md
python tools/encoder_table.py --check    # exit 1 when the page differs from the JSON
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "encoders.md"
START, END = "<!-- cpu-encoder-table:start -->", "<!-- cpu-encoder-table:end -->"


def newest() -> tuple:
    """``(file name, JSON)`` of the newest ``<date>-cpu-<simd>-encoder.json`` written by ``bench cpu-encoder``."""
    found = []
    for f in sorted(RESULTS.glob("????-??-??-cpu-*-encoder.json")):
        data = json.loads(f.read_text())
        if data.get("bench") == "cpu-encoder":
            found.append((f.name, data))
    if not found:
        raise SystemExit("no cpu-encoder JSON in benchmarks/results")
    return max(found, key=lambda x: x[0][:10])


def render() -> str:
    name, res = newest()
    cpu = res["cpu"]
    lines = [
        f"From `{name}`: {cpu['model']}, {cpu['logical_cpus']} logical CPUs ({', '.join(cpu['simd'][-4:])}), "
        f"onnxruntime {res['versions']['onnxruntime']}, torch {res['versions']['torch']}. "
        f"Exact: {res['criterion'].split(': ', 1)[1]}.",
        "",
    ]
    for wname, w in res["workloads"].items():
        lines += [
            f"**{wname}** ({w['texts']:,} texts, {w['unique_share']:.0%} distinct, {w['tokens_mean']:.0f} tokens "
            f"on average, at most {w['tokens_max']})",
            "",
            "| encoder | backend | version | batch | texts/s | lowest cosine | exact | ratio to ours (float32) |",
            "|---|---|---|---:|---:|---:|:-:|---:|",
        ]
        ours32 = w["ours"][0]["texts_per_s"]
        rows = [dict(r, version="this") for r in w["ours"]] + w["baselines"]
        for r in sorted(rows, key=lambda r: -r.get("texts_per_s", 0)):
            if "error" in r:
                lines.append(
                    f"| {r['name']} | {r['backend']} | {r['version']} | | did not run: {r['error'][:80]} | | | |"
                )
                continue
            exact = "yes" if r["min_cosine"] >= 0.9999 else "no"
            label = f"{r['name']} (another embedding: not compared)" if "note" in r else r["name"]
            lines.append(
                f"| {label} | {r['backend']} | {r['version']} | {r['batch']} | {r['texts_per_s']:,.0f} | "
                f"{r['min_cosine']:.5f} | {exact} | {r['texts_per_s'] / ours32:.2f} |"
            )
        fp = w["fast_path"]
        summary = []
        if "speedup" in w:
            summary.append(f"float32: **{w['speedup']:.2f}×** the fastest exact peer ({w['fastest_exact_peer']})")
        if "speedup" in fp:
            summary.append(f"int8: **{fp['speedup']:.2f}×** sentence-transformers' torch default (batch 32)")
        if "speedup_over_fastest" in fp:
            summary.append(f"{fp['speedup_over_fastest']:.2f}× the fastest peer of any accuracy ({fp['fastest_peer']})")
        summary.append(f"int8 cosine to float32: lowest {fp['min_cosine']:.4f}, mean {fp['mean_cosine']:.4f}")
        lines += ["", "; ".join(summary) + ".", ""]
    if "int8_variants" in res:
        lines += [
            "| int8 graph (short texts, default batch) | texts/s | lowest cosine | mean cosine | "
            "embedding shift, batch 1 vs default | cosine-score shift |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for k, v in res["int8_variants"].items():
            lines.append(
                f"| {k} | {v['texts_per_s']:,.0f} | {v['min_cosine']:.4f} | {v['mean_cosine']:.4f} | "
                f"{v['batch_shift']:.1e} | {v['pair_cosine_shift']:.1e} |"
            )
        lines.append("")
    if "auc_changes" in res:
        lines += ["| AUC with int8 embeddings | float32 | int8 | change |", "|---|---:|---:|---:|"]
        for k, v in res["auc_changes"].items():
            lines.append(f"| {k} | {v['float32']:.4f} | {v['int8']:.4f} | {v['change']:+.4f} |")
    return "\n".join(lines).rstrip() + "\n"


def page_table(page: str) -> str:
    return page.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    table = render()
    if args.write:
        page = PAGE.read_text(encoding="utf-8")
        before, rest = page.split(START, 1)
        after = rest.split(END, 1)[1]
        PAGE.write_text(f"{before}{START}\n{table}{END}{after}", encoding="utf-8")
        return 0
    if args.check:
        return 0 if page_table(PAGE.read_text(encoding="utf-8")) == table else 1
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

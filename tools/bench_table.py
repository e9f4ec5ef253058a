"""The GPU benchmark table of docs/benchmarks.md, rendered from the committed JSON in benchmarks/results.

Every figure in the table is read from the newest ``<date>-<device>-<bench>.json`` of each bench, so the
docs cannot drift from the measurements (tests/bench/test_bench_table.py checks the page against this).

    python tools/bench_table.py            # print the table
    python tools/bench_table.py --write    # replace the table between the markers in docs/benchmarks.md
    python tools/bench_table.py --check    # exit 1 when the page differs from the JSON
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pages import between, table_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- gpu-table:start -->", "<!-- gpu-table:end -->"
BENCHES = ("kernels", "kernels-float32", "maxsim", "encoder", "judge", "persona")


def _gpu_results(bench: str) -> list:
    """``<date>-<gpu>-<bench>.json`` files, oldest first (CPU results and named comparisons left out)."""
    pattern = re.compile(rf"^\d{{4}}-\d\d-\d\d-(?!cpu)[a-z]+\d+[a-z0-9]*-{re.escape(bench)}\.json$")
    return sorted((p for p in RESULTS.glob("*.json") if pattern.match(p.name)), key=lambda p: p.name[:10])


def newest() -> dict:
    """``{bench: (file name, JSON)}``: the newest result of each bench, on whichever GPU it ran (the file
    name says which). ``judge-engine`` is the newest judge result that has the engine's end-to-end run."""
    out = {}
    for bench in BENCHES:
        files = _gpu_results(bench)
        if files:
            out[bench] = (files[-1].name, json.loads(files[-1].read_text()))
    for f in reversed(_gpu_results("judge")):
        res = json.loads(f.read_text())
        if "engine" in res.get("workloads", {}):
            out["judge-engine"] = (f.name, res)
            break
    return out


def _ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def _x(v: float) -> str:
    return f"{v:.2f}×"


def _n(v: float) -> str:
    return f"{v:,.0f}"


def _pool_label(k: int) -> str:
    return f"10{'⁴⁵⁶'[len(str(k)) - 5]}" if str(k).startswith("1") and set(str(k)[1:]) == {"0"} else _n(k)


def rows(res: dict) -> list:
    """Table rows ``(what, ours, ratio to the measured peak, against, JSON file)``."""
    out = []
    if "kernels" in res:
        name, k = res["kernels"]
        for cfg, what in (
            ("fused", "fused kernel, cosine + Mahalanobis + KL, 1M rows × 384 bf16, V = 500"),
            ("fused_knn", "same + kNN-max over 64 shared references"),
        ):
            c = k["configs"][cfg]
            t = c["backends"]["triton"]
            out.append(
                (
                    what,
                    f"{_ms(t['median_s'])}, {_n(t['gb_per_s'])} GB/s",
                    f"{c['ratio_to_peak']:.2f} of copy",
                    f"**{_x(c['speedup'])}** the same torch reference under `torch.compile` (bf16); "
                    f"{_x(c['speedup_vs_torch_eager'])} eager",
                    name,
                )
            )
        for cfg, c in k["configs"].items():
            if not cfg.startswith("knn_pool_"):
                continue
            t = c["backends"]["triton"]
            out.append(
                (
                    f"kNN-max, {_n(c['rows'])} rows × {_pool_label(c['refs'])} references, bf16",
                    f"{_ms(t['median_s'])}, {t['tflop_per_s']:.0f} TFLOP/s",
                    f"{c['ratio_to_peak']:.2f} of matmul",
                    f"**{_x(c['speedup'])}** bf16 torch matmul + max; {_x(c['speedup_vs_torch_compile'])} it "
                    f"under `torch.compile`; {_x(c['speedup_vs_torch_eager'])} eager fp32",
                    name,
                )
            )
    if "kernels-float32" in res:
        name, k = res["kernels-float32"]
        for cfg, c in k["configs"].items():
            if not cfg.startswith("knn_pool_"):
                continue
            t = c["backends"]["triton"]
            out.append(
                (
                    f"kNN-max, {_n(c['rows'])} rows × {_pool_label(c['refs'])} references, **float32** "
                    "(3 bf16 tensor-core products)",
                    f"{_ms(t['median_s'])}, {t['tflop_per_s']:.0f} TFLOP/s",
                    f"{c['ratio_to_peak']:.2f} of bf16 matmul",
                    f"**{_x(c['speedup_vs_torch_eager'])}** torch eager float32; max \\|Δ\\| vs float64 "
                    f"{c['correctness']['max_abs_error_vs_float64']:.1e}",
                    name,
                )
            )
    if "maxsim" in res:
        name, m = res["maxsim"]
        a = m["args"]
        t = next(v for b, v in m["backends"].items() if b.startswith("adherence"))
        base = m["baseline"].removeprefix("baseline (").removesuffix(")")
        others = "; ".join(
            f"{_x(v)} {b.removeprefix('baseline (').removesuffix(')')}"
            for b, v in m["speedup_by_baseline"].items()
            if b != m["baseline"]
        )
        out.append(
            (
                f"MaxSim, {a['queries']} queries × {a['pool']}-document pools of {_n(a['corpus'])} "
                f"(~{a['doc_len']} tokens, {a['dtype']}; each document in {m['pool_overlap']:.1f} pools)",
                f"{_n(t['queries_per_s'])} queries/s, {_n(t['gb_per_s'])} GB/s of distinct documents",
                f"{m['ratio_to_peak']:.2f} of copy",
                f"**{_x(m['speedup'])}** {base} (PyLate {m['versions'].get('pylate')}, pools padded before "
                f"its timer){'; ' + others if others else ''}",
                name,
            )
        )
    if "encoder" in res:
        name, e = res["encoder"]
        t = e["backends"]["adherence"]
        default = e["backends"].get("sentence_transformers (float32, batch 32)")
        out.append(
            (
                f"encoder, {_n(e['args']['texts'])} {e['args']['source'].removesuffix('.csv')} utterances "
                f"({_n(e['tokens'])} tokens), MiniLM {e['args']['dtype']}, tokenisation included",
                f"{_n(t['texts_per_s'])} texts/s, {_n(t['tokens_per_s'])} tokens/s",
                "—",
                f"**{_x(e['speedup'])}** {e['baseline']} (its fastest of "
                f"{len([b for b in e['backends'] if b.startswith('sentence')])} settings)"
                + (f"; {_x(default['median_s'] / t['median_s'])} its default" if default else ""),
                name,
            )
        )
    if "judge" in res:
        name, j = res["judge"]
        w, a = j["workloads"], j["args"]
        f8 = j.get("float8") or {}
        f8w = f8.get("workloads", {})
        model = a["model"].removeprefix("random:").replace("llama-3-8b", "random Llama-3-8B")
        if "unique" in w:
            u = w["unique"]
            extra = ""
            if "unique" in f8w:
                acc = f8["accuracy"]["unique"]
                extra = (
                    f"float8: {f8w['unique']['turns_per_s']:.1f} turns/s (**{_x(f8w['unique']['speedup_vs_' + a['dtype']])}**"
                    f" {a['dtype']}; P(yes) mean \\|Δ\\| {acc['mean_abs_p_yes_difference']:.3f} from {a['dtype']}"
                )
                low = j["correctness"].get(a["dtype"])
                if low:
                    extra += (
                        f", where {a['dtype']} is itself {low['separate_vs_fp32']['mean_abs_p_yes_difference']:.3f}"
                        " from fp32 on this random model)"
                    )
                else:
                    extra += ")"
            out.append(
                (
                    f"judge, {model} {a['dtype']}, {u['turns']} prompts of {_n(u['mean_prompt_tokens'])} tokens, "
                    "nothing shared",
                    f"{u['turns_per_s']:.1f} turns/s, {u['achieved_tflop_per_s']:.0f} TFLOP/s",
                    f"{u['ratio_to_peak']:.2f} of matmul",
                    extra or "—",
                    name,
                )
            )
        for layout, p in w.get("prefix", {}).get("layouts", {}).items():
            ps = p["modes"]["prefix_sharing"]
            against = f"**{_x(p['speedup'])}** separate passes ({p['forward_token_ratio']:.2f}× fewer forward tokens)"
            got = f8w.get(f"prefix_{layout}")
            if got:
                g = got["modes"]["prefix_sharing"]
                against += (
                    f"; float8: {g['turns_per_s']:.1f} turns/s, {_n(g['turns_per_hour'])} turns/hour "
                    f"({_x(got['speedup_vs_' + a['dtype']])} {a['dtype']})"
                )
            out.append(
                (
                    f"judge, {a['conversations']} conversations × {a['turns']} turns "
                    f"({a['role_tokens']}-word role, {a['turn_tokens']}-word exchanges), `{layout}` layout",
                    f"{ps['turns_per_s']:.1f} turns/s (prefix sharing), {_n(ps['turns_per_hour'])} turns/hour",
                    f"{ps['ratio_to_peak']:.2f} of matmul",
                    against,
                    name,
                )
            )
    if "judge-engine" in res:
        name, j = res["judge-engine"]
        en = j["workloads"]["engine"]
        out.append(
            (
                f"engine end to end, {_n(en['turns'])} turns, random SmolLM2-135M architecture",
                f"{en['turns_per_s']:.0f} turns/s",
                f"GPU busy {en['gpu_utilisation_mean']:.0f}%",
                "—",
                name,
            )
        )
    if "persona" in res:
        name, p = res["persona"]
        out.append(
            (
                f"EVAL4SIM on {p['args']['reference'].removesuffix('.csv')} ({p['args']['n_documents']} "
                f"conversations, {len(p['args']['pool_sizes'])} pool sizes, {p['args']['repeats']} repeats)",
                f"{p['wall_s']:.1f} s wall",
                "—",
                f"**{_x(p['speedup'])}** the CPU run it is checked against (AUCs equal: "
                f"{'passed' if p['correct'] else 'FAILED'})",
                name,
            )
        )
    return out


def render(res: dict | None = None) -> str:
    res = newest() if res is None else res
    lines = [
        "| bench | ours | ratio to the measured peak | against | JSON |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {w} | {o} | {r} | {a} | `{f}` |" for w, o, r, a, f in rows(res)]
    return "\n".join(lines)


def page_table(text: str) -> str:
    return between(text, START, END)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the table in docs/benchmarks.md")
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/benchmarks.md differs from the JSON")
    args = ap.parse_args(argv)
    return table_command(PAGE, START, END, render(), write=args.write, check=args.check, tool="tools/bench_table.py")


if __name__ == "__main__":
    sys.exit(main())

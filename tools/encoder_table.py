"""The CPU encoder tables of docs/encoders.md, rendered from the newest committed cpu-encoder JSON of each kind of CPU
and the newest cpu-million JSON.

python tools/encoder_table.py            # print the tables
python tools/encoder_table.py --write    # replace them between the markers in docs/encoders.md
python tools/encoder_table.py --check    # exit 1 when the page differs from the JSON
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pages import between, table_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "encoders.md"
START, END = "<!-- cpu-encoder-table:start -->", "<!-- cpu-encoder-table:end -->"
M_START, M_END = "<!-- cpu-million:start -->", "<!-- cpu-million:end -->"


def _cpu_results(bench: str) -> list:
    """``<date>-cpu-<simd>-<bench>.json`` files, oldest first (longer names, e.g. ``-platforms-int8-large``, are
    other measurements)."""
    files = (f for f in RESULTS.glob(f"????-??-??-cpu-*-{bench}.json") if f.name.count("-") == 5)
    return sorted(files, key=lambda f: f.name)  # the date first


def newest() -> tuple:
    """``(file name, JSON)`` of the newest ``<date>-cpu-<simd>-encoder.json`` written by ``bench cpu-encoder``."""
    return per_cpu()[0]


def per_cpu() -> list:
    """``[(file name, JSON)]``: for each CPU tag (``<simd>`` in the name: one per kind of CPU measured), its newest
    ``bench cpu-encoder`` JSON; newest first."""
    found: dict = {}
    for f in _cpu_results("encoder"):  # oldest first: a later file of a tag replaces an earlier one
        data = json.loads(f.read_text())
        if data.get("bench") == "cpu-encoder":
            found[f.name.split("-")[4]] = (f.name, data)
    if not found:
        raise SystemExit("no cpu-encoder JSON in benchmarks/results")
    return sorted(found.values(), key=lambda x: x[0], reverse=True)


def render() -> str:
    """One section per kind of CPU measured, the newest first."""
    return "\n\n".join(render_one(name, res) for name, res in per_cpu())


def _matrix_units(cpu: dict) -> str:
    simd = set(cpu["simd"])
    if "amx_bf16" in simd:
        return "AMX"
    if "avx512_bf16" in simd:
        return "AVX512-BF16, no AMX"
    return "AVX-512, no bf16 units" if "avx512f" in simd else "AVX2 only"


def render_one(name: str, res: dict) -> str:
    cpu = res["cpu"]
    lines = [
        f"### {cpu['model']} ({_matrix_units(cpu)})",
        "",
        f"From `{name}`: {cpu['model']}, {cpu['logical_cpus']} logical CPUs ({', '.join(cpu['simd'][-4:])}), "
        f"onnxruntime {res['versions']['onnxruntime']}, openvino {res['versions']['openvino']}, "
        f"torch {res['versions']['torch']}. "
        f"Exact: {res['criterion'].split(': ', 1)[1]}.",
        "",
    ]
    for wname, w in res["workloads"].items():
        lines += [
            f"**{wname}** ({w['texts']:,} texts, {w['unique_share']:.0%} distinct, {w['tokens_mean']:.0f} tokens "
            f"on average, at most {w['tokens_max']})",
            "",
            "| encoder | backend | version | batch | texts/s | lowest cosine | exact | ratio to ours (float32) |"
            + (" ratio to bound |" if "bound" in w else ""),
            "|---|---|---|---:|---:|---:|:-:|---:|" + ("---:|" if "bound" in w else ""),
        ]
        ours32 = w["ours"][0]["texts_per_s"]
        rows = [dict(r, version="this") for r in w["ours"]] + w["baselines"]
        for r in sorted(rows, key=lambda r: -r.get("texts_per_s", 0)):
            if "error" in r:
                lines.append(
                    f"| {r['name']} | {r['backend']} | {r['version']} | | did not run: {r['error'][:80]} | | | |"
                    + (" |" if "bound" in w else "")
                )
                continue
            exact = "yes" if r["min_cosine"] >= 0.9999 else "no"
            label = f"{r['name']} (another embedding: not compared)" if "note" in r else r["name"]
            lines.append(
                f"| {label} | {r['backend']} | {r['version']} | {r['batch']} | {r['texts_per_s']:,.0f} | "
                f"{r['min_cosine']:.5f} | {exact} | {r['texts_per_s'] / ours32:.2f} |"
                + (f" {r['ratio_to_bound']:.2f} |" if "bound" in w else "")
            )
        fp, path, fast = w["fast_path"], w["exact_path"], w["fast_path"]["name"]
        summary, named = [], {fast}
        if "speedup" in w:
            named.add(path)
            summary.append(
                f"exact path ({path}): **{w['speedup']:.2f}×** the fastest exact peer ({w['fastest_exact_peer']})"
            )
            if "head_to_head" in w:
                h = w["head_to_head"]
                rounds = ", ".join(f"{r['speedup']:.2f}×" for r in h["rounds"])
                summary.append(
                    f"the two timed in turn, {len(h['rounds'])} rounds: {rounds}, median **{h['speedup']:.2f}×**"
                )
            if path != "adherence float32":
                summary.append(f"float32: {w['float32_speedup']:.2f}× it")
        if "speedup" in fp:
            summary.append(
                f"fastest ({fast}): **{fp['speedup']:.2f}×** sentence-transformers' torch default (batch 32)"
            )
        if "speedup_over_fastest" in fp:
            summary.append(f"{fp['speedup_over_fastest']:.2f}× the fastest peer of any accuracy ({fp['fastest_peer']})")
        for r in w["ours"]:
            if r["name"] not in named and "vs_st_torch_default" in r:
                summary.append(f"{r['name']}: {r['vs_st_torch_default']:.2f}× the torch default")
        lines += ["", "; ".join(summary) + ".", ""]
        if "bound" in w:
            b = w["bound"]
            text = (
                f"Bound: {b['texts_per_s']:,.0f} texts/s, every product at {b['matmul_flops_per_s'] / 1e12:.2f} "
                f"TFLOP/s ({b['dtype']}, this CPU's rate on one layer's products, measured in the same run"
                + (
                    "; by library, " + ", ".join(f"{k} {v / 1e12:.3f}" for k, v in b["matmul_by_library"].items())
                    if "matmul_by_library" in b
                    else ""
                )
                + f") and every softmax element at {b['exp_per_s'] / 1e9:.1f} G exps/s, nothing else"
            )
            if "exact_goal" in w:
                g = w["exact_goal"]
                text += (
                    f"; {g['speedup']:g}× the fastest exact peer would be {g['texts_per_s']:,.0f} texts/s, "
                    f"**{g['ratio_to_bound']:.2f}** of it"
                    + (f": more than this CPU's {b['dtype']} products allow" if g["ratio_to_bound"] > 1 else "")
                )
            lines += [text + ".", ""]
    if "variants" in res:
        lines += [
            "| CPU path (short texts, default batch) | texts/s | lowest cosine | mean cosine | "
            "embedding shift, batch 1 vs default | cosine-score shift |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for k, v in res["variants"].items():
            lines.append(
                f"| {k} | {v['texts_per_s']:,.0f} | {v['min_cosine']:.4f} | {v['mean_cosine']:.4f} | "
                f"{v['batch_shift']:.1e} | {v['pair_cosine_shift']:.1e} |"
            )
        lines.append("")
    if "auc_changes" in res:
        first = next(iter(res["auc_changes"].values()))
        others = [k for k in first if k != "float32" and not k.startswith("change")]
        lines += [
            "| AUC | float32 | " + " | ".join(f"{k} | change" for k in others) + " |",
            "|---|---:|" + "---:|---:|" * len(others),
        ]
        for k, v in res["auc_changes"].items():
            cells = " | ".join(f"{v[o]:.4f} | {v[f'change_{o}']:+.4f}" for o in others)
            lines.append(f"| {k} | {v['float32']:.4f} | {cells} |")
    return "\n".join(lines).rstrip()


FIGURE = ROOT / "docs" / "img" / "encoders-bound.svg"


def bound_bars() -> list:
    """``[(label, {bar: share of the bound})]`` for each kind of CPU and workload with a bound: our exact path, the
    fastest exact peer, and the goal (1.5x that peer), in that order; the figure draws these."""
    out = []
    for name, res in per_cpu():
        for wname, w in res["workloads"].items():
            if "bound" not in w or "exact_goal" not in w:
                continue
            rows = {r["name"]: r for r in w["ours"] + w["baselines"] if "ratio_to_bound" in r}
            bars = {
                f"ours ({w['exact_path']})": rows[w["exact_path"]]["ratio_to_bound"],
                f"fastest exact peer ({w['fastest_exact_peer']})": rows[w["fastest_exact_peer"]]["ratio_to_bound"],
                f"{w['exact_goal']['speedup']:g}x that peer": w["exact_goal"]["ratio_to_bound"],
            }
            out.append((f"{res['cpu']['model']} ({_matrix_units(res['cpu'])})\n{wname} texts ({name[:10]})", bars))
    return out


def figure() -> str:
    """An SVG of ``bound_bars``: each bar a share of its CPU's bound, the bound drawn at 1."""
    from adherence.report._html import figure_svg, pyplot

    plt = pyplot()
    plt.rcParams["svg.hashsalt"] = "encoders"  # the same file from the same JSON
    plt.rcParams["svg.fonttype"] = "none"  # words as text: ``figure_labels`` finds them in the file
    groups = bound_bars()
    fig, ax = plt.subplots(figsize=(8, 1.1 + 0.9 * len(groups)))
    colours = [("#1f77b4", 1.0), ("#999999", 1.0), ("#d62728", 0.35)]  # ours, the peer, the goal (faint)
    y, ticks = 0.0, []
    for label, bars in reversed(groups):
        for k, (bar, v) in reversed(list(enumerate(bars.items()))):  # drawn bottom up: ours on top
            ax.barh(y, v, height=0.8, color=colours[k][0], alpha=colours[k][1])
            ax.text(v + 0.01, y, _bar_label(bar, v), va="center", fontsize=7)
            y += 1
        ticks.append((y - len(bars) / 2 - 0.5, label))
        y += 0.8
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([t for t, _ in ticks], [lab for _, lab in ticks], fontsize=8)
    ax.set_xlim(0, max(1.35, max(max(b.values()) for _, b in groups) + 0.45))
    ax.set_xlabel("share of the bound (every product at the rate the CPU reaches in the exact path's precision)")
    ax.set_title("Exact path against the bound, per kind of CPU", fontsize=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    svg = figure_svg(fig)
    svg = svg[: svg.index("<metadata>")] + svg[svg.index("</metadata>") + len("</metadata>") :]  # its date
    return "\n".join(line.rstrip() for line in svg.splitlines() if line.strip()) + "\n"


def figure_labels() -> list:
    """Each bar's label with its value, as the figure writes it: the check finds them in the committed SVG (its
    drawing may differ by matplotlib release; its figures may not)."""
    return [_bar_label(bar, v) for _, bars in bound_bars() for bar, v in bars.items()]


def _bar_label(bar: str, share: float) -> str:
    return f"{bar}: {share:.2f}"


def newest_million() -> tuple:
    """``(file name, JSON)`` of the newest ``<date>-cpu-<simd>-million.json`` (tools/cpu_million.py)."""
    files = _cpu_results("million")
    if not files:
        raise SystemExit("no cpu-million JSON in benchmarks/results")
    return files[-1].name, json.loads(files[-1].read_text())


def render_million() -> str:
    name, res = newest_million()
    w, f32, prof = res["workload"], res["float32"], res["profile"]
    lines = [
        f"From `{name}` ({res['cpu']['model']}, {res['cpu']['logical_cpus']} logical CPUs): {w['turns']:,} turns, "
        f"{w['texts_encoded']:,} texts encoded (each reply and its reference), {w['unique_text_share']:.1%} of "
        f"them distinct, {w['mean_chars']:.0f} characters on average.",
        "",
        "| path | turns | wall | turns/s | a million turns |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in ("bf16", "int8"):
        if p in res:
            r = res[p]
            note = f"measured, `{r['reused_from']}`" if "reused_from" in r else "measured"
            lines.append(
                f"| `--encoder-precision {p}` | {r['turns']:,} | {r['wall_s'] / 60:.1f} min | {r['turns_per_s']:.0f} | "
                f"**{r['hours']:.2f} h** ({note}) |"
            )
    lines += [
        f"| float32 (default) | {f32['turns']:,} | {f32['wall_s'] / 60:.1f} min | {f32['turns_per_s']:.0f} | "
        f"{f32['projected_hours_for_all_turns']:.2f} h (projected at that rate) |",
        "",
    ]
    checks = []
    for p, c in res["correctness"].items():
        checks.append(
            f"{p}: the job's scores equal the cosine of the {p} embeddings to {c['job_vs_embeddings_max_abs_diff']:.1e} "
            f"and differ from float32 scores by {c['vs_float32_score_mean_abs_diff']:.4f} on average, "
            f"{c['vs_float32_score_max_abs_diff']:.3f} at most"
        )
    lines.append(
        f"Every row came back `status=ok`. Checked first on {next(iter(res['correctness'].values()))['turns']:,} "
        f"turns: {'; '.join(checks)}. Profile of the "
        f"{prof['precision']} job on {prof['turns']:,} turns (`{prof['file']}`): the encoder's runtime took "
        f"{prof['encoder_runtime_s']:.1f} s of {prof['wall_s']:.1f} s; everything else (reading, tokenising, batching, "
        f"the scoring kernel, writing, loading) **{prof['not_encoder_share']:.1%}**."
    )
    return "\n".join(lines)


def page_table(page: str, start: str = START, end: str = END) -> str:
    return between(page, start, end)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    table, million = render(), render_million()
    if not (args.write or args.check):
        print(f"{table}\n\n{million}")
        return 0
    # each table goes through _pages.table_command, as the other table tools' do: written, or checked with a
    # line naming the stale part and the command that mends it; the figure likewise
    tool = "tools/encoder_table.py"
    tables = [(START, END, table), (M_START, M_END, million)]
    stale = [table_command(PAGE, s, e, t, write=args.write, check=args.check, tool=tool) for s, e, t in tables]
    if args.write:
        FIGURE.write_text(figure(), encoding="utf-8")
        return 0
    drawn = FIGURE.read_text(encoding="utf-8") if FIGURE.exists() else ""
    if not all(html.escape(label, quote=False) in drawn for label in figure_labels()):
        print(f"docs/img/{FIGURE.name}'s figure differs from benchmarks/results: run {tool} --write")
        stale.append(1)
    return 1 if any(stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One line per goal of the GPU run, read from the JSON files `gpu.sh` wrote, and the run's record.

    python3 benchmarks/gpu_goals.py OUT DAY DEVICE STEPS_FILE

STEPS_FILE has one "name rc seconds" line per step `gpu.sh` ran or skipped (rc "skipped" when the time budget ran
out). Writes OUT/DAY-DEVICE-run.json (steps, goals, every file read) and prints the goal lines; exits 1 when a step
failed or was skipped, or a file's own correctness check failed (a goal missed is reported, not an error: it is a measurement).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(out: Path, day: str, dev: str, bench: str):
    path = out / f"{day}-{dev}-{bench}.json"
    if not path.is_file():
        return None, path.name
    try:
        return json.loads(path.read_text()), path.name
    except ValueError:
        return {"correct": False, "unreadable": True}, path.name


def _get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _busy(engine) -> float | None:
    """The GPU's busy share over the engine run: the CUDA-event forward time over the wall time when recorded,
    else the sampled utilisation (percent) as a share."""
    if not isinstance(engine, dict):
        return None
    if engine.get("gpu_forward_share") is not None:
        return float(engine["gpu_forward_share"])
    if engine.get("gpu_utilisation_mean") is not None:
        return float(engine["gpu_utilisation_mean"]) / 100
    return None


def goals(out: Path, day: str, dev: str) -> tuple[list, dict]:
    """``([(goal, value text, verdict)], {bench: file name or None})``; verdict: met, missed, no data."""
    files, data = {}, {}
    for bench in ("judge-engine", "judge-8b", "bundled", "maxsim", "kernels", "persona"):
        data[bench], name = _load(out, day, dev, bench)
        files[bench] = name if data[bench] is not None else None
    rows = []

    def row(goal: str, value, bar, fmt: str = "{:.3f}", higher: bool = True, note: str = "") -> None:
        if value is None:
            rows.append((goal, "not measured", "no data"))
            return
        ok = value >= bar if higher else value <= bar
        rows.append((goal, fmt.format(value) + (f" ({note})" if note else ""), "met" if ok else "missed"))

    for bench, what in (("judge-engine", "135M judge"), ("judge-8b", "8B config")):
        e = _get(data[bench], "workloads", "engine")
        row(f"engine busy share, {what} (>= 0.90)", _busy(e), 0.90,
            note=f"{e['turns_per_s']:.0f} turns/s" if isinstance(e, dict) and e.get("turns_per_s") else "")  # fmt: skip
    j = _get(data["bundled"], "judge")
    if j:
        sets = j["sets"].values()
        worst_p = max((s["mean_abs_p_yes_difference"] or 0.0) for s in sets)
        worst_auc = max((s["auc_difference"] or 0.0) for s in sets)
        rows.append(("float8 on real weights: mean |dP(yes)| <= 0.01, AUC within 0.005",
                     f"{worst_p:.4f}, {worst_auc:.4f} (worst set, against {j['against']})",
                     "met" if j["float8_within_goal"] else "missed"))  # fmt: skip
    else:
        rows.append(("float8 on real weights: mean |dP(yes)| <= 0.01, AUC within 0.005", "not measured", "no data"))
    m = data["maxsim"]
    pylate = None
    if m:
        by = m.get("speedup_by_baseline") or {}
        pylate = min((v for k, v in by.items() if "pylate" in k), default=None)
    row("MaxSim vs PyLate colbert_scores, fastest backend (>= 5x)", pylate, 5.0, fmt="{:.2f}x")
    fused = _get(data["kernels"], "configs", "fused")
    row("fused kernel vs torch.compile (>= 1.3x)", _get(fused, "speedup"), 1.3, fmt="{:.2f}x")
    row("fused kernel, share of copy bandwidth (>= 0.85)", _get(fused, "ratio_to_peak"), 0.85)
    pools = [v for k, v in (_get(data["kernels"], "configs") or {}).items() if k.startswith("knn_pool")]
    knn = min((p["ratio_to_peak"] for p in pools if p.get("ratio_to_peak") is not None), default=None)
    row("kNN-max, share of matmul peak, smallest over pools (>= 0.6)", knn, 0.6)
    p = data["persona"]
    p = data["persona"]
    checked = _get(p, "correct")
    note = {True: "AUCs equal to the CPU run", None: "no CPU run to check its AUCs against"}.get(
        checked, "AUCs differ from the CPU run"
    )
    row("EVAL4SIM on Synthetic-Persona-Chat valid (<= 10 s)", _get(p, "wall_s"), 10.0, fmt="{:.1f} s", higher=False,
        note=note)  # fmt: skip
    c = _get(data["bundled"], "classifier")
    rows.append(("classifier through the engine (turns/hour)",
                 f"{c['turns_per_hour']:,.0f} ({c['encoder_dtype']})" if c else "not measured",
                 ("measured" if c["correct"] else "failed") if c else "no data"))  # fmt: skip
    return rows, {**files, "_data": data}


def main(argv: list) -> int:
    out, day, dev, steps_file = Path(argv[0]), argv[1], argv[2], Path(argv[3])
    steps = []
    for line in steps_file.read_text().splitlines():
        name, rc, seconds = line.split()
        steps.append({"step": name, "rc": rc if rc == "skipped" else int(rc), "seconds": int(seconds)})
    rows, files = goals(out, day, dev)
    data = files.pop("_data")
    broken = [b for b, d in data.items() if d is not None and d.get("correct") is False]
    failed = [s["step"] for s in steps if s["rc"] not in (0, "skipped")]
    skipped = [s["step"] for s in steps if s["rc"] == "skipped"]
    record = {
        "run": "benchmarks/gpu.sh",
        "device": dev,
        "day": day,
        "steps": steps,
        "seconds": sum(s["seconds"] for s in steps),
        "files": files,
        "correct": not broken and not failed,
        "failed_steps": failed,
        "skipped_steps": skipped,
        "complete": not skipped,
        "failed_checks": broken,
        "goals": [{"goal": g, "value": v, "verdict": r} for g, v, r in rows],
    }
    (out / f"{day}-{dev}-run.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"== goals ({dev}, {record['seconds']} s of steps)")
    for s in steps:
        if s["rc"] == "skipped":
            print(f"step {s['step']}: skipped (the time budget ran out)")
        elif s["rc"] != 0:
            print(f"step {s['step']}: FAILED (exit {s['rc']}, {s['seconds']} s)")
    for g, v, r in rows:
        print(f"{r.upper():8} {g}: {v}")
    for b in broken:
        print(f"FAILED   {files[b]}: its correctness check failed")
    if skipped:
        print(f"incomplete: {len(skipped)} step(s) skipped; run them alone: bash benchmarks/gpu.sh {' '.join(skipped)}")
    return 0 if record["correct"] and not skipped else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A one-million-turn cosine job on mostly unique texts, on this machine's CPUs, as a user runs it.

    python tools/cpu_million.py --turns 1000000 --paths bf16,int8 --out benchmarks/results/<date>-cpu-avx512-million.json

The turns: each reply and each reference reply is two Synthetic-Persona-Chat utterances (Jandaghi et al.
2023, CC BY 4.0) joined, so nearly every text is distinct (the share is in the JSON) and the encoder's
cache cannot help, as with real logs; a persona as the role, 4-16 turns per conversation.

For each precision of ``--paths`` (``bf16``, ``int8``):

1. Correctness first, on the first 2,000 turns: the job's scores equal the cosine of that precision's
   embeddings computed here, and their difference from the float32 job's is reported (``float32`` in
   ``--paths``: the default path on every turn, its runtime chosen for this CPU, e.g. OpenVINO float32).
2. ``adherence score IN -o OUT --method cosine --encoder-precision P`` on every turn, in a fresh
   process, wall time with model loading; every row is checked to be in the output with ``status=ok``.

Then:

3. The float32 path on ``--exact-turns`` of them (the same command without the flag): turns/s and the
   hours the whole file would take at that rate (a projection, named so in the JSON).
4. Where the first path's job time goes: the job on ``--profile-turns`` under cProfile, the share of its
   time inside the encoder's runtime (the OpenVINO or ONNX Runtime calls) against everything else
   (tokenising, Arrow, the scoring kernel, writing), with the profile's top entries written beside the JSON.

``--reuse FILE`` keeps the whole-file runs of an earlier JSON for precisions not in ``--paths`` when its
workload and CPU are the same as this run's (each such section names the file it came from).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workloads import DEFAULT_PERSONA_CSV  # noqa: E402
from _workloads import million_turns as build  # noqa: E402


def head(src: Path, n: int, dest: Path) -> Path:
    pq.write_table(pq.read_table(src).slice(0, n), dest)
    return dest


def run_job(src: Path, out: Path, precision: str) -> float:
    # this interpreter's package, as the other tools run it: a bare `adherence` is not on PATH when the tool is run
    # with a virtualenv's python that is not activated
    cmd = [sys.executable, "-m", "adherence", "score", str(src), "-o", str(out), "--method", "cosine",
           "--encoder-precision", precision]  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return wall


def check_output(out: Path, n: int) -> dict:
    t = pq.read_table(out, columns=["status", "score"])
    status = t["status"].to_pylist()
    ok = sum(s == "ok" for s in status)
    if t.num_rows != n or ok != n:
        raise SystemExit(f"{out}: {t.num_rows} rows, {ok} ok, expected {n}")
    return {"rows": t.num_rows, "ok": ok}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=1_000_000)
    ap.add_argument("--exact-turns", type=int, default=100_000)
    ap.add_argument("--profile-turns", type=int, default=20_000)
    ap.add_argument("--persona-csv", type=Path, default=DEFAULT_PERSONA_CSV)
    ap.add_argument(
        "--paths", default="int8", help="precisions run on every turn, comma-separated (bf16, int8, float32)"
    )
    ap.add_argument(
        "--reuse", type=Path, help="an earlier JSON whose other whole-file runs are kept (same workload, CPU)"
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not paths or set(paths) - {"bf16", "int8", "float32"}:
        raise SystemExit(f"--paths takes bf16, int8 and/or float32, got {args.paths!r}")
    import adherence
    from adherence.bench._hardware import cpu_info
    from adherence.models import Encoder
    from adherence.models._onnx import BF16_BATCH_TOLERANCE

    report: dict = {"bench": "cpu-million", "method": "cosine", "cpu": cpu_info(), "versions": {}}
    for pkg in ("adherence", "torch", "onnxruntime", "openvino", "pyarrow"):
        report["versions"][pkg] = __import__(pkg).__version__.split("-")[0]
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        src = t / "turns.parquet"
        report["workload"] = build(args.turns, args.persona_csv, src)
        print(json.dumps(report["workload"]), flush=True)
        reused = None
        if args.reuse:  # checked before any job runs
            reused = json.loads(args.reuse.read_text())
            keys = ("model", "logical_cpus", "simd")
            same_cpu = {k: reused["cpu"].get(k) for k in keys} == {k: report["cpu"].get(k) for k in keys}
            if reused.get("workload") != report["workload"] or not same_cpu:
                raise SystemExit(f"--reuse {args.reuse}: another workload or CPU than this run's")

        small = head(src, 2000, t / "small.parquet")
        s32 = adherence.score(str(small), method="cosine")
        rows = pq.read_table(small)
        report["correctness"], report["correct"] = {}, True
        for precision in paths:
            # 1. correctness on the first 2,000 turns
            sp = adherence.score(str(small), method="cosine", encoder_precision=precision)
            enc = Encoder(device="cpu", precision=precision, progress=False, cache_bytes=0)
            a = enc.encode(rows["assistant"].to_pylist()).numpy()
            g = enc.encode(rows["ground_truth_assistant"].to_pylist()).numpy()
            mine = np.clip((a * g).sum(1), 0, 1)
            d_job = float(np.abs(mine - sp["score"].to_numpy()).max())
            diff = np.abs(sp["score"].to_numpy() - s32["score"].to_numpy())
            report["correctness"][precision] = {
                "turns": rows.num_rows,
                "job_vs_embeddings_max_abs_diff": d_job,
                "vs_float32_score_max_abs_diff": float(diff.max()),
                "vs_float32_score_mean_abs_diff": float(diff.mean()),
            }
            print(json.dumps({precision: report["correctness"][precision]}), flush=True)
            # bf16 batches differ between the job and this call (another encoder's batches); int8 does not move
            if d_job > (BF16_BATCH_TOLERANCE if precision == "bf16" else 1e-4):
                report["correct"] = False
                raise SystemExit(f"the job's {precision} scores differ from the {precision} embeddings' cosine")

            # 2. the whole file on this path
            out = t / f"out-{precision}.parquet"
            wall = run_job(src, out, precision)
            report[precision] = {"turns": args.turns, "wall_s": wall, "turns_per_s": args.turns / wall,
                                 "hours": wall / 3600, **check_output(out, args.turns)}  # fmt: skip
            out.unlink()
            print(json.dumps({precision: report[precision]}), flush=True)
        for precision in ("bf16", "int8"):
            if reused and precision not in paths and precision in reused:
                report[precision] = dict(reused[precision], reused_from=args.reuse.name)
                c = reused.get("correctness", {})
                if precision in c:
                    report["correctness"][precision] = dict(c[precision], reused_from=args.reuse.name)
                elif precision == "int8" and "int8_job_vs_int8_embeddings_max_abs_diff" in c:  # the first format
                    report["correctness"]["int8"] = {
                        "turns": c["turns"],
                        "job_vs_embeddings_max_abs_diff": c["int8_job_vs_int8_embeddings_max_abs_diff"],
                        "vs_float32_score_max_abs_diff": c["int8_vs_float32_score_max_abs_diff"],
                        "vs_float32_score_mean_abs_diff": c["int8_vs_float32_score_mean_abs_diff"],
                        "reused_from": args.reuse.name,
                    }

        # 3. the float32 path on a slice, projected (unless it ran on every turn above)
        ex = None if "float32" in paths else head(src, args.exact_turns, t / "exact.parquet")
        if ex is not None:
            wall = run_job(ex, t / "out32.parquet", "float32")
            check_output(t / "out32.parquet", args.exact_turns)
            report["float32"] = {"turns": args.exact_turns, "wall_s": wall, "turns_per_s": args.exact_turns / wall,
                                 "projected_hours_for_all_turns": args.turns / (args.exact_turns / wall) / 3600}  # fmt: skip
            print(json.dumps(report["float32"]), flush=True)

        # 4. profile of the first path's job
        prof_src = head(src, args.profile_turns, t / "prof.parquet")
        enc_warm = adherence.score(str(small), method="cosine", encoder_precision=paths[0])  # imports, export done
        del enc_warm
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        adherence.score(str(prof_src), str(t / "prof-out.parquet"), method="cosine", encoder_precision=paths[0])
        prof.disable()
        total = time.perf_counter() - t0
        stats = pstats.Stats(prof)
        # OnnxSentenceModel.run / OpenVinoSentenceModel.run: the runtime's forward passes (in its threads;
        # the call waits for them); on a torch float32 path there is none, and the share is not measured
        runtime = sum(v[3] for k, v in stats.stats.items() if k[2] == "run" and k[0].endswith("_onnx.py"))  # type: ignore[attr-defined]
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(30)
        profile_path = Path(args.out).with_suffix(".profile.txt")
        profile_path.write_text(buf.getvalue().replace(tmp, "$TMP"))
        report["profile"] = {"precision": paths[0], "turns": args.profile_turns, "wall_s": total, "encoder_runtime_s": runtime,
                             "not_encoder_share": 1 - runtime / total, "file": profile_path.name}  # fmt: skip
        print(json.dumps(report["profile"]), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

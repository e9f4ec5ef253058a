"""Soak test of unattended jobs: kill a large scoring job again and again, resume it, compare with a clean run.

    python tools/soak.py --turns 1000000 --kills 5 --out benchmarks/results/soak-cpu.json

1. Writes N synthetic turns (Parquet; a small pool of texts so the encoder is not the bottleneck).
2. Scores them once, uninterrupted (the reference), measuring wall time and peak RSS.
3. Scores them again, killing the job ``--kills`` times at random points, alternating SIGKILL and
   SIGINT, the last kill during the merge (when the output's temporary appears), then ``--resume``
   after each kill until it finishes. The final output must equal the reference table.
4. Peak RSS of uninterrupted runs at ``--rss-sizes`` turns for Parquet, JSONL and CSV output.
5. The cost of the input's content hash (resume by content) on the N-turn input, as Parquet and as
   JSONL (the JSONL scores file of step 4: the texts uncompressed, as logs usually come).

Writes a JSON report; exits 1 if the resumed output differs from the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_turns(n: int, path: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    replies = [f"Reply {k}: I can help with your account, card or transfer question number {k}." for k in range(400)]
    truths = [f"Ground truth {k}: the bank assistant answers question {k} politely and on topic." for k in range(400)]
    writer = None
    step = 100_000
    for start in range(0, n, step):
        m = min(step, n - start)
        idx = np.arange(start, start + m)
        conv = idx // 8
        t = pa.table(
            {
                "conversation_id": pa.array([f"c{c:07d}" for c in conv]),
                "turn_index": pa.array((idx % 8).astype(np.int32)),
                "role": pa.array(["You are a helpful bank assistant."] * m),
                "user": pa.array([f"question {i % 97}" for i in idx]),
                "assistant": pa.array([replies[k] for k in rng.integers(0, 400, m)]),
                "ground_truth_assistant": pa.array([truths[k] for k in rng.integers(0, 400, m)]),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(path, t.schema)
        writer.write_table(t)
    writer.close()


def score_cmd(src: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "adherence",
        "score",
        str(src),
        "-o",
        str(out),
        "--method",
        "cosine",
        "--shard-size",
        "50000",
        "--no-progress",
        *extra,
    ]


def run_measured(cmd: list[str]) -> dict:
    """Run ``cmd`` in a fresh wrapper process so that ``ru_maxrss`` is this command's peak alone."""
    wrapper = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter(); rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "print(json.dumps({'rc': rc, 'seconds': time.perf_counter() - t,\n"
        "                  'peak_rss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))\n"
    )
    res = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def killed_runs(src: Path, out: Path, kills: int, seed: int, clean_s: float) -> list[dict]:
    rnd = random.Random(seed)
    log = []
    for k in range(kills):
        during_merge = k == kills - 1
        sig = signal.SIGINT if (k % 2 == 1 or during_merge) else signal.SIGKILL
        cmd = score_cmd(src, out, *(["--resume"] if k or log else []))
        # A background shell starts children with SIGINT ignored; give the job the default disposition,
        # as a terminal or an orchestrator would, so that SIGINT really interrupts it.
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        t0 = time.perf_counter()
        if during_merge:
            # The merge writes the output under a temporary name beside it: kill when it appears.
            while proc.poll() is None and not any(
                p.name.startswith(f".{out.name}.") and p.name.endswith(".tmp") for p in out.parent.iterdir()
            ):
                time.sleep(0.01)
            time.sleep(rnd.uniform(0.0, 0.5))
        else:
            time.sleep(rnd.uniform(0.15, 0.7) * clean_s)
        state = "running" if proc.poll() is None else f"already exited rc={proc.returncode}"
        if proc.poll() is None:
            proc.send_signal(sig)
        rc = proc.wait()
        log.append(
            {
                "kill": k + 1,
                "signal": sig.name,
                "after_s": round(time.perf_counter() - t0, 2),
                "during_merge": during_merge,
                "state_at_kill": state,
                "rc": rc,
                "output_published": out.exists(),
                "stderr_tail": (proc.stderr.read() or "").strip()[-200:],
            }
        )
        print(json.dumps(log[-1]), flush=True)
    res = subprocess.run(score_cmd(src, out, "--resume"), capture_output=True, text=True)
    log.append({"final_resume_rc": res.returncode, "summary": res.stdout.strip()})
    print(json.dumps(log[-1]), flush=True)
    return log


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=1_000_000)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--rss-sizes", default="200000,1000000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    ap.add_argument("--out", default="benchmarks/results/soak-cpu.json")
    args = ap.parse_args()
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="adherence-soak-"))
    scratch.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "bench": "soak",
        "turns": args.turns,
        "kills": args.kills,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    src = scratch / f"turns-{args.turns}.parquet"
    if not src.exists():
        make_turns(args.turns, src)
    report["input_bytes"] = src.stat().st_size

    from adherence.engine._plan import input_fingerprint

    t = time.perf_counter()
    input_fingerprint(src)
    report["content_hash_s"] = time.perf_counter() - t

    ref = scratch / "reference.parquet"
    report["reference"] = run_measured(score_cmd(src, ref))
    print(json.dumps(report["reference"]), flush=True)
    out = scratch / "killed.parquet"
    report["killed_runs"] = killed_runs(src, out, args.kills, args.seed, report["reference"]["seconds"])
    a, b = pq.read_table(ref), pq.read_table(out)
    report["identical"] = bool(a.equals(b))
    report["rows"] = b.num_rows
    report["leftovers"] = sorted(p.name for p in scratch.iterdir() if p.name.endswith((".tmp", ".work", ".lock")))

    report["peak_rss"] = []
    for n in [int(x) for x in args.rss_sizes.split(",")]:
        src_n = scratch / f"turns-{n}.parquet"
        if not src_n.exists():
            make_turns(n, src_n)
        for ext in ("parquet", "jsonl", "csv"):
            m = run_measured(score_cmd(src_n, scratch / f"rss-{n}.{ext}"))
            report["peak_rss"].append({"turns": n, "format": ext, **m})
            print(json.dumps(report["peak_rss"][-1]), flush=True)
    big = scratch / f"rss-{args.turns}.jsonl"
    if big.exists():
        input_fingerprint(big)  # warm the page cache: the job reads the input right after hashing it
        t = time.perf_counter()
        input_fingerprint(big)
        report["content_hash_jsonl"] = {"bytes": big.stat().st_size, "seconds": time.perf_counter() - t}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"identical: {report['identical']} -> {args.out}")
    return 0 if report["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())

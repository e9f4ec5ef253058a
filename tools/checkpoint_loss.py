"""What a kill costs mid-shard: the work lost between the last checkpoint and the kill, measured.

    python tools/checkpoint_loss.py --turns 4000 --every 5 --kills 4 \
        --out benchmarks/results/2026-11-25-cpu-checkpoint-loss.json

One shard of real, mostly unique Synthetic-Persona-Chat turns (tools/platform_throughput.py's workload) is
scored with cosine and ``--checkpoint-every S``; the job is killed with SIGKILL at random points and resumed
with ``--resume`` each time, until a run finishes. Each kill records the seconds of scoring lost (from the last
checkpoint's record to the kill) and the rows the next run reused; the final output is compared with an
uninterrupted run's (every turn once, max |Δscore|). Before checkpoints within a shard, each kill lost the whole
shard's work so far.
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

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from platform_throughput import DEFAULT_PERSONA_CSV, make_persona_turns, workload, write_report  # noqa: E402


def _cmd(src: Path, out: Path, every: float, *extra: str) -> list[str]:
    return [sys.executable, "-m", "adherence", "score", str(src), "-o", str(out), "--method", "cosine",
            "--bootstrap", "0", "--no-progress", "--checkpoint-every", str(every), *extra]  # fmt: skip


def _records(folder: Path) -> list[dict]:
    out = []
    for p in sorted(folder.glob("*.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            pass  # being written
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=4000)
    ap.add_argument("--every", type=float, default=5.0, help="--checkpoint-every, seconds")
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--persona-csv", type=Path, default=DEFAULT_PERSONA_CSV)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="adherence-ckpt-"))
    src = tmp / "turns.parquet"
    make_persona_turns(args.turns, src, args.persona_csv)

    t0 = time.perf_counter()
    subprocess.run(_cmd(src, tmp / "ref.parquet", 0), check=True, capture_output=True)
    whole_s = time.perf_counter() - t0

    out = tmp / "out.parquet"
    folder = tmp / "out.parquet.work" / "checkpoints"
    kills = []
    resume: list[str] = []
    for _ in range(args.kills):
        started = time.time()
        proc = subprocess.Popen(_cmd(src, out, args.every, *resume), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # somewhere after this run's first new checkpoint, before the job could end
        before = len(_records(folder))
        while proc.poll() is None and len(_records(folder)) <= before:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.2, 1.6) * args.every)
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        killed = time.time()
        proc.wait()
        records = _records(folder)
        last = max((r["written_at"] for r in records), default=started)
        kills.append(
            {
                "seconds_into_run": killed - started,
                "lost_s": killed - max(last, started),
                "checkpoints": len(records),
                "rows_committed": sum(r["rows"] for r in records),
            }
        )
        resume = ["--resume"]
    res = subprocess.run(_cmd(src, out, args.every, *resume), capture_output=True, text=True)
    got, want = pq.read_table(out), pq.read_table(tmp / "ref.parquet")
    key = lambda t: list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))  # noqa: E731
    same_rows = key(got) == key(want) and len(set(key(got))) == args.turns
    diff = max(abs(a - b) for a, b in zip(got.column("score").to_pylist(), want.column("score").to_pylist()))
    reused = int(res.stdout.split(" reused from an earlier run")[0].rsplit("(", 1)[1]) if "reused" in res.stdout else 0
    report = {
        "bench": "checkpoint-loss",
        "turns": args.turns,
        "texts": "persona",
        "workload": workload(src),
        "method": "cosine",
        "checkpoint_every_s": args.every,
        "uninterrupted_s": whole_s,
        "kills": kills,
        "max_lost_s": max((k["lost_s"] for k in kills), default=None),
        "max_lost_over_interval": max((k["lost_s"] for k in kills), default=0) / args.every,
        "final_run_rows_reused": reused,
        "final_exit": res.returncode,
        "every_turn_once": same_rows,
        "max_abs_diff": diff,
        "correct": res.returncode == 0 and same_rows and diff <= 1e-6,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    return write_report(args.out, report)


if __name__ == "__main__":
    sys.exit(main())

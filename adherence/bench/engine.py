"""Engine throughput: local vs Ray on a synthetic Parquet file, with peak memory.

Each configuration runs in a fresh Python process so its peak RSS is its own.
Texts are drawn from a small pool, so after the first shard the encoder cache
answers and the benchmark measures the engine (planning, sharding, scoring
kernel, writing), not the encoder. Correctness first: on a small file the
engine's output must equal a one-pass ``adherence.role.score_turns``.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["bench_engine", "write_synthetic_parquet"]

_ROLE = "You are the support assistant of a bank. Help with accounts, cards and transfers."


def write_synthetic_parquet(
    path: Path, n_turns: int, *, turns_per_conversation: int = 4, pool: int = 500, seed: int = 0, batch: int = 100_000
) -> Path:
    """Write ``n_turns`` turns in batches (flat memory), texts drawn from ``pool`` sentences."""
    rng = np.random.default_rng(seed)
    words = "account card transfer fee balance refund limit statement deposit branch online secure".split()
    texts = np.array([" ".join(rng.choice(words, 12)) + f" #{i}" for i in range(pool)], dtype=object)
    writer = None
    try:
        for start in range(0, n_turns, batch):
            n = min(batch, n_turns - start)
            idx = np.arange(start, start + n)
            table = pa.table(
                {
                    "conversation_id": pa.array([f"c{i // turns_per_conversation:08d}" for i in idx]),
                    "turn_index": pa.array(idx % turns_per_conversation, pa.int32()),
                    "role": pa.array([_ROLE] * n),
                    "user": pa.array(texts[rng.integers(0, pool, n)].tolist()),
                    "assistant": pa.array(texts[rng.integers(0, pool, n)].tolist()),
                    "ground_truth_assistant": pa.array(texts[rng.integers(0, pool, n)].tolist()),
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    return path


_CHILD = r"""
import json, resource, sys, time
from adherence.engine import Engine
args = json.loads(sys.argv[1])
kw = dict(method=args["method"], shard_size=args["shard_size"], progress=False, n_bootstrap=0, executor=args["executor"])
if args["executor"] == "ray":
    import ray
    ray.init(address="local", num_cpus=max(2, args["workers"]), include_dashboard=False, log_to_driver=False)
    kw["num_workers"] = args["workers"]
t = time.perf_counter()
res = Engine(**kw).run(args["input"], args["output"])
elapsed = time.perf_counter() - t
print(json.dumps({"elapsed_s": elapsed, "turns": res.summary["turns"], "ok": res.summary["ok"],
                  "shards": res.summary["shards"],
                  "peak_rss_mb_driver": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run_child(args: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"engine run failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_engine(
    *,
    turns: int = 1_000_000,
    small: Optional[int] = None,
    method: str = "cosine",
    shard_size: int = 100_000,
    workers: int = 1,
    executors=("local", "ray"),
    work_dir: Optional[str] = None,
) -> dict:
    """Benchmark dict: correctness, per executor and input size turns/s and peak RSS, the ray/local ratio."""
    from ..engine import Engine
    from ..role import score_turns

    tmp = None
    if work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="adherence-bench-")
        work_dir = tmp.name
    root = Path(work_dir)
    root.mkdir(parents=True, exist_ok=True)
    try:
        check = write_synthetic_parquet(root / "check.parquet", 2_000)
        direct = score_turns(pq.read_table(check), method, progress=False)
        eng = Engine(method=method, shard_size=300, progress=False, n_bootstrap=0).run(
            check, root / "check-out.parquet"
        )
        got = pq.read_table(eng.output)

        def by_key(t):
            return dict(
                zip(
                    zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()),
                    t.column("score").to_pylist(),
                )
            )

        a, b = by_key(got), by_key(direct)
        diff = max(abs(a[k] - b[k]) for k in b) if a.keys() == b.keys() else float("inf")
        if diff > 1e-5 or got.num_rows != direct.num_rows:
            raise RuntimeError(f"engine output differs from a one-pass score: max |diff| {diff}")
        sizes = sorted({s for s in (small or max(1, turns // 10), turns)})
        runs: dict = {}
        for n in sizes:
            src = write_synthetic_parquet(root / f"in-{n}.parquet", n)
            for ex in executors:
                r = _run_child(
                    {
                        "method": method,
                        "shard_size": shard_size,
                        "executor": ex,
                        "workers": workers,
                        "input": str(src),
                        "output": str(root / f"out-{ex}-{n}.parquet"),
                    }
                )
                r["turns_per_s"] = r["turns"] / r["elapsed_s"]
                runs.setdefault(ex, {})[f"n={n}"] = r
        result = {
            "args": {"turns": turns, "sizes": sizes, "method": method, "shard_size": shard_size, "workers": workers},
            "machine": f"{platform.machine()}, python {platform.python_version()}",
            "correctness": {"max_abs_score_difference_vs_one_pass": diff, "passed": True},
            "runs": runs,
        }
        if "local" in runs and "ray" in runs:
            key = f"n={turns}"
            result["ray_over_local"] = runs["ray"][key]["turns_per_s"] / runs["local"][key]["turns_per_s"]
        if "local" in runs and len(sizes) > 1:
            lo, hi = runs["local"][f"n={sizes[0]}"], runs["local"][f"n={sizes[-1]}"]
            result["local_rss_growth"] = hi["peak_rss_mb_driver"] / lo["peak_rss_mb_driver"]
        return result
    finally:
        if tmp is not None:
            tmp.cleanup()

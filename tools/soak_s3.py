"""Fault run of the object-storage path: kill a job writing to ``s3://`` at every phase, resume, compare.

    python tools/soak_s3.py --turns 20000 --out benchmarks/results/<date>-cpu-soak-s3.json

Against a real S3-compatible server on 127.0.0.1 (``moto`` in server mode), with the output and the work
dir on S3:

1. Scores N synthetic turns once to a local file (the reference).
2. For each phase -- while planning (the work dir's manifest appears), while scoring (some shards done),
   while publishing (the output's metadata appears, marked unpublished) -- and each signal (SIGKILL,
   SIGINT, SIGTERM), starts a job (``--resume`` after the first), waits for the phase, sends the signal,
   and records the exit code, what the job printed, whether the output's metadata says ``published``,
   and the local staging directories left behind.
3. Resumes until a job finishes; the output must equal the reference (every turn once, the same scores),
   the work dir prefix must be empty and no staging directory of a dead job may be left.

Writes a JSON report; exits 1 when any check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak import make_turns  # noqa: E402

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple:
    """A moto S3 server on a free port of 127.0.0.1: ``(process, port)`` once it accepts connections."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the moto server did not start")


@contextlib.contextmanager
def s3_bucket(bucket: str):
    """A moto S3 server on 127.0.0.1 with ``bucket`` made, the process environment pointing pyarrow (and
    subprocesses) at it while the block runs: yields ``s3://bucket``."""
    proc, port = start_moto()
    saved = {k: os.environ.get(k) for k in (*ENV, "AWS_ENDPOINT_URL")}
    os.environ.update(ENV, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    try:
        from pyarrow import fs as pafs

        fs, _ = pafs.FileSystem.from_uri(f"s3://{bucket}?allow_bucket_creation=true")
        fs.create_dir(bucket)
        yield f"s3://{bucket}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def score_cmd(src: Path, out: str, shard_size: int, *extra: str) -> list:
    return [
        sys.executable, "-m", "adherence", "score", str(src), "-o", out, "--method", "cosine",
        "--shard-size", str(shard_size), "--no-progress", "--bootstrap", "0", *extra,
    ]  # fmt: skip


def _staging(pid: int) -> list:
    return sorted(p.name for p in Path(tempfile.gettempdir()).glob(f"adherence-staging-{pid}-*"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=20_000)
    ap.add_argument("--shard-size", type=int, default=2_000)
    ap.add_argument("--out", default=None, help="the JSON report (default: print it)")
    args = ap.parse_args()

    os.environ.update(ENV)
    moto, port = start_moto()
    os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    from pyarrow import fs as pafs

    from adherence.data._storage import Remote

    fs, _ = pafs.FileSystem.from_uri("s3://soak?allow_bucket_creation=true")
    fs.create_dir("soak")
    report: dict = {
        "what": "kills and signals at every phase of a job whose output and work dir are on S3, then --resume",
        "store": "moto server (S3-compatible) on 127.0.0.1",
        "turns": args.turns,
        "shard_size": args.shard_size,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "runs": [],
    }
    failures = []
    try:
        with tempfile.TemporaryDirectory(prefix="adherence-soak-s3-") as d:
            src = Path(d) / "turns.parquet"
            make_turns(args.turns, src)
            t0 = time.perf_counter()
            subprocess.run(score_cmd(src, str(Path(d) / "ref.parquet"), args.shard_size), check=True)
            report["clean_local_s"] = round(time.perf_counter() - t0, 2)
            ref = pq.read_table(Path(d) / "ref.parquet")

            out = "s3://soak/run/scores.parquet"
            obj, meta_obj, work = Remote(out), Remote(out + ".meta.json"), Remote(out + ".work")

            def snapshot() -> tuple:
                info = fs.get_file_info((work / "job.json").path)
                done = sum(n.endswith(".done.json") for n in (work / "out").listdir())
                return info.mtime_ns if info.type == pafs.FileType.File else None, done

            def phase_reached(phase: str, before: tuple) -> bool:
                """The phase has begun in this run (not in an earlier one): the manifest rewritten, one more
                shard done, or the output's commit record written."""
                now = snapshot()
                if phase == "planning":
                    return now[0] is not None and now[0] != before[0]
                if phase == "scoring":
                    return now[1] > before[1]
                return meta_obj.exists()

            first = True
            for phase in ("planning", "scoring", "publishing"):
                for sig in (signal.SIGKILL, signal.SIGINT, signal.SIGTERM):
                    if meta_obj.exists():
                        meta_obj.delete()  # a finished publish from the last run would end the phase at once
                        obj.delete()
                    before = snapshot()
                    proc = subprocess.Popen(
                        score_cmd(src, out, args.shard_size, *([] if first else ["--resume"])),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                        text=True,
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                    )
                    first = False
                    t = time.perf_counter()
                    while proc.poll() is None and not phase_reached(phase, before) and time.perf_counter() - t < 600:
                        time.sleep(0.005)
                    reached = proc.poll() is None
                    if reached:
                        proc.send_signal(sig)
                    rc = proc.wait()
                    err = (proc.stderr.read() if proc.stderr else "").strip()
                    meta = json.loads(meta_obj.read_bytes()) if meta_obj.exists() else None
                    run = {
                        "phase": phase,
                        "signal": sig.name,
                        "signalled_while_running": reached,
                        "after_s": round(time.perf_counter() - t, 2),
                        "rc": rc,
                        "stderr_tail": err[-240:],
                        "metadata_published": None if meta is None else meta.get("published"),
                        "staging_left": _staging(proc.pid),
                    }
                    # A signal before the commit must never read as success, and a success must be complete.
                    expected = {signal.SIGKILL: -9, signal.SIGINT: 130, signal.SIGTERM: 143}[sig]
                    if reached and rc == 0 and not (meta and meta.get("published")):
                        failures.append(f"{phase}/{sig.name}: exit 0 without a published output")
                    if reached and rc not in (0, expected):
                        failures.append(f"{phase}/{sig.name}: exit {rc}, expected {expected} (or 0 once published)")
                    if sig != signal.SIGKILL and run["staging_left"]:
                        failures.append(f"{phase}/{sig.name}: staging left by a job that exited")
                    report["runs"].append(run)
                    print(json.dumps(run), flush=True)
            res = subprocess.run(score_cmd(src, out, args.shard_size, "--resume"), capture_output=True, text=True)
            got = pq.read_table(obj.path, filesystem=obj.fs)
            keys = list(zip(got.column("conversation_id").to_pylist(), got.column("turn_index").to_pylist()))
            import numpy as np

            keys_ref = ["conversation_id", "turn_index", "status"]
            diff = np.abs(
                np.array(got.column("score").to_pylist(), dtype=float)
                - np.array(ref.column("score").to_pylist(), dtype=float)
            )
            same = got.select(keys_ref).equals(ref.select(keys_ref)) and float(np.nanmax(diff)) <= 1e-6
            dead_staging = [
                p.name
                for p in Path(tempfile.gettempdir()).glob("adherence-staging-*")
                if any(str(r["staging_left"]).find(p.name) >= 0 for r in report["runs"])
            ]
            report["final"] = {
                "rc": res.returncode,
                "summary": res.stdout.strip()[-400:],
                "metadata_published": json.loads(meta_obj.read_bytes()).get("published"),
                "turns": got.num_rows,
                "unique_turns": len(set(keys)),
                "equals_reference": bool(same),
                "max_abs_score_diff": float(np.nanmax(diff)),
                "work_dir_objects_left": len(work.walk()),
                "killed_jobs_staging_left": dead_staging,
            }
            if res.returncode != 0 or not same or len(set(keys)) != args.turns or got.num_rows != args.turns:
                failures.append("the resumed output differs from the reference")
            if report["final"]["work_dir_objects_left"] or dead_staging:
                failures.append("objects or staging left after the final run")
    finally:
        moto.terminate()
        moto.wait(timeout=30)
    report["failures"] = failures
    report["passed"] = not failures
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(json.dumps(report["final"] if "final" in report else report, indent=2))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())

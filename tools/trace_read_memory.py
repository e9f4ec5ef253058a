"""Reading a large trace file: memory and speed of the OTLP JSON reader.

    python tools/trace_read_memory.py --conversations 3000 --turns 20 --out benchmarks/results/2026-11-25-cpu-trace-read.json

Writes an OTLP JSON file of GenAI chat spans shaped like production traces (each span's input repeats the whole
conversation so far, so the file grows with the square of the conversation's length; replies from
Synthetic-Persona-Chat, Jandaghi et al. 2023, CC BY 4.0), then reads it as turns in a fresh process (the engine's
reader, batch by batch) and records the peak resident memory against the file's size, and the spans read per
second. The turns are checked first: one per span, in order, each with the exchange its span holds.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from platform_throughput import DEFAULT_PERSONA_CSV  # noqa: E402


def _attr(k: str, v: str) -> dict:
    return {"key": k, "value": {"stringValue": v}}


def write(path: Path, conversations: int, turns: int, csv: Path, seed: int) -> dict:
    from adherence.data import read_synthetic_persona_chat

    texts = [u["text"] for u in read_synthetic_persona_chat(csv).conversations.to_pylist()]
    rng = random.Random(seed)
    t0 = 1_700_000_000_000_000_000
    spans = 0
    with open(path, "w", encoding="utf-8") as fh:
        for c in range(conversations):
            history: list = []
            out = []
            trace = f"{rng.getrandbits(128):032x}"
            for t in range(turns):
                user, reply = rng.choice(texts), rng.choice(texts)
                history.append({"role": "user", "parts": [{"type": "text", "content": f"{c}.{t} {user}"}]})
                out.append({
                    "traceId": trace, "spanId": f"{rng.getrandbits(64):016x}", "name": "chat",
                    "startTimeUnixNano": str(t0 + (c * turns + t) * 10**9),
                    "endTimeUnixNano": str(t0 + (c * turns + t) * 10**9 + 5 * 10**8),
                    "attributes": [
                        _attr("gen_ai.operation.name", "chat"), _attr("gen_ai.conversation.id", f"conv-{c}"),
                        _attr("gen_ai.system_instructions", json.dumps([{"type": "text", "content": "You are a friendly person."}])),
                        _attr("gen_ai.input.messages", json.dumps(history)),
                        _attr("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": reply}]}])),
                    ],
                })  # fmt: skip
                history.append({"role": "assistant", "parts": [{"type": "text", "content": reply}]})
                spans += 1
            fh.write(
                json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": out}]}]}) + "\n"
            )
    return {"conversations": conversations, "turns_per_conversation": turns, "spans": spans,
            "file_mb": path.stat().st_size / 2**20}  # fmt: skip


_READ = r"""
import json, resource, sys, time
from adherence.data import TURNS, TranscriptOptions, iter_batches
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
n, last, ok = 0, {}, True
for b in iter_batches(sys.argv[1], TURNS, transcripts=TranscriptOptions(), batch_size=65536):
    for cid, ti, user in zip(b.column("conversation_id").to_pylist(), b.column("turn_index").to_pylist(), b.column("user").to_pylist()):
        ok &= ti == last.get(cid, -1) + 1 and user.startswith(f"{cid[5:]}.{ti} ")
        last[cid] = ti
        n += 1
took = time.perf_counter() - t0
print(json.dumps({"turns": n, "in_order": bool(ok), "seconds": took, "rss_baseline_mb": base,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=3000)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--persona-csv", type=Path, default=DEFAULT_PERSONA_CSV)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from adherence.bench._hardware import cpu_info

    path = Path(tempfile.mkdtemp(prefix="trace-read-")) / "traces.otlp.jsonl"
    t0 = time.perf_counter()
    workload = write(path, args.conversations, args.turns, args.persona_csv, args.seed)
    workload["write_s"] = time.perf_counter() - t0
    p = subprocess.run([sys.executable, "-c", _READ, str(path)], capture_output=True, text=True, check=True)
    read = json.loads(p.stdout.strip().splitlines()[-1])
    if read["turns"] != workload["spans"] or not read["in_order"]:
        raise SystemExit(
            f"the reader gave {read['turns']} turns for {workload['spans']} spans (in order: {read['in_order']})"
        )
    result = {
        "what": "adherence's OTLP JSON trace reader on a large file: peak memory against the file's size",
        "command": " ".join(["python", "tools/trace_read_memory.py", *sys.argv[1:]]),
        "workload": workload,
        "read": read,
        "spans_per_s": read["turns"] / read["seconds"],
        "memory_over_file": (read["peak_rss_mb"] - read["rss_baseline_mb"]) / workload["file_mb"],
        "machine": {**cpu_info(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("workload", "read", "spans_per_s", "memory_over_file")}, indent=2))
    path.unlink()


if __name__ == "__main__":
    main()

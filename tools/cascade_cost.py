"""A real two-stage cascade on CPU: what it decides, how well, and what it saves against the judge on every turn.

    python tools/cascade_cost.py --turns 1200 --out benchmarks/results/2026-11-25-cpu-cascade.json

The labelled set is built from Synthetic-Persona-Chat (Jandaghi et al. 2023, CC BY 4.0; ../shared/data/persona or
--persona-csv): each User 2 reply to a User 1 message, with User 2's persona as the role; for half the turns
(drawn at random) the reply is swapped for a reply from another conversation. Labels are by construction:
``adherent`` (the conversation's own reply) or ``off_conversation`` (a swapped one). Conversations are split in
two halves: the first to fit the cascade, the second to run it.

Stage 1 is cheap: cosine similarity of the reply to the user message it answers (``ground_truth_assistant`` is
set to the user message), thresholded at its median on the fitting half. Stage 2 is the bundled judge
(SmolLM2-135M-Instruct, full history, default prompt). On the second half the script runs the judge on every turn
(the baseline: its time and calls) and ``adherence score --cascade`` (its time, escalation share and decisions),
and checks the cascade's decisions against ``adherence cascade apply`` on the full runs before reporting.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from platform_throughput import DEFAULT_PERSONA_CSV, make_persona_turns  # noqa: E402


def build(n: int, csv: Path, out_dir: Path, seed: int) -> tuple:
    raw = out_dir / "persona.parquet"
    make_persona_turns(n, raw, csv)
    rows = pq.read_table(raw).to_pylist()
    rng = np.random.default_rng(seed)
    pool = [(r["conversation_id"], r["assistant"]) for r in rows]
    for r in rows:
        r["ground_truth_assistant"] = r["user"]  # the reference of the relevance signal: the message answered
        if rng.random() < 0.5:
            while True:
                cid, reply = pool[rng.integers(len(pool))]
                if cid != r["conversation_id"]:
                    break
            r["assistant"], r["label"] = reply, "off_conversation"
        else:
            r["label"] = "adherent"
    convs = list(dict.fromkeys(r["conversation_id"] for r in rows))
    fit_ids = set(convs[: len(convs) // 2])
    halves = {}
    for name, keep in (("fit", True), ("test", False)):
        path = out_dir / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist([r for r in rows if (r["conversation_id"] in fit_ids) == keep]), path)
        halves[name] = path
    return halves["fit"], halves["test"]


def adherence(*args: str) -> tuple:
    """Run the command line; its wall time and its standard output."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "adherence", *args], capture_output=True, text=True)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"adherence {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return took, p.stdout


def meta(path: Path) -> dict:
    return json.loads(Path(str(path) + ".meta.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=1200)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--persona-csv", type=Path, default=DEFAULT_PERSONA_CSV)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from adherence.bench._hardware import cpu_info

    work = Path(tempfile.mkdtemp(prefix="cascade-cost-"))
    fit, test = build(args.turns, args.persona_csv, work, args.seed)
    common = ["--no-progress", "--device", "cpu"]

    # the cheap stage's threshold: its median on the fitting half
    adherence("score", str(fit), "-o", str(work / "probe.parquet"), "--method", "cosine", *common)
    cut = float(np.median(pq.read_table(work / "probe.parquet").column("score").to_numpy()))
    cosine = ["--method", "cosine", "--threshold", f"{cut:.6f}"]

    # fit on the first half
    adherence("score", str(fit), "-o", str(work / "fit-cos.parquet"), *cosine, *common)
    adherence("score", str(fit), "-o", str(work / "fit-judge.parquet"), *common)
    cascade = work / "cascade.json"
    _, fit_out = adherence(
        "cascade", "fit", str(work / "fit-cos.parquet"), str(work / "fit-judge.parquet"), "--label", "label",
        "--positive", "adherent", "--alpha", str(args.alpha), "--delta", str(args.delta), "-o", str(cascade),
    )  # fmt: skip

    # the second half: each stage on every turn (the baseline and the reference), then the cascade
    t_cos, _ = adherence("score", str(test), "-o", str(work / "test-cos.parquet"), *cosine, *common)
    t_judge, _ = adherence("score", str(test), "-o", str(work / "test-judge.parquet"), *common)
    t_cascade, cascade_out = adherence(
        "score", str(test), "-o", str(work / "test-cascade.parquet"), "--cascade", str(cascade), *common
    )
    adherence(
        "cascade", "apply", str(work / "test-cos.parquet"), str(work / "test-judge.parquet"), "--cascade",
        str(cascade), "-o", str(work / "test-applied.parquet"),
    )  # fmt: skip

    # correctness first: the cascade's decisions are apply's on the full runs, and its judge scores the full run's
    got = pq.read_table(work / "test-cascade.parquet").to_pylist()
    want = {
        (r["conversation_id"], r["turn_index"]): r for r in pq.read_table(work / "test-applied.parquet").to_pylist()
    }
    full_judge = {
        (r["conversation_id"], r["turn_index"]): r["score"]
        for r in pq.read_table(work / "test-judge.parquet").to_pylist()
    }
    worst = 0.0
    for r in got:
        k = (r["conversation_id"], r["turn_index"])
        if (r["status"], r["decided_by"], r["prediction"]) != (
            want[k]["status"],
            want[k]["decided_by"],
            want[k]["prediction"],
        ):
            raise SystemExit(
                f"turn {k}: the cascade decided {r['status'], r['decided_by']}, apply {want[k]['status'], want[k]['decided_by']}"
            )
        if r["stage2_score"] is not None:
            worst = max(worst, abs(r["stage2_score"] - full_judge[k]))
    if worst > 1e-4:
        raise SystemExit(f"the judge's scores in the cascade's second pass differ from a full run's by {worst}")

    labels = {
        (r["conversation_id"], r["turn_index"]): r["label"] == "adherent" for r in pq.read_table(test).to_pylist()
    }
    decided = [r for r in got if r["status"] == "ok"]
    agree = [int(r["prediction"]) == labels[(r["conversation_id"], r["turn_index"])] for r in decided]

    def accuracy(path: Path) -> float:
        t = pq.read_table(path).to_pylist()
        return float(np.mean([int(r["prediction"]) == labels[(r["conversation_id"], r["turn_index"])] for r in t]))

    summary = meta(work / "test-cascade.parquet")["summary"]
    judge_meta = meta(work / "test-judge.parquet")["summary"]
    doc = json.loads(cascade.read_text())
    result = {
        "what": "a two-stage cascade (cosine of the reply to the user message, then the bundled judge) fitted on one "
        "half of a labelled persona set and run with `adherence score --cascade` on the other",
        "command": " ".join(["python", "tools/cascade_cost.py", *sys.argv[1:]]),
        "workload": {
            "source": "Synthetic-Persona-Chat valid (Jandaghi et al. 2023, CC BY 4.0)",
            "turns": args.turns,
            "fit_turns": pq.read_metadata(fit).num_rows,
            "test_turns": len(got),
            "labels": "by construction: the conversation's own reply (adherent) or, for a random half, a reply "
            "from another conversation (off_conversation)",
            "unique_reply_share": len({r["assistant"] for r in got}) / len(got),
            "mean_reply_chars": float(np.mean([len(r["assistant"]) for r in got])),
        },
        "stages": [
            {
                "stage": 1,
                "method": "cosine",
                "score_threshold": cut,
                "threshold": doc["stages"][0]["threshold"],
                "fit_accepted": doc["stages"][0]["accepted"],
                "fit_reaching": doc["stages"][0]["reaching"],
            },
            {
                "stage": 2,
                "method": "llm_judge (bundled SmolLM2-135M-Instruct)",
                "score_threshold": 0.5,
                "threshold": doc["stages"][1]["threshold"],
                "fit_accepted": doc["stages"][1]["accepted"],
                "fit_reaching": doc["stages"][1]["reaching"],
            },
        ],  # fmt: skip
        "alpha": args.alpha,
        "delta": args.delta,
        "guarantee": doc["guarantee"],
        "fit_output": fit_out.strip().splitlines(),
        "test": {
            "decided": len(decided),
            "decided_share": len(decided) / len(got),
            "decided_by_stage": [st["decided"] for st in summary["stages"]],
            "escalated_to_judge": summary["stages"][1]["turns"] if len(summary["stages"]) > 1 else 0,
            "abstained": summary["abstained"],
            "agreement_on_decided": float(np.mean(agree)) if agree else None,
            "accuracy_cosine_alone": accuracy(work / "test-cos.parquet"),
            "accuracy_judge_alone": accuracy(work / "test-judge.parquet"),
        },
        "cost": {
            "judge_on_every_turn_s": t_judge,
            "judge_on_every_turn_calls": judge_meta["judge_usage"]["calls"],
            "judge_on_every_turn_forward_tokens": judge_meta["judge_usage"].get("forward_tokens"),
            "cosine_on_every_turn_s": t_cos,
            "cascade_s": t_cascade,
            "cascade_judge_calls": sum((st["judge_usage"] or {}).get("calls", 0) for st in summary["stages"]),
            "cascade_forward_tokens": sum(
                (st["judge_usage"] or {}).get("forward_tokens", 0) for st in summary["stages"]
            ),
            "cascade_over_judge_time": t_cascade / t_judge,
            "note": "wall time of each command, model loading included",
        },
        "checks": {"decisions_equal_cascade_apply": True, "second_pass_judge_max_abs_diff": worst},
        "cascade_summary": cascade_out.strip().splitlines(),
        "machine": {**cpu_info(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("test", "cost")}, indent=2))


if __name__ == "__main__":
    main()

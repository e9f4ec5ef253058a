"""Throughput of the three ways to score a turns table: the engine, Ray Data and Spark, side by side.

    python tools/platform_throughput.py --texts persona --turns 5000 --out benchmarks/results/platforms-cpu.json

Correctness first: every path's scores are compared with the engine's on the same rows (max |diff|).
Then turns/s per path (wall time of the whole call, model loading included) and the ratio to the engine
(in-process, and on the same local Ray cluster for Ray Data).

Two workloads (the JSON records which, with its share of unique texts and its text lengths):
``persona`` (the realistic one): real, mostly unique utterances of Synthetic-Persona-Chat (Jandaghi et al.
2023, CC BY 4.0; ../shared/data/persona or --persona-csv) -- a user message, the reply scored and the next
reply as its reference, the replying persona as the role; ``pool``: texts drawn from a pool of 400 (see
tools/soak.py), as heavily repeated logs are, where the encoder's cache does almost all the work;
``million``: the turns of tools/cpu_million.py's one-million-turn job (utterances joined in pairs, so nearly
every text is distinct at any size), for as many turns as asked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from adherence.bench._hardware import cpu_info
from adherence.models._onnx import BF16_BATCH_TOLERANCE, PRECISIONS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workloads import DEFAULT_PERSONA_CSV, million_turns  # noqa: E402
from soak import make_turns  # noqa: E402


def make_persona_turns(n: int, path: Path, csv: Path) -> None:
    """``n`` turns from Synthetic-Persona-Chat: each User 1 utterance (the user message) with the User 2 reply
    after it (the turn scored), User 1's next utterance as its reference text, and User 2's persona as the
    role; in corpus order."""
    from adherence.data import read_synthetic_persona_chat

    corpus = read_synthetic_persona_chat(csv)
    personas = {(p["conversation_id"], p["speaker"]): " ".join(p["persona"] or []) for p in corpus.personas.to_pylist()}
    by_conv: dict = {}
    for u in corpus.conversations.to_pylist():
        by_conv.setdefault(u["conversation_id"], []).append(u)
    rows: list = []
    for cid, us in by_conv.items():
        pairs = [
            (a["text"], b["text"]) for a, b in zip(us, us[1:]) if (a["speaker"], b["speaker"]) == ("User 1", "User 2")
        ]
        role = "You are this person, chatting with a stranger: " + personas.get((cid, "User 2"), "")
        for k, (user, reply) in enumerate(pairs[:-1]):
            rows.append(
                {"conversation_id": cid, "turn_index": k, "role": role, "user": user, "assistant": reply,
                 "ground_truth_assistant": pairs[k + 1][0]}
            )  # fmt: skip
            if len(rows) == n:
                break
        if len(rows) == n:
            break
    if len(rows) < n:
        raise SystemExit(f"{csv} gives {len(rows)} turns, fewer than --turns {n}")
    pq.write_table(pa.Table.from_pylist(rows), path)


def workload(path: Path) -> dict:
    """The texts a run encodes: how many are distinct, and how long they are."""
    t = pq.read_table(path, columns=["assistant", "ground_truth_assistant", "role", "user"])
    texts = t.column("assistant").to_pylist() + t.column("ground_truth_assistant").to_pylist()
    chars = [len(x) for x in texts]
    return {
        "unique_text_share": len(set(texts)) / len(texts),
        "unique_texts": len(set(texts)),
        "texts": len(texts),
        "mean_chars": sum(chars) / len(chars),
        "max_chars": max(chars),
        "unique_roles": len(set(t.column("role").to_pylist())),
    }


def _scores(t: pa.Table) -> dict:
    return dict(
        zip(
            zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()),
            t.column("score").to_pylist(),
        )
    )


def _max_diff(got: pa.Table, ref: dict) -> float:
    a = _scores(got)
    assert a.keys() == ref.keys(), "different rows"
    return max(abs(a[k] - ref[k]) for k in ref)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--method", default="cosine")
    ap.add_argument("--encoder-precision", choices=PRECISIONS, default="float32")
    ap.add_argument("--workers", type=int, default=2, help="Ray actors / Spark local cores")
    ap.add_argument(
        "--texts", choices=("persona", "pool", "million"), default="persona", help="the workload (see above)"
    )
    ap.add_argument(
        "--ray-data-actors",
        type=int,
        help="Ray Data scoring actors (default: --workers - 1, each holding a whole CPU, one CPU left to the "
        "grouping shuffle)",
    )
    ap.add_argument(
        "--ray-data-actor-cpus",
        type=float,
        help="CPUs each Ray Data actor holds (default 1); e.g. 0.5 with --ray-data-actors 2 on 2 CPUs: both actors "
        "score on their own core (Ray gives a fractional actor one thread) and the shuffle still gets a CPU",
    )
    ap.add_argument("--persona-csv", type=Path, default=DEFAULT_PERSONA_CSV)
    ap.add_argument("--out", default="benchmarks/results/platforms-cpu.json")
    args = ap.parse_args()
    import adherence

    tmp = Path(tempfile.mkdtemp(prefix="adherence-platforms-"))
    src = tmp / "turns.parquet"
    if args.texts == "persona":
        make_persona_turns(args.turns, src, args.persona_csv)
    elif args.texts == "million":
        million_turns(args.turns, args.persona_csv, src)
    else:
        make_turns(args.turns, src)
    report = {
        "bench": "platforms",
        "texts": args.texts,
        "workload": workload(src),
        "turns": args.turns,
        "method": args.method,
        "encoder_precision": args.encoder_precision,
        "workers": args.workers,
        "device": "cpu",
        "cpus": os.cpu_count(),
        "cpu": cpu_info(),  # the CPU's model and kind (avx2, avx512, avx512bf16, amx), as the encoder benches name it
        "platform": platform.platform(),
        "paths": {},
    }

    t = time.perf_counter()
    ref_table = adherence.score(src, method=args.method, n_bootstrap=0, encoder_precision=args.encoder_precision)
    engine_s = time.perf_counter() - t
    ref = _scores(ref_table)
    report["paths"]["engine"] = {"seconds": engine_s, "turns_per_s": args.turns / engine_s, "max_abs_diff": 0.0}
    print(json.dumps(report["paths"]["engine"]), flush=True)

    import ray
    import ray.data

    from adherence.ray_data import score_dataset

    ray.init(
        address="local",
        num_cpus=args.workers,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    # The engine on the same Ray cluster: the yardstick for Ray Data.
    t = time.perf_counter()
    ray_engine = adherence.score(
        src,
        method=args.method,
        n_bootstrap=0,
        executor="ray",
        num_workers=args.workers,
        encoder_precision=args.encoder_precision,
    )
    s = time.perf_counter() - t
    report["paths"]["engine_ray"] = {
        "seconds": s,
        "turns_per_s": args.turns / s,
        "max_abs_diff": _max_diff(ray_engine, ref),
    }
    print(json.dumps(report["paths"]["engine_ray"]), flush=True)
    t = time.perf_counter()
    # Actors hold their CPUs: by default one is left to the grouping shuffle.
    actors = args.ray_data_actors or max(1, args.workers - 1)
    ds = score_dataset(
        ray.data.read_parquet(str(src)),
        method=args.method,
        encoder_precision=args.encoder_precision,
        concurrency=actors,
        num_cpus=args.ray_data_actor_cpus,
    )
    got = pa.concat_tables(ray.get(ds.to_arrow_refs()), promote_options="permissive")
    ray_s = time.perf_counter() - t
    report["paths"]["ray_data"] = {
        "seconds": ray_s,
        "turns_per_s": args.turns / ray_s,
        "max_abs_diff": _max_diff(got, ref),
        "actors": actors,
        "actor_cpus": args.ray_data_actor_cpus or 1.0,
    }
    print(json.dumps(report["paths"]["ray_data"]), flush=True)
    ray.shutdown()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from adherence.spark import score_dataframe

    spark = (
        SparkSession.builder.master(f"local[{args.workers}]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    t = time.perf_counter()
    out = score_dataframe(
        spark.read.parquet(str(src)),
        method=args.method,
        num_partitions=args.workers,
        encoder_precision=args.encoder_precision,
    )
    out.write.mode("overwrite").parquet(str(tmp / "spark-out"))
    spark_s = time.perf_counter() - t
    got = pq.read_table(tmp / "spark-out")
    report["paths"]["spark"] = {
        "seconds": spark_s,
        "turns_per_s": args.turns / spark_s,
        "max_abs_diff": _max_diff(got, ref),
    }
    print(json.dumps(report["paths"]["spark"]), flush=True)
    spark.stop()

    for p in report["paths"].values():
        p["ratio_to_engine"] = p["turns_per_s"] / report["paths"]["engine"]["turns_per_s"]
    report["paths"]["ray_data"]["ratio_to_engine_on_ray"] = (
        report["paths"]["ray_data"]["turns_per_s"] / report["paths"]["engine_ray"]["turns_per_s"]
    )
    # the platforms batch other texts together: bf16 embeddings move with their batch, float32 and int8 do not
    report["tolerance"] = BF16_BATCH_TOLERANCE if args.encoder_precision == "bf16" else 1e-6
    report["correct"] = all(p["max_abs_diff"] <= report["tolerance"] for p in report["paths"].values())
    return write_report(args.out, report)


def write_report(out: str, report: dict) -> int:
    """The report as JSON at ``out`` and on stdout; the exit code says whether its correctness check passed."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if report["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())

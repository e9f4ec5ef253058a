"""How fast `adherence view` answers on a large output: open, each filter, a conversation, the distributions.

    python tools/view_bench.py --turns 1000000 --out benchmarks/results/2026-11-25-cpu-view-1m.json

The output is built from real text (Synthetic-Persona-Chat, Jandaghi et al. 2023, CC BY 4.0; ../shared/data/persona
or --persona-csv): each user message and reply two of its utterances joined (so nearly all distinct, as in real
logs), over conversations of 4 to 16 turns, with a score, a
prediction, a label, a role (one of 200 personas) and about 2% error rows. Each answer is checked against pandas on
the same file first; then the viewer's calls are timed (the median of --repeats after one untimed call, except the
opening, which is timed once from a fresh process state), beside pandas doing the default ranking the naive way
(read the whole file, group, sort). Peak memory is the process's maximum resident set.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from platform_throughput import DEFAULT_PERSONA_CSV  # noqa: E402


def build(n: int, csv: Path, path: Path, seed: int) -> dict:
    from adherence.data import read_synthetic_persona_chat

    corpus = read_synthetic_persona_chat(csv)
    texts = [u["text"] for u in corpus.conversations.to_pylist()]
    personas = [" ".join(p["persona"] or []) for p in corpus.personas.to_pylist()][:200]
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 17, size=n // 4 + 1)
    conv = np.repeat(np.arange(len(lengths)), lengths)[:n]
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    turn = (np.arange(n) - starts[conv]).astype(np.int32)
    score = rng.beta(5, 2, n)
    status = np.where(rng.random(n) < 0.02, "error", "ok")
    ok = status == "ok"
    # two utterances joined for each text: nearly every user message and reply distinct, as in real logs
    idx = rng.integers(0, len(texts) - 1, n)
    pair = rng.integers(0, len(texts), (n, 2))
    t = pa.table(
        {
            "conversation_id": pa.array([f"conv-{c:07d}" for c in conv]),
            "turn_index": pa.array(turn),
            "role": pa.array([personas[c % len(personas)] for c in conv]),
            "user": pa.array([f"{texts[i]} {texts[j]}" for i, j in zip(idx, pair[:, 0])]),
            "assistant": pa.array([f"{texts[i + 1]} {texts[j]}" for i, j in zip(idx, pair[:, 1])]),
            "label": pa.array(np.where(rng.random(n) < 0.2, "scope_violation", "adherent")),
            "method": pa.array(["llm_judge"] * n),
            "score": pa.array(np.where(ok, score, np.nan), mask=~ok),
            "prediction": pa.array((score >= 0.5).astype(np.int8), mask=~ok),
            "status": pa.array(status),
            "error": pa.array(np.where(ok, None, "judge call failed")),
        }
    )
    pq.write_table(t, path, row_group_size=128_000)
    assistant = t.column("assistant").to_pylist()
    return {
        "turns": n,
        "conversations": int(len(np.unique(conv))),
        "unique_reply_share": len(set(assistant)) / n,
        "mean_reply_chars": float(np.mean([len(a) for a in assistant])),
        "file_mb": path.stat().st_size / 2**20,
    }


def timed(fn, repeats: int) -> dict:
    fn()  # warm-up, not timed
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "max_s": max(times), "repeats": repeats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--persona-csv", type=Path, default=DEFAULT_PERSONA_CSV)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import pandas as pd

    from adherence.bench._hardware import cpu_info
    from adherence.view import Filters, ScoreStore

    path = Path(tempfile.mkdtemp(prefix="view-bench-")) / "scores.parquet"
    # built in a child process, so that this one's peak memory is the viewer's (and pandas' check, measured apart)
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:
        workload = pool.apply(build, (args.turns, args.persona_csv, path, args.seed))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # opening, as the command does it: the store, the summary and the first page of the default ranking
    t0 = time.perf_counter()
    store = ScoreStore([path])
    summary = store.summary()
    first = store.conversations(Filters(), limit=50)
    open_s = time.perf_counter() - t0

    rss_viewer_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # correctness first, against pandas on the same file
    df = pd.read_parquet(path)
    assert summary["turns"] == len(df) and summary["conversations"] == df["conversation_id"].nunique()
    g = df.groupby("conversation_id")["score"].mean().sort_values(kind="stable")
    worst = first["rows"][0]
    assert abs(worst["mean_score"] - g.iloc[0]) < 1e-12, (worst, g.iloc[0])
    sub = df[df["label"] == "scope_violation"]
    assert store.conversations(Filters(label="scope_violation"))["total"] == sub["conversation_id"].nunique()
    word = "dog"
    hits = df[
        df["user"].str.contains(word, case=False, regex=False)
        | df["assistant"].str.contains(word, case=False, regex=False)
    ]
    assert store.conversations(Filters(q=word))["total"] == hits["conversation_id"].nunique()
    c = store.conversation(0, worst["conversation_id"])
    assert len(c["turns"]) == int((df["conversation_id"] == worst["conversation_id"]).sum())
    role = summary["roles"][0][0]
    assert store.conversations(Filters(role=role))["total"] == df[df["role"] == role]["conversation_id"].nunique()

    def pandas_ranking():
        d = pd.read_parquet(path)
        return d.groupby("conversation_id").agg(mean=("score", "mean")).sort_values("mean").head(50)

    del df, sub, hits
    calls = {
        "default ranking (worst first), page 1": lambda: store.conversations(Filters(), limit=50),
        "page 1,000 of the ranking": lambda: store.conversations(Filters(), offset=50_000, limit=50),
        "label = scope_violation": lambda: store.conversations(Filters(label="scope_violation")),
        "status = error": lambda: store.conversations(Filters(status="error")),
        "prediction = violation": lambda: store.conversations(Filters(prediction=0)),
        "score in [0.2, 0.4]": lambda: store.conversations(Filters(min_score=0.2, max_score=0.4)),
        "one role": lambda: store.conversations(Filters(role=role)),
        f"text search '{word}'": lambda: store.conversations(Filters(q=word)),
        "sort by most violations": lambda: store.conversations(Filters(), sort="violations"),
        "label + score range + text": lambda: store.conversations(Filters(label="adherent", max_score=0.5, q="love")),
        "one conversation": lambda: store.conversation(0, worst["conversation_id"]),
        "distributions (all turns)": lambda: store.distributions(Filters()),
        "distributions (label filter)": lambda: store.distributions(Filters(label="scope_violation")),
    }
    answers = {name: timed(fn, args.repeats) for name, fn in calls.items()}
    pandas = timed(pandas_ranking, max(1, args.repeats // 2))
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    slowest = max(a["median_s"] for a in answers.values())
    result = {
        "what": "adherence view's queries on a large score output (DuckDB over the Parquet file where it lies)",
        "command": " ".join(["python", "tools/view_bench.py", *sys.argv[1:]]),
        "workload": workload,
        "open_s": open_s,
        "open_target_s": 2.0,
        "answers": answers,
        "slowest_answer_s": slowest,
        "answer_target_s": 1.0,
        "pandas_default_ranking": {**pandas, "note": "read the whole file, group by conversation, sort: the naive way"},
        "default_ranking_speedup_vs_pandas": pandas["median_s"]
        / answers["default ranking (worst first), page 1"]["median_s"],
        "peak_rss_mb": {
            "before_opening": rss_before,
            "after_opening_in_the_viewer": rss_viewer_open,
            "after_the_pandas_checks_and_all_answers": rss_after,
        },
        "checked_against_pandas": [
            "turns",
            "conversations",
            "worst conversation's mean score",
            "label filter total",
            "text search total",
            "one conversation's turns",
            "role filter total",
        ],  # fmt: skip
        "machine": {**cpu_info(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps(
            {k: result[k] for k in ("open_s", "slowest_answer_s", "default_ranking_speedup_vs_pandas")}, indent=2
        )
    )
    for name, a in answers.items():
        print(f"  {name:<40}{a['median_s'] * 1000:8.0f} ms")


if __name__ == "__main__":
    main()

"""Workloads the throughput tools share: where the persona corpus lies, and the one-million-turn job's turns
(``cpu_million`` times them; ``platform_throughput --texts million`` races the platforms on them). Imported by both,
importing neither."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DEFAULT_PERSONA_CSV = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "persona" / "Synthetic-Persona-Chat_valid.csv"
)


def million_turns(n: int, csv: Path, path: Path, seed: int = 0) -> dict:
    from adherence.data import read_synthetic_persona_chat

    corpus = read_synthetic_persona_chat(csv)
    texts = [u["text"] for u in corpus.conversations.to_pylist()]
    personas = [" ".join(p["persona"] or []) for p in corpus.personas.to_pylist()]
    rng = np.random.default_rng(seed)
    writer = None
    done, conv = 0, 0
    while done < n:
        k = min(200_000, n - done)
        lengths = rng.integers(4, 17, size=k // 4 + 1)
        cid = np.repeat(np.arange(len(lengths)), lengths)[:k]
        starts = np.r_[0, np.cumsum(lengths)[:-1]]
        turn = (np.arange(k) - starts[cid]).astype(np.int32)
        a = rng.integers(0, len(texts), (k, 4))
        table = pa.table(
            {
                "conversation_id": pa.array([f"conv-{conv + c:08d}" for c in cid]),
                "turn_index": pa.array(turn),
                "role": pa.array(["You are this person: " + personas[(conv + c) % len(personas)] for c in cid]),
                "user": pa.array([texts[i] for i in a[:, 0]]),
                "assistant": pa.array([f"{texts[i]} {texts[j]}" for i, j in a[:, 1:3]]),
                "ground_truth_assistant": pa.array([f"{texts[i]} {texts[j]}" for i, j in zip(a[:, 3], a[:, 1])]),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=100_000)
        done += k
        conv += int(cid.max()) + 1
    writer.close()
    col = pq.read_table(path, columns=["assistant", "ground_truth_assistant"])
    replies = col["assistant"].to_pylist() + col["ground_truth_assistant"].to_pylist()
    lens = [len(t) for t in replies[:200_000]]
    return {"turns": n, "unique_text_share": len(set(replies)) / len(replies), "texts_encoded": len(replies),
            "mean_chars": float(np.mean(lens)), "max_chars": int(max(lens))}  # fmt: skip

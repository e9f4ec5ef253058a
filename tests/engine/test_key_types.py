"""Conversation ids written as integers come back as integers (turns and sessions), so the scores join back to
the source table; ids written as text, or mixed, stay text."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.data import example_path
from adherence.engine import Engine


def _rows(as_int=True):
    rows = [json.loads(x) for x in example_path("role").read_text(encoding="utf-8").splitlines()]
    ids: dict = {}
    for r in rows:
        r["conversation_id"] = ids.setdefault(r["conversation_id"], 7000 + len(ids)) if as_int else r["conversation_id"]
    return rows


def _run(src, out):
    Engine(method="kl", progress=False, n_bootstrap=0, shard_size=10).run(src, out)
    return pq.read_table(out), pq.read_table(out.with_name(out.name.replace(".parquet", ".sessions.parquet")))


@pytest.mark.parametrize("kind", ["jsonl", "parquet-int32", "table"])
def test_integer_ids_come_back_as_integers(tmp_path, kind):
    rows = _rows()
    if kind == "jsonl":
        src = tmp_path / "in.jsonl"
        src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        want = pa.int64()
    else:
        table = pa.Table.from_pylist(rows)
        table = table.set_column(0, "conversation_id", table.column("conversation_id").cast(pa.int32()))
        want = pa.int32()
        src = table
        if kind == "parquet-int32":
            src = tmp_path / "in.parquet"
            pq.write_table(table, src)
    turns, sessions = _run(src, tmp_path / "o.parquet")
    assert turns.schema.field("conversation_id").type == want
    assert sessions.schema.field("conversation_id").type == want
    keys = sorted(zip(turns.column("conversation_id").to_pylist(), turns.column("turn_index").to_pylist()))
    assert keys == sorted((r["conversation_id"], r["turn_index"]) for r in rows)
    assert set(sessions.column("conversation_id").to_pylist()) == {r["conversation_id"] for r in rows}
    # the join back to the source table, on its own key types
    source = (
        pa.Table.from_pylist(rows)
        .select(["conversation_id", "turn_index"])
        .cast(pa.schema([("conversation_id", want), ("turn_index", pa.int64())]))
    )
    joined = source.join(
        turns.select(["conversation_id", "turn_index", "score"]).cast(
            pa.schema([("conversation_id", want), ("turn_index", pa.int64()), ("score", pa.float64())])
        ),
        ["conversation_id", "turn_index"],
    )
    assert joined.num_rows == len(rows) and joined.column("score").null_count == 0


def test_text_or_mixed_ids_stay_text(tmp_path):
    rows = _rows()
    for r in rows:  # one conversation named in text: all stay text
        if r["conversation_id"] == rows[0]["conversation_id"]:
            r["conversation_id"] = "first"
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    turns, sessions = _run(src, tmp_path / "o.parquet")
    assert turns.schema.field("conversation_id").type == pa.string()
    assert sessions.schema.field("conversation_id").type == pa.string()
    assert sorted(turns.column("conversation_id").to_pylist()) == sorted(str(r["conversation_id"]) for r in rows)
    text = _rows(as_int=False)
    src = tmp_path / "text.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in text) + "\n")
    turns, _ = _run(src, tmp_path / "t.parquet")
    assert turns.schema.field("conversation_id").type == pa.string()

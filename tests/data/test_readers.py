import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.data import (
    ARTIFACTS,
    CONTRACTS,
    JUDGMENTS,
    TURN_SCORES,
    TURNS,
    DataError,
    example_path,
    iter_batches,
    metadata_path,
    read_table,
    read_turns,
    run_metadata,
    write_table,
)


@pytest.fixture
def turns():
    return read_turns(example_path("role"))


def _write_text(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


def test_example_is_valid_turns(turns):
    assert turns.num_rows == 28
    assert turns.schema.field("turn_index").type == pa.int32()
    assert "rater_score" in turns.column_names  # extra column passes through
    assert set(turns.column("label").to_pylist()) == {
        "adherent",
        "scope_violation",
        "tone_violation",
        "constructive_failure",
    }


@pytest.mark.parametrize("ext", ["parquet", "jsonl", "csv"])
def test_round_trip(tmp_path, turns, ext):
    path = write_table(turns, tmp_path / f"t.{ext}")
    back = read_turns(path)
    assert back.column_names == turns.column_names
    for name in ("conversation_id", "turn_index", "assistant", "label"):
        assert back.column(name).to_pylist() == turns.column(name).to_pylist()
    assert back.column("rater_score").to_pylist() == turns.column("rater_score").to_pylist()


def test_list_column_survives_csv_as_json_text(tmp_path):
    t = pa.table(
        {
            "conversation_id": ["a", "a"],
            "turn_index": [0, 1],
            "role": ["r", "r"],
            "assistant": ["x", "y"],
            "references": [["one", "two"], None],
        }
    )
    back = read_turns(write_table(t, tmp_path / "t.csv"))
    assert back.column("references").to_pylist() == [["one", "two"], None]
    assert back.schema.field("references").type == pa.list_(pa.string())


def test_missing_required_column_names_file_and_column(tmp_path):
    path = _write_text(tmp_path / "t.csv", "conversation_id,turn_index,assistant\na,0,hi\n")
    with pytest.raises(DataError) as err:
        read_turns(path)
    msg = str(err.value)
    assert str(path) in msg and "'role'" in msg and "missing required column" in msg
    assert err.value.column == "role"


def test_wrong_type_names_row_and_column(tmp_path):
    path = _write_text(tmp_path / "t.csv", "conversation_id,turn_index,role,assistant\na,0,r,x\na,1,r,y\na,two,r,z\n")
    with pytest.raises(DataError) as err:
        read_turns(path)
    assert (err.value.row, err.value.column) == (3, "turn_index")
    assert "'two'" in str(err.value)


def test_fractional_turn_index_rejected_in_jsonl(tmp_path):
    lines = [
        {"conversation_id": "a", "turn_index": 0, "role": "r", "assistant": "x"},
        {"conversation_id": "a", "turn_index": 1.5, "role": "r", "assistant": "y"},
    ]
    path = _write_text(tmp_path / "t.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(DataError) as err:
        read_turns(path)
    assert (err.value.row, err.value.column) == (2, "turn_index")


def test_empty_file_and_header_only(tmp_path):
    empty = _write_text(tmp_path / "e.parquet", b"")
    with pytest.raises(DataError, match="file is empty"):
        read_turns(empty)
    header = _write_text(tmp_path / "h.csv", "conversation_id,turn_index,role,assistant\n")
    with pytest.raises(DataError, match="no rows"):
        read_turns(header)


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_non_utf8_names_the_line(tmp_path, ext):
    good = (
        "conversation_id,turn_index,role,assistant\na,0,r,fine\n"
        if ext == "csv"
        else '{"conversation_id": "a", "turn_index": 0, "role": "r", "assistant": "fine"}\n'
    )
    bad = (
        "a,1,r,caf\xe9\n".encode("latin-1")
        if ext == "csv"
        else '{"conversation_id": "a", "turn_index": 1, "role": "r", "assistant": "caf\xe9"}\n'.encode("latin-1")
    )
    path = _write_text(tmp_path / f"t.{ext}", good.encode() + bad)
    with pytest.raises(DataError, match="not valid UTF-8") as err:
        read_turns(path)
    assert err.value.line == (3 if ext == "csv" else 2)


def test_duplicate_key_names_both_rows_across_batches(tmp_path):
    rows = [{"conversation_id": "c", "turn_index": i, "role": "r", "assistant": "x"} for i in range(7)]
    rows.append({"conversation_id": "c", "turn_index": 2, "role": "r", "assistant": "again"})
    path = _write_text(tmp_path / "t.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as err:
        list(iter_batches(path, TURNS, batch_size=3))
    assert err.value.row == 8 and "first seen at row 3" in str(err.value)


def test_invalid_json_line(tmp_path):
    path = _write_text(tmp_path / "t.jsonl", '{"conversation_id": "a"}\n\n{oops}\n')
    with pytest.raises(DataError) as err:
        read_table(path)
    assert err.value.line == 3 and err.value.row == 2 and "invalid JSON" in str(err.value)


def test_mixed_types_in_extra_column_are_located(tmp_path):
    rows = [
        {"conversation_id": "a", "turn_index": 0, "role": "r", "assistant": "x", "meta": 1},
        {"conversation_id": "a", "turn_index": 1, "role": "r", "assistant": "y", "meta": "text"},
    ]
    path = _write_text(tmp_path / "t.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as err:
        read_turns(path)
    assert (err.value.row, err.value.column) == (2, "meta")


def test_null_key_and_closed_vocabulary(tmp_path):
    t = pa.table({"conversation_id": ["a", None], "turn_index": [0, 1], "role": ["r", "r"], "assistant": ["x", "y"]})
    with pytest.raises(DataError) as err:
        read_turns(t)
    assert (err.value.row, err.value.column) == (2, "conversation_id")
    scores = pa.table(
        {"conversation_id": ["a"], "turn_index": [0], "method": ["cosine"], "score": [0.3], "status": ["fine"]}
    )
    with pytest.raises(DataError, match="'fine' is not one of 'ok', 'unscored', 'error'"):
        read_table(scores, TURN_SCORES)


def test_streaming_batches_keep_row_numbers(tmp_path, turns):
    path = write_table(turns, tmp_path / "t.parquet")
    batches = list(iter_batches(path, TURNS, batch_size=10))
    assert [b.num_rows for b in batches] == [10, 10, 8]
    bad = turns.set_column(
        turns.column_names.index("turn_index"),
        "turn_index",
        pa.array([str(v) if i != 24 else "x" for i, v in enumerate(turns.column("turn_index").to_pylist())]),
    )
    write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(DataError) as err:
        list(iter_batches(tmp_path / "bad.parquet", TURNS, batch_size=10))
    assert err.value.row == 25


def test_parquet_directory_is_one_dataset(tmp_path, turns):
    (tmp_path / "d").mkdir()
    pq.write_table(turns.slice(0, 10), tmp_path / "d" / "part-0.parquet")
    pq.write_table(turns.slice(10), tmp_path / "d" / "part-1.parquet")
    assert read_turns(tmp_path / "d").num_rows == 28


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(DataError, match="extension"):
        read_table(_write_text(tmp_path / "t.xlsx", "x"))
    with pytest.raises(DataError, match="no such file"):
        read_table(tmp_path / "nope.parquet")


def test_writer_writes_run_metadata(tmp_path, turns):
    meta = run_metadata(config={"method": "cosine", "threshold": 0.5}, seed=42, inputs=[example_path("role")])
    out = write_table(turns, tmp_path / "out.parquet", metadata=meta)
    written = json.loads(metadata_path(out).read_text())
    assert written["seed"] == 42 and written["config"]["method"] == "cosine"
    assert {"python", "numpy", "pyarrow", "adherence"} <= set(written["versions"])
    assert written["inputs"][0]["digest"].startswith("blake2b:")
    assert not list(tmp_path.glob(".*.tmp"))


MINIMAL = {
    "turns": {"conversation_id": ["a"], "turn_index": [0], "role": ["r"], "assistant": ["x"]},
    "ground_truth": {"conversation_id": ["a"], "turn_index": [0], "ground_truth_assistant": ["Hello!"]},
    "turn_scores": {
        "conversation_id": ["a"],
        "turn_index": [0],
        "method": ["cosine"],
        "score": [None],
        "status": ["unscored"],
    },
    "session_scores": {"conversation_id": ["a"], "n_turns": [3], "score": [0.7], "adherent": [True]},
    "rubric_items": {
        "question_id": ["q1"],
        "question": ["Is it JSON?"],
        "category": ["Format Adherence"],
        "kind": ["objective"],
    },
    "artifacts": {"artifact_id": ["a1"], "generator": ["g"], "filled_prompt": ["p"], "output": ["o"]},
    "judgments": {
        "artifact_id": ["a1"],
        "generator": ["g"],
        "judge": ["j"],
        "run": [0],
        "question_id": ["q1"],
        "answer": [None],
        "justification": ["unparseable"],
        "source": ["judge"],
    },
    "persona_conversations": {"conversation_id": ["a"], "turn_index": [0], "speaker": ["User 1"], "text": ["hi"]},
    "personas": {"conversation_id": ["a"], "speaker": ["User 1"], "persona": [["I ski."]]},
}


@pytest.mark.parametrize("name", sorted(CONTRACTS))
@pytest.mark.parametrize("ext", ["parquet", "jsonl", "csv"])
def test_every_contract_round_trips(tmp_path, name, ext):
    contract = CONTRACTS[name]
    table = read_table(pa.table(MINIMAL[name]), contract)
    back = read_table(write_table(table, tmp_path / f"{name}.{ext}"), contract)
    assert back.to_pylist() == table.to_pylist()
    assert back.schema.equals(table.schema)


def test_contract_specific_errors():
    with pytest.raises(DataError, match="missing required column"):
        read_table(pa.table({"artifact_id": ["a"]}), ARTIFACTS)
    bad = dict(MINIMAL["judgments"], answer=["maybe"])
    with pytest.raises(DataError, match="'maybe' is not one of 'Yes', 'No'"):
        read_table(pa.table(bad), JUDGMENTS)


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_a_csv_with_another_delimiter_reads_like_a_comma_one(tmp_path, delimiter):
    """European spreadsheet exports use ';' (it failed with 'Expected 1 columns, got 6'): the delimiter is read
    from the header; text holding the other delimiters, quoted or not, stays text."""
    import csv

    from adherence.data import read_turns

    rows = [
        ["conversation_id", "turn_index", "role", "assistant", "ground_truth_assistant"],
        ["c1", "0", "You are a bank bot; be polite, always", "Hello | how can I help?", "Hi; how may I help you?"],
        ["c1", "1", "You are a bank bot; be polite, always", "Sure", "Of course, right away"],
    ]
    for name, d in (("comma.csv", ","), ("other.csv", delimiter)):
        with open(tmp_path / name, "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh, delimiter=d).writerows(rows)
    a, b = read_turns(tmp_path / "comma.csv"), read_turns(tmp_path / "other.csv")
    assert a.equals(b) and a.num_rows == 2 and a.column("role")[0].as_py() == rows[1][2]

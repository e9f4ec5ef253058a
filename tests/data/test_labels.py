"""The labels file: its formats, each labeller's last word, disputes, and the join onto a score output."""

import json

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from adherence.data import DataError
from adherence.data._labels import join_labels, read_labels

ROWS = [
    {"conversation_id": "a", "turn_index": 0, "label": "adherent", "labeller": "ann", "weight": 2.0},
    {"conversation_id": "a", "turn_index": 1, "label": "violation", "labeller": "ann", "weight": 2.0},
    {"conversation_id": "zz", "turn_index": 4, "label": "adherent", "labeller": "ann", "weight": 2.0},
]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_every_format_reads_the_same(tmp_path, fmt):
    t = pa.Table.from_pylist(ROWS)
    path = tmp_path / f"labels.{fmt}"
    if fmt == "parquet":
        pq.write_table(t, path)
    elif fmt == "csv":
        pacsv.write_csv(t, path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    labels, weights, disputed = read_labels(path).resolved()
    assert labels == {("a", 0): "adherent", ("a", 1): "violation", ("zz", 4): "adherent"}
    assert set(weights.values()) == {2.0} and disputed == []


def test_last_word_undo_skip_and_disputes(tmp_path):
    events = [
        {"adherence_labels": 1, "sample": {"size": 3}},
        {"conversation_id": "a", "turn_index": 0, "label": "violation", "labeller": "ann"},
        {"conversation_id": "a", "turn_index": 0, "label": "adherent", "labeller": "ann"},  # changed her mind
        {"conversation_id": "a", "turn_index": 1, "label": "adherent", "labeller": "ann"},
        {"conversation_id": "a", "turn_index": 1, "label": None, "labeller": "ann"},  # undone
        {"conversation_id": "b", "turn_index": 0, "label": "skip", "labeller": "ann"},
        {"conversation_id": "b", "turn_index": 1, "label": "adherent", "labeller": "ann"},
        {"conversation_id": "b", "turn_index": 1, "label": "violation", "labeller": "bob"},  # disputed
        {"conversation_id": "a", "turn_index": 0, "label": "adherent", "labeller": "bob"},  # agrees
    ]
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + '{"conversation_id": "c", "turn_')  # torn line
    lab = read_labels(path)
    assert lab.sample == {"size": 3}
    labels, _, disputed = lab.resolved()
    assert labels == {("a", 0): "adherent"} and disputed == [("b", 1)]
    assert lab.by_labeller() == {"ann": {("a", 0): "adherent", ("b", 1): "adherent"},
                                 "bob": {("b", 1): "violation", ("a", 0): "adherent"}}  # fmt: skip


@pytest.mark.parametrize(
    "line, what",
    [
        ({"turn_index": 0, "label": "x"}, "needs conversation_id"),
        ({"conversation_id": "a", "turn_index": -1, "label": "x"}, "turn_index must be"),
        ({"conversation_id": "a", "turn_index": 0, "label": "x", "weight": 0.5}, "weight is 1 /"),
        ({"conversation_id": "a", "turn_index": 0, "label": {"x": 1}}, "label must be text"),
    ],
)
def test_a_bad_label_is_one_line_naming_file_row_and_column(tmp_path, line, what):
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(line) + "\n" + json.dumps(ROWS[1]) + "\n")
    with pytest.raises(DataError, match=what) as e:
        read_labels(path)
    assert str(path) in str(e.value) and "row 2" in str(e.value) and "\n" not in str(e.value)


def test_a_csv_without_the_columns_is_named(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("conversation_id,turn,label\na,0,adherent\n")
    with pytest.raises(DataError, match="missing turn_index"):
        read_labels(path)


def test_the_join_counts_and_names_labels_that_match_no_turn(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    scores = pa.table({"conversation_id": ["a", "a", "b"], "turn_index": [0, 1, 0], "score": [0.9, 0.1, 0.5],
                       "label": ["old", "old", "old"]})  # fmt: skip
    out, join = join_labels(scores, read_labels(path), file="s.parquet")
    assert out.column("label").to_pylist() == ["adherent", "violation", None]
    assert out.column("label_weight").to_pylist() == [2.0, 2.0, None]
    assert (join.n_labels, join.n_matched, join.unmatched) == (3, 2, [("zz", 4)])
    lines = join.lines()
    assert "2 of 3 label(s) joined" in lines[0] and "1 label(s) match no turn" in lines[1] and "zz/4" in lines[1]
    assert join.replaced_column
    with pytest.raises(DataError, match="none of the 3 labels"):
        join_labels(pa.table({"conversation_id": ["q"], "turn_index": [0]}), read_labels(path), file="s.parquet")


def test_conflicting_rows_of_one_key_are_disputed_and_csv_ids_keep_their_text(tmp_path):
    """The issue's repros: two rows of one key with different labels in a file without labellers resolved to the
    last row ("120 of 120 joined"); a CSV labels file's id "007" was read as 7 and nothing joined."""
    import pyarrow as pa

    from adherence.data._labels import join_labels, read_labels

    path = tmp_path / "l.jsonl"
    rows = [{"conversation_id": "a", "turn_index": 0, "label": "adherent"},
            {"conversation_id": "a", "turn_index": 0, "label": "violation"},
            {"conversation_id": "a", "turn_index": 1, "label": "adherent"},
            {"conversation_id": "a", "turn_index": 1, "label": "adherent"}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    labels, _, disputed = read_labels(path).resolved()
    assert disputed == [("a", 0)] and labels == {("a", 1): "adherent"}
    csv = tmp_path / "l.csv"
    csv.write_text("conversation_id,turn_index,label\n007,0,adherent\n007,1,violation\n")
    table = pa.table({"conversation_id": ["007", "007"], "turn_index": [0, 1]})
    joined, join = join_labels(table, read_labels(csv), file="scores")
    assert join.n_matched == 2 and joined.column("label").to_pylist() == ["adherent", "violation"]

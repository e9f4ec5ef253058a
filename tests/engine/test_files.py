"""The one reader of score outputs and the one writer of every analysis file (engine/_files.py)."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.data import DataError, write_run_metadata
from adherence.engine._files import open_scores, write_owned


def _ours(path, table, **meta):
    pq.write_table(table, path)
    write_run_metadata(path, {"producer": "adherence", "config": {"method": "cosine"}, **meta})
    return path


def _table(n=4, score=None):
    return pa.table({
        "conversation_id": ["a", "a", "b", "b"][:n], "turn_index": [0, 1, 0, 1][:n],
        "score": score if score is not None else [0.1, 0.9, 0.5, 0.7][:n], "status": ["ok"] * n,
    })  # fmt: skip


def test_the_writer_never_writes_onto_an_input_or_a_file_it_did_not_create(tmp_path):
    src = _ours(tmp_path / "scores.parquet", _table())
    before = src.read_bytes()
    with pytest.raises(DataError, match="would overwrite the input"):
        write_owned(src, "<html>", inputs=[src])
    user = tmp_path / "notes.html"
    user.write_text("mine")
    with pytest.raises(DataError, match="not written by adherence"):
        write_owned(user, "<html>", inputs=[src])
    assert src.read_bytes() == before and user.read_text() == "mine"
    out = write_owned(tmp_path / "r" / "page.html", "<html>1", inputs=[src])
    assert out.read_text() == "<html>1"
    meta = json.loads((tmp_path / "r" / "page.html.meta.json").read_text())
    assert meta["producer"] == "adherence" and meta["outputs"]["file"] == str(out)
    write_owned(out, "<html>2", inputs=[src])  # ours: replaced
    assert out.read_text() == "<html>2"
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["page.html", "page.html.meta.json"]


def test_the_writer_refuses_a_path_inside_an_input_directory(tmp_path):
    d = tmp_path / "dataset"
    d.mkdir()
    pq.write_table(_table(), d / "part-00000.parquet")
    with pytest.raises(DataError, match="would overwrite the input"):
        write_owned(d / "x.json", "{}", inputs=[d])


def test_the_reader_names_a_corrupt_or_truncated_file(tmp_path):
    src = _ours(tmp_path / "scores.parquet", _table())
    data = src.read_bytes()
    src.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as e:
        open_scores(src)
    assert str(src) in str(e.value) and "\n" not in str(e.value) and "Parquet" in str(e.value)
    with pytest.raises(DataError, match="no such file"):
        open_scores(tmp_path / "missing.parquet")


def test_the_reader_refuses_repeated_keys_and_reads_nan_as_no_score(tmp_path):
    dup = _ours(tmp_path / "dup.parquet", pa.table({"conversation_id": ["a", "a"], "turn_index": [0, 0],
                                                     "score": [0.1, 0.2]}))  # fmt: skip
    with pytest.raises(DataError, match="appears twice"):
        open_scores(dup)
    nan = _ours(tmp_path / "nan.parquet", _table(score=[np.nan, np.inf, 0.5, -np.inf]))
    out = open_scores(nan)
    assert out.table.column("score").to_pylist() == [None, None, 0.5, None]
    assert out.ours and "3 'score' value(s) were NaN, infinite or beyond" in out.notes[0]


def test_the_reader_refuses_an_unpublished_output_and_a_foreign_one_when_asked(tmp_path):
    src = _ours(tmp_path / "scores.parquet", _table(), published=False)
    with pytest.raises(DataError, match="never published"):
        open_scores(src)
    assert open_scores(src, allow_unpublished=True).published is False
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(_table(), foreign)
    assert open_scores(foreign).ours is False
    with pytest.raises(DataError, match="not a score output of adherence"):
        open_scores(foreign, require_ours=True)


def test_a_file_changed_after_adherence_wrote_it_is_never_replaced(tmp_path):
    """A rubric drafted by `audit rubric` and edited by hand, a calibration file tweaked: the writer recorded the
    bytes it wrote (sha256 in the run metadata), so a rerun refuses to replace what was changed since."""
    target = tmp_path / "rubric.yaml"
    write_owned(target, "items: []\n", what="the rubric")
    write_owned(target, "items: [a]\n", what="the rubric")  # unchanged since written: ours to replace
    target.write_text("items: [a, my own question]\n")  # edited by hand
    with pytest.raises(DataError, match="changed after adherence wrote it"):
        write_owned(target, "items: [b]\n", what="the rubric")
    assert target.read_text() == "items: [a, my own question]\n"


def test_the_score_output_schema_is_the_contracts_and_names_every_column_a_run_adds(tmp_path):
    """The columns a run adds, the input columns it refuses and the viewer's projection all come from the turn-scores
    contract: every column a real run writes beyond its input is one `output_columns` names (a judge's
    self-consistency columns were named `agreement` there while the run wrote `llm_judge_agreement`)."""
    import fnmatch
    from types import SimpleNamespace

    from adherence.cli.main import main
    from adherence.data import TURN_SCORES, TURNS, example_path, read_table
    from adherence.engine._safety import output_columns, reserved_columns
    from adherence.view._store import VIEW_COLUMNS

    src = example_path("role")
    cal = tmp_path / "cal.json"
    assert main(["score", str(src), "-o", str(tmp_path / "s.parquet"), "--method", "cosine", "--no-progress",
                 "--bootstrap", "0"]) == 0  # fmt: skip
    assert main(["calibrate", str(tmp_path / "s.parquet"), "-o", str(cal), "--bootstrap", "0"]) == 0
    assert main(["score", str(src), "-o", str(tmp_path / "c.parquet"), "--method", "cosine", "--calibration",
                 str(cal), "--no-progress", "--bootstrap", "0"]) == 0  # fmt: skip
    inputs = set(read_table(src).column_names)
    for out, config in (
        (tmp_path / "s.parquet", None),
        (tmp_path / "c.parquet", SimpleNamespace(calibration={"path": str(cal)})),
    ):
        added = set(read_table(out).column_names) - inputs
        named = output_columns("cosine", config)
        assert added and all(any(fnmatch.fnmatch(c, n) for n in named) for c in added), (added, named)
    assert "calibrated_score" in set(read_table(tmp_path / "c.parquet").column_names)
    assert reserved_columns("llm_judge", ["agreement", "llm_judge_agreement", "status"]) == [
        "llm_judge_agreement",
        "status",
    ]
    for name, kind in VIEW_COLUMNS.items():  # the viewer reads each column as its contract's type
        col = TURN_SCORES.column(name) if name in TURN_SCORES.names else TURNS.column(name)
        assert kind == ("DOUBLE" if col.type == pa.float64() else "VARCHAR" if col.type == pa.string() else "BIGINT")

"""Bad rows: ``--bad-rows fail`` (flat rows' default) names the first with its file, line and the right character;
``skip`` leaves each out, counts it and writes it with file, line and reason beside the output, and scores every
good row -- the same for JSONL, CSV and transcripts."""

import csv
import json

import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main
from adherence.data import TURNS, DataError, TranscriptOptions, example_path, iter_batches


def _rows():
    return [json.loads(line) for line in example_path("role").read_text(encoding="utf-8").splitlines()]


def _dirty_jsonl(path):
    """The bundled example with a line cut short at 80% of its length, a turn_index that is not an integer, and
    a line that is a JSON array instead of an object; returns the (line numbers, good row count)."""
    rows = _rows()
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    cut = int(len(lines[5]) * 0.8)
    lines[5] = lines[5][:cut]
    bad = dict(rows[9], turn_index="abc")
    lines[9] = json.dumps(bad)
    lines[14] = "[1, 2]"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {6: cut, 10: None, 15: None}, len(rows) - 3


def _score(src, out, *extra):
    return main(["score", str(src), "-o", str(out), "--method", "kl", "--no-progress", "--bootstrap", "0", *extra])


def test_a_cut_line_is_named_with_its_line_and_the_character_where_it_breaks(tmp_path, capsys):
    src = tmp_path / "dirty.jsonl"
    bad, _ = _dirty_jsonl(src)
    assert _score(src, tmp_path / "o.parquet") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    # the string that never ends starts on line 6; the line ends where it was cut (it said "character 1")
    assert "dirty.jsonl: row 6, line 6: invalid JSON (Unterminated string starting at character" in err[0]
    assert f"the line ends at character {bad[6]}: cut short?" in err[0]
    assert not (tmp_path / "o.parquet").exists()


def test_the_character_of_a_fault_at_the_end_of_a_line_is_on_that_line(tmp_path):
    src = tmp_path / "t.jsonl"
    line = json.dumps(_rows()[0])[:-1]  # the closing brace is missing
    src.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        list(iter_batches(src, TURNS))
    assert e.value.line == 1 and f"at character {len(line) + 1}" in e.value.reason


def test_skip_writes_every_bad_line_to_the_quarantine_and_every_good_row_to_the_output(tmp_path, capsys):
    src = tmp_path / "dirty.jsonl"
    bad, good = _dirty_jsonl(src)
    out = tmp_path / "o.parquet"
    assert _score(src, out, "--bad-rows", "skip", "--max-bad-rows", "1") == 0
    captured = capsys.readouterr()
    quarantine = tmp_path / "o.parquet.bad-rows.jsonl"
    assert f"3 bad row(s) left out, each with its file, line and reason in {quarantine}" in captured.out
    records = _records(quarantine)
    assert json.loads(quarantine.read_text().splitlines()[0])["adherence_bad_rows"]["output"] == str(out)
    assert sorted(r["line"] for r in records) == sorted(bad)
    lines = src.read_text(encoding="utf-8").splitlines()
    for r in records:
        assert r["file"] == str(src) and r["error"]
        if r["line"] != 10:  # unreadable lines are kept as they were written
            assert r["text"] == lines[r["line"] - 1]
    assert next(r for r in records if r["line"] == 10)["error"].startswith("expected an integer (int32), got 'abc'")
    t = pq.read_table(out)
    assert t.num_rows == good and set(t.column("status").to_pylist()) == {"ok"}
    expected = [(r["conversation_id"], r["turn_index"]) for i, r in enumerate(_rows()) if i + 1 not in bad]
    assert list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist())) == expected
    meta = json.loads((tmp_path / "o.parquet.meta.json").read_text())
    assert meta["summary"]["bad_rows"] == {"count": 3, "file": str(quarantine)}

    # a second run replaces its own quarantine; a file it did not write is never overwritten
    assert _score(src, out, "--bad-rows", "skip", "--max-bad-rows", "1") == 0
    foreign = tmp_path / "p.parquet.bad-rows.jsonl"
    foreign.write_text("mine\n")
    assert _score(src, tmp_path / "p.parquet", "--bad-rows", "skip", "--max-bad-rows", "1") == 2
    assert foreign.read_text() == "mine\n" and "refusing to overwrite" in capsys.readouterr().err


def test_skip_and_fail_in_csv_name_the_line(tmp_path, capsys):
    rows = _rows()
    keys = list(rows[0])
    src = tmp_path / "dirty.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(keys)
        for i, r in enumerate(rows):
            values = [r.get(k) for k in keys]
            w.writerow(values[:3] if i == 4 else values)  # data row 5 is line 6 (after the header)
    assert _score(src, tmp_path / "o.parquet") == 2
    assert f"dirty.csv: line 6: expected {len(keys)} fields, got 3" in capsys.readouterr().err
    assert _score(src, tmp_path / "o.parquet", "--bad-rows", "skip", "--max-bad-rows", "1") == 0
    q = _records(tmp_path / "o.parquet.bad-rows.jsonl")
    assert [(r["line"], r["error"]) for r in q] == [(6, f"expected {len(keys)} fields, got 3")]
    assert q[0]["text"].startswith(f"{rows[4]['conversation_id']},")
    assert pq.read_table(tmp_path / "o.parquet").num_rows == len(rows) - 1


def test_transcripts_follow_the_same_policy(tmp_path):
    """A malformed transcript is skipped by default (with a warning), an error with fail, quarantined with skip;
    a line that is not JSON in a transcript file is skipped the same way."""
    src = tmp_path / "chats.jsonl"
    good = {"messages": [{"role": "system", "content": "Be a bank."}, {"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "hello"}]}  # fmt: skip
    src.write_text(
        "\n".join([json.dumps(good), json.dumps({"messages": "nope"}), '{"messages": [', json.dumps(good)]) + "\n"
    )
    opts = TranscriptOptions(bad_rows="skip")
    with pytest.warns(UserWarning, match="skipped 2 malformed"):
        t = list(iter_batches(src, TURNS, transcripts=opts))
    assert sum(b.num_rows for b in t) == 2
    assert [q["line"] for q in opts.quarantine] == [2, 3]
    with pytest.raises(DataError, match="line 2"):
        list(iter_batches(src, TURNS, transcripts=TranscriptOptions(bad_rows="fail")))
    with pytest.warns(UserWarning, match="skipped 2 malformed"):
        list(iter_batches(src, TURNS, transcripts=TranscriptOptions()))


@pytest.mark.slow
def test_by_default_no_malformed_transcript_vanishes_without_a_record(tmp_path, capsys):
    """Transcripts' default (skip with a warning) writes every line left out to OUTPUT.bad-rows.jsonl with its
    line and reason, and the summary names the file; the dry run says the same before anything is scored; a later
    clean run replaces the earlier run's file (its own), so the run after that is not refused."""
    src = tmp_path / "chats.jsonl"
    good = {"messages": [{"role": "system", "content": "Be a bank."}, {"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "hello", "reference": "hello there"}]}  # fmt: skip
    src.write_text(
        "\n".join([json.dumps(good), json.dumps({"messages": "nope"}), '{"messages": [', json.dumps(good)]) + "\n"
    )
    out = tmp_path / "o.parquet"
    q = tmp_path / "o.parquet.bad-rows.jsonl"
    # 2 of 4 records is over the default --max-bad-rows (0.05): the job fails, the records it left out written
    with pytest.warns(UserWarning, match="skipped 2 malformed"):
        assert _score(src, out) == 2
    assert "2 of 4 records (50%) could not be read" in capsys.readouterr().err and len(_records(q)) == 2
    assert not out.exists()
    with pytest.warns(UserWarning, match="skipped 2 malformed"):
        assert _score(src, out, "--max-bad-rows", "1") == 0
    kept = _records(q)
    assert [k["line"] for k in kept] == [2, 3] and all(k["error"] for k in kept)
    assert f"2 bad row(s) left out, each with its file, line and reason in {q}" in capsys.readouterr().out
    assert pq.read_table(out).num_rows == 2
    # the dry run names them (a judge's dry run: it counts tokens, nothing is scored)
    assert main(["score", str(src), "--dry-run", "--bad-rows", "skip"]) == 0
    said = capsys.readouterr().out
    assert "2 malformed input record(s) would be left out (record 2, line 3), for 2 reason(s)" in said, said
    # clean input, same output: the earlier run's bad-rows file is replaced (empty), and the next run goes on
    src.write_text(json.dumps(good) + "\n")
    for _ in range(2):
        assert _score(src, out) == 0
        assert _records(q) == [] and len(q.read_text().splitlines()) == 1  # the header alone

    # the user deletes it and keeps notes of their own there: the next run refuses rather than replace them
    q.unlink()
    q.write_text("my notes\n")
    assert _score(src, out) == 2
    assert q.read_text() == "my notes\n" and "refusing to overwrite" in capsys.readouterr().err


def _records(path):
    """The rows a bad-rows file records (after its header line, which names the output it belongs to)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines and "adherence_bad_rows" in json.loads(lines[0])
    return [json.loads(x) for x in lines[1:]]

"""Records left out as unreadable have a limit, for transcripts as for flat rows: beyond --max-bad-rows (a share of
the records read, default 0.05) the job exits 2 with one error naming the file of the records left out, and
publishes nothing."""

from __future__ import annotations

import json

import pytest

from adherence.cli.main import main

pytestmark = pytest.mark.slow

GOOD = {"messages": [{"role": "system", "content": "You are the cooking assistant. Only talk about cooking."},
                     {"role": "user", "content": "How long do I boil an egg?"},
                     {"role": "assistant", "content": "Nine minutes for a hard egg, then cool it in cold water."}]}  # fmt: skip


def _log(path, n_good: int, n_bad: int):
    lines = [json.dumps({"conversation_id": f"g{i}", **GOOD}) for i in range(n_good)]
    for i in range(n_bad):  # half not JSON at all, half a transcript with a bad message
        bad = {"conversation_id": f"b{i}", "messages": [{"role": "user", "content": 5}]}
        lines.insert(2 * i, "not json" if i % 2 else json.dumps(bad))
    path.write_text("\n".join(lines) + "\n")
    return path


def _score(capsys, src, out, *extra) -> tuple:
    code = main(["score", str(src), "-o", str(out), "--method", "scope", "--no-progress", *extra])
    return code, capsys.readouterr().err


def test_transcripts_over_the_limit_fail_naming_the_file_of_skipped_records(tmp_path, capsys):
    src, out = _log(tmp_path / "log.jsonl", 2, 18), tmp_path / "o.parquet"
    code, err = _score(capsys, src, out)
    assert code == 2
    q = tmp_path / "o.parquet.bad-rows.jsonl"
    assert "18 of 20 records (90%) could not be read, over --max-bad-rows 0.05" in err and str(q) in err
    assert not out.exists() and not (tmp_path / "o.parquet.meta.json").exists()
    lines = q.read_text().splitlines()
    assert "adherence_bad_rows" in json.loads(lines[0]) and len(lines) == 19
    # the user allows it: scored, published, the records left out kept beside it
    code, err = _score(capsys, src, out, "--max-bad-rows", "1")
    assert code == 0 and out.exists() and len(q.read_text().splitlines()) == 19


def test_a_few_bad_transcripts_under_the_limit_are_left_out_with_a_warning(tmp_path, capsys):
    src, out = _log(tmp_path / "log.jsonl", 39, 1), tmp_path / "o.parquet"
    with pytest.warns(UserWarning, match=r"skipped 1 malformed transcript record\(s\)") as caught:
        code, err = _score(capsys, src, out)
    assert code == 0 and any("a malformed transcript is its whole conversation" in str(w.message) for w in caught)


def test_flat_rows_skipped_on_request_have_the_same_limit(tmp_path, capsys):
    src = tmp_path / "turns.csv"
    rows = ["conversation_id,turn_index,role,user,assistant"]
    for i in range(10):
        rows.append(
            f"c{i},0,You are a cooking bot.,hi,Boil the pasta for ten minutes." if i >= 3 else f"c{i},zero,x,y,z"
        )
    src.write_text("\n".join(rows) + "\n")
    out = tmp_path / "o.parquet"
    code, err = _score(capsys, src, out, "--bad-rows", "skip")
    assert code == 2 and "3 of 10 records (30%) could not be read" in err and not out.exists()
    code, err = _score(capsys, src, out, "--bad-rows", "skip", "--max-bad-rows", "0.5")
    assert code == 0 and out.exists()


def test_the_limit_is_a_share(tmp_path, capsys):
    src, out = _log(tmp_path / "log.jsonl", 3, 0), tmp_path / "o.parquet"
    code, err = _score(capsys, src, out, "--max-bad-rows", "3")
    assert code == 2 and "`max_bad_rows` is a share of the records in [0, 1], got 3" in err

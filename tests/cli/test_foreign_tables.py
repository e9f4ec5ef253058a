"""A score table adherence did not write (a judge run elsewhere, a production judge's logs), with the documented
minimal columns -- conversation_id, turn_index, score, and prediction where a command needs decisions -- goes through
every analysis command, each saying once, after its work, how it read it."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from adherence.cli.main import main

NOTE = "no run metadata of adherence beside it: read as a score table from elsewhere"


@pytest.fixture
def tables(tmp_path):
    rng = np.random.default_rng(0)
    rows, labels = [], []
    for c in range(30):
        for t in range(4):
            good = rng.random() > 0.3
            score = float(np.clip(rng.normal(0.7 if good else 0.35, 0.15), 0, 1))
            rows.append({"conversation_id": f"c{c:02d}", "turn_index": t, "score": round(score, 4),
                         "prediction": int(score >= 0.5), "trace_id": f"{c:032x}", "span_id": f"{c * 4 + t:016x}"})  # fmt: skip
            labels.append({"conversation_id": f"c{c:02d}", "turn_index": t, "label": "adherent" if good else "violation"})  # fmt: skip
    judge = tmp_path / "judge.csv"
    with judge.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    other = tmp_path / "other.csv"  # a second judge's table of the same turns (one decision flipped)
    with other.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["conversation_id", "turn_index", "score", "prediction"])
        w.writeheader()
        for i, r in enumerate(rows):
            flip = i == 3
            w.writerow({k: r[k] for k in ("conversation_id", "turn_index", "score")}
                       | {"prediction": 1 - r["prediction"] if flip else r["prediction"]})  # fmt: skip
    lab = tmp_path / "labels.jsonl"
    lab.write_text("".join(json.dumps(x) + "\n" for x in labels))
    return judge, other, lab, rows, labels


def _run(capsys, *argv) -> tuple:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_every_analysis_command_reads_a_table_from_elsewhere(tables, tmp_path, capsys, monkeypatch):
    judge, other, lab, rows, labels = tables
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "evaluate", str(judge), "--labels", str(lab), "--json")
    assert code == 0 and err.count(NOTE) == 1, err
    y = [x["label"] == "adherent" for x in labels]
    assert json.loads(out)["auc"] == pytest.approx(roc_auc_score(y, [r["score"] for r in rows]))
    code, out, err = _run(capsys, "calibrate", str(judge), "--labels", str(lab), "-o", "cal.json")
    assert code == 0 and err.count(NOTE) == 1 and (tmp_path / "cal.json").is_file()
    code, out, err = _run(capsys, "estimate", str(judge), "--labels", str(lab), "--json")
    assert code == 0 and err.count(NOTE) == 1
    code, out, err = _run(capsys, "compare", str(judge), str(other), "--labels", str(lab), "--json",
                          "--fail-if-worse-by", "0.5")  # fmt: skip
    assert code == 0 and err.count(NOTE) == 2  # once per table
    r = json.loads(out)
    assert r["agreement"]["n"] == 120 and r["mcnemar"]["b"] + r["mcnemar"]["c"] == 1
    code, out, err = _run(capsys, "cascade", "fit", str(judge), "--labels", str(lab), "-o", "cascade.json",
                          "--alpha", "0.3")  # fmt: skip
    assert code == 0 and err.count(NOTE) == 1
    code, out, err = _run(capsys, "cascade", "apply", str(judge), "--cascade", "cascade.json", "-o", "decided.csv")
    assert code == 0 and (tmp_path / "decided.csv").is_file()
    code, out, err = _run(capsys, "export", str(judge), "--format", "otel", "-o", "scores.otlp.jsonl")
    assert code == 0 and err.count(NOTE) == 1
    assert len((tmp_path / "scores.otlp.jsonl").read_text().splitlines()) >= 1
    # `score --cascade` needs stages it can run: a table from elsewhere records no scoring options
    code, out, err = _run(capsys, "score", str(judge), "--cascade", "cascade.json", "-o", "rescored.parquet")
    assert code == 2 and "no recorded scoring options" in err


def test_a_refused_table_from_elsewhere_is_one_line(tables, capsys):
    judge, _, lab, _, _ = tables
    code, out, err = _run(capsys, "evaluate", str(judge), "--score", "nope")
    assert (
        code == 2 and len(err.strip().splitlines()) == 1 and NOTE not in err and "no labels: give --labels FILE" in err
    )


def test_columns_named_otherwise_are_mapped_by_score_and_view(tmp_path, capsys):
    """A chat log whose columns are chat_id, turn, system, question, answer: `--columns` names them once, and the
    scores equal those of the same table with adherence's names; a wrong name is one line naming what is there."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    role = "You are the cooking assistant of a recipe site. Only talk about cooking."
    rows = [("c1", 0, "How long to boil an egg?", "Nine minutes, then cool it in cold water."),
            ("c1", 1, "Who won the match?", "The home team won 3-1."),
            ("c2", 0, "Best pasta sauce?", "Tomato and basil.")]  # fmt: skip
    named = pa.table({"conversation_id": [r[0] for r in rows], "turn_index": [r[1] for r in rows],
                      "role": [role] * 3, "user": [r[2] for r in rows], "assistant": [r[3] for r in rows]})  # fmt: skip
    other = named.rename_columns(["chat_id", "turn", "system", "question", "answer"])
    import pyarrow.csv as pacsv

    pacsv.write_csv(named, tmp_path / "named.csv")
    pacsv.write_csv(other, tmp_path / "other.csv")
    mapping = "conversation_id=chat_id,turn_index=turn,role=system,user=question,assistant=answer"
    for name, extra in (("named", []), ("other", ["--columns", mapping])):
        assert main(["score", str(tmp_path / f"{name}.csv"), "-o", str(tmp_path / f"{name}.parquet"), "--method",
                     "scope", "-q", "--no-progress", *extra]) == 0  # fmt: skip
    a, b = pq.read_table(tmp_path / "named.parquet"), pq.read_table(tmp_path / "other.parquet")
    assert a.column("score").to_pylist() == pytest.approx(b.column("score").to_pylist())
    capsys.readouterr()
    code = main(["score", str(tmp_path / "other.csv"), "-o", str(tmp_path / "x.parquet"), "--method", "scope"])
    err = capsys.readouterr().err
    assert code == 2 and "give its names with --columns NAME=COLUMN" in err and len(err.strip().splitlines()) == 1
    code = main(["score", str(tmp_path / "other.csv"), "-o", str(tmp_path / "x.parquet"), "--method", "scope",
                 "--columns", "conversation_id=chatid"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "'chatid', which the input does not have; its columns are: chat_id" in err
    assert main(["score", str(tmp_path / "other.csv"), "--dry-run", "--columns", mapping]) == 0
    assert "dry run: 3 turns (0 with input errors)" in capsys.readouterr().out
    # the viewer over a score table named otherwise
    t = pq.read_table(tmp_path / "other.parquet").select(["conversation_id", "turn_index", "score", "assistant"])
    pq.write_table(t.rename_columns(["chat_id", "turn", "p_yes", "answer"]), tmp_path / "theirs.parquet")
    page = tmp_path / "v.html"
    code = main(["view", str(tmp_path / "theirs.parquet"), "--export-html", str(page), "--columns",
                 "conversation_id=chat_id,turn_index=turn,score=p_yes,assistant=answer"])  # fmt: skip
    assert code == 0 and "Nine minutes" in page.read_text() and "c2" in page.read_text()

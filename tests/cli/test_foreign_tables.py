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

"""A calibration is learned from labels too: its threshold and map are chosen on the labelled turns it was fitted
on, so a figure on those turns with it is in-sample. The file records them (key and reply digest); `evaluate`
leaves them out (or refuses when nothing else is labelled), `estimate --score calibrated_score` reads the raw score
instead, and `compare` leaves them out of the agreement -- each says so in one line."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import f1_score, roc_auc_score

from adherence.cli.main import main
from adherence.data import example_path

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

LOG = example_path("role").parent / "support_log.jsonl"
TRUTH = example_path("role").parent / "support_log.truth.jsonl"


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    d = tmp_path_factory.mktemp("cal")
    lines = TRUTH.read_text().splitlines()
    (d / "fit.jsonl").write_text("\n".join(lines[:150]) + "\n")
    (d / "all.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["score", str(LOG), "-o", str(d / "raw.parquet"), "--method", "scope", "--no-progress",
                 "--bootstrap", "0"]) == 0  # fmt: skip
    assert main(["calibrate", str(d / "raw.parquet"), "--labels", str(d / "fit.jsonl"), "--map", "isotonic",
                 "-o", str(d / "cal.json")]) == 0  # fmt: skip
    assert main(["score", str(LOG), "-o", str(d / "cal.parquet"), "--method", "scope", "--calibration",
                 str(d / "cal.json"), "--no-progress", "--bootstrap", "0"]) == 0  # fmt: skip
    assert main(["score", str(LOG), "-o", str(d / "thr.parquet"), "--method", "scope", "--threshold", "0.15",
                 "--no-progress", "--bootstrap", "0"]) == 0  # fmt: skip
    return d


def _truth(lines):
    return {(x["conversation_id"], x["turn_index"]): x["label"] for x in map(json.loads, lines)}


def test_the_calibration_file_records_the_turns_it_was_fitted_on(calibrated):
    doc = json.loads((calibrated / "cal.json").read_text())
    fit = _truth(TRUTH.read_text().splitlines()[:150])
    t = doc["training"]
    assert len(t["conversation_id"]) == 150
    assert set(zip(t["conversation_id"], t["turn_index"])) == set(fit)
    assert all(isinstance(d, str) and len(d) == 16 for d in t["reply_digest"])
    # the record is under the file's digest: one edited is refused
    t["turn_index"][0] += 1000
    (calibrated / "edited.json").write_text(json.dumps(doc))
    from adherence.data import DataError
    from adherence.role._calibration import load_calibration

    with pytest.raises(DataError, match="edited after it was fitted"):
        load_calibration(calibrated / "edited.json")


def test_evaluate_leaves_out_the_turns_the_applied_calibration_was_fitted_on(calibrated, capsys):
    d = calibrated
    capsys.readouterr()
    assert main(["evaluate", str(d / "cal.parquet"), "--labels", str(d / "all.jsonl"), "--json",
                 "--bootstrap", "0"]) == 0  # fmt: skip
    out = capsys.readouterr()
    r = json.loads(out.out)
    assert "150 labelled turn(s) fitted the calibration" in out.err and "the 220 other labelled turn(s)" in out.err
    # the figures are scikit-learn's on the 220 turns the calibration never saw
    fit = _truth(TRUTH.read_text().splitlines()[:150])
    truth = _truth(TRUTH.read_text().splitlines())
    rows = [
        x for x in pq.read_table(d / "cal.parquet").to_pylist() if (x["conversation_id"], x["turn_index"]) not in fit
    ]
    y = np.array([truth[(x["conversation_id"], x["turn_index"])] == "adherent" for x in rows])
    assert len(rows) == 220 and r["n"] == 220
    assert r["auc"] == pytest.approx(roc_auc_score(y, [x["score"] for x in rows]), abs=1e-12)
    assert r["f1_positive"] == pytest.approx(f1_score(y, [x["prediction"] for x in rows]), abs=1e-12)


def test_evaluate_refuses_when_every_label_fitted_the_calibration(calibrated, capsys):
    d = calibrated
    for argv in (
        ["evaluate", str(d / "cal.parquet"), "--labels", str(d / "fit.jsonl")],
        ["evaluate", str(d / "raw.parquet"), "--labels", str(d / "fit.jsonl"), "--calibration", str(d / "cal.json")],
    ):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert "every labelled turn (150) fitted the calibration" in err[-1], err
        assert "in-sample, not held out" in err[-1] and err[-1].startswith("adherence evaluate: error:")


def test_evaluate_with_a_calibration_file_leaves_out_its_turns_too(calibrated, capsys):
    d = calibrated
    capsys.readouterr()
    assert main(["evaluate", str(d / "raw.parquet"), "--labels", str(d / "all.jsonl"), "--calibration",
                 str(d / "cal.json"), "--json", "--bootstrap", "0"]) == 0  # fmt: skip
    out = capsys.readouterr()
    assert f"150 labelled turn(s) fitted the calibration {d / 'cal.json'}" in out.err
    assert json.loads(out.out)["n"] == 220


def test_estimate_on_calibrated_score_with_its_own_labels_reads_the_raw_score(calibrated, capsys):
    d = calibrated
    capsys.readouterr()
    argv = ["estimate", str(d / "cal.parquet"), "--labels", str(d / "fit.jsonl"), "--json"]
    assert main([*argv, "--score", "calibrated_score"]) == 0
    out = capsys.readouterr()
    got = json.loads(out.out)
    assert "150 labelled turn(s) fitted the calibration behind calibrated_score" in out.err
    assert "reads the raw score instead" in out.err and got["score_column"] == "score"
    assert main([*argv, "--score", "score"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert (got["estimate"], got["ci_low"], got["ci_high"]) == (raw["estimate"], raw["ci_low"], raw["ci_high"])
    # labels the calibration never saw: calibrated_score is a held-out prediction there and is read as asked
    (d / "other.jsonl").write_text("\n".join(TRUTH.read_text().splitlines()[200:320]) + "\n")
    assert main(["estimate", str(d / "cal.parquet"), "--labels", str(d / "other.jsonl"), "--json", "--score",
                 "calibrated_score"]) == 0  # fmt: skip
    out = capsys.readouterr()
    assert json.loads(out.out)["score_column"] == "calibrated_score" and "fitted the calibration" not in out.err


def test_compare_leaves_the_calibrations_turns_out_of_the_agreement(calibrated, capsys):
    d = calibrated
    capsys.readouterr()
    assert main(["compare", str(d / "thr.parquet"), str(d / "cal.parquet"), "--labels", str(d / "all.jsonl"),
                 "--json"]) in (0, 1)  # fmt: skip
    r = json.loads(capsys.readouterr().out)
    ag = r["agreement"]
    assert ag["left_out_fitted"] == 150 and ag["labelled"] == 220
    fit = _truth(TRUTH.read_text().splitlines()[:150])
    truth = _truth(TRUTH.read_text().splitlines())
    new = {
        (x["conversation_id"], x["turn_index"]): x["prediction"] for x in pq.read_table(d / "cal.parquet").to_pylist()
    }
    right = [new[k] == (v == "adherent") for k, v in truth.items() if k not in fit]
    assert ag["new"] == pytest.approx(np.mean(right), abs=1e-12)
    capsys.readouterr()
    assert main(["compare", str(d / "thr.parquet"), str(d / "cal.parquet"), "--labels", str(d / "fit.jsonl"),
                 "--fail-if-worse-by", "0.05"]) != 0  # fmt: skip
    assert "fitted the calibration one side applied" in capsys.readouterr().err


def test_cascade_fit_certifies_a_calibrated_stage_only_on_labels_it_did_not_learn_from(calibrated, capsys):
    d = calibrated
    capsys.readouterr()
    assert main(["cascade", "fit", str(d / "cal.parquet"), "--labels", str(d / "all.jsonl"), "-o",
                 str(d / "cascade.json"), "--alpha", "0.2"]) == 0  # fmt: skip
    assert "150 labelled turn(s) fitted the calibration a stage applied" in capsys.readouterr().err
    stage = json.loads((d / "cascade.json").read_text())["stages"][0]
    assert stage["reaching"] == 220
    assert main(["cascade", "fit", str(d / "cal.parquet"), "--labels", str(d / "fit.jsonl"), "-o",
                 str(d / "cascade2.json"), "--alpha", "0.2"]) == 2  # fmt: skip
    assert "certified only on labels it did not learn from" in capsys.readouterr().err
    assert not (d / "cascade2.json").exists()

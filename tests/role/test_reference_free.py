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


def test_classifier_fit_equals_scikit_learn(encoder, log):
    t, y = log
    rows = t.slice(0, 160).to_pylist()
    x = classifier_features(encoder, [r["role"] for r in rows], [r["user"] for r in rows],
                            [r["assistant"] for r in rows])  # fmt: skip
    y = y[:160]
    assert x.shape == (160, 384 + 5) and len(FEATURES) == 6
    fit = fit_classifier(x, y, l2=1.0, shrinks=(1.0,), folds=5, seed=0)
    z = (x - np.array(fit["mean"])) / np.array(fit["scale"])
    ref = LogisticRegression(C=1.0, tol=1e-10, max_iter=10000).fit(z, y)
    np.testing.assert_allclose(fit["coef"], ref.coef_[0], atol=2e-4)
    assert abs(fit["intercept"] - ref.intercept_[0]) < 2e-4
    # the out-of-fold AUC is scikit-learn's of the same folds' models
    from adherence.stats._calibration import _stratified_folds

    fold = _stratified_folds(y, 5, 0)
    oof = np.empty(len(y))
    for k in range(5):
        tr, te = fold != k, fold == k
        mu, sd = x[tr].mean(0), x[tr].std(0)
        sd[sd == 0] = 1
        m = LogisticRegression(C=1.0, tol=1e-10, max_iter=10000).fit((x[tr] - mu) / sd, y[tr])
        oof[te] = m.predict_proba((x[te] - mu) / sd)[:, 1]
    np.testing.assert_allclose(fit["cv"]["oof"], oof, atol=1e-4)
    assert abs(fit["cv"]["auc"] - roc_auc_score(y, oof)) < 1e-9
    assert all(len(set(y[fold == k])) == 2 for k in range(5))  # folds are stratified: each holds both classes


def test_the_embeddings_extra_shrinkage_is_ridge_with_a_larger_penalty_on_that_block(encoder, log):
    """A shrink of k on the embedding equals scikit-learn's ridge on features whose embedding block is divided by
    sqrt(k); the shrink chosen is the one with the best out-of-fold AUC."""
    t, y = log
    rows = t.slice(0, 160).to_pylist()
    x = classifier_features(encoder, [r["role"] for r in rows], [r["user"] for r in rows],
                            [r["assistant"] for r in rows])  # fmt: skip
    y = y[:160]
    fit = fit_classifier(x, y, shrinks=(1.0, 10.0, 100.0), folds=5, seed=0)
    assert str(fit["shrink"]) in fit["cv"]["by_shrink"]
    assert fit["cv"]["auc"] == max(fit["cv"]["by_shrink"].values())
    mu, sd = x.mean(0), x.std(0)
    z = (x - mu) / sd
    z[:, :384] /= np.sqrt(fit["shrink"])
    ref = LogisticRegression(C=1.0, tol=1e-10, max_iter=10000).fit(z, y)
    np.testing.assert_allclose(fit["coef"], ref.coef_[0], atol=2e-4)


def _doc(encoder, log, tmp_path):
    t, y = log
    rows = t.slice(0, 120).to_pylist()
    x = classifier_features(encoder, [r["role"] for r in rows], [r["user"] for r in rows],
                            [r["assistant"] for r in rows])  # fmt: skip
    fit = fit_classifier(x, y[:120])
    doc = classifier_document(fit, encoder=encoder, dim=384, source={"n": 120}, baselines=None)
    path = tmp_path / "clf.json"
    path.write_text(json.dumps(doc))
    return doc, path, x


def test_classifier_method_scores_are_the_models_probabilities(encoder, log, tmp_path):
    doc, path, x = _doc(encoder, log, tmp_path)
    t = log[0].slice(0, 120)
    cfg = RoleConfig(method="classifier", classifier=str(path), progress=False)
    out = score_turns(t, "classifier", config=cfg, resources=Resources(cfg, encoder=encoder))
    m = doc["model"]
    want = 1 / (
        1 + np.exp(-(((x - np.array(m["mean"])) / np.array(m["scale"])) @ np.array(m["coef"]) + m["intercept"]))
    )
    np.testing.assert_allclose(out.column("score").to_numpy(), want, atol=1e-6)
    assert out.column("prediction").to_pylist() == [int(p >= 0.5) for p in want]


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

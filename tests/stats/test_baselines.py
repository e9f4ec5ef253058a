"""Trivial baselines beside a scorer, checked against scikit-learn."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score as sk_auc
from sklearn.model_selection import PredefinedSplit, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from adherence.stats._baselines import _cv_auc, baseline_report, fit_logistic, text_baselines
from adherence.stats._calibration import stratified_folds


@pytest.mark.parametrize("seed", range(4))
def test_fit_logistic_matches_sklearns_unpenalised_fit(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(300, 3))
    y = (rng.random(300) < 1 / (1 + np.exp(-(x @ [1.5, -0.7, 0.2] + 0.3)))).astype(int)
    coef, b = fit_logistic(x, y, l2=0.0)
    ref = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(x, y)
    np.testing.assert_allclose(coef, ref.coef_[0], atol=1e-6)
    assert b == pytest.approx(ref.intercept_[0], abs=1e-6)


def test_cross_validated_auc_matches_sklearn_on_the_same_folds():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(200, 2))
    y = (x[:, 0] + rng.normal(scale=1.5, size=200) > 0).astype(np.int8)
    ours = _cv_auc(x, y, folds=5, seed=3)
    fold = stratified_folds(y, 5, 3)  # the same stratified assignment _cv_auc makes
    model = make_pipeline(StandardScaler(), LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000))
    pred = cross_val_predict(model, x, y, cv=PredefinedSplit(fold), method="decision_function")
    assert ours == pytest.approx(sk_auc(y, pred), abs=1e-9)


def test_a_score_that_only_repeats_reply_length_is_flagged():
    rng = np.random.default_rng(0)
    n = 120
    y = (rng.random(n) < 0.5).astype(np.int8)
    replies = [" ".join(["word"] * int(5 + 10 * t + rng.integers(0, 6))) for t in y]
    base = text_baselines({"assistant": replies, "role": ["You are a bank assistant"] * n})
    assert base["reply_length"].tolist() == [len(r.split()) for r in replies]
    length_like = base["reply_length"] + rng.normal(scale=3.0, size=n)  # a "judge" that reads length, noisily
    rep = baseline_report(y, length_like, base)
    assert rep["auc"]["reply_length"] == pytest.approx(sk_auc(y, base["reply_length"]))
    assert rep["score_auc"] == pytest.approx(sk_auc(y, length_like))
    assert not rep["beats_baselines"] and "does not beat reply length" in rep["note"]
    informative = y + rng.normal(scale=0.05, size=n) - 0.2 * base["reply_length"] / 20
    assert baseline_report(y, informative, base)["score_auc"] > 0.99
    assert baseline_report(y[:6], length_like[:6], {k: v[:6] for k, v in base.items()}) is None  # too few rows


def test_overlap_is_the_share_of_the_replys_words_found_in_the_other_text():
    got = text_baselines({"assistant": ["Your card, your card!", ""], "user": ["my card is lost", "hi"]})
    assert got["user_overlap"].tolist() == [0.5, 0.0]  # {your, card}: card is in the user message

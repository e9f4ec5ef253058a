"""Calibration statistics against scikit-learn."""

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score, precision_recall_curve, roc_curve
from sklearn.metrics import brier_score_loss as sk_brier_score_loss

from adherence.stats import (
    CalibrationMap,
    UndefinedMetricError,
    balanced_accuracy,
    brier_score_loss,
    expected_calibration_error,
    fit_calibration,
    fit_isotonic,
    fit_platt,
    fit_threshold,
    reliability_bins,
)


def _judge_like(rng, n=300):
    """A small judge's P(yes): squeezed into [0.15, 0.25], informative but far from calibrated."""
    s = rng.uniform(0.15, 0.25, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-60 * (s - 0.2)))).astype(int)
    return y, s


@pytest.mark.parametrize("seed", range(5))
def test_balanced_accuracy_and_brier_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 200)
    p = rng.random(200)
    pred = (p > 0.4).astype(int)
    assert balanced_accuracy(y, pred) == pytest.approx(balanced_accuracy_score(y, pred), abs=1e-12)
    assert brier_score_loss(y, p) == pytest.approx(sk_brier_score_loss(y, p), abs=1e-12)


@pytest.mark.parametrize("n_bins", [5, 10, 15])
def test_reliability_bins_and_ece_match_calibration_curve(n_bins):
    rng = np.random.default_rng(n_bins)
    y = rng.integers(0, 2, 500)
    p = rng.beta(2, 5, 500)
    b = reliability_bins(y, p, n_bins)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy="uniform")
    filled = [i for i, c in enumerate(b["count"]) if c]
    assert np.allclose([b["fraction_positive"][i] for i in filled], prob_true, atol=1e-12)
    assert np.allclose([b["mean_probability"][i] for i in filled], prob_pred, atol=1e-12)
    counts, _ = np.histogram(p, bins=np.linspace(0, 1, n_bins + 1))  # no value sits on an edge here
    assert b["count"] == counts.tolist()
    ref = np.sum(counts[counts > 0] * np.abs(prob_true - prob_pred)) / len(p)
    assert expected_calibration_error(y, p, n_bins) == pytest.approx(ref, abs=1e-12)


def test_ece_refuses_scores_outside_unit_interval():
    with pytest.raises(UndefinedMetricError, match=r"\[0, 1\]"):
        expected_calibration_error([0, 1], [0.2, 1.3])


def _halfway_below(s, t):
    """Halfway between the chosen score ``t`` and the next lower observed score (``t`` at the lowest)."""
    lower = s[s < t]
    return t if not len(lower) else (t + lower.max()) / 2


@pytest.mark.parametrize("seed", range(6))
def test_thresholds_match_sklearn_curves(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 150)
    s = np.round(rng.random(150) + 0.4 * y, 2 if seed % 2 else 6)  # with and without ties
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    t = fit_threshold(y, s, "youden")
    assert t == pytest.approx(_halfway_below(s, thr[int(np.argmax(tpr - fpr))]))
    # the fitted rows are decided as at sklearn's threshold
    assert np.array_equal(s >= t, s >= thr[int(np.argmax(tpr - fpr))])
    for target in (0.6, 0.8, 0.95):
        ref = thr[int(np.flatnonzero(tpr >= target)[0])]
        assert fit_threshold(y, s, "recall", target) == pytest.approx(_halfway_below(s, ref))
        prec, _, pthr = precision_recall_curve(y, s, drop_intermediate=False)
        reachable = pthr[prec[:-1] >= target]
        if len(reachable):
            assert fit_threshold(y, s, "precision", target) == pytest.approx(_halfway_below(s, reachable.min()))
        else:
            with pytest.raises(UndefinedMetricError, match="precision"):
                fit_threshold(y, s, "precision", target)


def test_threshold_rules_check_their_arguments():
    with pytest.raises(ValueError, match="target"):
        fit_threshold([0, 1], [0.1, 0.9], "precision")
    with pytest.raises(ValueError, match="no target"):
        fit_threshold([0, 1], [0.1, 0.9], "youden", 0.9)
    with pytest.raises(UndefinedMetricError, match="one class"):
        fit_threshold([1, 1], [0.1, 0.9])


@pytest.mark.parametrize("seed", range(5))
def test_platt_matches_unpenalised_logistic_regression_on_smoothed_targets(seed):
    rng = np.random.default_rng(seed)
    y, s = _judge_like(rng, 200)
    m = fit_platt(y, s)
    n_pos, n_neg = y.sum(), len(y) - y.sum()
    t = np.where(y == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    X = np.r_[s, s][:, None]
    lr = LogisticRegression(C=np.inf, tol=1e-12, max_iter=100_000).fit(
        X, np.r_[np.ones(len(s)), np.zeros(len(s))], sample_weight=np.r_[t, 1 - t]
    )
    grid = np.linspace(0.1, 0.3, 41)
    assert np.allclose(m(grid), lr.predict_proba(grid[:, None])[:, 1], atol=1e-6)
    assert m.a == pytest.approx(lr.coef_[0, 0], rel=1e-4)


def test_platt_stays_finite_on_separable_scores():
    m = fit_platt([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9])
    assert np.isfinite(m.a) and np.isfinite(m.b) and m.a > 0
    assert 0.5 < m(np.array([0.9]))[0] < 1.0


@pytest.mark.parametrize("seed", range(5))
def test_isotonic_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    y, s = _judge_like(rng, 120)
    if seed % 2:
        s = np.round(s, 2)  # ties
    m = fit_isotonic(y, s)
    ref = IsotonicRegression(out_of_bounds="clip").fit(s, y)
    grid = np.r_[np.linspace(0.1, 0.3, 97), s]
    assert np.allclose(m(grid), ref.predict(grid), atol=1e-12)


def test_map_round_trips_through_json():
    rng = np.random.default_rng(0)
    y, s = _judge_like(rng)
    for m in (fit_platt(y, s), fit_isotonic(y, s), CalibrationMap("none")):
        back = CalibrationMap.from_dict(m.to_dict())
        assert np.array_equal(back(s), m(s))
    with pytest.raises(ValueError, match="non-decreasing"):
        CalibrationMap.from_dict({"method": "isotonic", "x": [0.2, 0.1], "y": [0, 1]})


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_fit_calibration_repairs_a_squeezed_judge_on_held_out_rows(method):
    rng = np.random.default_rng(3)
    y, s = _judge_like(rng, 400)
    cal = fit_calibration(y, s, method=method, n_bootstrap=200)
    # Before: every turn is below 0.5, so every turn is predicted a violation.
    assert cal["before"]["predicted_positive_share"] == 0.0
    assert cal["before"]["balanced_accuracy"] == 0.5
    assert cal["before"]["ece"] > 0.2
    # After (out of fold): far better, and the interval excludes the raw 0.5.
    assert cal["after"]["balanced_accuracy"] > 0.75
    assert cal["after"]["balanced_accuracy_ci"][0] > 0.6
    assert cal["after"]["ece"] < 0.08
    low, high = cal["threshold_ci"]
    assert 0.17 < low <= cal["threshold"] <= high < 0.23
    assert cal["threshold"] == fit_threshold(y, s)
    assert len(cal["fold_thresholds"]) == 5
    # The held-out prediction uses each fold's own threshold: recompute it independently.
    assert balanced_accuracy_score(y, s >= 0.5) == cal["before"]["balanced_accuracy"]


def test_fit_calibration_needs_enough_of_each_class():
    with pytest.raises(UndefinedMetricError, match="5-fold"):
        fit_calibration([0, 0, 1, 1, 1, 1, 1, 1], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])


def test_fit_calibration_refuses_a_score_that_runs_backwards_unless_allowed():
    """AUC < 0.5: 'score >= threshold' and an increasing map would contradict each other (it wrote a map with a
    negative slope); refused, or fitted with a note under allow_inverted."""
    rng = np.random.default_rng(1)
    y, s = _judge_like(rng, 200)
    with pytest.raises(UndefinedMetricError, match=r"AUC 0\.\d+ < 0\.5.*--allow-inverted"):
        fit_calibration(y, -s, n_bootstrap=0)
    cal = fit_calibration(y, -s, n_bootstrap=0, allow_inverted=True)
    assert cal["auc"] < 0.5 and "--allow-inverted" in cal["note"]
    assert cal["before"]["ece"] is None  # negative scores are no probabilities

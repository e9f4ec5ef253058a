import numpy as np
import pytest
from sklearn import metrics as skm

from adherence.stats import (
    UndefinedMetricError,
    average_precision_score,
    roc_auc_score,
    roc_curve,
    separation,
)


def _random_case(rng, n, ties):
    y = rng.integers(0, 2, n)
    y[0], y[1] = 0, 1
    s = rng.random(n)
    if ties:
        s = np.round(s * 5) / 5  # heavy ties
    return y, s


@pytest.mark.parametrize("n", [2, 7, 100, 769])
@pytest.mark.parametrize("ties", [False, True])
def test_auc_and_ap_match_sklearn(rng, n, ties):
    for _ in range(5):
        y, s = _random_case(rng, n, ties)
        assert roc_auc_score(y, s) == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
        assert average_precision_score(y, s) == pytest.approx(skm.average_precision_score(y, s), abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_roc_curve_matches_sklearn(rng, ties):
    y, s = _random_case(rng, 200, ties)
    fpr, tpr, thr = roc_curve(y, s)
    ref_fpr, ref_tpr, ref_thr = skm.roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, ref_fpr)
    np.testing.assert_allclose(tpr, ref_tpr)
    np.testing.assert_allclose(thr[1:], ref_thr[1:])


def test_separation_is_difference_of_class_means(rng):
    y, s = _random_case(rng, 300, False)
    assert separation(y, s) == pytest.approx(s[y == 1].mean() - s[y == 0].mean())


@pytest.mark.parametrize("fn", [roc_auc_score, separation, roc_curve])
def test_single_class_is_undefined(fn):
    with pytest.raises(UndefinedMetricError, match="one class"):
        fn([1, 1, 1], [0.1, 0.2, 0.3])


def test_ap_without_positive_is_undefined():
    with pytest.raises(UndefinedMetricError, match="positive"):
        average_precision_score([0, 0], [0.1, 0.2])


def test_nan_scores_and_bad_labels_are_named():
    with pytest.raises(ValueError, match="index 1"):
        roc_auc_score([0, 1], [0.1, float("nan")])
    with pytest.raises(ValueError, match="0/1"):
        roc_auc_score([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="different lengths"):
        roc_auc_score([0, 1, 1], [0.1, 0.2])


def test_boolean_labels_are_accepted():
    assert roc_auc_score([False, True], [0.2, 0.9]) == 1.0

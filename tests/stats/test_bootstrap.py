import math

import numpy as np
import pytest
from scipy import stats as sps

from adherence.stats import UndefinedMetricError, bootstrap_ci, roc_auc_score


def test_percentile_interval_matches_scipy_on_the_mean(rng):
    x = rng.normal(3.0, 2.0, 400)
    ours = bootstrap_ci(np.mean, x, n_resamples=4000, seed=0)
    ref = sps.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", random_state=1)
    # Different resampling streams: the two Monte Carlo intervals agree to about a tenth of a sd of the mean.
    se = x.std() / math.sqrt(len(x))
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=0.1 * se + 0.02)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=0.1 * se + 0.02)
    assert ours.estimate == pytest.approx(x.mean())
    assert ours.n_resamples == 4000 and ours.n_skipped == 0


def test_single_class_resamples_are_skipped_and_counted():
    y = np.array([1] * 9 + [0])  # many resamples miss the single negative
    s = np.linspace(0, 1, 10)
    ci = bootstrap_ci(roc_auc_score, y, s, n_resamples=500, seed=3)
    expected_skip = 500 * 0.9**10  # P(no negative drawn)
    assert ci.n_resamples + ci.n_skipped == 500
    assert 0.5 * expected_skip < ci.n_skipped < 1.6 * expected_skip
    assert 0.0 <= ci.low <= ci.high <= 1.0


def test_seeded_and_reproducible(rng):
    y = rng.integers(0, 2, 80)
    s = rng.random(80)
    a = bootstrap_ci(roc_auc_score, y, s, n_resamples=300, seed=7)
    b = bootstrap_ci(roc_auc_score, y, s, n_resamples=300, seed=7)
    c = bootstrap_ci(roc_auc_score, y, s, n_resamples=300, seed=8)
    assert (a.low, a.high) == (b.low, b.high)
    assert (a.low, a.high) != (c.low, c.high)


def test_all_resamples_undefined_gives_nan_interval():
    def never(*_):
        raise UndefinedMetricError("never defined")

    ci = bootstrap_ci(never, [1, 2, 3], n_resamples=20)
    assert math.isnan(ci.low) and math.isnan(ci.high) and ci.n_skipped == 20
    assert ci.as_list() == [None, None]


@pytest.mark.parametrize("kwargs", [{"n_resamples": 0}, {"level": 1.5}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        bootstrap_ci(np.mean, [1.0, 2.0], **kwargs)

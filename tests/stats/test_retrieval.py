import numpy as np
import pytest
from scipy.integrate import trapezoid

from adherence.stats import curve_similarity, mrr, normalized_auc, span_weights


def test_mrr(rng):
    ranks = rng.integers(1, 50, 100)
    assert mrr(ranks) == pytest.approx(np.mean(1.0 / ranks))
    assert mrr([1, None, float("inf"), 2]) == pytest.approx((1 + 0 + 0 + 0.5) / 4)
    with pytest.raises(ValueError):
        mrr([0.5])


def test_normalized_auc_matches_scipy(rng):
    p = np.sort(rng.choice(np.arange(1, 1001), 13, replace=False)).astype(float)
    v = rng.random(13)
    assert normalized_auc(p, v) == pytest.approx(trapezoid(v, p) / (p[-1] - p[0]))


def test_span_weights():
    np.testing.assert_allclose(span_weights([1, 2, 4, 8]), [1, 1.5, 3, 4])
    with pytest.raises(ValueError):
        span_weights([1, 1, 2])


def test_curve_similarity_properties(rng):
    p = [1, 2, 5, 10, 20, 50, 100]
    a = rng.random(7)
    assert curve_similarity(a, a, p) == pytest.approx(1.0)
    # deviation in either direction is penalised, and symmetrically in the two curves
    assert curve_similarity(a, 1.5 * a, p) == pytest.approx(1 / 1.5)
    assert curve_similarity(a, 0.5 * a, p) == pytest.approx(0.5)
    b = rng.random(7)
    assert curve_similarity(a, b, p) == pytest.approx(curve_similarity(b, a, p))
    w = span_weights(p)
    assert curve_similarity(a, b, p) == pytest.approx(np.sum(w * a * b) / max(np.sum(w * a * a), np.sum(w * b * b)))

import numpy as np
import pytest
from sklearn import metrics as skm

from adherence.stats import c_at_1, f05u_score, pan_f1, verification_metrics


def _case(rng, n=200, nonanswers=0.15):
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    s = np.clip(y * 0.3 + rng.random(n) * 0.7, 0, 1)
    s[rng.random(n) < nonanswers] = 0.5
    return y, s


def _c_at_1_by_definition(y, s):
    # Peñas & Rodrigo (2011): c@1 = (1/n)(n_c + n_u * n_c / n)
    n = len(y)
    nc = sum(1 for t, p in zip(y, s) if p != 0.5 and (p > 0.5) == (t == 1))
    nu = sum(1 for p in s if p == 0.5)
    return (nc + nu * nc / n) / n


def test_each_metric_against_its_reference(rng):
    for _ in range(10):
        y, s = _case(rng)
        m = verification_metrics(y, s)
        answered = s != 0.5
        assert m["auc"] == pytest.approx(skm.roc_auc_score(y, s))
        assert m["f1"] == pytest.approx(skm.f1_score(y[answered], (s[answered] > 0.5).astype(int)))
        assert m["brier"] == pytest.approx(1 - skm.brier_score_loss(y, s))
        assert m["c_at_1"] == pytest.approx(_c_at_1_by_definition(y, s))
        # F0.5u: a non-answer is a false negative whatever the truth -> as (true 1, predicted 0).
        y_ref = np.where(answered, y, 1)
        p_ref = np.where(answered, (s > 0.5).astype(int), 0)
        assert m["f05u"] == pytest.approx(skm.fbeta_score(y_ref, p_ref, beta=0.5))
        five = [m[k] for k in ("auc", "c_at_1", "f1", "f05u", "brier")]
        assert m["overall"] == pytest.approx(np.mean(five))
        assert m["overall_no_brier"] == pytest.approx(np.mean(five[:4]))


def test_without_nonanswers_c_at_1_is_accuracy_and_f05u_is_fbeta(rng):
    y, s = _case(rng, nonanswers=0.0)
    s[s == 0.5] = 0.51
    assert c_at_1(y, s) == pytest.approx(skm.accuracy_score(y, s > 0.5))
    assert f05u_score(y, s) == pytest.approx(skm.fbeta_score(y, s > 0.5, beta=0.5))


def test_all_nonanswers():
    y = [0, 1, 1]
    s = [0.5, 0.5, 0.5]
    assert c_at_1(y, s) == 0.0 and pan_f1(y, s) == 0.0 and f05u_score(y, s) == 0.0


def test_scores_outside_unit_interval_rejected():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        verification_metrics([0, 1], [0.2, 1.2])

"""Invariances every metric of a family must satisfy (scikit-learn's test_common idea)."""

import numpy as np
import pytest

from adherence.stats import (
    agreement,
    average_precision_score,
    cohen_kappa,
    macro_f1,
    roc_auc_score,
    separation,
    verification_metrics,
)

SCORE_METRICS = [roc_auc_score, average_precision_score]


@pytest.fixture
def case(rng):
    y = rng.integers(0, 2, 120)
    y[:2] = [0, 1]
    return y, rng.random(120)


@pytest.mark.parametrize("metric", SCORE_METRICS)
def test_rank_metrics_invariant_to_monotone_transforms(metric, case):
    y, s = case
    base = metric(y, s)
    assert metric(y, np.exp(3 * s)) == pytest.approx(base)
    assert metric(y, 10 * s - 4) == pytest.approx(base)


@pytest.mark.parametrize("metric", SCORE_METRICS + [separation, verification_metrics])
def test_invariant_to_row_order(metric, case, rng):
    y, s = case
    perm = rng.permutation(len(y))
    a, b = metric(y, s), metric(y[perm], s[perm])
    if isinstance(a, dict):
        assert a == pytest.approx(b)
    else:
        assert a == pytest.approx(b)


def test_auc_flips_with_score(case):
    y, s = case
    assert roc_auc_score(y, -s) == pytest.approx(1 - roc_auc_score(y, s))
    assert roc_auc_score(1 - y, s) == pytest.approx(1 - roc_auc_score(y, s))


@pytest.mark.parametrize("metric", [cohen_kappa, macro_f1])
def test_label_metrics_invariant_to_relabelling(metric, rng):
    y = rng.integers(0, 3, 90)
    p = np.where(rng.random(90) < 0.7, y, rng.integers(0, 3, 90))
    names = np.array(["scope", "tone", "ok"])
    assert metric(names[y], names[p]) == pytest.approx(metric(y, p))


def test_agreement_invariant_to_rater_order_and_category_names(rng):
    r = rng.choice(["Yes", "No"], size=(25, 4)).astype(object)
    a = agreement(r)
    b = agreement(r[:, ::-1])
    c = agreement(np.where(r == "Yes", "Y", "N"))
    for x in (b, c):
        assert (x.percent_agreement, x.gwet_ac1, x.fleiss_kappa) == pytest.approx(
            (a.percent_agreement, a.gwet_ac1, a.fleiss_kappa)
        )

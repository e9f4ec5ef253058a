import numpy as np
import pytest
from sklearn import metrics as skm

from adherence.stats import UndefinedMetricError, cohen_kappa, f1_per_class, macro_f1


@pytest.mark.parametrize("n_classes", [2, 3, 5])
def test_f1_and_kappa_match_sklearn(rng, n_classes):
    for _ in range(10):
        y = rng.integers(0, n_classes, 150)
        p = np.where(rng.random(150) < 0.6, y, rng.integers(0, n_classes, 150))
        labels = sorted(set(y) | set(p))
        ours = f1_per_class(y, p)
        ref = skm.f1_score(y, p, average=None, labels=labels, zero_division=0)
        assert [ours[lab] for lab in labels] == pytest.approx(list(ref))
        assert macro_f1(y, p) == pytest.approx(skm.f1_score(y, p, average="macro", zero_division=0))
        assert cohen_kappa(y, p) == pytest.approx(skm.cohen_kappa_score(y, p))


def test_string_labels_and_absent_class():
    y = ["yes", "yes", "no", "no"]
    p = ["yes", "yes", "yes", "yes"]
    ours = f1_per_class(y, p)
    ref = skm.f1_score(y, p, average=None, labels=["no", "yes"], zero_division=0)
    assert [ours["no"], ours["yes"]] == pytest.approx(list(ref))


def test_kappa_undefined_for_one_label():
    with pytest.raises(UndefinedMetricError):
        cohen_kappa([1, 1, 1], [1, 1, 1])

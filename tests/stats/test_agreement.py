import numpy as np
import pandas as pd
import pytest
from irrCAC.raw import CAC
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

from adherence.stats import agreement, category_counts, fleiss_kappa, gwet_ac1, percent_agreement


def _ratings(rng, n_subjects, n_raters, categories, missing):
    base = rng.choice(categories, size=n_subjects)
    out = np.empty((n_subjects, n_raters), dtype=object)
    for j in range(n_raters):
        flip = rng.random(n_subjects) < 0.3
        out[:, j] = np.where(flip, rng.choice(categories, size=n_subjects), base)
    out[rng.random(out.shape) < missing] = None
    return out


@pytest.mark.parametrize("categories", [["No", "Yes"], ["a", "b", "c"], ["1", "2", "3", "4"]])
@pytest.mark.parametrize("missing", [0.0, 0.2])
@pytest.mark.parametrize("shape", [(12, 3), (40, 5), (7, 10)])
def test_matches_irrcac(rng, categories, missing, shape):
    ratings = _ratings(rng, *shape, categories, missing)
    if len(category_counts(ratings)[1]) < 2:
        pytest.fail("random case collapsed to one category; change the seed")
    ours = agreement(ratings)
    cac = CAC(pd.DataFrame(ratings), digits=12)
    gwet, fleiss = cac.gwet()["est"], cac.fleiss()["est"]
    assert ours.percent_agreement == pytest.approx(gwet["pa"], abs=1e-10)
    assert ours.gwet_ac1 == pytest.approx(gwet["coefficient_value"], abs=1e-10)
    assert ours.fleiss_kappa == pytest.approx(fleiss["coefficient_value"], abs=1e-10)
    assert not ours.fleiss_imputed and not ours.ac1_imputed


def test_fleiss_matches_statsmodels_on_complete_data(rng):
    for _ in range(5):
        ratings = _ratings(rng, 30, 4, ["x", "y", "z"], 0.0)
        counts, _ = category_counts(ratings)
        assert fleiss_kappa(ratings) == pytest.approx(sm_fleiss_kappa(counts, method="fleiss"))


def test_single_category_is_imputed_and_flagged():
    ratings = [["Yes", "Yes", None], ["Yes", "Yes", "Yes"]]
    value, imputed = fleiss_kappa(ratings, return_imputed=True)
    assert (value, imputed) == (1.0, True)
    assert gwet_ac1(ratings) == 1.0 and agreement(ratings).ac1_imputed
    assert percent_agreement(ratings) == 1.0
    # irrCAC divides by zero here (Fleiss' kappa is 0/0): the imputation is ours and flagged.
    with pytest.raises(ZeroDivisionError):
        CAC(pd.DataFrame(ratings), digits=12).fleiss()


def test_unanimous_subjects_with_two_categories_are_defined():
    ratings = [["Yes"] * 3, ["No"] * 3, ["Yes"] * 3]
    a = agreement(ratings)
    assert a.fleiss_kappa == pytest.approx(1.0) and not a.fleiss_imputed
    assert a.gwet_ac1 == pytest.approx(1.0)


def test_nan_and_empty_string_are_missing():
    a = agreement([["Yes", float("nan"), "Yes"], ["No", "", "No"], [None, None, None]])
    assert a.n_subjects == 2 and a.categories == ("No", "Yes")


def test_needs_a_matrix_and_two_answers():
    with pytest.raises(ValueError, match="subjects x raters"):
        agreement(["Yes", "No"])
    with pytest.raises(ValueError, match="two or more answers"):
        agreement([["Yes", None], [None, "No"]])


def test_case_and_space_variants_are_one_category(rng):
    clean = _ratings(rng, 30, 4, ["No", "Yes"], 0.1)
    messy = clean.copy()
    spell = {"Yes": ["Yes", "yes ", " YES"], "No": ["No", "no", "NO  "]}
    for idx in np.ndindex(messy.shape):
        if messy[idx] is not None:
            messy[idx] = spell[messy[idx]][rng.integers(3)]
    ours = agreement(messy)
    cac = CAC(pd.DataFrame(clean), digits=12)
    assert sorted(c.casefold() for c in ours.categories) == ["no", "yes"]
    assert ours.gwet_ac1 == pytest.approx(cac.gwet()["est"]["coefficient_value"], abs=1e-10)
    assert ours.fleiss_kappa == pytest.approx(cac.fleiss()["est"]["coefficient_value"], abs=1e-10)
    # normalize=False keeps every spelling a category of its own, exactly as irrCAC's Python port counts them.
    raw = agreement(messy, normalize=False)
    assert len(raw.categories) == 6
    assert raw.gwet_ac1 == pytest.approx(
        CAC(pd.DataFrame(messy), digits=12).gwet()["est"]["coefficient_value"], abs=1e-10
    )
    assert raw.gwet_ac1 != pytest.approx(ours.gwet_ac1, abs=1e-3)

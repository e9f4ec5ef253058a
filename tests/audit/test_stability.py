import numpy as np
import pyarrow as pa
import pytest
from sklearn.cluster import DBSCAN

from adherence.audit import choose_strategy, dbscan_cosine, dominant_share, fingerprint, stability_tables
from adherence.data import JUDGMENTS, read_table
from adherence.stats import agreement


def _same_partition(a, b):
    pairs_a = {(i, j) for i in range(len(a)) for j in range(len(a)) if a[i] == a[j]}
    pairs_b = {(i, j) for i in range(len(b)) for j in range(len(b)) if b[i] == b[j]}
    return pairs_a == pairs_b


@pytest.mark.parametrize("eps", [0.01, 0.05, 0.2])
def test_dbscan_matches_sklearn(rng, eps):
    for _ in range(5):
        centers = rng.normal(size=(3, 8))
        x = np.concatenate([c + rng.normal(scale=0.05, size=(4, 8)) for c in centers])
        ours = dbscan_cosine(x, eps)
        ref = DBSCAN(eps=eps, min_samples=1, metric="cosine").fit(x).labels_
        assert _same_partition(ours, ref)


def test_fingerprints_and_strategy():
    assert fingerprint("The summary has 71 words, over the 60 limit.", "numeric") == "71"
    assert fingerprint('It says "I think" and "we saw".', "quote") == "I think | we saw"
    assert fingerprint("The tone is professional, and encouraging!", "assertion") == "tone professional encouraging"
    assert fingerprint(None, "assertion") is None
    assert choose_strategy(["has 12 words", "has 14 words", "fine"]) == "numeric"
    assert choose_strategy(['quotes "x"', 'quotes "y"', "none"]) == "quote"
    assert choose_strategy(["polite", "warm"]) == "assertion"
    assert dominant_share(np.array([0, 0, 1, 0, 2])) == pytest.approx(0.6)


@pytest.fixture(scope="module")
def encoder():
    from adherence.models import Encoder

    return Encoder(progress=False)


FLAKY_REASONS = [
    "The tone is warm and friendly.",
    "Counted seventy one words in the summary.",
    "Quarterly revenue targets were exceeded.",
    "The JSON object lacks a closing brace.",
]


def _judgments():
    rows = []
    answers = {  # question -> artifact -> answers over 4 runs
        "q_stable": {"a1": ["Yes"] * 4, "a2": ["No"] * 4, "a3": ["Yes"] * 4},
        "q_flaky": {
            "a1": ["Yes", "No", "Yes", "No"],
            "a2": ["No", "No", "Yes", None],
            "a3": ["Yes", "Yes", "Yes", "No"],
        },
    }
    for q, arts in answers.items():
        for art, ans in arts.items():
            for run, a in enumerate(ans):
                why = f"The review of {art} is complete." if q == "q_stable" else FLAKY_REASONS[run]
                rows.append(
                    dict(
                        artifact_id=art,
                        generator="g",
                        judge="j",
                        run=run,
                        question_id=q,
                        answer=a,
                        justification=why if a else None,
                        source="judge",
                    )
                )
    return read_table(pa.Table.from_pylist(rows), JUDGMENTS)


def test_stability_tables_against_direct_computation(encoder):
    j = _judgments()
    m = stability_tables(j, encoder, ks=[2, 4])
    flaky = np.array([["Yes", "No", "Yes", "No"], ["No", "No", "Yes", None], ["Yes", "Yes", "Yes", "No"]], dtype=object)
    ref = agreement(flaky)
    got = m["questions"]["q_flaky"]["k=4"]
    assert got["percent_agreement"] == pytest.approx(ref.percent_agreement)
    assert got["gwet_ac1"] == pytest.approx(ref.gwet_ac1) and got["fleiss_kappa"] == pytest.approx(ref.fleiss_kappa)
    ref2 = agreement(flaky[:, :2])
    assert m["questions"]["q_flaky"]["k=2"]["gwet_ac1"] == pytest.approx(ref2.gwet_ac1)
    # identical justifications -> one cluster; all different -> dominant share 1/k
    assert m["questions"]["q_stable"]["k=4"]["r_stab"] == pytest.approx(1.0)
    assert m["questions"]["q_flaky"]["k=4"]["r_stab"] == pytest.approx(np.mean([1 / 4, 1 / 3, 1 / 4]))
    assert m["pooled"]["k=4"]["r_stab"] == pytest.approx(np.mean([1.0, np.mean([1 / 4, 1 / 3, 1 / 4])]))
    a1 = next(a for a in m["artifacts"] if a["artifact_id"] == "a1")
    assert a1["s_per_run"] == [1.0, 0.5, 1.0, 0.5] and a1["std"] == pytest.approx(np.std([1, 0.5, 1, 0.5], ddof=1))
    with pytest.raises(ValueError, match="exceeds"):
        stability_tables(j, encoder, ks=[5])


def test_scatter_labels_of_nearby_points_never_overlap():
    """Two questions with close verdict and reasoning stability: their labels stack instead of printing over
    each other (the bundled audit's page showed 'growth_specific' on top of another label)."""
    from adherence.report._audit import label_levels

    labels = {(0.611, 0.333): "growth_specific", (0.667, 0.333): "style_length", (0.333, 0.333): "style_tone"}
    levels = label_levels(labels)
    assert levels[(0.611, 0.333)] != levels[(0.667, 0.333)]  # 15 characters reach across 0.056 of the axis
    assert levels[(0.333, 0.333)] == 0  # far enough left: stays just above its point
    assert label_levels({(0.2, 0.2): "a", (0.9, 0.9): "b"}) == {(0.2, 0.2): 0, (0.9, 0.9): 0}

import numpy as np
import pyarrow as pa
import pytest
from sklearn.metrics import f1_score, fbeta_score, roc_auc_score

from adherence.data import PERSONA_CONVERSATIONS, PERSONAS, PersonaCorpus, example_path, read_persona_corpus
from adherence.data._validate import conform
from adherence.persona import consistency, fit_thresholds, human_similarity, pan_rescale
from adherence.persona._consistency import author_pairs


def _pan_correct(scores, p1, p2):
    """PAN 2020 baseline's correction, written as its loop."""
    out = []
    for sc in scores:
        if sc <= p1:
            sc = 0 + (sc - 0) / (p1 - 0) * (0.49 - 0)
        elif p1 < sc < p2:
            sc = 0.5
        else:
            sc = 0.51 + (sc - p2) / (1 - p2) * (1 - 0.51)
        out.append(sc)
    return np.array(out)


def _overall_sklearn(y, s):
    """PAN's overall score from scikit-learn pieces: AUC, c@1, F1 and F0.5u (non-answers as FN), 1 - Brier."""
    answered = s != 0.5
    pred = (s > 0.5).astype(int)
    n_u = int(np.sum(~answered))
    n_c = np.sum(pred[answered] == y[answered])
    c1 = (n_c + n_u * n_c / len(y)) / len(y)
    f1 = f1_score(y[answered], pred[answered], zero_division=0) if answered.any() else 0.0
    # F0.5u: every non-answer counts as a false negative (a positive predicted negative).
    f05u = fbeta_score(np.where(answered, y, 1), np.where(answered, pred, 0), beta=0.5, zero_division=0)
    return np.mean([roc_auc_score(y, s), c1, f1, f05u, 1 - np.mean((s - y) ** 2)])


def test_rescale_matches_pan_baseline(rng):
    s = rng.random(500)
    for p1, p2 in [(0.2, 0.4), (0.3, 0.3), (0.01, 0.99), (0.5, 0.51)]:
        np.testing.assert_allclose(pan_rescale(s, p1, p2), _pan_correct(s, p1, p2), atol=1e-12)


@pytest.mark.slow
def test_threshold_search_finds_the_grid_optimum(rng):
    y = rng.integers(0, 2, 120)
    s = np.clip(0.35 + 0.25 * y + rng.normal(0, 0.15, 120), 0, 1)
    p1, p2, best = fit_thresholds(y, s, step=0.05, low=0.05, high=0.95)
    grid = np.round(np.arange(0.05, 0.951, 0.05), 10)
    brute = max(_overall_sklearn(y, pan_rescale(s, a, b)) for i, a in enumerate(grid) for b in grid[i:])
    assert best == pytest.approx(brute, abs=1e-9)
    assert _overall_sklearn(y, pan_rescale(s, p1, p2)) == pytest.approx(best, abs=1e-9)
    assert p1 <= p2


def _corpus(authors):
    rows, personas = [], []
    for c, (u1, u2) in enumerate(authors):
        for i in range(max(len(u1), len(u2))):
            for s, lines in (("User 1", u1), ("User 2", u2)):
                if i < len(lines):
                    rows.append(
                        {
                            "conversation_id": f"c{c}",
                            "turn_index": len([r for r in rows if r["conversation_id"] == f"c{c}"]),
                            "speaker": s,
                            "text": lines[i],
                        }
                    )
        personas += [{"conversation_id": f"c{c}", "speaker": s, "persona": ["x"]} for s in ("User 1", "User 2")]
    return PersonaCorpus(
        conform(pa.Table.from_pylist(rows), PERSONA_CONVERSATIONS), conform(pa.Table.from_pylist(personas), PERSONAS)
    )


def _author(rng, alphabet, n=10):
    return [" ".join("".join(rng.choice(alphabet, size=5)) for _ in range(6)) + "." for _ in range(n)]


def test_pairs_are_balanced_and_from_the_right_authors():
    corpus = read_persona_corpus(example_path("persona") / "human.csv", limit=10)
    a, b, y, n = author_pairs(corpus, seed=3)
    assert n == 20 and len(a) == len(b) == 40 and y.sum() == 20
    for i in range(n):  # a same-author pair is an author's first half + their own second half; others differ
        assert a[i] == a[n + i] and b[i] != b[n + i]


@pytest.mark.slow
def test_consistency_tells_distinct_voices_apart(rng):
    letters = list("abcdefghijklmnopqrstuvwxyz")
    distinct = _corpus(
        [
            (
                _author(rng, letters[(4 * c) % 26 : (4 * c) % 26 + 4] or letters[:4]),
                _author(rng, letters[(4 * c + 2) % 26 : (4 * c + 2) % 26 + 4] or letters[:4]),
            )
            for c in range(25)
        ]
    )
    same = _corpus([(_author(rng, letters), _author(rng, letters)) for _ in range(25)])
    hi, lo = consistency(distinct, seed=0), consistency(same, seed=0)
    assert hi["score"] > 0.85 and hi["auc"] > 0.9
    assert lo["auc"] < 0.75 and lo["score"] < hi["score"] - 0.15
    assert hi["n_train"] + hi["n_test"] == 100 and hi["n_test"] == 20
    for k in ("f1", "auc", "c_at_1", "f05u", "brier"):
        assert 0.0 <= hi[k] <= 1.0
    assert hi["score"] == pytest.approx(np.mean([hi[k] for k in ("f1", "auc", "c_at_1", "f05u", "brier")]))
    assert consistency(distinct, seed=0) == hi  # seeded


def test_human_similarity():
    assert human_similarity(0.6, 0.6) == 1.0
    assert human_similarity(0.5, 0.625) == pytest.approx(0.8) == human_similarity(0.75, 0.625)
    assert human_similarity(0.5, None) is None and human_similarity(0.5, 0.0) is None


def test_too_small_corpus_is_a_clear_error():
    corpus = read_persona_corpus(example_path("persona") / "human.csv", limit=1)
    with pytest.raises(ValueError, match="at least 3 speakers"):
        consistency(corpus)

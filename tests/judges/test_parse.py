import json

import pytest
from scipy.special import expit, logsumexp

from adherence.judges import conversation_request, p_yes_from_logprobs, parse_turn_verdicts, parse_yes_no


@pytest.mark.parametrize(
    "text, expected",
    [
        ("YES", 1),
        (" yes", 1),
        ("Yes.", 1),
        ("**YES**", 1),
        ("yes, it adheres", 1),
        ("\nNo!", 0),
        ("NO", 0),
        ("'no'", 0),
        ("Nope", None),
        ("Maybe", None),
        ("", None),
        (None, None),
        ("The answer is yes", None),
        ("Yesterday", None),
    ],
)
def test_parse_yes_no(text, expected):
    assert parse_yes_no(text) == expected


def test_p_yes_matches_scipy_on_random_logprobs(rng):
    variants = ["Yes", " yes", "YES", "No", " no", "NO", "The", "I", "Maybe", " Y"]
    for _ in range(50):
        chosen = rng.choice(len(variants), size=rng.integers(1, len(variants)), replace=False)
        lps = {variants[i]: float(-rng.exponential(3)) for i in chosen}
        yes = [v for k, v in lps.items() if k.strip().lower() == "yes"]
        no = [v for k, v in lps.items() if k.strip().lower() == "no"]
        p, source = p_yes_from_logprobs(lps)
        if not yes and not no:
            assert (p, source) == (0.5, "fallback_0.5")
        elif not no:
            assert p == 1.0
        elif not yes:
            assert p == 0.0
        else:
            assert p == pytest.approx(expit(logsumexp(yes) - logsumexp(no)), abs=1e-12)
            assert source == "logprobs"


def test_p_yes_accepts_pairs_and_space_markers():
    assert p_yes_from_logprobs([("▁Yes", -1.0), ("Ġno", -1.0)])[0] == pytest.approx(0.5)
    assert p_yes_from_logprobs([("The", -0.1)]) == (0.5, "fallback_0.5")


def test_parse_turn_verdicts():
    text = "Turn 1: YES\nturn 2 - no\n**Turn 4:** Yes\nTurn 9: NO\nTurn 3: YES\nTurn 3: NO"
    assert parse_turn_verdicts(text, 5) == [1, 0, None, 1, None]  # 3 conflicting, 5 missing, 9 out of range
    assert parse_turn_verdicts(None, 2) == [None, None]


def test_per_turn_reasons_at_conversation_granularity():
    from adherence.judges._prompts import parse_turn_reasons

    text = "Turn 1: YES - stays on banking.\n**Turn 2: NO** — refuses an in-scope request\nTurn 3: YES\nTurn 1: NO - x"
    assert parse_turn_reasons(text, 3) == ["stays on banking.", "refuses an in-scope request", None]
    assert parse_turn_verdicts(text, 3) == [None, 0, 1]  # turn 1 contradicts itself: no verdict
    req = conversation_request("c", "role", ["u1", "u2"], ["a1", "a2"], include_reason=True)
    assert "<one-sentence reason>" in req.content
    assert "reason" not in conversation_request("c", "role", ["u1"], ["a1"]).content


def test_exact_sums_and_the_cache_round_trip():
    import math

    from adherence.judges import JudgeOutput
    from adherence.judges._parse import p_yes_from_sums

    p, mass = p_yes_from_sums(math.log(0.3), math.log(0.1))
    assert p == pytest.approx(0.75) and mass == pytest.approx(0.4)
    assert p_yes_from_sums(-math.inf, math.log(0.2)) == (0.0, pytest.approx(0.2))
    with pytest.raises(ValueError, match="probability 0"):
        p_yes_from_sums(-math.inf, -math.inf)
    with pytest.raises(ValueError, match="invalid"):
        p_yes_from_sums(float("nan"), -1.0)
    out = JudgeOutput(top_logprobs=[("Yes", -0.1)], yes_no=(-math.inf, -2.0))
    assert JudgeOutput.from_json(json.loads(json.dumps(out.to_json()))).yes_no == (-math.inf, -2.0)

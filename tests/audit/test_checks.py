import json

import pytest

from adherence.audit import CheckError, run_check, validate_check, word_count
from adherence.audit._checks import fill_placeholders, parse_json_object

GOOD = json.dumps(
    {
        "summary": "Ana Silva earned a rating of 4. She led the well-known migration.",
        "strengths": "migrated the billing pipeline; cut query costs by 30%",
        "growth_areas": "Present more.",
    }
)
FENCED = f"```json\n{GOOD}\n```"


@pytest.mark.parametrize(
    "output, expected", [(GOOD, "Yes"), (FENCED, "No"), ("not json", "No"), ("[1, 2]", "No"), ("", "No")]
)
def test_valid_json_is_strict(output, expected):
    assert run_check({"type": "valid_json"}, output)[0] == expected


def test_fenced_json_is_reported_as_fenced_but_fields_still_read():
    answer, evidence = run_check({"type": "valid_json"}, FENCED)
    assert answer == "No" and "fences" in evidence
    assert run_check({"type": "no_markdown_fences"}, FENCED)[0] == "No"
    assert run_check({"type": "exact_keys", "keys": ["summary", "strengths", "growth_areas"]}, FENCED)[0] == "Yes"


def test_exact_keys_names_what_differs():
    answer, evidence = run_check({"type": "exact_keys", "keys": ["summary", "strengths"]}, GOOD)
    assert answer == "No" and "growth_areas" in evidence


@pytest.mark.parametrize(
    "text, n",
    [
        ("well-known don't stop", 3),
        ("Zoë’s café—très bien", 4),
        ("", 0),
        ("  a  b\n\tc ", 3),
        ("30% of 2,000 users", 5),
        ("— - ...", 0),
    ],
)
def test_word_count(text, n):
    assert word_count(text) == n


def test_word_count_check_on_fields_and_combined():
    out = json.dumps({"a": "one two three", "b": "four five", "c": ""})
    assert run_check({"type": "word_count", "field": "a", "max": 3}, out) == ("Yes", "'a' has 3 words (required <= 3)")
    assert run_check({"type": "word_count", "fields": ["a", "b"], "min": 6}, out)[0] == "No"
    assert run_check({"type": "word_count", "field": "c", "min": 1}, out)[0] == "No"  # empty field
    assert "missing field" in run_check({"type": "word_count", "field": "zzz", "max": 5}, out)[1]


def test_contains_with_placeholders_and_list_variables():
    spec = {"type": "contains_at_least", "field": "strengths", "values": ["{achievements}"], "min": 2}
    ach = ["migrated the billing pipeline", "cut query costs by 30%", "mentored two interns"]
    answer, evidence = run_check(spec, GOOD, {"achievements": ach})
    assert answer == "Yes" and "2 of the required strings" in evidence
    assert run_check(dict(spec, min=3), GOOD, {"achievements": ach})[0] == "No"
    assert run_check({"type": "contains_at_least", "values": ["MIGRATED"], "case_sensitive": False}, GOOD)[0] == "Yes"


def test_starts_with_and_first_sentence_and_unicode():
    assert (
        run_check({"type": "starts_with", "field": "summary", "phrase": "{name}"}, GOOD, {"name": "Ana Silva"})[0]
        == "Yes"
    )
    assert run_check({"type": "starts_with", "field": "summary", "values": ["Ben", "Ana"]}, GOOD)[0] == "Yes"
    assert (
        run_check({"type": "first_sentence_contains", "field": "summary", "values": ["{rating}"]}, GOOD, {"rating": 4})[
            0
        ]
        == "Yes"
    )
    assert run_check({"type": "first_sentence_contains", "field": "summary", "values": ["migration"]}, GOOD)[0] == "No"
    uni = json.dumps({"summary": "Zoë Müller a obtenu 5. Très bien."}, ensure_ascii=False)
    assert run_check({"type": "starts_with", "field": "summary", "phrase": "Zoë Müller"}, uni)[0] == "Yes"


def test_first_person_and_negation():
    first = json.dumps({"summary": "I think Ana did well; our team agrees."})
    answer, evidence = run_check({"type": "first_person_pronoun", "field": "summary"}, first)
    assert answer == "Yes" and "['i', 'our']" in evidence
    assert run_check({"type": "first_person_pronoun", "field": "summary", "negate": True}, first)[0] == "No"
    assert run_check({"type": "first_person_pronoun", "field": "summary"}, GOOD)[0] == "No"  # "She" is third person


def test_placeholders_unknown_stay_and_specs_are_validated():
    assert fill_placeholders("Hi {name}, {missing}", {"name": "Ana"}) == "Hi Ana, {missing}"
    with pytest.raises(CheckError, match="unknown check type"):
        validate_check({"type": "regex"})
    with pytest.raises(CheckError, match="needs keys"):
        validate_check({"type": "exact_keys"})
    with pytest.raises(CheckError, match="min and/or max"):
        validate_check({"type": "word_count"})
    assert (
        parse_json_object('```\n{"a": 1}\n```') == {"a": 1}
        and parse_json_object('```\n{"a": 1}\n```', allow_fences=False) is None
    )

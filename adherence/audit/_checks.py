"""Deterministic rubric checks, answered by code and never sent to the judge.

A check spec is a dict ``{"type": ..., ...}``. Text values may hold
``{placeholders}`` filled from the artifact's input variables. Every check
returns ``(answer, evidence)``: ``"Yes"``/``"No"`` and what it found (a word
count, the matched strings), which becomes the judgment's justification.

Field access (``field``) reads a key of the output parsed as JSON; JSON wrapped
in markdown fences is unwrapped for field access, while ``valid_json`` itself is
strict (a fenced answer is not a JSON object).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

from .._errors import UserError

__all__ = [
    "CHECKS",
    "run_check",
    "validate_check",
    "fill_placeholders",
    "placeholders",
    "parse_json_object",
    "word_count",
    "CheckError",
]


class CheckError(UserError, ValueError):
    """A check spec is invalid (unknown type, missing argument)."""


_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WORD = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*", re.UNICODE)
_FIRST_PERSON = re.compile(r"\b(i|me|my|mine|myself|we|us|our|ours|ourselves)\b", re.IGNORECASE)


def fill_placeholders(value: Any, variables: dict) -> Any:
    """Replace ``{name}`` in strings (recursively in lists) with the artifact's variables; unknown names stay."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: str(variables[m.group(1)]) if m.group(1) in variables else m.group(0), value)
    if isinstance(value, list):
        out: list[Any] = []
        for v in value:
            filled = fill_placeholders(v, variables)
            # A placeholder that names a list variable expands into its items.
            if isinstance(v, str) and _PLACEHOLDER.fullmatch(v) and isinstance(variables.get(v[1:-1]), list):
                out.extend(str(x) for x in variables[v[1:-1]])
            else:
                out.append(filled)
        return out
    return value


def word_count(text: str) -> int:
    """Words as runs of letters/digits; hyphenated and apostrophe words count once ("well-known", "don't")."""
    return len(_WORD.findall(text or ""))


def parse_json_object(text: str, *, allow_fences: bool = True) -> Optional[dict]:
    """The output as a JSON object, or None. With ``allow_fences`` a single fenced block is unwrapped."""
    if text is None:
        return None
    body = text.strip()
    if allow_fences:
        m = _FENCE.match(body)
        if m:
            body = m.group(1).strip()
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _field_text(output: str, fields) -> tuple[Optional[str], str]:
    """Concatenated text of one or several fields (or the whole output when none)."""
    if not fields:
        return output or "", "the output"
    names = [fields] if isinstance(fields, str) else list(fields)
    obj = parse_json_object(output)
    if obj is None:
        return None, "the output is not a JSON object"
    missing = [f for f in names if f not in obj]
    if missing:
        return None, f"missing field(s) {', '.join(map(repr, missing))}"
    parts = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in (obj[f] for f in names)]
    return " ".join(parts), " + ".join(repr(f) for f in names)


def _yes(ok: bool) -> str:
    return "Yes" if ok else "No"


def _valid_json(output, spec):
    if parse_json_object(output, allow_fences=False) is not None:
        return "Yes", "the output parses as a JSON object"
    if parse_json_object(output, allow_fences=True) is not None:
        return "No", "the JSON object is wrapped in markdown fences"
    return "No", "the output does not parse as a JSON object"


def _exact_keys(output, spec):
    obj = parse_json_object(output)
    if obj is None:
        return "No", "the output is not a JSON object"
    want, got = set(spec["keys"]), set(obj)
    extra, missing = sorted(got - want), sorted(want - got)
    if not extra and not missing:
        return "Yes", f"keys are exactly {sorted(want)}"
    return "No", f"missing {missing}, unexpected {extra}"


def _no_fences(output, spec):
    n = (output or "").count("```")
    return _yes(n == 0), f"{n // 2 if n else 0} fenced block(s) found" if n else "no markdown fences"


def _word_count(output, spec):
    text, where = _field_text(output, spec.get("field") or spec.get("fields"))
    if text is None:
        return "No", where
    n = word_count(text)
    lo, hi = spec.get("min"), spec.get("max")
    ok = (lo is None or n >= lo) and (hi is None or n <= hi)
    bounds = " and ".join(
        b for b in ((f">= {lo}" if lo is not None else ""), (f"<= {hi}" if hi is not None else "")) if b
    )
    return _yes(ok), f"{where} has {n} words (required {bounds})"


def _contains(output, spec):
    text, where = _field_text(output, spec.get("field") or spec.get("fields"))
    if text is None:
        return "No", where
    values = [v for v in spec["values"] if isinstance(v, str) and v]
    cs = spec.get("case_sensitive", True)
    hay = text if cs else text.casefold()
    found = [v for v in values if (v if cs else v.casefold()) in hay]
    k = int(spec.get("min", 1))
    return _yes(len(found) >= k), f"{where} contains {len(found)} of the required strings (need {k}): {found}"


def _starts_with(output, spec):
    text, where = _field_text(output, spec.get("field"))
    if text is None:
        return "No", where
    options = [spec["phrase"]] if "phrase" in spec else list(spec["values"])
    stripped = text.lstrip()
    hit = next((o for o in options if o and stripped.startswith(o)), None)
    return _yes(hit is not None), f"{where} starts with {hit!r}" if hit else f"{where} starts with {stripped[:40]!r}"


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _first_sentence(output, spec):
    text, where = _field_text(output, spec.get("field"))
    if text is None:
        return "No", where
    first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0] if text.strip() else ""
    values = [v for v in spec["values"] if isinstance(v, str) and v]
    missing = [v for v in values if v not in first]
    return _yes(
        not missing
    ), f"first sentence {first[:80]!r}; missing {missing}" if missing else f"first sentence contains {values}"


def _first_person(output, spec):
    text, where = _field_text(output, spec.get("field"))
    if text is None:
        return "No", where
    found = sorted({m.group(0).lower() for m in _FIRST_PERSON.finditer(text)})
    return _yes(
        bool(found)
    ), f"first-person pronouns in {where}: {found}" if found else f"no first-person pronoun in {where}"


CHECKS: dict[str, tuple[Callable, tuple]] = {
    "valid_json": (_valid_json, ()),
    "exact_keys": (_exact_keys, ("keys",)),
    "no_markdown_fences": (_no_fences, ()),
    "word_count": (_word_count, ()),
    "contains_at_least": (_contains, ("values",)),
    "starts_with": (_starts_with, ()),
    "first_sentence_contains": (_first_sentence, ("values",)),
    "first_person_pronoun": (_first_person, ()),
}


def validate_check(spec: Any) -> dict:
    """Check a spec's shape; returns it, or raises ``CheckError`` with what is wrong."""
    if not isinstance(spec, dict) or "type" not in spec:
        raise CheckError(f"a check must be an object with a 'type'; got {spec!r}")
    if spec["type"] not in CHECKS:
        raise CheckError(f"unknown check type {spec['type']!r}; available: {', '.join(CHECKS)}")
    missing = [a for a in CHECKS[spec["type"]][1] if a not in spec]
    if missing:
        raise CheckError(f"check {spec['type']!r} needs {', '.join(missing)}")
    if spec["type"] == "word_count" and spec.get("min") is None and spec.get("max") is None:
        raise CheckError("check 'word_count' needs min and/or max")
    for bound in ("min", "max"):
        v = spec.get(bound)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise CheckError(f"check {spec['type']!r}: {bound} must be a whole number >= 0, got {v!r}")
    if spec["type"] in ("contains_at_least", "first_sentence_contains", "exact_keys"):
        key = "keys" if spec["type"] == "exact_keys" else "values"
        if not isinstance(spec[key], list):
            raise CheckError(f"check {spec['type']!r}: {key} must be a list, got {spec[key]!r}")
    if spec["type"] == "starts_with" and "phrase" not in spec and "values" not in spec:
        raise CheckError("check 'starts_with' needs phrase or values")
    return spec


def placeholders(spec: Any) -> set[str]:
    """Names of the ``{placeholders}`` a check spec uses (recursively)."""
    if isinstance(spec, str):
        return set(_PLACEHOLDER.findall(spec))
    if isinstance(spec, dict):
        return set().union(*(placeholders(v) for v in spec.values())) if spec else set()
    if isinstance(spec, list):
        return set().union(*(placeholders(v) for v in spec)) if spec else set()
    return set()


def run_check(spec: dict, output: Optional[str], variables: Optional[dict] = None) -> tuple[str, str]:
    """Run a check on an artifact's output with its input variables filled in.

    ``"negate": true`` flips the answer, for questions phrased as an absence
    ("Does the summary avoid first-person pronouns?").
    """
    validate_check(spec)
    filled = {k: fill_placeholders(v, variables or {}) for k, v in spec.items()}
    answer, evidence = CHECKS[spec["type"]][0](output if output is not None else "", filled)
    if spec.get("negate"):
        answer = "No" if answer == "Yes" else "Yes"
    return answer, evidence

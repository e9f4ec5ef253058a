"""The audit judge: one strict-and-fair evaluation per artifact and run, parsed tolerantly."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Optional

from ..judges import JudgeRequest, parse_yes_no

__all__ = [
    "audit_request",
    "question_requests",
    "evidence_request",
    "parse_audit_answer",
    "repair_json",
    "normalize_question",
]

_PROMPT = (
    "You are a strict and fair evaluator. An application was given the prompt below and produced the output "
    "below. Answer every question about the OUTPUT with Yes or No. Justify each answer with specific evidence "
    "quoted or counted from the output.\n\n<prompt>\n{prompt}\n</prompt>\n\n<output>\n{output}\n</output>\n\n"
    "Questions:\n{questions}\n\n"
    "Answer with JSON only, one key per category, in this form:\n"
    '{{"<category>": [{{"question": "<the question>", "justification": "<evidence>", "answer": "Yes" or "No"}}]}}'
)


# --answer-format per-question: one request per question, answered by the first token's P(yes), then the evidence
# for the verdict drawn, in a second call. Every answer parses, so small judges can audit too.
_HEAD = (
    "You are a strict and fair evaluator. An application was given the prompt below and produced the output "
    "below.\n\n<prompt>\n{prompt}\n</prompt>\n\n<output>\n{output}\n</output>\n\n"
)
_ASK = "Question about the OUTPUT: {question}\nAnswer with Yes or No only."
_EVIDENCE = (
    "Question about the OUTPUT: {question}\nThe answer is {answer}. In one sentence, give the evidence for it, "
    "quoted or counted from the output."
)


def question_requests(filled_prompt: str, output: str, items: list, *, group: str = "") -> list[JudgeRequest]:
    """One yes/no request per judge-answered item (in ``ordered_items`` order), the artifact as a shared prefix."""
    head = _HEAD.format(prompt=filled_prompt or "", output=output or "")
    return [
        JudgeRequest((head, _ASK.format(question=i.question)), group=group, index=n)
        for n, i in enumerate(ordered_items(items))
    ]


def evidence_request(question: JudgeRequest, item: Any, answer: str) -> JudgeRequest:
    """The request for the evidence behind ``answer`` to ``question`` (same artifact prefix)."""
    return JudgeRequest(
        (question.pieces[0], _EVIDENCE.format(question=item.question, answer=answer)),
        group=question.group,
        index=question.index,
    )


def ordered_items(items: list) -> list:
    """Items in the order the prompt numbers them: grouped by category, first-seen category first."""
    return [i for cat in dict.fromkeys(i.category for i in items) for i in items if i.category == cat]


def audit_request(filled_prompt: str, output: str, items: list, *, group: str = "") -> JudgeRequest:
    """The evaluation prompt for one artifact and the judge-answered rubric items (grouped by category)."""
    lines, cat = [], None
    for n, i in enumerate(ordered_items(items), start=1):
        if i.category != cat:
            cat = i.category
            lines.append(f"[{cat}]")
        lines.append(f"{n}. {i.question}")
    return JudgeRequest(
        (_PROMPT.format(prompt=filled_prompt or "", output=output or "", questions="\n".join(lines)),), group=group
    )


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def _closed(text: str) -> Optional[str]:
    """``text`` from its first ``{`` with the brackets it leaves open closed (a stop string or the token
    budget cut the answer short); None when there is nothing to close."""
    start = text.find("{")
    if start < 0:
        return None
    stack, in_str, esc = [], False, False
    for ch in text[start:]:
        if in_str:
            esc, in_str = (not esc and ch == "\\"), (in_str if esc or ch != '"' else False)
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack and stack[-1] == ch:
            stack.pop()
    if not stack:
        return None
    body = text[start:].rstrip()
    if in_str:
        body += '"'
    body = re.sub(r"[,:]\s*$", "", body)
    return body + "".join(reversed(stack))


def repair_json(text: Optional[str]) -> Any:
    """Best-effort JSON from a model answer: fences stripped, the outermost object cut out,
    trailing commas removed, single quotes and Python literals accepted, brackets left open by a
    stop string or the token budget closed. None when nothing parses."""
    if not text:
        return None
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    closed = _closed(text)
    if closed is not None:
        candidates.append(closed)
    for cand in candidates:
        start, end = cand.find("{"), cand.rfind("}")
        if start < 0 or end <= start:
            continue
        body = cand[start : end + 1]
        for attempt in (body, re.sub(r",\s*([}\]])", r"\1", body)):
            try:
                return json.loads(attempt)
            except json.JSONDecodeError:
                pass
        try:
            import ast

            fixed = (
                re.sub(r",\s*([}\]])", r"\1", body)
                .replace("true", "True")
                .replace("false", "False")
                .replace("null", "None")
            )
            obj = ast.literal_eval(fixed)
            if isinstance(obj, dict):
                return obj
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return None


def normalize_question(q: str) -> str:
    q = re.sub(r"^\s*\d+[.)]\s*", "", q or "")
    return re.sub(r"[^\w]+", " ", q.casefold()).strip()


def _answer_word(answer: Optional[int]) -> Optional[str]:
    """``Yes`` / ``No`` for a parsed verdict (1 / 0), None for none."""
    return None if answer is None else ("Yes" if answer else "No")


def parse_audit_answer(text: Optional[str], items: list) -> dict:
    """``question_id -> (answer, justification)`` for every item; unparseable or missing -> (None, None).

    Entries are matched to rubric questions by normalised text, then by close
    match (ratio >= 0.8), then by their position within the answer when the
    counts agree. An answer without JSON is read as numbered lines
    ("2. No - the summary has 71 words"), numbers as in the prompt.
    """
    out: dict[str, tuple[Optional[str], Optional[str]]] = {i.question_id: (None, None) for i in items}
    obj = repair_json(text)
    if obj is None:
        return _numbered_lines(text or "", items, out)
    entries: list[dict] = []
    if isinstance(obj, dict):
        for value in obj.values():
            if isinstance(value, list):
                entries.extend(e for e in value if isinstance(e, dict))
            elif isinstance(value, dict) and "question" in value:
                entries.append(value)
    elif isinstance(obj, list):
        entries = [e for e in obj if isinstance(e, dict)]
    if not entries:
        return out
    by_norm = {normalize_question(i.question): i.question_id for i in items}
    norms = list(by_norm)
    unmatched = []
    for e in entries:
        q = normalize_question(str(e.get("question", "")))
        qid = by_norm.get(q)
        if qid is None and q:
            close = difflib.get_close_matches(q, norms, n=1, cutoff=0.8)
            qid = by_norm[close[0]] if close else None
        answer = parse_yes_no(str(e.get("answer", "")))
        value = (_answer_word(answer), (str(e["justification"]) if e.get("justification") else None))
        if qid is None:
            unmatched.append(value)
        elif out[qid] == (None, None):
            out[qid] = value
    if unmatched and len(entries) == len(items) and all(v == (None, None) for v in out.values()):
        for i, e in zip(items, entries):
            answer = parse_yes_no(str(e.get("answer", "")))
            out[i.question_id] = (
                _answer_word(answer),
                str(e["justification"]) if e.get("justification") else None,
            )
    return out


_NUMBERED = re.compile(r"^\s*(?:question\s*)?(\d+)\s*[.):-]\s*\**\s*(yes|no)\b[\s*.,:;-]*(.*)$", re.IGNORECASE)


def _numbered_lines(text: str, items: list, out: dict) -> dict:
    order = ordered_items(items)
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = _NUMBERED.match(line)
        if not m:
            continue
        k = int(m.group(1)) - 1
        if not 0 <= k < len(order) or out[order[k].question_id] != (None, None):
            continue
        why = m.group(3).strip()
        if not why:  # the justification may follow on the next non-empty line
            why = next((ln.strip() for ln in lines[n + 1 : n + 3] if ln.strip() and not _NUMBERED.match(ln)), "")
        out[order[k].question_id] = ("Yes" if m.group(2).lower() == "yes" else "No", why or None)
    return out

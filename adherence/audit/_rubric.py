"""Rubrics: yes/no questions derived from a system prompt, loaded, validated and drafted."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import pyarrow as pa

from ..data import RUBRIC_ITEMS, DataError, read_table
from ._checks import CheckError, validate_check

__all__ = ["Rubric", "RubricItem", "load_rubric", "CATEGORIES", "draft_rubric", "rubric_prompts"]

CATEGORIES = ("Instruction Completeness", "Data Field Utilization", "Format Adherence", "Style Adherence")


@dataclass
class RubricItem:
    question_id: str
    question: str
    category: str
    kind: str  # objective | subjective
    check: Optional[dict] = None

    @property
    def by_code(self) -> bool:
        return self.check is not None


@dataclass
class Rubric:
    items: list
    ignored: list = field(default_factory=list)  # [{instruction, reason}]

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(
            [
                {
                    "question_id": i.question_id,
                    "question": i.question,
                    "category": i.category,
                    "kind": i.kind,
                    "check": json.dumps(i.check) if i.check else None,
                }
                for i in self.items
            ]
        )

    def to_json(self) -> dict:
        return {
            "questions": [
                {
                    "id": i.question_id,
                    "question": i.question,
                    "category": i.category,
                    "kind": i.kind,
                    **({"check": i.check} if i.check else {}),
                }
                for i in self.items
            ],
            "ignored": self.ignored,
        }

    def text(self, path: Union[str, os.PathLike]) -> str:
        """The rubric as the file ``path`` names would hold it: YAML for ``.yaml`` / ``.yml``, else JSON."""
        if Path(path).suffix.lower() in (".yaml", ".yml"):
            import yaml

            return yaml.safe_dump(self.to_json(), sort_keys=False, allow_unicode=True)
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    def save(self, path: Union[str, os.PathLike]) -> Path:
        """Write the rubric at ``path`` (a plain write, for scripts; `adherence audit rubric` writes through the one
        owner-checked writer, which never replaces a rubric edited by hand)."""
        path = Path(path)
        path.write_text(self.text(path), encoding="utf-8")
        return path


def _load_obj(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text (byte {exc.start}: {exc.reason})", file=path) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            what = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line
            raise DataError(f"invalid YAML ({what})", file=path, line=mark.line + 1 if mark else None) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON ({exc.msg})", file=path, line=exc.lineno) from None


def load_rubric(path: Union[str, os.PathLike]) -> Rubric:
    """Load a rubric (YAML/JSON ``{questions: [...], ignored: [...]}``, or a rubric-items table) and validate it.

    Each question: ``id``, ``question``, ``category``, ``kind`` (objective | subjective),
    optional ``check`` (a code-check spec). Errors name the file and the question.
    """
    path = Path(path)
    if not path.exists():
        raise DataError("no such file or directory", file=path)
    raw: Any
    ignored: Any
    if path.suffix.lower() in (".parquet", ".csv", ".jsonl"):
        t = read_table(path, RUBRIC_ITEMS)
        raw = [
            {
                "id": r["question_id"],
                "question": r["question"],
                "category": r["category"],
                "kind": r["kind"],
                "check": json.loads(r["check"]) if r.get("check") else None,
            }
            for r in t.to_pylist()
        ]
        ignored = []
    else:
        obj = _load_obj(path)
        raw = obj.get("questions") if isinstance(obj, dict) else obj
        ignored = obj.get("ignored", []) if isinstance(obj, dict) else []
        if not isinstance(raw, list) or not raw:
            raise DataError("a rubric needs a non-empty list of questions (under 'questions')", file=path)
    items, seen = [], set()
    for n, q in enumerate(raw, start=1):
        if not isinstance(q, dict):
            raise DataError(f"question {n}: expected an object", file=path, row=n)
        qid = str(q.get("id") or q.get("question_id") or f"q{n}")
        for key in ("question", "category", "kind"):
            if not q.get(key):
                raise DataError(f"question {qid!r}: missing {key!r}", file=path, row=n, column=key)
        if q["kind"] not in ("objective", "subjective"):
            raise DataError(
                f"question {qid!r}: kind must be objective or subjective, got {q['kind']!r}",
                file=path,
                row=n,
                column="kind",
            )
        if q["category"] not in CATEGORIES:
            from .._registry import unknown_name

            raise DataError(
                f"question {qid!r}: " + unknown_name("category", str(q["category"]), CATEGORIES),
                file=path,
                row=n,
                column="category",
            )
        if qid in seen:
            raise DataError(f"duplicate question id {qid!r}", file=path, row=n, column="id")
        seen.add(qid)
        check = q.get("check")
        if check is not None:
            try:
                validate_check(check)
            except CheckError as exc:
                raise DataError(f"question {qid!r}: {exc}", file=path, row=n, column="check") from None
        items.append(RubricItem(qid, str(q["question"]), str(q["category"]), q["kind"], check))
    return Rubric(items, list(ignored))


_DRAFT = (
    "You are a QA engineer. Below is the system prompt of an application.\n\n<system_prompt>\n{prompt}\n</system_prompt>\n\n"
    "List the {kind} instructions it gives, as yes/no questions a reviewer can answer about one output. "
    '{kind_rule} Conditional instructions ("if ..., then ...") do not become questions; put them under '
    '"ignored" with the reason, and so do instructions of the other kind.\n'
    "Group the questions by category: " + ", ".join(CATEGORIES) + ".\n"
    'Answer with JSON only: {{"questions": [{{"category": "...", "question": "..."}}], '
    '"ignored": [{{"instruction": "...", "reason": "..."}}]}}'
)
_KIND_RULE = {
    "objective": "Objective instructions can be verified without judgment (format, length, required fields or values).",
    "subjective": "Subjective instructions need judgment (tone, helpfulness, specificity).",
}


def rubric_prompts(system_prompt: str) -> dict:
    """The two drafting prompts (objective, subjective)."""
    return {
        kind: _DRAFT.format(prompt=system_prompt.strip(), kind=kind, kind_rule=_KIND_RULE[kind])
        for kind in ("objective", "subjective")
    }


def _extract_json(text: str):
    from ._judge import repair_json

    return repair_json(text)


def draft_rubric(
    system_prompt: str, backend, *, max_tokens: int = 512, seed: int = 0, stop: Optional[list] = None
) -> tuple[Rubric, list]:
    """Draft objective and subjective questions with an LLM in two passes; returns (rubric, raw answers).

    Generation ends at ``max_tokens`` or at the end of the requested JSON (``stop``, default ``"]}"``).

    Answers that are not parseable JSON fall back to one question per line that
    ends with a question mark. The draft is meant to be reviewed and edited.
    """
    from ..judges import JudgeRequest

    prompts = rubric_prompts(system_prompt)
    kinds = list(prompts)
    outs = backend.generate(
        [JudgeRequest((prompts[k],)) for k in kinds],
        max_tokens=max_tokens,
        temperature=0.0,
        seed=seed,
        stop=["]}"] if stop is None else stop,
    )
    items: list[RubricItem] = []
    ignored: list[dict[str, str]] = []
    raw: list[dict[str, Any]] = []
    for kind, out in zip(kinds, outs):
        text = out.text or ""
        raw.append({"kind": kind, "answer": text, "error": out.error})
        obj = _extract_json(text)
        questions: list[tuple[str, str]] = []
        if isinstance(obj, dict):
            for q in obj.get("questions") or []:
                if isinstance(q, dict) and isinstance(q.get("question"), str) and q["question"].strip():
                    cat = str(q["category"]) if q.get("category") in CATEGORIES else "Instruction Completeness"
                    questions.append((cat, q["question"].strip()))
            for ig in obj.get("ignored") or []:
                if isinstance(ig, dict) and ig.get("instruction"):
                    ignored.append(
                        {"instruction": str(ig["instruction"]), "reason": str(ig.get("reason", "")), "pass": kind}
                    )
        else:
            for line in text.splitlines():
                line = re.sub(r"^[\s\-*\d.)]+", "", line).strip()
                if line.endswith("?") and len(line) > 8:
                    questions.append(("Instruction Completeness", line))
        for cat, q in questions:
            items.append(RubricItem(f"{kind[:3]}{len(items) + 1}", q, cat, kind))
    return Rubric(items, ignored), raw

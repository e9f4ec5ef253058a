"""Run an audit: code checks and k independent judge runs per artifact -> a judgments table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

from ..data import ARTIFACTS, JUDGMENTS, read_table
from ._checks import placeholders, run_check
from ._judge import audit_request, parse_audit_answer
from ._rubric import Rubric

__all__ = ["AuditConfig", "run_audit", "artifact_variables"]


@dataclass
class AuditConfig:
    """Options of the repeated judging.

    Attributes:
        runs: independent judge runs per artifact (k).
        temperature: sampling temperature of each run (0 = greedy: identical runs).
        seed: run r samples with seed + r.
        max_tokens: answer budget per artifact (None: 48 + 72 per judge-answered question).
        stop: the answer ends at the first of these strings (default ``"]}"``, the end of the
            requested JSON; a cut answer's open brackets are closed before parsing).
        cache: SQLite judge-call cache (keyed by model, prompt, sampling params and run index).
        progress: a progress bar with ETA over runs x artifacts.
    """

    runs: int = 5
    temperature: float = 0.7
    seed: int = 0
    max_tokens: Optional[int] = None
    cache: Optional[str] = None
    stop: tuple = ("]}",)
    progress: bool = True

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError(f"`runs` must be >= 1, got {self.runs}")
        if self.temperature < 0:
            raise ValueError(f"`temperature` must be >= 0, got {self.temperature}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"`max_tokens` must be >= 1, got {self.max_tokens}")

    def budget(self, n_questions: int) -> int:
        return self.max_tokens or 48 + 72 * n_questions


def artifact_variables(row: dict) -> dict:
    """An artifact's input variables: its extra columns, plus the keys of an ``inputs`` JSON object."""
    skip = set(ARTIFACTS.names) | {"inputs"}
    out = {k: v for k, v in row.items() if k not in skip and v is not None}
    raw = row.get("inputs")
    if isinstance(raw, str) and raw.strip():
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            out.update(parsed)
    elif isinstance(raw, dict):
        out.update(raw)
    for k, v in list(out.items()):  # list variables may arrive as JSON text from CSV
        if isinstance(v, str) and v.startswith("["):
            try:
                out[k] = json.loads(v)
            except json.JSONDecodeError:
                pass
    return out


def _check_placeholders(code_items, rows: list[dict], artifacts) -> None:
    """A ``{placeholder}`` no artifact provides would silently answer "No" everywhere: refuse it up front."""
    from ..data import DataError

    file = str(artifacts) if not isinstance(artifacts, pa.Table) else "<table>"
    for n, row in enumerate(rows, start=1):
        variables = artifact_variables(row)
        for item in code_items:
            unknown = sorted(placeholders(item.check) - set(variables))
            if unknown:
                raise DataError(
                    f"question {item.question_id!r} uses placeholder {{{unknown[0]}}}, which artifact "
                    f"{row['artifact_id']!r} does not provide (its variables: "
                    f"{', '.join(sorted(variables)) or 'none'})",
                    file=file,
                    row=n,
                    column=unknown[0],
                )


def run_audit(
    rubric: Rubric, artifacts, backend, *, config: Optional[AuditConfig] = None, judge_name: Optional[str] = None
) -> pa.Table:
    """Judgments for every (artifact, run, question): code checks answered by code, the rest by the judge.

    A question the judge did not answer parseably has ``answer=null`` (unscored), never "No".
    Code-answered rows carry ``judge="code"``; judge-answered rows keep the judge's raw answer
    in ``raw`` so an unscored answer can be read.
    """
    from tqdm.auto import tqdm

    from ..judges import JudgeCache
    from ..judges._judge import cached_calls

    config = config or AuditConfig()
    table = read_table(artifacts, ARTIFACTS)
    rows = table.to_pylist()
    judge = judge_name or backend.model_id
    code_items = [i for i in rubric.items if i.by_code]
    judge_items = [i for i in rubric.items if not i.by_code]
    cache = JudgeCache(config.cache) if config.cache else None
    _check_placeholders(code_items, rows, artifacts)
    out = []
    for row in rows:
        variables = artifact_variables(row)
        code = {i.question_id: run_check(i.check, row["output"], variables) for i in code_items}
        for run in range(config.runs):
            for i in code_items:
                answer, evidence = code[i.question_id]
                out.append(
                    dict(
                        artifact_id=row["artifact_id"],
                        generator=row["generator"],
                        judge="code",
                        run=run,
                        question_id=i.question_id,
                        answer=answer,
                        justification=evidence,
                        source="code",
                        raw=None,
                    )
                )
    if judge_items:
        requests = [
            audit_request(r["filled_prompt"], r["output"], judge_items, group=f"{r['artifact_id']}|{r['generator']}")
            for r in rows
        ]
        budget = config.budget(len(judge_items))
        step = 6  # artifacts per call: batched generation, and a progress bar that moves
        bar = tqdm(
            total=config.runs * len(rows),
            desc=f"judging ({judge})",
            unit="answer",
            leave=False,
            disable=not config.progress,
            dynamic_ncols=True,
        )
        for run in range(config.runs):
            answers = []
            for a in range(0, len(requests), step):
                answers += cached_calls(
                    backend,
                    cache,
                    "audit",
                    requests[a : a + step],
                    repeat=run,
                    max_tokens=budget,
                    temperature=config.temperature,
                    seed=config.seed + run,
                    stop=list(config.stop) or None,
                )
                bar.update(len(requests[a : a + step]))
            for k, row in enumerate(rows):
                o = answers[k]
                parsed = parse_audit_answer(o.text if o.error is None else None, judge_items)
                for i in judge_items:
                    answer, why = parsed[i.question_id]
                    if o.error:
                        why = f"judge call failed: {o.error}"
                    out.append(
                        dict(
                            artifact_id=row["artifact_id"],
                            generator=row["generator"],
                            judge=judge,
                            run=run,
                            question_id=i.question_id,
                            answer=answer,
                            justification=why,
                            source="judge",
                            raw=o.text if o.error is None else None,
                        )
                    )
        bar.close()
    return read_table(pa.Table.from_pylist(out), JUDGMENTS)

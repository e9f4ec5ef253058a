"""Run an audit: code checks and k independent judge runs per artifact -> a judgments table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

from .._errors import OptionError
from .._options import option
from ..data import ARTIFACTS, JUDGMENTS, read_table
from ._checks import placeholders, run_check
from ._judge import audit_request, evidence_request, ordered_items, parse_audit_answer, question_requests
from ._rubric import Rubric

__all__ = ["AuditConfig", "read_artifacts", "run_audit", "artifact_variables", "ANSWER_FORMATS", "tempered_p_yes"]

ANSWER_FORMATS = ("json", "per-question")


@dataclass
class AuditConfig:
    """Options of the repeated judging.

    Attributes:
        runs: independent judge runs per artifact (k).
        temperature: sampling temperature of each run (0 = greedy: identical runs).
        seed: run r samples with seed + r.
        max_tokens: answer budget per artifact (None: 48 + 72 per judge-answered question); with
            ``answer_format="per-question"``: the evidence budget per question (None: 48).
        stop: the answer ends at the first of these strings (default ``"]}"``, the end of the
            requested JSON; a cut answer's open brackets are closed before parsing).
        cache: SQLite judge-call cache (keyed by model, prompt, sampling params and run index).
        progress: a progress bar with ETA over runs x artifacts.
        answer_format: ``"json"``: one generated JSON answer per artifact and run, parsed tolerantly (a
            judge that cannot write it leaves the answers unscored). ``"per-question"``: each question
            is its own request, answered Yes or No from the first token's P(yes) (greedy at temperature 0,
            else drawn with P(yes) tempered by the temperature, seeded per run), then the evidence for
            that verdict is generated: every answer parses, whatever the judge's size.
    """

    runs: int = option(5, help="independent judge runs k (default 5)")
    temperature: float = option(0.7, help="sampling temperature of each run (0: greedy, every run identical)")
    seed: int = option(0, help="run r samples with seed + r")
    max_tokens: Optional[int] = option(
        None,
        type=int,
        help="answer budget per artifact and run, in tokens (default: 48 + 72 per judge-answered question; answers "
        "also end at the close of the requested JSON); with --answer-format per-question: the evidence budget per "
        "question (default 48)",
    )
    cache: Optional[str] = None
    stop: tuple = ("]}",)
    progress: bool = True
    answer_format: str = option(
        "json",
        choices=ANSWER_FORMATS,
        help="json: one JSON answer per artifact and run, parsed tolerantly (default); per-question: each question "
        "answered Yes/No from the first token's P(yes), then the evidence generated (every answer parses: for small "
        "judges)",
    )

    def __post_init__(self) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise OptionError(f"`answer_format` must be one of {', '.join(ANSWER_FORMATS)}, got {self.answer_format!r}")
        if self.runs < 1:
            raise OptionError(f"`runs` must be >= 1, got {self.runs}")
        if self.temperature < 0:
            raise OptionError(f"`temperature` must be >= 0, got {self.temperature}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise OptionError(f"`max_tokens` must be >= 1, got {self.max_tokens}")

    def budget(self, n_questions: int) -> int:
        if self.answer_format == "per-question":
            return self.max_tokens or 48
        return self.max_tokens or 48 + 72 * n_questions


def tempered_p_yes(p: float, temperature: float) -> float:
    """P(yes) of sampling between yes and no at ``temperature`` from the judge's P(yes) ``p`` (the two-way
    softmax with logits divided by the temperature); 0 or 1 at temperature 0 (greedy, ``p >= 0.5`` is yes)."""
    if temperature == 0:
        return 1.0 if p >= 0.5 else 0.0
    if p <= 0.0 or p >= 1.0:
        return float(p >= 1.0)
    return 1.0 / (1.0 + ((1.0 - p) / p) ** (1.0 / temperature))


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


def read_artifacts(rubric: Rubric, artifacts) -> list[dict]:
    """The artifacts' rows (a file or an Arrow table), checked against the rubric's code checks: what ``run_audit``
    reads, to be read before a judge is loaded (bad input is one line at once, not after the model loads)."""
    rows = read_table(artifacts, ARTIFACTS).to_pylist()
    _check_placeholders([i for i in rubric.items if i.by_code], rows, artifacts)
    return rows


def run_audit(
    rubric: Rubric, artifacts, backend, *, config: Optional[AuditConfig] = None, judge_name: Optional[str] = None
) -> pa.Table:
    """Judgments for every (artifact, run, question): code checks answered by code, the rest by the judge.

    A question the judge did not answer parseably has ``answer=null`` (unscored), never "No".
    ``artifacts``: a file, an Arrow table, or the rows ``read_artifacts`` gave. Code-answered rows carry
    ``judge="code"``; judge-answered rows keep the judge's raw answer
    in ``raw`` so an unscored answer can be read.
    """

    from ..judges import JudgeCache, cached_calls

    config = config or AuditConfig()
    rows = artifacts if isinstance(artifacts, list) else read_artifacts(rubric, artifacts)
    judge = judge_name or backend.model_id
    code_items = [i for i in rubric.items if i.by_code]
    judge_items = [i for i in rubric.items if not i.by_code]
    cache = JudgeCache(config.cache) if config.cache else None
    out = []
    for row in rows:
        variables = artifact_variables(row)
        code = {i.question_id: run_check(i.check, row["output"], variables) for i in code_items}
        for run in range(config.runs):
            for i in code_items:
                answer, evidence = code[i.question_id]
                out.append(_judgment(row, "code", run, i.question_id, answer, evidence, None, source="code"))
    if judge_items and config.answer_format == "per-question":
        out += _per_question(rows, judge_items, backend, cache, config, judge)
    elif judge_items:
        requests = [
            audit_request(r["filled_prompt"], r["output"], judge_items, group=f"{r['artifact_id']}|{r['generator']}")
            for r in rows
        ]
        budget = config.budget(len(judge_items))
        step = 6  # artifacts per call: batched generation, and a progress bar that moves
        bar = _progress(config, len(rows), judge)
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
                        _judgment(row, judge, run, i.question_id, answer, why, o.text if o.error is None else None)
                    )
        bar.close()
    return read_table(pa.Table.from_pylist(out), JUDGMENTS)


def _judgment(row: dict, judge: str, run: int, question_id: str, answer, justification, raw, source="judge") -> dict:
    """One row of the judgments table (``source="code"``: answered by a code check)."""
    return dict(
        artifact_id=row["artifact_id"],
        generator=row["generator"],
        judge=judge,
        run=run,
        question_id=question_id,
        answer=answer,
        justification=justification,
        source=source,
        raw=raw,
    )


def _progress(config: AuditConfig, n_rows: int, judge: str):
    """The judging progress bar: runs x artifacts answers, with an ETA."""
    from tqdm.auto import tqdm

    return tqdm(
        total=config.runs * n_rows,
        desc=f"judging ({judge})",
        unit="answer",
        leave=False,
        disable=not config.progress,
        dynamic_ncols=True,
    )


def _first_token_p_yes(backend, cache, requests: list) -> list:
    """Per request ``(P(yes) or None, what it came from or why there is none)``: exact over the whole vocabulary
    in-process, from the top log-probabilities on servers. None for every request of a backend without them."""
    from ..judges import cached_calls, first_token_verdict, variant_sets

    if not backend.supports_logprobs:
        return [(None, "the judge returns no log-probabilities")] * len(requests)
    yes, no = variant_sets()
    params: dict = {"top_k": 20}
    if backend.full_vocab:
        params["variants"] = [sorted(yes), sorted(no)]
    try:
        outs = cached_calls(backend, cache, "logprobs", requests, **params)
    except RuntimeError as exc:
        if backend.supports_logprobs:  # not a missing-logprobs failure
            raise
        return [(None, f"the judge returns no log-probabilities ({exc})")] * len(requests)
    got: list = []
    for o in outs:
        v = first_token_verdict(o, yes, no)
        if v.ok:
            got.append((v.p_yes, v.source))
        else:
            got.append((None, f"judge call failed: {v.error}" if o.error else v.error))
    return got


def _per_question(rows: list, judge_items: list, backend, cache, config: AuditConfig, judge: str) -> list:
    """Judge-answered rows of ``answer_format="per-question"``: a P(yes) per (artifact, question), a verdict per
    run drawn from it, and the evidence for each verdict generated in a second call."""
    import numpy as np

    from ..judges import cached_calls, parse_yes_no

    items = ordered_items(judge_items)
    asks = [
        question_requests(r["filled_prompt"], r["output"], items, group=f"{r['artifact_id']}|{r['generator']}")
        for r in rows
    ]
    flat = [q for per_row in asks for q in per_row]
    p_yes = _first_token_p_yes(backend, cache, flat)
    step = 6 * len(items)  # about six artifacts per call, as in the JSON format
    out = []
    bar = _progress(config, len(rows), judge)
    for run in range(config.runs):
        seed = config.seed + run
        draws = np.random.default_rng([config.seed, run]).random(len(flat))
        verdicts: list = []
        said: list = []
        if any(p is None for p, _ in p_yes):  # no log-probabilities: generated verdicts, sampled by the backend
            said = cached_calls(
                backend,
                cache,
                "audit-verdict",
                flat,
                repeat=run,
                max_tokens=4,
                temperature=config.temperature,
                seed=seed,
            )
        for n, (p, source) in enumerate(p_yes):
            if p is not None:
                verdicts.append(("Yes" if draws[n] < tempered_p_yes(p, config.temperature) else "No", p, source))
            else:
                v = parse_yes_no(said[n].text) if said[n].error is None else None
                why = source if v is not None else (said[n].error or f"unparseable judge answer: {said[n].text!r}")
                verdicts.append(({1: "Yes", 0: "No"}.get(v) if v is not None else None, None, why))
        wanted = [(n, evidence_request(flat[n], items[n % len(items)], v[0])) for n, v in enumerate(verdicts) if v[0]]
        evidence: dict = {}
        advanced = 0.0
        for a in range(0, len(wanted), step):
            part = wanted[a : a + step]
            texts = cached_calls(
                backend,
                cache,
                "audit-evidence",
                [r for _, r in part],
                repeat=run,
                max_tokens=config.budget(len(items)),
                temperature=config.temperature,
                seed=seed,
            )
            evidence.update({n: o for (n, _), o in zip(part, texts)})
            bar.update(len(part) / len(items))
            advanced += len(part) / len(items)
        bar.update(len(rows) - advanced)  # artifacts whose verdicts were all unscored need no evidence
        for k, row in enumerate(rows):
            for j, item in enumerate(items):
                n = k * len(items) + j
                answer, p, source = verdicts[n]
                e = evidence.get(n)
                why = None
                if answer is None:
                    why = source
                elif e is not None and e.error:
                    why = f"judge call failed: {e.error}"
                elif e is not None:
                    why = (e.text or "").strip() or None
                raw = {"p_yes": p, "p_yes_source": source if p is not None else None, "verdict": answer}
                if e is not None:
                    raw["evidence"] = e.text
                out.append(
                    _judgment(row, judge, run, item.question_id, answer, why, json.dumps(raw, ensure_ascii=False))
                )
    bar.close()
    return out

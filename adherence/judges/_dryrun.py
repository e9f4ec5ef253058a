"""What a judge job would send, counted without loading the model (``adherence score --dry-run``)."""

from __future__ import annotations

import pyarrow as pa

from ._backend_options import capabilities

__all__ = ["judge_plan"]


def judge_plan(turns: pa.Table, config) -> dict:
    """Counts for scoring ``turns`` with ``config`` (a ``adherence.role.RoleConfig`` with a judge).

    Prompt and forward tokens are exact for the transformers backend (its tokenizer, chat
    template and prefix-sharing packer); other backends get a characters / 4 estimate,
    labelled ``approximate``. Generated tokens are the upper bound the job allows.
    """
    from ._judge import JudgeConfig, RoleJudge
    from ._prompts import reason_request

    jc = config.judge or JudgeConfig()
    planner = RoleJudge.__new__(RoleJudge)  # only its request builder: no backend, no model
    planner.config = jc
    per_turn, per_conv, errors = planner.requests(turns)
    reqs = [r for _, r in per_turn] + [r for _, r in per_conv]
    k = jc.samples
    binary = jc.output_mode == "binary" or jc.granularity == "conversation"
    gen_each = 4 if binary else 0
    out = {
        "turns": turns.num_rows,
        "turns_with_errors": len(errors),
        "judge_calls": 0,
        "prompt_tokens": 0,
        "forward_tokens": 0,
        "generated_tokens_max": 0,
        "approximate": not capabilities(jc.backend).exact_token_counts,
    }
    if jc.granularity == "conversation":
        calls = [(r, 16 + (40 if jc.include_reason else 8) * r.meta["n_turns"]) for _, r in per_conv]
    else:
        calls = [(r, gen_each) for r in reqs] * k
        if jc.include_reason:
            calls += [(reason_request(r), 96) for r in reqs]
    out["judge_calls"] = len(calls)
    out["generated_tokens_max"] = sum(g for _, g in calls)
    if capabilities(jc.backend).exact_token_counts:
        from ._planner import PromptPlanner

        opts = jc.backend_options
        backend = PromptPlanner.from_model(
            jc.model, max_context=opts.get("max_context"), prefix_sharing=opts.get("prefix_sharing", True)
        )
        by_reserve: dict = {}
        for r, g in calls:
            by_reserve.setdefault(max(1, g), []).append(r)
        for reserve, group in by_reserve.items():
            c = backend.count_tokens(group, reserve=reserve)
            shared = reserve == 1  # only first-token log-prob calls are packed; generation runs each prompt
            out["prompt_tokens"] += c["prompt_tokens"]
            out["forward_tokens"] += c["forward_tokens"] if shared else c["prompt_tokens"]
            out["too_long"] = out.get("too_long", 0) + c["too_long"]
            out["truncated"] = out.get("truncated", 0) + c["truncated"]
        out["judge_model"] = backend.model_id
    else:
        chars = sum(len(r.content) + len(r.system or "") for r, _ in calls)
        out["prompt_tokens"] = out["forward_tokens"] = chars // 4
        out["judge_model"] = jc.model
    return out

"""``adherence score --dry-run``: what a judge job would send (counted without loading the model) and, with
``--estimate N``, how long it would take here, from N samples scored with the real judge."""

from __future__ import annotations

from typing import Optional

import pyarrow as pa

from .._errors import OptionError
from ..judges import judge_plan

__all__ = ["dry_run", "time_estimate"]


#: turns per timed sample of ``--estimate`` (whole conversations): enough for the judge to batch as in a job
SAMPLE_TURNS = 16


def time_estimate(turns: pa.Table, config, *, samples: int, total_tokens: int, seed: int = 0) -> dict:
    """The job's time on this machine, from timing ``samples`` samples of its conversations with the real judge.

    Each sample is whole conversations drawn at random until it holds ``SAMPLE_TURNS`` turns (fewer in a
    small input); one more is
    scored first, untimed (the model loads, kernels warm up). Each timed sample gives seconds per forward
    token; the estimate is ``total_tokens`` times their mean, and its 95% interval ``total_tokens`` times
    Student's t interval of that mean (wide with few samples: time more to narrow it). A job batches a whole
    shard at once, so the estimate leans long.
    """
    import time

    import numpy as np
    import pyarrow.compute as pc
    from scipy import stats

    from ._base import Resources
    from ._score import score_turns

    if samples < 2:
        raise OptionError(f"--estimate needs at least 2 samples to give an interval, got {samples}")
    column = turns.column("conversation_id")
    ids, counts = np.unique(np.asarray(column.to_pylist(), dtype=object), return_counts=True)
    order = np.random.default_rng(seed).permutation(len(ids))
    # a small input gets smaller samples, so that it still has samples + 1 of them
    target = max(1, min(SAMPLE_TURNS, turns.num_rows // (samples + 1)))
    groups: list[list] = []
    current: list = []
    size = 0
    for i in order:
        current.append(ids[i])
        size += int(counts[i])
        if size >= target:
            groups.append(current)
            current, size = [], 0
            if len(groups) == samples + 1:
                break
    if len(groups) < 3:
        raise OptionError(f"--estimate needs at least 3 samples; the input has {len(ids)} conversations")
    resources = Resources(config)
    per_token, timed_turns, seconds = [], 0, 0.0
    for k, group in enumerate(groups):
        part = turns.filter(pc.is_in(column, value_set=pa.array(group, column.type)))
        t0 = time.perf_counter()
        score_turns(part, config.method, config=config, resources=resources)
        dt = time.perf_counter() - t0
        if k == 0:
            continue  # the warm-up
        per_token.append(dt / max(1, judge_plan(part, config)["forward_tokens"]))
        timed_turns += part.num_rows
        seconds += dt
    x = np.asarray(per_token)
    mean = float(x.mean())
    low, high = stats.t.interval(0.95, len(x) - 1, loc=mean, scale=stats.sem(x)) if x.std() > 0 else (mean, mean)
    return {
        "seconds": total_tokens * mean,
        "low": max(0.0, total_tokens * float(low)),
        "high": total_tokens * float(high),
        "samples": len(x),
        "turns": timed_turns,
        "turns_per_s": timed_turns / seconds if seconds > 0 else None,
        "seconds_per_token": per_token,
    }


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def dry_run(
    source,
    config,
    *,
    input_format: str = "auto",
    role: Optional[str] = None,
    bad_rows: Optional[str] = None,
    estimate: int = 0,
    columns: Optional[dict] = None,
) -> str:
    """The dry-run report for a file, as the lines ``adherence score --dry-run`` prints (``columns``: the input's own
    names of the contract's columns, as ``score --columns`` gives them)."""
    from ..data import TURNS, TranscriptOptions, iter_batches, skipped_summary

    opts = TranscriptOptions(input_format, role, bad_rows, columns=dict(columns or {}))
    batches = list(iter_batches(source, TURNS, transcripts=opts))
    turns = (
        pa.Table.from_batches(batches)
        if batches and isinstance(batches[0], pa.RecordBatch)
        else (pa.concat_tables(batches) if batches else None)
    )
    if turns is None or turns.num_rows == 0:
        raise OptionError(f"{source}: no turns to score")
    plan = judge_plan(turns, config)
    about = "about " if plan["approximate"] else ""
    lines = [
        f"dry run: {plan['turns']} turns ({plan['turns_with_errors']} with input errors), judge {plan['judge_model']}",
        f"  {plan['judge_calls']} judge calls, {about}{plan['prompt_tokens']:,} prompt tokens, "
        f"{about}{plan['forward_tokens']:,} forward tokens after prefix sharing, "
        f"at most {plan['generated_tokens_max']:,} generated tokens",
    ]
    if plan.get("truncated") or plan.get("too_long"):
        lines.append(
            f"  {plan.get('truncated', 0)} prompts lose history to fit the context; "
            f"{plan.get('too_long', 0)} do not fit even without it (status=error)"
        )
    sk = skipped_summary(opts.skipped)  # what the job's summary records of them
    if sk:
        reasons = sk["reasons"]
        lines.append(
            f"  {sk['count']} malformed input record(s) would be left out ({', '.join(sk['first'])}"
            f"{', ...' if sk['count'] > len(sk['first']) else ''}), for {len(reasons)} reason(s): "
            f"{'; '.join(reasons[:3])}{'; ...' if len(reasons) > 3 else ''}; "
            "the job writes each to OUTPUT.bad-rows.jsonl (--bad-rows fail stops on the first)"
        )
    if plan["approximate"]:
        lines.append("  (token counts for this backend are estimated as characters / 4)")
    if estimate:
        est = time_estimate(turns, config, samples=estimate, total_tokens=plan["forward_tokens"])
        lines.append(
            f"  estimated time on this machine, one worker: {_duration(est['seconds'])} (95% interval "
            f"{_duration(est['low'])} to {_duration(est['high'])}), from {est['samples']} samples "
            f"({est['turns']} turns, {est['turns_per_s']:.2f} turns/s) timed after a warm-up"
        )
    else:
        lines.append("  add --estimate 4 to time 4 samples of the input with the judge and estimate the job's time")
    return "\n".join(lines)

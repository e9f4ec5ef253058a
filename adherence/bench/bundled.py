"""``adherence bench bundled``: the bundled models on the bundled labelled sets, on one device.

Two parts, each checked before it is timed:

- ``judge``: the bundled judge (SmolLM2-135M-Instruct, its real weights) scores every labelled turn of the bundled
  sets in ``dtype`` (bf16 on a GPU, fp32 on a CPU) and again with its linear layers in float8; per set, P(yes)'s mean
  and largest change and each precision's AUC against the labels. The goal a float8 default must meet: mean
  |delta P(yes)| <= 0.01 and AUC within 0.005 on every set (``float8_within_goal``).
- ``classifier``: a classifier fit on the claims desk's labels scores a generated support log through the engine on
  the device (turns/s), after its first 64 scores are checked against the model's probabilities computed directly.

Sets: the hand-written ``claims_desk`` and ``pharmacy_line`` logs and the paper-style role sets (``examples``);
``limit`` keeps each set's first turns (a rehearsal on a CPU).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pyarrow as pa

__all__ = ["bench_bundled"]

FLOAT8_GOAL = {"mean_abs_p_yes_difference": 0.01, "auc_difference": 0.005}


def _sets() -> dict:
    from .labels import paper_style_turns
    from .own_logs import own_log_turns

    out = {}
    for name in ("claims_desk", "pharmacy_line"):
        t, y, _ = own_log_turns(name)
        out[name] = (t, y)
    out["paper_style"] = paper_style_turns()
    return out


def _judge_scores(table: pa.Table, dtype: str, device: Optional[str]) -> tuple:
    from ..judges import JudgeConfig
    from ..models import DEFAULT_JUDGE
    from ..role import Resources, RoleConfig, score_turns

    judge = JudgeConfig(model=DEFAULT_JUDGE, backend_options={"progress": False, "dtype": dtype, "device": device})
    cfg = RoleConfig(method="llm_judge", judge=judge, progress=False, device=device)
    t0 = time.perf_counter()
    scored = score_turns(table, "llm_judge", config=cfg, resources=Resources(cfg))
    seconds = time.perf_counter() - t0
    s = np.asarray([np.nan if v is None else v for v in scored.column("score").to_pylist()], dtype=float)
    return s, seconds


def _scored_auc(y: np.ndarray, s: np.ndarray) -> Optional[float]:
    """The AUC over the turns that have a score (``adherence bench labels``' AUC, None for one class)."""
    from .labels import _auc

    ok = np.isfinite(s)
    return _auc(y[ok], s[ok]) if ok.sum() > 1 else None


def _judge(sets: dict, device: Optional[str], dtype: str, say) -> dict:
    rows: dict[str, Any] = {}
    for name, (table, y) in sets.items():
        say(f"judge: {name} ({table.num_rows} turns) in {dtype}, then float8")
        base, t_base = _judge_scores(table, dtype, device)
        f8, t_f8 = _judge_scores(table, "float8", device)
        both = np.isfinite(base) & np.isfinite(f8)
        d = np.abs(base[both] - f8[both])
        auc_base, auc_f8 = _scored_auc(y, base), _scored_auc(y, f8)
        auc_diff = None if auc_base is None or auc_f8 is None else abs(auc_base - auc_f8)
        rows[name] = {
            "turns": int(table.num_rows),
            "scored_in_both": int(both.sum()),
            "mean_abs_p_yes_difference": float(d.mean()) if d.size else None,
            "max_abs_p_yes_difference": float(d.max()) if d.size else None,
            "auc": {dtype: auc_base, "float8": auc_f8},
            "auc_difference": auc_diff,
            "seconds": {dtype: round(t_base, 2), "float8": round(t_f8, 2)},
            "turns_per_s": {dtype: table.num_rows / t_base, "float8": table.num_rows / t_f8},
        }
    means = [r["mean_abs_p_yes_difference"] for r in rows.values()]
    aucs = [r["auc_difference"] for r in rows.values()]
    within = all(m is not None and m <= FLOAT8_GOAL["mean_abs_p_yes_difference"] for m in means) and all(
        a is None or a <= FLOAT8_GOAL["auc_difference"] for a in aucs
    )
    return {
        "model": "bundled SmolLM2-135M-Instruct (GGUF weights), P(yes)",
        "against": dtype,
        "goal": FLOAT8_GOAL,
        "sets": rows,
        "float8_within_goal": bool(within),
        # the check that can fail: both precisions scored every turn
        "correct": all(r["scored_in_both"] == r["turns"] for r in rows.values()),
    }


def _classifier(train: tuple, turns: int, device: Optional[str], tmpdir: str, say) -> dict:
    """The classifier job of ``adherence bench labels``, on ``device``: fit on ``train``'s labels, timed on a
    generated log, checked on its first 64 turns."""
    from ..models import Encoder
    from .labels import classifier_job, classifier_job_setup

    table, y = train
    encoder = Encoder(progress=False, device=device)
    clf, big, src = classifier_job_setup(encoder, table, y, turns, tmpdir)
    say(f"classifier: {big.num_rows} turns through the engine")
    row, _ = classifier_job(clf, big, src, Path(tmpdir) / "scores.parquet", device=device, encoder=encoder)
    return {
        "trained_on": f"claims_desk labels ({table.num_rows} turns)",
        "turns": int(big.num_rows),
        **row,
        "correct": bool(row.get("correctness", {}).get("passed")),
    }


def bench_bundled(
    *,
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    limit: Optional[int] = None,
    classifier_turns: int = 50_000,
    parts: tuple = ("judge", "classifier"),
    verbose: bool = True,
) -> dict:
    """The bundled judge in ``dtype`` vs float8 on the bundled labelled sets, and the classifier's turns/s through
    the engine, on ``device`` (default: CUDA when available). Returns the JSON-able result; ``correct`` is False when
    a check failed."""
    import tempfile

    import torch

    from .._errors import OptionError
    from ._hardware import cpu_info, device_name

    unknown = set(parts) - {"judge", "classifier"}
    if unknown:
        raise OptionError(f"unknown part(s) {', '.join(sorted(unknown))}: choose judge, classifier")
    if limit is not None and limit < 2:
        raise OptionError(f"--limit must be >= 2, got {limit}")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype or ("bfloat16" if dev.type == "cuda" else "float32")

    def say(msg: str) -> None:
        if verbose:
            print(f"[bench bundled] {msg}", flush=True)

    sets = _sets()
    train = sets["claims_desk"]  # the classifier learns from every label of the claims desk, whatever ``limit``
    if limit:
        sets = {k: (t.slice(0, limit), y[:limit]) for k, (t, y) in sets.items()}
    result: dict[str, Any] = {
        "bench": "bundled",
        "args": {"dtype": dtype, "limit": limit, "classifier_turns": classifier_turns, "parts": list(parts)},
        "device": device_name(dev),
        "cpu": cpu_info(),
    }
    if "judge" in parts:
        result["judge"] = _judge(sets, str(dev), dtype, say)
    if "classifier" in parts:
        with tempfile.TemporaryDirectory(prefix="adherence-bench-bundled-") as tmp:
            result["classifier"] = _classifier(train, classifier_turns, str(dev), tmp, say)
    result["correct"] = all(result[p]["correct"] for p in parts)
    return result

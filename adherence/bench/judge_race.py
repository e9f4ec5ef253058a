"""The judge backends raced on the same prompts, model and dtype: in-process transformers vs vLLM (offline
engine) and optionally an OpenAI-compatible server. Correctness first (P(yes) against the transformers
backend), then one timed pass per workload: ``unique`` prompts with nothing shared, and ``multi_turn``
conversations whose turns share their prefix (our tree-masked packing vs vLLM's automatic prefix caching).
"""

from __future__ import annotations

import platform
import time
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa

from .._errors import OptionError
from .judge import synthetic_conversations

__all__ = ["bench_judge_race"]


def _table(convs: list) -> pa.Table:
    rows = []
    for cid, role, users, assistants in convs:
        for i, (u, a) in enumerate(zip(users, assistants)):
            rows.append({"conversation_id": cid, "turn_index": i, "role": role, "user": u, "assistant": a})
    return pa.Table.from_pylist(rows).cast(
        pa.schema(
            [
                ("conversation_id", pa.string()),
                ("turn_index", pa.int32()),
                ("role", pa.string()),
                ("user", pa.string()),
                ("assistant", pa.string()),
            ]
        )
    )


def bench_judge_race(
    *,
    model: str,
    backends: Sequence[str] = ("transformers", "vllm"),
    dtype: str = "float32",
    unique: int = 64,
    unique_words: int = 120,
    conversations: int = 8,
    turns: int = 8,
    words_per_turn: int = 40,
    base_url: Optional[str] = None,
    served_model: Optional[str] = None,
    kv_cache_gb: float = 2.0,
    max_model_len: int = 2048,
    tolerance: Optional[float] = None,
    server_tolerance: float = 0.05,
    seed: int = 0,
    prebuilt: Optional[dict] = None,
) -> dict:
    """Race ``backends`` on the same judge checkpoint (a transformers directory, e.g. from
    ``adherence models export-judge``). Returns a JSON-ready dict with per workload and backend: seconds,
    turns/s, prompt tokens/s, and the max |ΔP(yes)| against the transformers backend; ``ratio`` is each
    backend's turns/s over transformers'. ``prebuilt``: backends already started, by name.
    ``tolerance``: allowed max |ΔP(yes)| of an in-process engine (default 1e-4 in float32; 0.1 in bfloat16,
    where different kernels round differently: the mean |ΔP| and the share of equal predictions are reported too)."""
    import torch

    if tolerance is None:
        tolerance = 1e-4 if dtype == "float32" else 0.1

    from ..judges import JudgeConfig, PromptPlanner, RoleJudge, TransformersBackend, get_backend

    if "transformers" not in backends:
        backends = ("transformers", *backends)
    workloads = {
        "unique": _table(synthetic_conversations(unique, 1, unique_words, seed)),
        "multi_turn": _table(synthetic_conversations(conversations, turns, words_per_turn, seed + 1)),
    }
    warm = _table(synthetic_conversations(2, 2, 20, seed + 99))
    counter = PromptPlanner.from_model(model)
    built = {}
    for name in backends:
        t = time.perf_counter()
        if prebuilt and name in prebuilt:
            built[name] = prebuilt[name]
        elif name == "transformers":
            built[name] = TransformersBackend(
                model, device="cpu" if not torch.cuda.is_available() else None, dtype=dtype, progress=False
            )
        elif name == "vllm":
            built[name] = get_backend(
                "vllm", model=model, dtype=dtype, max_model_len=max_model_len, kv_cache_gb=kv_cache_gb, progress=False
            )
        elif name == "openai":
            if not base_url:
                raise OptionError("the openai backend needs --base-url (e.g. a vllm server on 127.0.0.1)")
            built[name] = get_backend("openai", model=served_model or model, base_url=base_url, concurrency=16)
        else:
            raise OptionError(f"unknown backend {name!r}: transformers, vllm or openai")
        built[f"{name}:startup_s"] = time.perf_counter() - t
    result: dict[str, Any] = {
        "args": {
            "model": model,
            "backends": list(backends),
            "dtype": dtype,
            "unique": unique,
            "unique_words": unique_words,
            "conversations": conversations,
            "turns": turns,
            "words_per_turn": words_per_turn,
            "tolerance": tolerance,
            "server_tolerance": server_tolerance,
        },
        "device": f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"
        if not torch.cuda.is_available()
        else torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "startup_s": {n: built[f"{n}:startup_s"] for n in backends},
        "workloads": {},
    }
    tf = built["transformers"]
    result["transformers"] = {
        "batch_tokens": getattr(tf, "batch_tokens", None),
        "tree_attention": bool(getattr(tf, "tree_attention", False)),
        "prefix_sharing": bool(getattr(tf, "prefix_sharing", False)),
    }
    try:
        import vllm

        result["versions"]["vllm"] = vllm.__version__
    except ImportError:
        pass
    for wname, table in workloads.items():
        reqs = RoleJudge.__new__(RoleJudge)
        reqs.config = JudgeConfig(model=model)
        per_turn, _, _ = reqs.requests(table)
        counts = counter.count_tokens([r for _, r in per_turn])
        entry: dict[str, Any] = {
            "turns": table.num_rows,
            "prompt_tokens": counts["prompt_tokens"],
            "transformers_forward_tokens": counts["forward_tokens"],
            "backends": {},
        }
        ref = None
        for name in backends:
            cfg = JudgeConfig(model=model, backend=name)
            judge = RoleJudge(cfg, backend=built[name])
            judge.score(warm)  # warm-up on other prompts (vLLM's prefix cache must not hold the timed ones)
            t = time.perf_counter()
            cols = judge.score(table)
            sec = time.perf_counter() - t
            if set(cols["status"]) != {"ok"}:
                raise RuntimeError(f"{name} on {wname}: not every turn was scored: {set(cols['status'])}")
            p = np.array(cols["score"], dtype=float)
            if ref is None:
                ref = p
            diff = float(np.abs(p - ref).max())
            tol = server_tolerance if name == "openai" else tolerance
            if diff > tol:
                raise RuntimeError(f"{name} on {wname}: P(yes) differs from transformers by {diff} > {tol}")
            entry["backends"][name] = {
                "seconds": sec,
                "turns_per_s": table.num_rows / sec,
                "prompt_tokens_per_s": counts["prompt_tokens"] / sec,
                "max_abs_p_yes_vs_transformers": diff,
                "mean_abs_p_yes_vs_transformers": float(np.abs(p - ref).mean()),
                "same_prediction_share": float(np.mean((p >= 0.5) == (ref >= 0.5))),
                "p_yes_source": sorted(set(cols["p_yes_source"])),
            }
        base = entry["backends"]["transformers"]["turns_per_s"]
        for v in entry["backends"].values():
            v["ratio_vs_transformers"] = v["turns_per_s"] / base
        result["workloads"][wname] = entry
    return result

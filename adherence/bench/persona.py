"""The EVAL4SIM persona protocol end to end: wall time, where it goes, and agreement with a CPU run.

Runs ``adherence.persona.evaluate_persona`` on one reference corpus (adherence with every retriever
over 13 pool sizes and ``repeats`` pools per query and size, and consistency), on the chosen device,
and reports the wall time with its parts: loading, each retriever's scoring (encoding and MaxSim
included) and MRR-curve sampling, and consistency. With ``baseline`` (the JSON ``adherence persona -o``
wrote on another machine, e.g. 2 CPU cores) the curves' normalised AUCs are checked against it (lexical
retrievers exactly, encoder ones within ``tolerance``: bf16 on a GPU vs fp32 on CPU) and ``speedup`` is
its wall time over ours.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Optional

from ._hardware import device_name

__all__ = ["bench_persona"]

_LEXICAL = ("tfidf", "bm25")


def bench_persona(
    *,
    reference: str,
    baseline: Optional[str] = None,
    device: Optional[str] = None,
    repeats: int = 10,
    dimensions=("adherence", "consistency"),
    tolerance: float = 0.01,
    limit: Optional[int] = None,
) -> dict:
    """Benchmark dict (``bench="persona"``): wall time and its parts, AUCs, agreement with ``baseline``."""
    import torch

    from ..models import pick_device
    from ..persona import PersonaConfig, evaluate_persona

    dev = pick_device(device)
    cfg = PersonaConfig(dimensions=tuple(dimensions), repeats=repeats, device=str(dev), progress=False, limit=limit)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t = time.perf_counter()
    res = evaluate_persona(reference, config=cfg)
    wall = time.perf_counter() - t
    ((name, out),) = res.items()
    parts: dict = {}
    adh = out.get("adherence", {})
    for m, curve in adh.get("curves", {}).items():
        for k, v in curve.get("seconds", {}).items():
            parts[f"adherence/{m}/{k}"] = v
    if "seconds" in adh:
        parts["adherence/other"] = round(
            adh["seconds"] - sum(v for k, v in parts.items() if k.startswith("adherence/")), 3
        )
    if "consistency" in out and "seconds" in out["consistency"]:
        parts["consistency"] = out["consistency"]["seconds"]
    parts["loading_and_models"] = round(wall - sum(parts.values()), 3)
    aucs = {m: c["nauc"] for m, c in adh.get("curves", {}).items()}
    result = {
        "bench": "persona",
        "args": {
            "reference": Path(reference).name,
            "dimensions": list(dimensions),
            "repeats": repeats,
            "pool_sizes": adh.get("pool_sizes"),
            "n_queries": adh.get("n_queries"),
            "n_documents": adh.get("n_documents"),
            "limit": limit,
        },
        "device": device_name(dev),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "wall_s": wall,
        "parts_s": dict(sorted(parts.items(), key=lambda kv: -kv[1])),
        "nauc": aucs,
        "consistency_score": out.get("consistency", {}).get("score"),
    }
    if dev.type == "cuda":
        result["gpu_peak_memory_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
    if baseline:
        base = json.loads(Path(baseline).read_text())
        bres = next(iter(base.values())) if "adherence" not in base else base
        bcurves = bres.get("adherence", {}).get("curves", {})
        diffs = {m: abs(aucs[m] - bcurves[m]["nauc"]) for m in aucs if m in bcurves}
        ok = all(d <= (1e-9 if m in _LEXICAL else tolerance) for m, d in diffs.items()) and bool(diffs)
        base_wall = sum(v.get("seconds", 0) for k, v in bres.items() if isinstance(v, dict))
        result["correctness"] = {
            "checked_against": f"{Path(baseline).name} (nauc per retriever)",
            "abs_differences": diffs,
            "tolerance": tolerance,
            "lexical_tolerance": 1e-9,
            "passed": ok,
        }
        result["correct"] = ok
        result["baseline_dimension_s"] = base_wall
        ours = sum(v.get("seconds", 0) for k, v in out.items() if isinstance(v, dict))
        result["dimension_s"] = ours
        result["speedup"] = base_wall / ours if ours else None
    return result

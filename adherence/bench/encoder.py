"""Sentence-encoder throughput against sentence-transformers on the same texts, weights and device.

Correctness first: our embeddings against sentence-transformers' ``encode`` in float32 (max |Δ| per
component and the lowest cosine between the two embeddings of a text), and in the run dtype against
sentence-transformers loaded in the same dtype; the criterion (``1 - min cosine <= tolerance`` and
``max |Δ| <= component_tolerance``) is named in the JSON. Then texts/s, tokenisation included for both:
ours (token-budget batches, the default dtype of the device) and sentence-transformers at its default
(float32, batch 32) and in the run dtype at batch sizes ``st_batches``; ``speedup`` is over the fastest
of those (named in ``baseline``). Every text is distinct and our cache is off, so each run encodes every
text.
"""

from __future__ import annotations

import csv
import functools
import platform
import re
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from ._hardware import device_name, spread, timed

__all__ = ["bench_encoder", "persona_chat_utterances"]


def persona_chat_utterances(path, limit: Optional[int] = None) -> list:
    """Distinct utterances of a Synthetic-Persona-Chat CSV (``User N:`` prefixes removed), in file order."""
    seen: dict = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for line in (row.get("Best Generated Conversation") or "").splitlines():
                text = re.sub(r"^\s*User \d+:\s*", "", line).strip()
                if text:
                    seen.setdefault(text, None)
                    if limit and len(seen) >= limit:
                        return list(seen)
    return list(seen)


def _synthetic(n: int, seed: int) -> list:
    from .judge import _WORDS

    rng = np.random.default_rng(seed)
    lens = np.clip(rng.lognormal(np.log(14), 0.6, n), 2, 200).astype(int)
    return [f"{i} " + " ".join(rng.choice(_WORDS, k)) for i, k in enumerate(lens)]


def bench_encoder(
    *,
    texts: int = 2000,
    persona_csv: Optional[str] = None,
    model: Optional[str] = None,
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    repeats: int = 3,
    tolerance: float = 1e-3,
    component_tolerance: float = 1e-2,
    st_batches=(32, 128, 512, 2048),
    seed: int = 0,
) -> dict:
    """Benchmark dict (``bench="encoder"``): correctness, per backend texts/s and tokens/s, ``speedup``."""
    import torch
    from sentence_transformers import SentenceTransformer

    from ..models import Encoder, pick_device, pick_dtype, resolve_model

    dev = pick_device(device)
    run_dtype = pick_dtype(dev, dtype)
    corpus = persona_chat_utterances(persona_csv, texts) if persona_csv else _synthetic(texts, seed)
    path = str(resolve_model(model).path)
    ours = Encoder(path, device=str(dev), dtype=dtype, progress=False, cache_bytes=0)
    n_tokens = sum(len(i) for i in ours.tokenizer(corpus, truncation=True, max_length=ours.max_length)["input_ids"])

    def st(dt):
        m = SentenceTransformer(path, device=str(dev), model_kwargs={"dtype": dt})
        m.max_seq_length = ours.max_length
        return m

    st32 = st(torch.float32)
    st_run = st32 if run_dtype == torch.float32 else st(run_dtype)

    def st_encode(m, bs):
        return m.encode(
            corpus, batch_size=bs, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False
        )

    mine = ours.encode(corpus).float().cpu()
    ref32 = st_encode(st32, 32).float().cpu()
    ref_run = ref32 if st_run is st32 else st_encode(st_run, 256).float().cpu()
    d32 = (mine - ref32).abs().max().item()
    cos32 = (mine * ref32).sum(1).min().item()
    d_run = (mine - ref_run).abs().max().item()
    cos_run = (mine * ref_run).sum(1).min().item()
    passed = (1 - cos32) <= tolerance and d32 <= component_tolerance
    if not passed:
        raise RuntimeError(
            f"encoder embeddings differ from sentence-transformers: lowest cosine {cos32} (bound 1 - {tolerance}), "
            f"largest component difference {d32} (bound {component_tolerance})"
        )
    result = {
        "bench": "encoder",
        "args": {
            "texts": len(corpus),
            "source": Path(persona_csv).name if persona_csv else "synthetic",
            "model": ours.name,
            "dtype": str(run_dtype).replace("torch.", ""),
            "repeats": repeats,
        },
        "device": device_name(dev),
        "versions": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "sentence_transformers": __import__("sentence_transformers").__version__,
        },
        "tokens": n_tokens,
        "correctness": {
            "checked_against": "sentence-transformers encode (float32)",
            "criterion": "1 - min_cosine <= tolerance and max_abs_difference <= component_tolerance",
            "max_abs_difference": d32,
            "min_cosine": cos32,
            "tolerance": tolerance,
            "component_tolerance": component_tolerance,
            "passed": passed,
            "same_dtype": {"max_abs_difference": d_run, "min_cosine": cos_run},
        },
        "correct": passed,
        "backends": {},
    }
    backends: dict[str, Callable[[], Any]] = {
        "adherence": lambda: ours.encode(corpus),
        "sentence_transformers (float32, batch 32)": lambda: st_encode(st32, 32),
    }
    for bs in st_batches:
        name = f"sentence_transformers ({result['args']['dtype']}, batch {bs})"
        backends.setdefault(name, functools.partial(st_encode, st_run, bs))
    result["args"]["st_batches"] = list(st_batches)
    for name, fn in backends.items():
        times = timed(fn, repeats, dev)
        entry = result["backends"][name] = spread(times)
        entry.update(texts_per_s=len(corpus) / entry["median_s"], tokens_per_s=n_tokens / entry["median_s"])
    st_rows = {k: v["median_s"] for k, v in result["backends"].items() if k.startswith("sentence")}
    result["baseline"] = min(st_rows, key=st_rows.__getitem__)
    result["speedup"] = st_rows[result["baseline"]] / result["backends"]["adherence"]["median_s"]
    return result

"""MaxSim over 1000-document pools: queries/s, against a padded per-query baseline, correctness first.

A synthetic corpus of unit-norm fp16 token embeddings (document lengths drawn around a
mean) is stored as one contiguous matrix with offsets, as the index stores it; every
query is scored against its own random pool of ``pool`` documents. The baseline scores
one query at a time the way padded implementations do (PyLate's ``colbert_scores``
when installed, else the same padded einsum in torch): gather the pool into
``[pool, max_len, dim]``, multiply, max, sum.

Bytes that must be read at least once per query: the pool's document tokens
(``sum(len) * dim * element size``). GB/s = bytes / time; ``ratio_to_peak`` divides it by the copy
bandwidth measured in the same run (:func:`adherence.bench._hardware.measured_peaks`). On CUDA the
baseline reads the stored dtype (PyLate picks its own fastest backend); on CPU it runs in float32.
"""

from __future__ import annotations

import platform
from typing import Optional

import numpy as np
import torch

from .._optional import is_available
from ..kernels.maxsim import maxsim, maxsim_reference
from ._hardware import device_name, measured_peaks, spread, timed

__all__ = ["bench_maxsim"]


def _corpus(n_docs, mean_len, q_len, n_queries, dim, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.clamp(torch.normal(float(mean_len), mean_len / 3.0, (n_docs,), generator=g), 4, 4 * mean_len).long()
    d_off = torch.zeros(n_docs + 1, dtype=torch.int64)
    d_off[1:] = lens.cumsum(0)
    # A shared direction makes token similarities positive, as in real (anisotropic) encoders; padded
    # baselines that score padding as 0 (PyLate) then agree with the exact definition.
    common = torch.randn(dim, generator=g) * 0.15
    d = torch.nn.functional.normalize(torch.randn(int(d_off[-1]), dim, generator=g) / dim ** 0.5 + common, dim=-1)
    q = torch.nn.functional.normalize(torch.randn(n_queries * q_len, dim, generator=g) / dim ** 0.5 + common, dim=-1)
    d, q = d.to(dtype), q.to(dtype)
    q_off = torch.arange(0, n_queries * q_len + 1, q_len, dtype=torch.int64)
    return q.to(device), q_off.to(device), d.to(device), d_off.to(device), lens


def _baseline(q, q_off, d, d_off, pools, device):
    """Padded per-query scoring (PyLate's colbert_scores when available)."""
    colbert = None
    if is_available("pylate"):
        try:
            from pylate.scores import colbert_scores as colbert
        except Exception:  # PyLate's optional imports failed: same computation in torch
            colbert = None
    lens = (d_off[1:] - d_off[:-1])
    out = []
    for i, pool in enumerate(pools):
        qq = q[int(q_off[i]) : int(q_off[i + 1])].float()[None]
        L = int(lens[pool].max())
        pos = torch.arange(L, device=device)
        mask = pos[None, :] < lens[pool][:, None]
        rows = (d_off[pool][:, None] + pos[None, :]).clamp(max=d.shape[0] - 1)
        docs = d[rows] * mask[..., None].to(d.dtype)
        if device.type != "cuda":
            docs = docs.float()
        qq = qq.to(docs.dtype)
        if colbert is not None:
            out.append(colbert(qq, docs, documents_mask=mask.to(docs.dtype))[0].float())
        else:
            sim = torch.einsum("qd,nld->nql", qq[0], docs).float().masked_fill(~mask[:, None, :], float("-inf"))
            out.append(sim.max(dim=2).values.sum(dim=1))
    return torch.stack(out), ("pylate.colbert_scores" if colbert is not None else "torch padded einsum")


def bench_maxsim(*, queries: int = 32, pool: int = 1000, corpus: int = 5000, doc_len: int = 300, query_len: int = 32,
                 dim: int = 384, dtype: str = "float16", repeats: int = 5, device: Optional[str] = None,
                 seed: int = 0, baseline: bool = True) -> dict:
    """Benchmark dict: arguments, device, versions, correctness, and median/spread time, queries/s, GB/s per backend."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if pool > corpus:
        raise ValueError(f"`pool` ({pool}) cannot exceed `corpus` ({corpus})")
    dt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    q, q_off, d, d_off, lens = _corpus(corpus, doc_len, query_len, queries, dim, dt, dev, seed)
    rng = np.random.default_rng(seed)
    pools = [torch.as_tensor(rng.choice(corpus, size=pool, replace=False), device=dev) for _ in range(queries)]
    qi = torch.arange(queries, device=dev).repeat_interleave(pool)
    di = torch.cat(pools)
    # CPU matmuls run in float32 (the index keeps a float32 copy on CPU); GPUs read fp16 directly.
    d_run = d if dev.type == "cuda" else d.float()
    q_run = q if dev.type == "cuda" else q.float()
    ours = "triton" if dev.type == "cuda" and is_available("triton") else "torch"

    def run():
        return maxsim(q_run, q_off, d_run, d_off, qi, di, backend=ours)

    # Correctness first: a sample of pairs against the one-pair-at-a-time definition.
    got = run()
    sample = torch.as_tensor(rng.choice(len(qi), size=min(300, len(qi)), replace=False), device=dev)
    want = maxsim_reference(q.cpu(), q_off.cpu(), d.cpu(), d_off.cpu(), qi[sample].cpu(), di[sample].cpu())
    err = float((got[sample].cpu() - want).abs().max())
    tol = 1e-3 if dt == torch.float32 else 5e-2
    if err > tol:
        raise RuntimeError(f"MaxSim ({ours}) disagrees with the definition: max abs error {err} > {tol}")
    correctness = {"checked_against": "maxsim_reference (per pair, float32)", "pairs_checked": int(len(sample)),
                   "max_abs_error": err, "tolerance": tol, "passed": True}
    elem = torch.tensor([], dtype=dt).element_size()
    pool_tokens = int(torch.stack([lens[p.cpu()].sum() for p in pools]).sum())
    bytes_read = pool_tokens * dim * elem + queries * query_len * dim * elem
    name = device_name(dev)
    peaks = measured_peaks(dev)
    result = {
        "bench": "maxsim",
        "args": {"queries": queries, "pool": pool, "corpus": corpus, "doc_len": doc_len, "query_len": query_len,
                 "dim": dim, "dtype": dtype, "repeats": repeats, "seed": seed},
        "device": name,
        "versions": {"torch": torch.__version__, "python": platform.python_version(),
                     **({"triton": __import__("triton").__version__} if ours == "triton" else {})},
        "correctness": correctness,
        "correct": True,
        "peak": peaks,
        "doc_tokens_per_query": pool_tokens / queries,
        "bytes_read_per_run": bytes_read,
        "backends": {},
    }
    backends = {f"adherence_{ours}": run}
    if baseline:
        base_scores, base_name = _baseline(q, q_off, d, d_off, pools, dev)
        berr = float((base_scores.flatten() - got).abs().max())
        if berr > tol:
            raise RuntimeError(f"baseline ({base_name}) disagrees with adherence: max abs error {berr} > {tol}")
        correctness["baseline_max_abs_error"] = berr
        backends[f"baseline ({base_name})"] = lambda: _baseline(q, q_off, d, d_off, pools, dev)
    for label, fn in backends.items():
        times = timed(fn, repeats, dev)  # after a warm-up (compilation for Triton)
        entry = spread(times)
        med = entry["median_s"]
        entry.update(queries_per_s=queries / med, pairs_per_s=queries * pool / med, gb_per_s=bytes_read / med / 1e9)
        entry["ratio_to_peak"] = entry["gb_per_s"] * 1e9 / peaks["copy_bytes_per_s"]
        result["backends"][label] = entry
    result["ratio_to_peak"] = result["backends"][f"adherence_{ours}"]["ratio_to_peak"]
    result["peak_kind"] = "copy_bytes_per_s"
    if baseline:
        ours_t = result["backends"][f"adherence_{ours}"]["median_s"]
        base_t = next(v["median_s"] for k, v in result["backends"].items() if k.startswith("baseline"))
        result["speedup"] = result["speedup_vs_baseline"] = base_t / ours_t
    return result

"""MaxSim over 1000-document pools: queries/s, against a padded per-query baseline, correctness first.

A synthetic corpus of unit-norm fp16 token embeddings (document lengths drawn around a
mean) is stored as one contiguous matrix with offsets, as the index stores it; every
query is scored against its own random pool of ``pool`` documents. The baseline scores
one query at a time the way padded implementations do: PyLate's ``colbert_scores`` (each of its
backends that runs here: torch einsum, flash-maxsim, late-interaction-kernels), else the same padded
einsum in torch. The baselines get their pools already gathered into ``[pool, max_len, dim]`` tensors
with masks, made before the timer: only the library's own call is timed. The fastest of them is the
named ``baseline`` of ``speedup``. The gather itself (what a caller holding contiguous token
embeddings must add) is timed separately as ``padded_pipeline``.

Bytes that must be read at least once per run: the tokens of every document in the union of the pools
and the queries' tokens (``bytes_read_per_run``; pools drawn from a corpus overlap, as EVAL4SIM's do, and
``pool_overlap`` says how many pools hold a document on average). A kernel that reads each document once
per pair moves ``pair_bytes_per_run`` instead. GB/s = ``bytes_read_per_run`` / time for every row, so rows
compare as work done; ``ratio_to_peak`` divides it by the copy bandwidth measured in the same run
(``adherence.bench._hardware.measured_peaks``). On CUDA the
baseline reads the stored dtype (PyLate picks its own fastest backend); on CPU it runs in float32.
"""

from __future__ import annotations

import platform
from typing import Any, Optional

import numpy as np
import torch

from .._errors import OptionError
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
    d = torch.nn.functional.normalize(torch.randn(int(d_off[-1]), dim, generator=g) / dim**0.5 + common, dim=-1)
    q = torch.nn.functional.normalize(torch.randn(n_queries * q_len, dim, generator=g) / dim**0.5 + common, dim=-1)
    d, q = d.to(dtype), q.to(dtype)
    q_off = torch.arange(0, n_queries * q_len + 1, q_len, dtype=torch.int64)
    return q.to(device), q_off.to(device), d.to(device), d_off.to(device), lens


def _padded(q, q_off, d, d_off, pools, device):
    """Per query: ``(query [1, Lq, dim], documents [pool, max_len, dim] zero-padded, mask [pool, max_len])`` —
    the layout padded implementations take (float32 on CPU, the stored dtype on CUDA)."""
    lens = d_off[1:] - d_off[:-1]
    out = []
    for i, pool in enumerate(pools):
        L = int(lens[pool].max())
        pos = torch.arange(L, device=device)
        mask = pos[None, :] < lens[pool][:, None]
        rows = (d_off[pool][:, None] + pos[None, :]).clamp(max=d.shape[0] - 1)
        docs = d[rows] * mask[..., None].to(d.dtype)
        if device.type != "cuda":
            docs = docs.float()
        qq = q[int(q_off[i]) : int(q_off[i + 1])][None].to(docs.dtype)
        out.append((qq, docs, mask.to(docs.dtype)))
    return out


def _pylate_backends(device) -> dict:
    """PyLate's ``colbert_scores`` under each of its backends that runs here: ``{name: fn(q, docs, mask)}``
    (``torch``: its einsum; ``flash``: flash-maxsim; ``lik``: late-interaction-kernels — GPU only)."""
    if not is_available("pylate"):
        return {}
    try:
        from pylate.scores import colbert as pl
    except Exception:  # PyLate's optional imports failed
        return {}
    names = ["torch"]
    if device.type == "cuda":
        from pylate.scores import _flash_backend, _lik_backend

        names += [n for n, mod in (("flash", _flash_backend), ("lik", _lik_backend)) if mod.is_available()]
    return {
        n: (lambda qq, docs, mask, n=n: pl.colbert_scores(qq, docs, documents_mask=mask, backend=n)[0].float())
        for n in names
    }


def _torch_padded(qq, docs, mask):
    sim = torch.einsum("qd,nld->nql", qq[0], docs).float().masked_fill(~mask.bool()[:, None, :], float("-inf"))
    return sim.max(dim=2).values.sum(dim=1)


def bench_maxsim(
    *,
    queries: int = 32,
    pool: int = 1000,
    corpus: int = 5000,
    doc_len: int = 300,
    query_len: int = 32,
    dim: int = 384,
    dtype: str = "float16",
    repeats: int = 5,
    device: Optional[str] = None,
    seed: int = 0,
    baseline: bool = True,
) -> dict:
    """Benchmark dict: arguments, device, versions, correctness, and median/spread time, queries/s, GB/s per backend."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if pool > corpus:
        raise OptionError(f"`pool` ({pool}) cannot exceed `corpus` ({corpus})")
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
    correctness: dict[str, Any] = {
        "checked_against": "maxsim_reference (per pair, float32)",
        "pairs_checked": int(len(sample)),
        "max_abs_error": err,
        "tolerance": tol,
        "passed": True,
    }
    elem = torch.tensor([], dtype=dt).element_size()
    pool_tokens = int(torch.stack([lens[p.cpu()].sum() for p in pools]).sum())
    union = torch.unique(torch.cat(pools).cpu())
    q_bytes = queries * query_len * dim * elem
    bytes_read = int(lens[union].sum()) * dim * elem + q_bytes
    name = device_name(dev)
    peaks = measured_peaks(dev)
    result: dict[str, Any] = {
        "bench": "maxsim",
        "args": {
            "queries": queries,
            "pool": pool,
            "corpus": corpus,
            "doc_len": doc_len,
            "query_len": query_len,
            "dim": dim,
            "dtype": dtype,
            "repeats": repeats,
            "seed": seed,
        },
        "device": name,
        "versions": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            **({"triton": __import__("triton").__version__} if ours == "triton" else {}),
        },
        "correctness": correctness,
        "correct": True,
        "peak": peaks,
        "doc_tokens_per_query": pool_tokens / queries,
        "pool_overlap": queries * pool / len(union),
        "bytes_read_per_run": bytes_read,
        "pair_bytes_per_run": pool_tokens * dim * elem + q_bytes,
        "backends": {},
    }
    backends = {f"adherence_{ours}": run}
    baselines = {}
    if baseline:
        padded = _padded(q, q_off, d, d_off, pools, dev)
        impl = {f"pylate.colbert_scores[{n}]": fn for n, fn in _pylate_backends(dev).items()}
        impl = impl or {"torch padded einsum": _torch_padded}
        versions = result["versions"]
        if is_available("pylate"):
            versions["pylate"] = _version("pylate")
            for pkg in ("flash-maxsim", "late-interaction-kernels"):
                if _version(pkg):
                    versions[pkg] = _version(pkg)
        for label, fn in impl.items():
            run_base = lambda fn=fn: [fn(*args) for args in padded]
            try:
                scores = torch.stack(run_base()).flatten()
            except Exception as exc:  # a backend that cannot take these inputs is reported, not timed
                correctness.setdefault("baseline_failed", {})[label] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            berr = float((scores - got).abs().max())
            if berr > tol:
                raise RuntimeError(f"baseline ({label}) disagrees with adherence: max abs error {berr} > {tol}")
            correctness.setdefault("baseline_max_abs_error", {})[label] = berr
            baselines[f"baseline ({label})"] = run_base
            backends[f"baseline ({label})"] = run_base
        backends["padded_pipeline (gather + pad + mask, before any baseline)"] = lambda: _padded(
            q, q_off, d, d_off, pools, dev
        )
    for label, fn in backends.items():
        times = timed(fn, repeats, dev)  # after a warm-up (compilation for Triton)
        entry = spread(times)
        med = entry["median_s"]
        entry.update(queries_per_s=queries / med, pairs_per_s=queries * pool / med, gb_per_s=bytes_read / med / 1e9)
        entry["ratio_to_peak"] = entry["gb_per_s"] * 1e9 / peaks["copy_bytes_per_s"]
        result["backends"][label] = entry
    result["ratio_to_peak"] = result["backends"][f"adherence_{ours}"]["ratio_to_peak"]
    result["peak_kind"] = "copy_bytes_per_s"
    if baselines:
        ours_t = result["backends"][f"adherence_{ours}"]["median_s"]
        fastest = min(baselines, key=lambda k: result["backends"][k]["median_s"])
        result["baseline"] = fastest
        result["speedup"] = result["speedup_vs_baseline"] = result["backends"][fastest]["median_s"] / ours_t
        result["speedup_by_baseline"] = {k: result["backends"][k]["median_s"] / ours_t for k in baselines}
    return result


def _version(dist: str) -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None

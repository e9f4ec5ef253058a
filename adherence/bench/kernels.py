"""Throughput of the fused scoring kernels against torch eager, correctness checked first.

Two kinds of configuration, each compared with the hardware limit measured in the same run
(``adherence.bench._hardware.measured_peaks``):

* ``fused`` (cosine + Mahalanobis + KL) and ``fused_knn`` (the same plus kNN-max over a small shared
  pool): memory-bound. Bytes moved per candidate row are what the kernels must read at least once: the
  candidate and its paired reference (2·D elements) and one row of Q (V floats), plus the pool, centroid,
  inverse variances and P once per call. ``ratio_to_peak`` = bytes / time / measured copy bandwidth.
* ``knn_pool_K``: kNN-max over a large shared pool of K references, compute-bound: 2·B·K·D FLOP per
  call; ``ratio_to_peak`` = FLOP/s / measured dense bf16 matmul FLOP/s. Rows: the torch reference
  (float32 arithmetic, the library's CPU path, in row chunks so the B x K matrix fits), a torch matmul
  + max in the input dtype in the same chunks, and that matmul + max under ``torch.compile``.

Each configuration names its fair ``baseline`` (same inputs, same dtype) and ``speedup`` is the
baseline's time over the kernel's: for the memory-bound configurations the same torch reference under
``torch.compile`` (it fuses the elementwise work and reductions too); for the pools a torch matmul + max
in the input dtype. ``speedup_vs_torch_eager`` is kept as a second, labelled ratio. Compilation and the
Triton autotuner's first call are warm-up, outside every timer. On float32 inputs the pools are also
checked against float64 (max |error| <= 1e-4): the kernel multiplies them as three bf16 tensor-core
products of a hi/lo split.
"""

from __future__ import annotations

import platform
from typing import Any, Optional, Sequence

import torch

from ..kernels.fused_scores import fused_scores_math, fused_scores_reference, fused_scores_triton, triton_available
from ._hardware import device_name, measured_peaks, spread, timed

__all__ = ["bench_kernels"]


def _inputs(B, D, K, V, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, D, generator=g).to(dtype).to(device)
    y = torch.randn(B, D, generator=g).to(dtype).to(device)
    refs = torch.randn(K, D, generator=g).to(dtype).to(device)
    mu = torch.randn(D, generator=g).to(dtype).to(device)
    iv = (1.0 / (torch.rand(D, generator=g) + 0.01)).to(dtype).to(device)
    p = torch.softmax(torch.randn(V, generator=g), 0).to(device)
    q = torch.softmax(torch.randn(B, V, generator=g), 1).to(device)
    return dict(x=x, paired=y, refs=refs, mu=mu, inv_var=iv, p=p, q=q)


def _chunked(fn, x: torch.Tensor, K: int) -> torch.Tensor:
    """``fn`` over row chunks of ``x`` small enough for a [chunk, K] float32 matrix of <= 1 GiB."""
    step = max(1, (1 << 28) // max(K, 1))
    return torch.cat([fn(x[i : i + step]) for i in range(0, x.shape[0], step)])


def _knn_chunk(xc: torch.Tensor, refs: torch.Tensor, rn: torch.Tensor) -> torch.Tensor:
    sims = (xc @ refs.T).float()
    return (sims / (xc.float().norm(dim=1)[:, None] * rn[None, :]).clamp_min(1e-12)).max(dim=1).values


def _torch_matmul_knn(x: torch.Tensor, refs: torch.Tensor, chunk_fn=_knn_chunk) -> torch.Tensor:
    """kNN-max cosine as a plain torch user would write it in the input dtype: matmul, scale, max
    (``chunk_fn``: the same chunk under ``torch.compile``)."""
    rn = refs.float().norm(dim=1)
    return _chunked(lambda xc: chunk_fn(xc, refs, rn), x, refs.shape[0])


def _compiled(fn):
    """``fn`` under ``torch.compile`` (default mode: the mode whose kernels run in a plain call; shapes static)."""
    return torch.compile(fn, dynamic=False)


def _float64_knn(x: torch.Tensor, pool: torch.Tensor, rows: int = 256) -> torch.Tensor:
    """kNN-max cosine of the first ``rows`` rows in float64 (the accuracy reference for float32 inputs)."""
    xs = x[:rows].double()
    p = pool.double()
    sims = (xs @ p.T) / (xs.norm(dim=1)[:, None] * p.norm(dim=1)[None, :]).clamp_min(1e-12)
    return sims.max(dim=1).values


def _entry(times: list, rows: int, work: float, unit: str) -> dict:
    out = spread(times)
    med = out["median_s"]
    out["rows_per_s"] = rows / med
    out["gb_per_s" if unit == "bytes" else "tflop_per_s"] = work / med / (1e9 if unit == "bytes" else 1e12)
    return out


def bench_kernels(
    *,
    batch: int = 4096,
    dim: int = 384,
    refs: int = 64,
    vocab: int = 500,
    dtype: str = "float32",
    repeats: int = 10,
    device: Optional[str] = None,
    pools: Sequence[int] = (),
    pool_flop: float = 2e14,
) -> dict:
    """Benchmark dict (``bench="kernels"``): the measured peaks, and per configuration the correctness
    check, per backend timings, ``ratio_to_peak`` and ``speedup``.

    ``pools``: sizes K of large shared reference pools for the kNN configurations; each scores
    ``pool_flop / (2 K D)`` candidate rows (at least 64, at most ``batch``).
    """
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    use_triton = dev.type == "cuda" and triton_available()
    peaks = measured_peaks(dev)
    tol = 2e-5 if dt == torch.float32 else 2e-3
    elem = torch.tensor([], dtype=dt).element_size()
    result: dict[str, Any] = {
        "bench": "kernels",
        "args": {
            "batch": batch,
            "dim": dim,
            "refs": refs,
            "vocab": vocab,
            "dtype": dtype,
            "repeats": repeats,
            "pools": list(pools),
        },
        "device": device_name(dev),
        "versions": {"torch": torch.__version__, "python": platform.python_version(), "triton": _triton_version()},
        "peak": peaks,
        "configs": {},
    }

    def check(name, got, want):
        err = (got - want).abs().nan_to_num(0).max().item()
        nan_same = bool(torch.equal(torch.isnan(got), torch.isnan(want)))
        ok = err <= tol and nan_same
        if not ok:
            raise RuntimeError(
                f"kernels/{name}: the Triton kernel disagrees with the torch reference "
                f"(max abs error {err} > {tol}, or NaN where the reference has a value)"
            )
        return {
            "checked_against": "torch reference (float32 arithmetic)",
            "max_abs_error": err,
            "tolerance": tol,
            "passed": True,
        }

    for name, k in (("fused", 0), ("fused_knn", refs)):
        inp: Any = _inputs(batch, dim, max(k, 1), vocab, dt, dev)
        if not k:
            inp.pop("refs")
        cfg: dict[str, Any] = {
            "rows": batch,
            "refs": k,
            "columns": ["cosine", "mahalanobis", "kl"] + (["knn_max"] if k else []),
        }
        cfg["bytes_per_call"] = batch * (2 * dim * elem + vocab * 4) + k * dim * elem + 2 * dim * elem + vocab * 4
        backends = {"torch_eager": lambda: fused_scores_reference(**inp)}
        if use_triton:
            compiled = _compiled(fused_scores_math)
            backends["torch_compile"] = lambda: compiled(**inp)
            backends["triton"] = lambda: fused_scores_triton(**inp)
            cfg["correctness"] = check(name, fused_scores_triton(**inp), fused_scores_reference(**inp))
            check(f"{name} (torch.compile)", compiled(**inp), fused_scores_reference(**inp))
        cfg["backends"] = {
            b: _entry(timed(fn, repeats, dev), batch, cfg["bytes_per_call"], "bytes") for b, fn in backends.items()
        }
        best = cfg["backends"].get("triton") or cfg["backends"]["torch_eager"]
        cfg["ratio_to_peak"] = best["gb_per_s"] * 1e9 / peaks["copy_bytes_per_s"]
        cfg["peak_kind"] = "copy_bytes_per_s"
        if use_triton:
            tri = cfg["backends"]["triton"]["median_s"]
            cfg["baseline"] = "torch_compile: torch.compile(fused_scores_math), the torch reference compiled"
            cfg["speedup"] = cfg["backends"]["torch_compile"]["median_s"] / tri
            cfg["speedup_vs_torch_eager"] = cfg["backends"]["torch_eager"]["median_s"] / tri
        result["configs"][name] = cfg
        inp = None  # free this size before the next

    for K in pools:
        rows = min(batch, max(64, int(pool_flop / (2 * K * dim))))
        g = torch.Generator().manual_seed(K)
        x: Any = torch.randn(rows, dim, generator=g).to(dt).to(dev)
        pool: Any = torch.randn(K, dim, generator=g).to(dt).to(dev)
        flop = 2.0 * rows * K * dim
        cfg = {"rows": rows, "refs": K, "columns": ["knn_max"], "flop_per_call": flop}
        eager = lambda: _chunked(lambda xc: fused_scores_reference(xc, refs=pool)[:, 1], x, K)  # noqa: E731
        backends = {"torch_eager": eager, "torch_matmul_max": lambda: _torch_matmul_knn(x, pool)}
        if use_triton:
            chunk = _compiled(_knn_chunk)
            backends["torch_compile"] = lambda: _torch_matmul_knn(x, pool, chunk)
            backends["triton"] = lambda: fused_scores_triton(x, refs=pool)[:, 1]
            got = backends["triton"]()
            cfg["correctness"] = check(f"knn_pool_{K}", got, eager())
            ref64 = _float64_knn(x, pool)
            err64 = (got[: ref64.shape[0]].double() - ref64).abs().max().item()
            cfg["correctness"]["max_abs_error_vs_float64"] = err64
            if dt == torch.float32:
                cfg["correctness"]["float32_products"] = "bf16x3 (hi/lo split on bf16 tensor cores)"
                if not err64 <= 1e-4:
                    raise RuntimeError(f"kernels/knn_pool_{K}: float32 kNN off float64 by {err64} > 1e-4")
        reps = max(2, repeats // 4)
        cfg["backends"] = {
            b: _entry(timed(fn, reps if b != "triton" else max(3, repeats // 2), dev), rows, flop, "flop")
            for b, fn in backends.items()
        }
        best = cfg["backends"].get("triton") or cfg["backends"]["torch_eager"]
        cfg["ratio_to_peak"] = best["tflop_per_s"] * 1e12 / peaks["matmul_flops"]
        cfg["peak_kind"] = "matmul_flops"
        if use_triton:
            tri = cfg["backends"]["triton"]["median_s"]
            cfg["baseline"] = f"torch_matmul_max: torch matmul + max in {dtype}, row chunks"
            cfg["speedup"] = cfg["speedup_vs_torch_matmul_max"] = cfg["backends"]["torch_matmul_max"]["median_s"] / tri
            cfg["speedup_vs_torch_eager"] = cfg["backends"]["torch_eager"]["median_s"] / tri
            cfg["speedup_vs_torch_compile"] = cfg["backends"]["torch_compile"]["median_s"] / tri
            cfg["tuned_config"] = _tuned_config()
        result["configs"][f"knn_pool_{K}"] = cfg
        x = pool = None

    result["correct"] = all(c.get("correctness", {}).get("passed", True) for c in result["configs"].values())
    result["ratio_to_peak"] = result["configs"]["fused"]["ratio_to_peak"]
    if use_triton:
        result["speedup"] = min(c["speedup"] for c in result["configs"].values())
    return result


def _tuned_config() -> Optional[str]:
    """The kNN tile configuration the autotuner chose last (None before any GPU call)."""
    import importlib

    fs = importlib.import_module("adherence.kernels.fused_scores")  # the module, not the function of that name
    tuned = fs._KERNELS.get("knn_dot_tuned")
    best = getattr(tuned, "best_config", None)
    return str(best) if best is not None else None


def _triton_version() -> Optional[str]:
    if not triton_available():
        return None
    import triton

    return triton.__version__

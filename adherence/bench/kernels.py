"""Throughput of the fused scoring kernel against torch eager, correctness checked first.

Bytes moved per candidate row (the memory the fused kernel must read at least
once): the candidate and its paired reference (2·D elements), one row of Q
(V floats), plus the shared pool, centroid, inverse variances and P once per
batch. GB/s = bytes / time; on CUDA the ratio to the device's peak memory
bandwidth is reported when known.
"""

from __future__ import annotations

import platform
import statistics
import time
from typing import Optional

import torch

from ..kernels.fused_scores import fused_scores_reference, fused_scores_triton, triton_available

__all__ = ["bench_kernels"]

# Peak HBM bandwidth (GB/s) of common accelerators, for the ratio to the hardware limit.
_PEAK_GBPS = {"H100": 3350.0, "H200": 4800.0, "A100": 2039.0, "L4": 300.0}


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


def _time(fn, repeats: int, device) -> list[float]:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return times


def bench_kernels(
    *, batch: int = 4096, dim: int = 384, refs: int = 64, vocab: int = 500, dtype: str = "float32",
    repeats: int = 10, device: Optional[str] = None,
) -> dict:
    """Benchmark dict: arguments, device, versions, and per backend median/spread time, rows/s and GB/s."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    inp = _inputs(batch, dim, refs, vocab, dt, dev)
    backends = {"torch_eager": lambda: fused_scores_reference(**inp)}
    use_triton = dev.type == "cuda" and triton_available()
    if use_triton:
        backends["triton_fused"] = lambda: fused_scores_triton(**inp)
    want = fused_scores_reference(**inp)
    correctness = {"checked_against": "torch_eager"}
    if use_triton:
        got = fused_scores_triton(**inp)
        err = (got - want).abs().nan_to_num(0).max().item()
        tol = 2e-5 if dt == torch.float32 else 2e-2
        correctness.update(max_abs_error=err, tolerance=tol, passed=err <= tol)
        if err > tol:
            raise RuntimeError(f"fused kernel disagrees with the reference: max abs error {err} > {tol}")
    elem = torch.tensor([], dtype=dt).element_size()
    bytes_moved = batch * (2 * dim * elem + vocab * 4) + refs * dim * elem + 2 * dim * elem + vocab * 4
    result = {
        "args": {"batch": batch, "dim": dim, "refs": refs, "vocab": vocab, "dtype": dtype, "repeats": repeats},
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)",
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "correctness": correctness,
        "bytes_per_call": bytes_moved,
        "backends": {},
    }
    for name, fn in backends.items():
        fn()  # warm-up (and compilation for Triton)
        times = _time(fn, repeats, dev)
        med = statistics.median(times)
        entry = {
            "median_s": med,
            "min_s": min(times),
            "max_s": max(times),
            "rows_per_s": batch / med,
            "gb_per_s": bytes_moved / med / 1e9,
        }
        if dev.type == "cuda":
            peak = next((v for k, v in _PEAK_GBPS.items() if k in result["device"]), None)
            if peak:
                entry["fraction_of_peak_bandwidth"] = entry["gb_per_s"] / peak
        result["backends"][name] = entry
    if "triton_fused" in result["backends"]:
        result["speedup_vs_torch_eager"] = result["backends"]["torch_eager"]["median_s"] / result["backends"]["triton_fused"]["median_s"]
    return result

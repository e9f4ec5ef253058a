"""The hardware limits a benchmark is compared with, measured in the same run on the same device.

* ``matmul_flops``: a square bf16 matrix product (8192^3 on CUDA, 1024^3 on CPU), best of several;
* ``copy_bytes_per_s``: a device-to-device copy (1 GiB on CUDA, 64 MiB on CPU), counting the bytes
  read and written, best of several.

Spec-sheet peaks are not used: clocks, power limits and memory parts differ between boards of one name.
"""

from __future__ import annotations

import platform
import time
from typing import Any

__all__ = ["device_name", "measured_peaks", "spread", "synchronize", "timed"]

_CACHE: dict = {}


def synchronize(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, repeats: int, device, warmup: int = 1) -> list:
    """Wall seconds of ``repeats`` calls of ``fn`` after ``warmup`` calls, the device drained around each."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        t = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t)
    return times


def spread(times: list) -> dict:
    """``{"median_s", "min_s", "max_s"}`` of repeated timings (the median is what benchmarks report)."""
    import statistics

    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def device_name(device) -> str:
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


#: The CPU flags a benchmark JSON names: the SIMD and matrix extensions that decide CPU speed.
SIMD_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


def cpu_info() -> dict:
    """The CPU a benchmark ran on: model, kind (``cpu_kind``), logical CPUs, SIMD flags, native bf16, and torch's
    CPU capability."""
    import os

    from ..models import cpu_bf16_native, cpu_features, cpu_kind

    model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.lower().startswith("model name")), None)
    except OSError:
        pass
    flags = cpu_features()
    out = {
        "model": model or platform.processor() or platform.machine(),
        "kind": cpu_kind(flags),
        "logical_cpus": os.cpu_count(),
        "simd": [f for f in SIMD_FLAGS if f in flags],
        "bf16_native": cpu_bf16_native(flags),
    }
    try:
        import torch

        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out["torch_threads"] = torch.get_num_threads()
    except Exception:  # noqa: BLE001 - a torch without the query only leaves the field out
        pass
    return out


def measured_peaks(device) -> dict:
    """``{"matmul_flops", "matmul_shape", "copy_bytes_per_s", "copy_bytes"}`` measured on ``device``."""
    import torch

    device = torch.device(device)
    key = str(device)
    if key in _CACHE:
        return dict(_CACHE[key])
    cuda = device.type == "cuda"
    n = 8192 if cuda else 1024
    dtype = torch.bfloat16 if cuda else torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    a: Any = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b: Any = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    mm = min(timed(lambda: torch.mm(a, b), 10 if cuda else 3, device, warmup=3 if cuda else 1))
    a = b = None  # free the operands (the timed closure is done with them)
    size = (1 << 30) if cuda else (64 << 20)
    src: Any = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
    dst: Any = torch.empty_like(src)
    cp = min(timed(lambda: dst.copy_(src), 20 if cuda else 3, device, warmup=3 if cuda else 1))
    src = dst = None
    out = {
        "matmul_flops": 2.0 * n**3 / mm,
        "matmul_shape": [n, n, n],
        "matmul_dtype": str(dtype).replace("torch.", ""),
        "copy_bytes_per_s": 2.0 * size / cp,
        "copy_bytes": size,
    }
    _CACHE[key] = out
    return dict(out)

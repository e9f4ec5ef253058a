"""Device and dtype choice shared by every model: bf16 on GPU, fp32 on CPU.

``dtype="auto"`` picks bf16 on CPUs with native bf16 matrix instructions (AVX512-BF16 or AMX) and fp32 on
every other CPU: on an AVX2-only CPU bf16 is emulated and runs slower than fp32 (a SmolLM2-shaped layer
ran about 3x slower). The plain default stays fp32 on CPU so scores do not depend on the machine.
"""

from __future__ import annotations

import functools
import platform
import warnings
from typing import Optional

from .._errors import OptionError

__all__ = ["cpu_bf16_native", "cpu_features", "cpu_kind", "pick_device", "pick_dtype"]

_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "float16": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}
#: CPU flags (as /proc/cpuinfo spells them) that give native bf16 matrix arithmetic.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=1)
def cpu_features() -> frozenset:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("flags", "features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_bf16_native(flags: Optional[frozenset] = None) -> bool:
    """True where the CPU multiplies bf16 natively (AVX512-BF16 or AMX-BF16 on x86-64; Arm's bf16)."""
    flags = cpu_features() if flags is None else flags
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "bf16" in flags
    return any(f in flags for f in BF16_FLAGS)


def cpu_kind(flags: Optional[frozenset] = None) -> str:
    """The kind of CPU, as the encoder benchmarks name them: ``amx``, ``avx512bf16``, ``avx512``, ``avx2`` (x86-64),
    ``arm64``, or ``other``. The encoder's float32 runtime is chosen by it (``adherence.models._onnx``)."""
    flags = cpu_features() if flags is None else flags
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return "arm64"
    if machine not in ("x86_64", "amd64"):
        return "other"
    if "amx_bf16" in flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512bf16"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "other"


def pick_device(device: Optional[str] = None):
    import torch

    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device, dtype: Optional[str] = None):
    """The torch dtype for ``device``: ``dtype`` when given (``auto``: see the module), else bf16 on CUDA and
    fp32 elsewhere. bf16 asked for on a CPU without native bf16 is honoured with a warning."""
    import torch

    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    on_cpu = getattr(device, "type", str(device)) == "cpu"
    if dtype == "auto" and on_cpu:
        return torch.bfloat16 if cpu_bf16_native() else torch.float32
    if dtype not in (None, "auto"):
        if dtype not in _NAMES:
            raise OptionError(f"unknown dtype {dtype!r}; expected auto, float32, bfloat16 or float16")
        name = _NAMES[dtype]
        if on_cpu and name == "bfloat16" and not cpu_bf16_native():
            warnings.warn(
                "bfloat16 on this CPU (no AVX512-BF16/AMX) is emulated and usually slower than float32; "
                "`--judge-dtype auto` picks what is fastest here",
                stacklevel=2,
            )
        return table[name]
    return torch.bfloat16 if getattr(device, "type", "") == "cuda" else torch.float32

"""Print the CMAKE_ARGS that build llama.cpp (llama-cpp-python) for the x86-64 CPU this runs on.

llama.cpp's default native build crashed on every completion on some of this project's CPUs, and a
fixed list that names AVX-512 emits instructions an AVX2-only CPU cannot execute. This script reads
the CPU's flags (``/proc/cpuinfo``; ``--flags "avx2 fma ..."`` to ask for another CPU) and turns on
exactly the instruction sets the CPU has, from a portable base (``GGML_NATIVE=OFF``); AMX stays off.

    CMAKE_ARGS="$(python3 tools/llama_cpp_cmake_args.py)" pip install "llama-cpp-python[server]"
    python3 tools/llama_cpp_cmake_args.py --explain     # the CPU model and the flags it found
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

# ggml option -> the /proc/cpuinfo flag that must be present to turn it on.
OPTIONS = (
    ("GGML_AVX", "avx"),
    ("GGML_AVX2", "avx2"),
    ("GGML_FMA", "fma"),
    ("GGML_F16C", "f16c"),
    ("GGML_AVX512", "avx512f"),
)
# Never on: AMX tiles need kernel permission and crashed here; the AVX-512 sub-extensions are left to
# the base AVX-512 build (GGML_AVX512 alone is what worked on the project's AVX-512 machines).
ALWAYS_OFF = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_info(path: str = "/proc/cpuinfo") -> tuple[str, set]:
    """``(model name, set of flags)`` of the first CPU listed in ``path`` (empty on other systems)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return model, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and value.strip():
            model = value.strip()
        elif key == "flags":
            flags = set(value.split())
            break
    return model, flags


def cmake_args(flags: set) -> list:
    """The ``-D`` options for a CPU with ``flags``."""
    args = ["-DGGML_NATIVE=OFF"]
    args += [f"-D{opt}={'ON' if need in flags else 'OFF'}" for opt, need in OPTIONS]
    args += [f"-D{opt}=OFF" for opt in ALWAYS_OFF]
    return args


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", help="space-separated CPU flags to use instead of /proc/cpuinfo's")
    ap.add_argument("--explain", action="store_true", help="print the CPU model and its SIMD flags to stderr")
    args = ap.parse_args(argv)
    model, flags = cpu_info()
    if args.flags is not None:
        model, flags = "given", set(args.flags.split())
    if args.explain:
        simd = sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c", "sse4")))
        print(f"cpu: {model}; simd flags: {' '.join(simd) or 'none found'}", file=sys.stderr)
    print(" ".join(cmake_args(flags)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

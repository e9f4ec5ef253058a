"""Benchmarks and paper reproductions."""

from ._hardware import cpu_info
from .bundled import bench_bundled
from .cpu_encoder import bench_cpu_encoder
from .encoder import bench_encoder
from .engine import bench_engine
from .judge import bench_judge
from .judge_race import bench_judge_race
from .kernels import bench_kernels
from .labels import bench_labels
from .maxsim import bench_maxsim
from .own_logs import bench_own_logs
from .persona import bench_persona
from .role_paper import DEFAULT_METHODS, role_paper

__all__ = [
    "DEFAULT_METHODS",
    "bench_bundled",
    "bench_cpu_encoder",
    "bench_encoder",
    "bench_engine",
    "bench_judge",
    "bench_judge_race",
    "bench_kernels",
    "bench_labels",
    "bench_maxsim",
    "bench_own_logs",
    "bench_persona",
    "cpu_info",
    "role_paper",
]

"""Benchmarks and paper reproductions."""

from .engine import bench_engine
from .judge import bench_judge
from .judge_race import bench_judge_race
from .kernels import bench_kernels
from .maxsim import bench_maxsim
from .role_paper import DEFAULT_METHODS, role_paper

__all__ = ["DEFAULT_METHODS", "bench_engine", "bench_judge", "bench_judge_race", "bench_kernels", "bench_maxsim", "role_paper"]

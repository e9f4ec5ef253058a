"""Benchmarks and paper reproductions."""

from .kernels import bench_kernels
from .role_paper import DEFAULT_METHODS, role_paper

__all__ = ["DEFAULT_METHODS", "bench_kernels", "role_paper"]

"""Benchmarks and paper reproductions."""

from .role_paper import DEFAULT_METHODS, role_paper

__all__ = ["DEFAULT_METHODS", "role_paper"]

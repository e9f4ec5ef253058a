"""Kernels: each a Triton kernel with a pure-torch reference beside it; CPU runs use the reference."""

from .fused_scores import COLUMNS, fused_scores, fused_scores_reference, triton_available

__all__ = ["COLUMNS", "fused_scores", "fused_scores_reference", "triton_available"]

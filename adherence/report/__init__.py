"""HTML reports with plots (needs ``adherence[report]`` for matplotlib)."""

from ._evaluation import evaluation_html, write_evaluation_html

__all__ = ["evaluation_html", "write_evaluation_html"]

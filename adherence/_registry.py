"""The one error message for a name that no registry holds."""

from __future__ import annotations

import difflib
from typing import Iterable

__all__ = ["unknown_name"]


def unknown_name(kind: str, name: str, available: Iterable[str]) -> str:
    """``unknown <kind> 'x'. Did you mean 'y'? Available: a, b, c``.

    Example:
        >>> unknown_name("method", "cosin", ["cosine", "knn"])
        "unknown method 'cosin'. Did you mean 'cosine'? Available: cosine, knn"
    """
    names = list(available)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} Available: {', '.join(names)}"

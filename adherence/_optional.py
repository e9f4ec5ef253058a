"""Optional dependencies: find them without importing, and name the extra when missing."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from ._errors import MissingDependencyError

__all__ = ["MissingDependencyError", "require", "is_available"]


def is_available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, extra: str, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise ``MissingDependencyError`` naming ``pip install adherence[extra]``."""
    if not is_available(module):
        what = f" for {purpose}" if purpose else ""
        raise MissingDependencyError(
            f"{module!r} is needed{what} but is not installed; install it with: pip install 'adherence[{extra}]'"
        )
    return importlib.import_module(module)

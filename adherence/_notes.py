"""Lines a command prints once it has done its work (how it read what it was given), held back until then so that a
refusal stays the one line an orchestrator reads."""

from __future__ import annotations

__all__ = ["after_success", "take"]

_pending: list = []


def after_success(line: str) -> None:
    """Say ``line`` (once) on standard error when the running command succeeds; never when it fails."""
    if line not in _pending:
        _pending.append(line)


def take() -> list:
    """The lines held back, emptied."""
    out = list(_pending)
    _pending.clear()
    return out

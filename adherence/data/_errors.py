"""The one error type every reader raises for bad input (defined with the others in ``adherence._errors``)."""

from __future__ import annotations

import json
import warnings
from typing import Any, Optional, Sequence

from .._errors import DataError

__all__ = ["DataError", "record_text", "skipped_summary", "warn_skipped"]


def skipped_summary(skipped: Sequence[tuple[str, str]]) -> Optional[dict]:
    """``{"count", "first", "reasons"}`` of the malformed records a reader skipped (``(where, reason)``
    pairs), or None when none was: the first 10 places and every distinct reason."""
    if not skipped:
        return None
    return {"count": len(skipped), "first": [w for w, _ in skipped[:10]], "reasons": sorted({r for _, r in skipped})}


_STRICT_HINT = "strict_input=True, on the command line --strict-input, makes this an error"


def warn_skipped(
    file: str, skipped: Sequence[tuple[str, str]], unit: str, rest: str = "evaluated", hint: str = _STRICT_HINT
) -> None:
    r"""One warning naming the file, how many ``unit``\ s were skipped, the first 10 and the first reason."""
    if not skipped:
        return
    first = ", ".join(w for w, _ in skipped[:10]) + (", ..." if len(skipped) > 10 else "")
    warnings.warn(
        f"{file}: skipped {len(skipped)} malformed {unit}(s) ({first}): {skipped[0][1]}; the rest is {rest} ({hint})",
        stacklevel=3,
    )


def record_text(record: Any) -> Any:
    """A record left out, as the text its quarantine line keeps (JSON where it can be, else its repr)."""
    try:
        return json.dumps(record, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(record)

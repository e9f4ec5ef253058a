"""The one error type every reader raises for bad input."""

from __future__ import annotations

import os
import warnings
from typing import Optional, Sequence


class DataError(ValueError):
    """Bad input data, located as precisely as the format allows.

    ``row`` is the 1-based index of the data record (header lines and blank
    JSONL lines are not counted); ``line`` is the 1-based physical line for
    text formats when it differs from the row.

    Example:
        >>> str(DataError("expected int32, got 'abc'", file="t.csv", row=3, column="turn_index"))
        "t.csv: row 3, column 'turn_index': expected int32, got 'abc'"
    """

    def __init__(
        self,
        reason: str,
        *,
        file: Optional[os.PathLike | str] = None,
        row: Optional[int] = None,
        column: Optional[str] = None,
        line: Optional[int] = None,
    ) -> None:
        self.reason = reason
        self.file = None if file is None else str(file)
        self.row = row
        self.column = column
        self.line = line
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        head = ", ".join(where)
        if self.file:
            head = f"{self.file}: {head}" if head else self.file
        return f"{head}: {self.reason}" if head else self.reason

    def located(self, file: Optional[str] = None, row_offset: int = 0) -> DataError:
        """Return a copy with the file filled in and the row shifted by ``row_offset``."""
        return DataError(
            self.reason,
            file=self.file or file,
            row=None if self.row is None else self.row + row_offset,
            column=self.column,
            line=self.line,
        )


def skipped_summary(skipped: Sequence[tuple[str, str]]) -> Optional[dict]:
    """``{"count", "first", "reasons"}`` of the malformed records a reader skipped (``(where, reason)``
    pairs), or None when none was: the first 10 places and every distinct reason."""
    if not skipped:
        return None
    return {"count": len(skipped), "first": [w for w, _ in skipped[:10]], "reasons": sorted({r for _, r in skipped})}


def warn_skipped(file: str, skipped: Sequence[tuple[str, str]], unit: str, rest: str = "evaluated") -> None:
    r"""One warning naming the file, how many ``unit``\ s were skipped, the first 10 and the first reason."""
    if not skipped:
        return
    first = ", ".join(w for w, _ in skipped[:10]) + (", ..." if len(skipped) > 10 else "")
    warnings.warn(
        f"{file}: skipped {len(skipped)} malformed {unit}(s) ({first}): {skipped[0][1]}; the rest is {rest} "
        "(strict_input=True, on the command line --strict-input, makes this an error)",
        stacklevel=3,
    )

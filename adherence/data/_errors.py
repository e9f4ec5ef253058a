"""The one error type every reader raises for bad input."""

from __future__ import annotations

import os
from typing import Optional


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

    def located(self, file: Optional[str] = None, row_offset: int = 0) -> "DataError":
        """Return a copy with the file filled in and the row shifted by ``row_offset``."""
        return DataError(
            self.reason,
            file=self.file or file,
            row=None if self.row is None else self.row + row_offset,
            column=self.column,
            line=self.line,
        )

"""Every error adherence raises on purpose, at the bottom of the package, with one common base.

Two kinds matter to whoever runs a job unattended, and the command line maps them to exit codes:

- ``UserError``: the input, an option or a configuration is wrong (exit 2). The message is one line
  that names what to change (``DataError`` names the file, row and column).
- ``JobError``: the job itself could not finish -- a shard kept failing, the judge server went away, a
  worker could not get ready (exit 1). What was finished is kept for ``--resume``.

Anything else that escapes is a bug: the command line shows it as one line with exit 1 and asks for
``--debug`` (the full traceback), never as "bad input".

Both user-error classes also derive from the built-in they refine (``ValueError``, ``ImportError``,
``FileNotFoundError``), so callers catching those keep working.
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = [
    "AdherenceError",
    "DataError",
    "EngineError",
    "JobError",
    "MissingDependencyError",
    "OptionError",
    "UserError",
]


class AdherenceError(Exception):
    """The common base of the errors adherence raises on purpose."""


class UserError(AdherenceError):
    """Bad input, options or configuration: the caller can fix it (the command line exits 2)."""


class JobError(AdherenceError, RuntimeError):
    """The job could not finish (a shard kept failing, a server or worker was lost): exit 1."""


class EngineError(JobError):
    """A job could not finish (e.g. a shard kept failing); the message names the shard."""


class OptionError(UserError, ValueError):
    """An option or configuration value is out of its range or contradicts another.

    Example:
        >>> str(OptionError("`top_p` must be in (0, 1], got 1.5"))
        '`top_p` must be in (0, 1], got 1.5'
    """


class MissingDependencyError(UserError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class DataError(UserError, ValueError):
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

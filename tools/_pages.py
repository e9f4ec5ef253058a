"""The docs pages' generated tables: the text between two HTML comment markers, read and replaced."""

from __future__ import annotations

from pathlib import Path


def between(text: str, start: str, end: str) -> str:
    """The text between the markers, without its surrounding blank lines."""
    a, b = text.index(start) + len(start), text.index(end)
    return text[a:b].strip("\n")


def write_between(page: Path, start: str, end: str, body: str) -> None:
    """Replace what lies between the markers on ``page`` with ``body``."""
    text = page.read_text(encoding="utf-8")
    a, b = text.index(start) + len(start), text.index(end)
    page.write_text(text[:a] + "\n" + body + "\n" + text[b:], encoding="utf-8")


def table_command(page: Path, start: str, end: str, table: str, *, write: bool, check: bool, tool: str) -> int:
    """What a table tool does with its rendered ``table``: write it onto the page, check the page against it
    (1 when they differ, naming ``tool``), or print it."""
    if write:
        write_between(page, start, end, table)
        return 0
    if check:
        if between(page.read_text(encoding="utf-8"), start, end) != table:
            print(f"{page.parent.name}/{page.name}'s table differs from benchmarks/results: run {tool} --write")
            return 1
        return 0
    print(table)
    return 0

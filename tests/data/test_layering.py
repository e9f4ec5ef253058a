"""The data package is layered: formats below adapters and transcripts, dispatch above them; no import circle."""

import ast
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "adherence" / "data"


def _imports(path: Path) -> set:
    """Sibling modules a module imports, at any depth of its code (function-level imports count too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_no_import_circle_in_the_data_package():
    graph = {p.stem: _imports(p) for p in DATA.glob("*.py") if p.stem != "__init__"}
    state: dict = {}

    def visit(m, path):
        if state.get(m) == "open":
            raise AssertionError("import circle: " + " -> ".join(path + [m]))
        if state.get(m) == "done":
            return
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            visit(d, path + [m])
        state[m] = "done"

    for m in sorted(graph):
        visit(m, [])


def test_formats_know_nothing_of_adapters_or_transcripts():
    assert not _imports(DATA / "_formats.py") & {"_io", "_adapters", "_transcripts", "_readers"}
    assert {"_formats", "_adapters", "_transcripts"} <= _imports(DATA / "_io.py")

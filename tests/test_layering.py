"""The package is layered: every import points down (or sideways inside a room), and no module imports
itself back through a circle. Imports inside functions count too: a lazy import is still a dependency."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "adherence"

# Lowest first; a room may import any room of a lower layer (and its own modules), nothing above or beside it.
LAYERS = [
    {"_version", "_errors", "_atomic", "_registry", "_fingerprint"},
    {"_optional"},
    {"data"},
    {"stats", "kernels", "models"},
    {"index", "judges"},
    {"role"},
    {"engine", "audit", "persona"},
    {"ray_data", "spark", "report", "bench"},
    {"cli"},
    {"__main__"},
]
LEVEL = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PKG.rglob("*.py")}


def _imports(name: str) -> set:
    """Modules of the package that ``name`` imports (``from .x import y`` counts ``.x.y`` when it is a module)."""
    path = MODULES[name]
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("adherence"):
                continue
            subs = {f"{target}.{a.name}" for a in node.names} & set(MODULES)
            out |= subs or ({target} & set(MODULES))
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
    out.discard(name)
    return out


GRAPH = {m: _imports(m) for m in MODULES}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_room_has_a_layer():
    rooms = {_room(m) for m in MODULES} - {""}
    assert rooms <= set(LEVEL), f"rooms without a layer: {sorted(rooms - set(LEVEL))}"


def test_imports_point_down():
    up = [
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if _room(m)
        for d in deps
        if _room(d) != _room(m) and _room(d) and LEVEL[_room(d)] >= LEVEL[_room(m)]
    ]
    assert not up, "imports that point up or sideways across rooms:\n" + "\n".join(sorted(up))


def test_no_import_circle():
    state: dict = {}

    def visit(m, path):
        if state.get(m) == "open":
            raise AssertionError("import circle: " + " -> ".join(path[path.index(m) :] + [m]))
        if state.get(m) == "done":
            return
        state[m] = "open"
        for d in sorted(GRAPH[m]):
            visit(d, path + [m])
        state[m] = "done"

    for m in sorted(GRAPH):
        visit(m, [])


@pytest.mark.parametrize(
    "planted",
    [
        ("adherence.role._base", "adherence.engine._engine"),  # an arrow back up
        ("adherence.cli.evaluate", "adherence.cli.calibrate"),  # with the reverse arrow below, a circle
    ],
)
def test_the_checks_see_a_planted_fault(planted):
    """The two checks fail on the faults this package had (role -> engine; cli.calibrate <-> cli.evaluate)."""
    src, dst = planted
    saved = {src: set(GRAPH[src]), dst: set(GRAPH[dst])}
    GRAPH[src].add(dst)
    same_room = _room(src) == _room(dst)
    if same_room:
        GRAPH[dst].add(src)
    try:
        with pytest.raises(AssertionError):
            test_no_import_circle() if same_room else test_imports_point_down()
    finally:
        GRAPH.update(saved)

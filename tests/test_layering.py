"""The package is layered: every import points down (or sideways inside a room), and no module imports
itself back through a circle. Imports inside functions count too: a lazy import is still a dependency."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
import architecture  # noqa: E402  (the layers and the import graph, also drawn on docs/architecture.md)

LEVEL = architecture.LEVEL
MODULES = architecture.modules()
GRAPH = architecture.graph()
_room = architecture.room


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


def test_the_house_counts_in_the_docs_are_the_sources():
    """docs/architecture.md's table of counts equals what tools/house_counts.py reads from the source, and no code
    outside a backend tests a backend's name."""
    import re

    import house_counts

    got = house_counts.counts()["counts"]
    assert got["backend_name_tests"] == 0, house_counts.backend_name_tests()
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = {k: int(v) for k, v in re.findall(r"^\| (\w+) \| (\d+) \|$", doc, flags=re.M)}
    assert table == got

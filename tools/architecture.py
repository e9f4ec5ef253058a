"""The picture on docs/architecture.md: the package's rooms in their layers and who imports whom, read from the
code (every import, lazy ones included), so the page cannot drift from the package.

    python tools/architecture.py --write    # rewrite docs/architecture.svg
    python tools/architecture.py --check    # exit 1 when the picture differs from the code

``LAYERS`` is also what tests/test_layering.py holds the package to: every import points down.
"""

from __future__ import annotations

import argparse
import ast
import html
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "adherence"
SVG = ROOT / "docs" / "architecture.svg"

# Lowest first; a room may import any room of a lower layer (and its own modules), nothing above or beside it.
LAYERS = [
    ["_version", "_errors", "_notes", "_atomic", "_fingerprint"],
    ["_optional", "_options", "_registry"],
    ["data"],
    ["stats", "kernels", "models"],
    ["index", "judges"],
    ["role"],
    ["engine", "audit", "persona"],
    ["ray_data", "spark", "report", "bench", "cascade"],
    ["view"],
    ["cli"],
    ["__main__"],
]
LEVEL = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    return {_module(p): p for p in sorted(PKG.rglob("*.py"))}


def imports(name: str, mods: dict) -> set:
    """Modules of the package that ``name`` imports (``from .x import y`` counts ``.x.y`` when it is a module)."""
    path = mods[name]
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
            subs = {f"{target}.{a.name}" for a in node.names} & set(mods)
            out |= subs or ({target} & set(mods))
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in mods}
    out.discard(name)
    return out


def graph() -> dict:
    """``{module: modules it imports}`` over the whole package."""
    mods = modules()
    return {m: imports(m, mods) for m in mods}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def room_edges(g: dict) -> set:
    """``(room, room it imports)`` pairs between different rooms."""
    return {(room(m), room(d)) for m, deps in g.items() for d in deps if room(m) and room(d) and room(m) != room(d)}


def reduced(edges: set) -> set:
    """The edges left after dropping every one that a longer path also gives (the picture's arrows)."""

    def reach(a: str, skip: tuple) -> set:
        seen, todo = set(), [b for (x, b) in edges if x == a and (x, b) != skip]
        while todo:
            b = todo.pop()
            if b not in seen:
                seen.add(b)
                todo.extend(c for (x, c) in edges if x == b)
        return seen

    return {(a, b) for (a, b) in edges if b not in reach(a, (a, b))}


def render() -> str:
    """The SVG: one row per layer (highest on top), a box per room, an arrow per import that no path of
    other arrows already gives."""
    g = graph()
    edges = reduced(room_edges(g))
    counts = {r: sum(1 for m in g if room(m) == r) for r in LEVEL}
    w, h, gap_x, gap_y, pad = 118, 34, 16, 46, 20
    width = max(len(rooms) for rooms in LAYERS) * (w + gap_x) - gap_x + 2 * pad
    pos = {}
    for i, rooms in enumerate(reversed(LAYERS)):
        row_w = len(rooms) * (w + gap_x) - gap_x
        for j, r in enumerate(rooms):
            pos[r] = (pad + (width - 2 * pad - row_w) / 2 + j * (w + gap_x), pad + i * (h + gap_y))
    height = pad * 2 + len(LAYERS) * (h + gap_y) - gap_y
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" font-family="sans-serif" font-size="12">',
        "<title>adherence: rooms by layer; an arrow is an import (every import points down)</title>",
        '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#6b7280"/></marker></defs>',
    ]
    for a, b in sorted(edges):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        out.append(
            f'<line x1="{xa + w / 2:.1f}" y1="{ya + h:.1f}" x2="{xb + w / 2:.1f}" y2="{yb:.1f}" '
            'stroke="#9ca3af" stroke-width="1.2" marker-end="url(#a)"/>'
        )
    for r, (x, y) in pos.items():
        base = LEVEL[r] <= 1
        fill = "#f3f4f6" if base else "#e0e7ff"
        label = r if r.startswith("_") else f"{r}/" if counts[r] > 1 else f"{r}.py"
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w}" height="{h}" rx="6" fill="{fill}" stroke="#4f46e5"/>')
        out.append(
            f'<text x="{x + w / 2:.1f}" y="{y + h / 2 + 4:.1f}" text-anchor="middle">{html.escape(label)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite {SVG.relative_to(ROOT)}")
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed picture differs from the code")
    args = ap.parse_args(argv)
    svg = render()
    if args.write:
        SVG.write_text(svg, encoding="utf-8")
        return 0
    if args.check:
        same = SVG.exists() and SVG.read_text(encoding="utf-8") == svg
        if not same:
            print(f"{SVG.relative_to(ROOT)} is stale: run python tools/architecture.py --write", file=sys.stderr)
        return 0 if same else 1
    sys.stdout.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())

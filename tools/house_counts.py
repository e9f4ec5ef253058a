"""Counts of the house's one-place rules, read from the source (no import of the package): what docs/architecture.md
reports and tests/test_layering.py checks against it.

- ``backend_name_tests``: comparisons of a backend-ish name (``x.backend``, ``backend``) with a registered backend's
  name outside the backends themselves and the benchmarks that race them (each should be a capability);
- ``cross_package_private_imports``: imports of another sub-package's ``_private`` module (``from ..engine._files
  import ...`` in ``cli``); ``root_private_imports``: of the package root's own (``.._options``, ``.._errors``), the
  shared core, counted apart;
- ``renamed_options``: declared options whose flag or dest is not the field's own name (``--{field}``, dest field);
- ``score_hand_flags``: flags ``score`` declares by hand instead of from an options class.

    python tools/house_counts.py          # one line per count
    python tools/house_counts.py --json   # and the places counted
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "adherence"
#: the backends' own modules and their declarations (the benchmarks that race backends by name are skipped too)
BACKEND_OWNERS = {"judges/_transformers.py", "judges/_vllm.py", "judges/_openai.py", "judges/_backend.py",
                  "judges/_backend_options.py"}  # fmt: skip


def _files(root: Path = PKG):
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        yield rel, ast.parse(path.read_text(encoding="utf-8"))


def backend_names() -> tuple:
    """The registered backends' names, read from the registry (``BACKENDS`` in judges/_backend.py)."""
    tree = ast.parse((PKG / "judges" / "_backend.py").read_text(encoding="utf-8"))
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        value = getattr(node, "value", None)
        if isinstance(value, ast.Call):  # BACKENDS = Registry("judge backend", {...}, base=...)
            value = next((a for a in value.args if isinstance(a, ast.Dict)), None)
        if getattr(target, "id", None) == "BACKENDS" and isinstance(value, ast.Dict):
            return tuple(k.value for k in value.keys if isinstance(k, ast.Constant))
    raise LookupError("no BACKENDS registry in judges/_backend.py")


def backend_name_tests(root: Path = PKG) -> list:
    """``file:line`` of each comparison of a backend-ish name with a registered backend's name under ``root``,
    outside the backends and the benchmarks."""
    names = set(backend_names())
    out = []
    for rel, tree in _files(root):
        if rel in BACKEND_OWNERS or rel.startswith("bench/"):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            named = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in names]
            about = [n for n in ast.walk(node) if "backend" in (getattr(n, "id", None) or getattr(n, "attr", ""))]
            if named and about:
                out.append(f"{rel}:{node.lineno}")
    return out


def _package(rel: str) -> str:
    """The sub-package a module is in (``""``: the package root)."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else ""


def private_imports() -> tuple:
    """``(cross-package, root)``: each import of a private module outside its own sub-package, as ``file:line``."""
    cross, root = [], []
    for rel, tree in _files():
        own = _package(rel)
        here = rel.split("/")[:-1]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif (node.module or "").startswith("adherence."):
                target = node.module.split(".")[1:]  # type: ignore[union-attr]
            else:
                continue
            mods = [target] if target and target[-1].startswith("_") else []
            mods += [
                [*target, a.name]
                for a in node.names
                if a.name.startswith("_") and (PKG.joinpath(*target, a.name + ".py")).exists()
            ]
            for m in mods:
                if not m or not m[-1].startswith("_") or m[-1].startswith("__"):
                    continue
                pkg = m[0] if len(m) > 1 else ""
                if pkg == own:
                    continue
                (root if pkg == "" else cross).append(f"{rel}:{node.lineno} {'.'.join(m)}")
    return cross, root


def renamed_options() -> list:
    """Fields declared with ``option(..., flag=..., dest=...)`` whose flag is not ``--{field}`` or whose dest is not
    the field's name."""
    out = []
    for rel, tree in _files():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                call = stmt.value
                if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "option"):
                    continue
                name = stmt.target.id
                kw = {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}
                flag, dest = kw.get("flag"), kw.get("dest")
                if (flag and flag != "--" + name.replace("_", "-")) or (dest and dest != name):
                    out.append(f"{rel}:{stmt.lineno} {cls.name}.{name} -> {flag or ''} {dest or ''}".rstrip())
    return out


def score_hand_flags() -> list:
    tree = ast.parse((PKG / "cli" / "score.py").read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            if flags:
                out.append(flags[0])
    return out


def counts() -> dict:
    cross, root = private_imports()
    places = {
        "backend_name_tests": backend_name_tests(),
        "cross_package_private_imports": cross,
        "root_private_imports": root,
        "renamed_options": renamed_options(),
        "score_hand_flags": score_hand_flags(),
    }
    return {"counts": {k: len(v) for k, v in places.items()}, "places": places}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    result = counts()
    if "--json" in argv:
        print(json.dumps(result, indent=1))
    else:
        for k, v in result["counts"].items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

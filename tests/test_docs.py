"""The documentation site builds with `mkdocs build --strict` (API reference from the docstrings included), every
page is in the navigation, and the README's links into docs/ point at pages that exist."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    import importlib.util

    assert importlib.util.find_spec("mkdocs"), "mkdocs is part of the `test` extra (pip install -e '.[test]')"
    p = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "", "HOME": str(tmp_path)},
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    site = tmp_path / "site"
    assert (site / "index.html").exists() and (site / "calibrate" / "index.html").exists()
    api = (site / "api" / "stats" / "index.html").read_text(encoding="utf-8")
    assert "fit_calibration" in api and "roc_auc_score" in api  # the API reference is generated from docstrings
    # Docstrings render as Markdown: a Sphinx role (:class:`X`) shows raw, and "a, b: ..." under Args or
    # Attributes renders as a parameter named "a," of type "b".
    for page in sorted((site / "api").rglob("index.html")):
        html = page.read_text(encoding="utf-8")
        roles = re.findall(r":(?:class|func|meth|attr|mod|data|exc|obj):", html)
        assert not roles, (page.relative_to(site), roles[:5])
        joined = re.findall(r"<code>\w+,</code>", html)
        assert not joined, (page.relative_to(site), joined[:5])


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    listed = set(re.findall(r"([\w/-]+\.md)", nav))
    assert pages == listed, (pages - listed, listed - pages)


def test_readme_links_into_docs_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?:docs/)[^)#]+)", readme)
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).exists(), link


def test_the_architecture_picture_is_drawn_from_the_code():
    import architecture

    assert architecture.main(["--check"]) == 0, "run: python tools/architecture.py --write"
    svg = (DOCS / "architecture.svg").read_text(encoding="utf-8")
    for rooms in architecture.LAYERS:  # every room is drawn
        assert all(f">{r}" in svg for r in rooms), rooms


def test_every_name_the_architecture_page_gives_exists():
    import importlib

    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`(adherence(?:\.\w+)+)`", page))
    assert len(names) >= 15
    for name in sorted(names):
        module, _, attr = name.rpartition(".")
        try:
            obj = importlib.import_module(name)
        except ImportError:
            obj = getattr(importlib.import_module(module), attr, None)
        assert obj is not None, name


def test_the_docs_requirements_are_the_docs_extra():
    """`pip install -r requirements-docs.txt` builds the site without adherence or torch: the same tools as the
    `[docs]` extra, and no import of the package is needed to document it (mkdocstrings reads the sources)."""
    import ast

    tree = ast.parse((ROOT / "setup.py").read_text())
    extras = next(
        ast.literal_eval(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "EXTRAS"
    )
    lines = (ROOT / "requirements-docs.txt").read_text().splitlines()
    assert [x for x in lines if x and not x.startswith("#")] == extras["docs"]
    mk = (ROOT / "mkdocs.yml").read_text()
    assert "allow_inspection: true" not in mk and "force_inspection" not in mk

"""House rules: ruff's lint and format check find nothing in the package, the tests and the tools (ruff.toml),
and mypy finds nothing in the package (mypy.ini)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["adherence", "tests", "tools"]


def _tool(name: str) -> str:
    exe = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(exe).exists():
        pytest.fail(f"{name} is not installed: it is part of the `test` extra (pip install -e '.[test]')")
    return exe


def _ruff(*args):
    return subprocess.run([_tool("ruff"), *args, *TARGETS], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _mypy(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "mypy.ini"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_ruff_lint_finds_nothing():
    p = _ruff("check", "--output-format", "concise")
    assert p.returncode == 0, p.stdout + p.stderr


def test_ruff_format_check_finds_nothing():
    p = _ruff("format", "--check")
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.slow
def test_mypy_finds_nothing_in_the_package():
    _tool("mypy")
    p = _mypy()
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Success: no issues found" in p.stdout, p.stdout


def test_mypy_with_the_house_config_catches_a_planted_type_error(tmp_path):
    # The same configuration on a file with a wrong return type and a None dereference: both are reported,
    # so the check above passing means something.
    bad = tmp_path / "planted.py"
    bad.write_text(
        "from typing import Optional\n\n\n"
        "def count(xs: list[str]) -> int:\n"
        "    return ','.join(xs)\n\n\n"
        "def first(d: Optional[dict]) -> object:\n"
        "    return d.get('a')\n",
        encoding="utf-8",
    )
    p = _mypy("--cache-dir", str(tmp_path / "cache"), str(bad), cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "planted.py:5: error: Incompatible return value type" in p.stdout, p.stdout
    assert 'planted.py:9: error: Item "None" of' in p.stdout, p.stdout

"""House rules: ruff's lint and format check find nothing in the package, the tests and the tools (ruff.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["adherence", "tests", "tools"]


def _ruff(*args):
    exe = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(exe).exists():
        pytest.fail("ruff is not installed: it is part of the `test` extra (pip install -e '.[test]')")
    return subprocess.run([exe, *args, *TARGETS], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint_finds_nothing():
    p = _ruff("check", "--output-format", "concise")
    assert p.returncode == 0, p.stdout + p.stderr


def test_ruff_format_check_finds_nothing():
    p = _ruff("format", "--check")
    assert p.returncode == 0, p.stdout + p.stderr

"""Judge backends declare what they can do (``adherence.judges.capabilities``), beside their options; code outside a
backend asks those, never the backend's name -- a new backend is a registry line, its options and its capabilities."""

import ast
from pathlib import Path

import pytest

from adherence._errors import OptionError
from adherence.judges import BACKENDS, JudgeConfig, capabilities
from adherence.judges._backend_options import BACKEND_OPTIONS, CAPABILITIES

PACKAGE = Path(__file__).resolve().parents[2] / "adherence"
#: the backends themselves, their declarations, and the benchmarks that race them by name
OWNERS = {"judges/_transformers.py", "judges/_vllm.py", "judges/_openai.py", "judges/_backend.py",
          "judges/_backend_options.py"}  # fmt: skip


def test_every_registered_backend_declares_its_options_and_capabilities():
    assert set(BACKENDS) == set(BACKEND_OPTIONS) == set(CAPABILITIES)
    assert [n for n, c in CAPABILITIES.items() if c.default] == ["transformers"]
    assert JudgeConfig().backend == "transformers"  # the default backend is the one declared so


def test_no_code_outside_a_backend_tests_a_backend_by_name():
    """A comparison of anything with a backend's name (``x.backend == "vllm"``, ``backend in ("transformers",
    ...)``) outside the backends and the benchmarks that race them: there were ten, each a rule about a capability."""
    names = set(BACKENDS)
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in OWNERS or rel.startswith("bench/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            consts = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in names]
            about = [n for n in ast.walk(node) if "backend" in (getattr(n, "id", None) or getattr(n, "attr", ""))]
            if consts and about:
                found.append(f"{rel}:{node.lineno}")
    assert not found, found


def test_capabilities_decide_what_the_name_used_to():
    # self-consistency samples of a deterministic P(yes) are refused before any model loads
    for backend in ("transformers", "vllm"):
        with pytest.raises(OptionError, match="exact and deterministic"):
            JudgeConfig(backend=backend, samples=3, temperature=0.7)
    JudgeConfig(backend="openai", samples=3, temperature=0.7)
    assert capabilities("vllm").tensor_parallel and not capabilities("transformers").tensor_parallel
    assert capabilities("transformers").exact_token_counts and not capabilities("openai").exact_token_counts
    assert capabilities("no-such-backend") == capabilities("openai")  # nothing claimed for an unknown name

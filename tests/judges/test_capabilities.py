"""Judge backends declare what they can do (``adherence.judges.capabilities``), beside their options; code outside a
backend asks those, never the backend's name -- a new backend is a registry line, its options and its capabilities."""

import pytest

from adherence._errors import OptionError
from adherence.judges import BACKENDS, JudgeConfig, capabilities
from adherence.judges._backend_options import BACKEND_OPTIONS, CAPABILITIES


def test_every_registered_backend_declares_its_options_and_capabilities():
    assert set(BACKENDS) == set(BACKEND_OPTIONS) == set(CAPABILITIES)
    assert [n for n, c in CAPABILITIES.items() if c.default] == ["transformers"]
    assert JudgeConfig().backend == "transformers"  # the default backend is the one declared so


def test_no_code_outside_a_backend_tests_a_backend_by_name(tmp_path):
    """A comparison of anything with a backend's name (``x.backend == "vllm"``, ``backend in ("transformers",
    ...)``) outside the backends and the benchmarks that race them: there were ten, each a rule about a capability.
    The count is tools/house_counts.py's, which finds one planted in a package of its own."""
    import house_counts

    assert set(house_counts.backend_names()) == set(BACKENDS)
    assert house_counts.backend_name_tests() == []
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "x.py").write_text('def f(args):\n    return args.backend == "vllm" or fmt == "openai"\n')
    assert house_counts.backend_name_tests(tmp_path) == ["cli/x.py:2"]


def test_capabilities_decide_what_the_name_used_to():
    # self-consistency samples of a deterministic P(yes) are refused before any model loads
    for backend in ("transformers", "vllm"):
        with pytest.raises(OptionError, match="exact and deterministic"):
            JudgeConfig(backend=backend, samples=3, temperature=0.7)
    JudgeConfig(backend="openai", samples=3, temperature=0.7)
    assert capabilities("vllm").tensor_parallel and not capabilities("transformers").tensor_parallel
    assert capabilities("transformers").exact_token_counts and not capabilities("openai").exact_token_counts
    assert capabilities("no-such-backend") == capabilities("openai")  # nothing claimed for an unknown name

"""One registry for every kind of plug-in (methods, judge backends, commands, executors): lazy "module:Class"
entries, a base-class check on load, one "did you mean" error; and a method added in one file plus one registry
line runs through `score`, a job file and the run's metadata like a bundled one."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from adherence._errors import OptionError
from adherence._registry import Registry
from adherence.cli.main import COMMANDS, main
from adherence.data import example_path, metadata_path
from adherence.engine import EXECUTORS, EngineOptions, get_executor
from adherence.judges import BACKENDS
from adherence.role import METHODS, Method, get_method


@pytest.mark.parametrize("registry", [METHODS, BACKENDS, COMMANDS, EXECUTORS], ids=lambda r: r.kind)
def test_every_entry_loads_and_is_of_its_kind(registry):
    base_module, base_name = registry.base.split(":")
    for name in registry:
        cls = registry.load(name)
        assert any(b.__name__ == base_name and b.__module__ == base_module for b in cls.__mro__), (name, cls)


def test_an_unknown_name_is_one_line_with_the_close_one():
    with pytest.raises(OptionError, match=r"unknown method 'cosin'\. Did you mean 'cosine'\? Available: cosine, knn"):
        get_method("cosin")
    with pytest.raises(OptionError, match=r"unknown judge backend 'vlm'\. Did you mean 'vllm'\?"):
        BACKENDS.load("vlm")
    with pytest.raises(OptionError, match=r"unknown executor 'rey'\. Did you mean 'ray'\?"):
        EngineOptions(executor="rey")
    assert type(get_executor(EngineOptions())).__name__ == "LocalExecutor"


def test_register_refuses_a_taken_name_a_bad_entry_and_a_class_of_another_kind():
    r = Registry("method", {"scope": "adherence.role._scope:ScopeMethod"}, base="adherence.role._base:Method")
    with pytest.raises(ValueError, match="registered already"):
        r.register("scope", "adherence.role._scope:ScopeMethod")
    with pytest.raises(ValueError, match="'module:Class'"):
        r.register("toy", "tests.role._toy_method.ToyMethod")
    r.register("wrong", "tests.role._toy_method:NotAMethod")
    with pytest.raises(TypeError, match="is not a Method"):
        r.load("wrong")
    r.remove("wrong")
    assert list(r) == ["scope"] and r["scope"] == "adherence.role._scope:ScopeMethod"


@pytest.fixture
def toy():
    METHODS.register("toy", "tests.role._toy_method:ToyMethod")  # the one line a new method adds
    try:
        yield
    finally:
        METHODS.remove("toy")


def test_a_method_added_in_one_file_and_one_line_runs_through_score_a_job_file_and_the_metadata(toy, tmp_path):
    log = example_path("role")
    out = tmp_path / "toy.parquet"
    assert main(["score", str(log), "-o", str(out), "--method", "toy", "--threshold", "0.3", "-q"]) == 0
    t = pq.read_table(out).to_pydict()
    words = [set(a.lower().split()) for a in t["assistant"]]
    want = [len(w & set(r.lower().split())) / len(w) for w, r in zip(words, t["role"])]
    np.testing.assert_allclose(t["score"], want, atol=1e-6)
    assert t["prediction"] == [s >= 0.3 for s in want]
    meta = json.loads(metadata_path(out).read_text())
    assert meta["config"]["method"] == "toy"

    job = tmp_path / "job.yaml"  # the same job from a job file
    job.write_text(f"input: {log}\nmethod: toy\nthreshold: 0.3\noutput: {tmp_path / 'again.parquet'}\nquiet: true\n")
    assert main(["score", "--config", str(job)]) == 0
    assert pq.read_table(tmp_path / "again.parquet").column("score").to_pylist() == t["score"]
    assert isinstance(get_method("toy"), Method)

    METHODS.remove("toy")  # gone from the registry, gone from the command line
    with pytest.raises(SystemExit) as stop:
        main(["score", str(log), "-o", str(tmp_path / "x.parquet"), "--method", "toy", "-q"])
    assert stop.value.code == 2 and not (tmp_path / "x.parquet").exists()

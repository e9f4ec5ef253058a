"""The bundled GGUF judge exported to a transformers checkpoint scores like the GGUF it came from."""

import json

import numpy as np
import pytest

from adherence.cli.main import main
from adherence.data import example_path, read_turns
from adherence.judges import JudgeConfig, RoleJudge


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "smollm2"
    assert main(["models", "export-judge", str(out), "--no-progress"]) == 0
    return out


@pytest.mark.slow
def test_export_loads_without_gguf_and_scores_the_same(exported, smollm_judge):
    from adherence.judges._transformers import TransformersBackend

    meta = json.loads((exported / "adherence_export.json").read_text())
    assert meta["producer"] == "adherence" and meta["dtype"] == "float32"
    assert not list(exported.glob("*.gguf")) and (exported / "model.safetensors").exists()
    cfg = json.loads((exported / "config.json").read_text())
    assert "quantization_config" not in cfg
    turns = read_turns(example_path("role")).slice(0, 8)
    plain = TransformersBackend(str(exported), device="cpu", progress=False)
    a = RoleJudge(JudgeConfig(), backend=smollm_judge).score(turns)["score"]
    b = RoleJudge(JudgeConfig(model=str(exported)), backend=plain).score(turns)["score"]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_export_never_replaces_a_directory(exported, capsys):
    assert main(["models", "export-judge", str(exported)]) == 1
    assert "already exists" in capsys.readouterr().err

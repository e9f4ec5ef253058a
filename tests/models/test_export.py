"""The bundled GGUF judge exported to a transformers checkpoint scores like the GGUF it came from, and the
in-process judge reads that checkpoint from the cache after its first load."""

import json

import numpy as np
import pytest
import torch

from adherence.cli.main import main
from adherence.data import example_path, read_turns
from adherence.judges import JudgeConfig, RoleJudge


@pytest.fixture(scope="module")
def exported(cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "smollm2"
    assert main(["models", "export-judge", str(out), "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def direct():
    """The bundled GGUF read by transformers itself, no cache in between: the reference."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adherence.models import DEFAULT_JUDGE, resolve_model

    r = resolve_model(DEFAULT_JUDGE)
    tok = AutoTokenizer.from_pretrained(str(r.path), gguf_file=r.gguf_file)
    return AutoModelForCausalLM.from_pretrained(str(r.path), gguf_file=r.gguf_file, dtype=torch.float32), tok


@pytest.mark.slow
def test_export_loads_without_gguf_and_scores_the_same(exported, direct):
    from adherence.judges._transformers import TransformersBackend

    meta = json.loads((exported / "adherence_export.json").read_text())
    assert meta["producer"] == "adherence" and meta["dtype"] == "float32"
    assert not list(exported.glob("*.gguf")) and (exported / "model.safetensors").exists()
    cfg = json.loads((exported / "config.json").read_text())
    assert "quantization_config" not in cfg
    plain = TransformersBackend(str(exported), device="cpu", progress=False)
    ref = direct[0].state_dict()
    got = plain.model.state_dict()
    assert got.keys() == ref.keys()
    assert all(torch.equal(got[k].float(), ref[k]) for k in ref)  # the de-quantised weights, to the bit
    turns = read_turns(example_path("role")).slice(0, 3)  # the weights are equal above: this checks the rest
    gguf = TransformersBackend(loaded=(*direct, "gguf"), device="cpu", progress=False)
    a = RoleJudge(JudgeConfig(), backend=gguf).score(turns)["score"]
    b = RoleJudge(JudgeConfig(model=str(exported)), backend=plain).score(turns)["score"]
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_a_bfloat16_load_is_the_float32_weights_rounded_once(direct):
    """The GGUF file read straight into bfloat16 (``export-judge --dtype bf16``): transformers' float32 weights
    rounded to bfloat16, nothing computed in between."""
    from adherence.models import DEFAULT_JUDGE, resolve_model
    from adherence.models._gguf import gguf_model

    got = gguf_model(resolve_model(DEFAULT_JUDGE), torch.bfloat16).state_dict()
    ref = direct[0].state_dict()
    assert got.keys() == ref.keys()
    assert all(got[k].dtype == torch.bfloat16 and torch.equal(got[k], ref[k].to(torch.bfloat16)) for k in ref)


@pytest.mark.slow
def test_the_in_process_judge_reads_the_gguf_once_then_its_checkpoint_in_the_cache(cache, exported, capsys):
    """The first load of the bundled judge de-quantises it into the cache (the export's checkpoint); later loads
    read that, with the same weights, and the run's model name is still the GGUF's."""
    from adherence.judges._transformers import TransformersBackend
    from adherence.models import DEFAULT_JUDGE, resolve_model
    from adherence.models._export import gguf_checkpoint

    r = resolve_model(DEFAULT_JUDGE)
    folder = gguf_checkpoint(r)
    assert folder is not None and folder.parent == cache / "judges"  # made by the export above
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    judge = TransformersBackend(device="cpu", progress=True)
    assert "de-quantising" not in capsys.readouterr().err  # not again
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert judge.model_id == f"{r.name}::{r.gguf_file}"
    exp = TransformersBackend(str(exported), device="cpu", progress=False).model.state_dict()
    assert all(torch.equal(v, exp[k]) for k, v in judge.model.state_dict().items())
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporary left behind


@pytest.mark.slow
def test_an_unwritable_cache_reads_the_gguf_file_itself(tmp_path, monkeypatch, direct):
    from adherence.judges._transformers import TransformersBackend
    from adherence.models import DEFAULT_JUDGE, resolve_model
    from adherence.models._export import gguf_checkpoint

    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("ADHERENCE_CACHE_DIR", str(blocked))
    assert gguf_checkpoint(resolve_model(DEFAULT_JUDGE)) is None
    got = TransformersBackend(device="cpu", progress=False).model.state_dict()  # from the GGUF file, no cache
    ref = direct[0].state_dict()
    assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)


@pytest.mark.slow
def test_export_never_replaces_a_directory(exported, capsys):
    assert main(["models", "export-judge", str(exported)]) == 1
    assert "already exists" in capsys.readouterr().err

"""The bf16 and int8 encoder paths need an extra (`adherence[cpu-encoders]`: ONNX Runtime and onnx): without it the
default float32 path still scores, and asking for bf16 or int8 is one line naming the extra, before anything is
scored. Without OpenVINO (a core requirement) the float32 path runs on torch, and the metadata says so."""

import json
import subprocess
import sys

import pytest

from adherence.data import example_path

LOG = example_path("role").parent / "support_log.jsonl"


def _score_without(modules, precision, out):
    code = (
        "import sys\n"
        f"for m in {modules!r}: sys.modules[m] = None  # as if not installed\n"
        "from adherence.cli.main import main\n"
        f"sys.exit(main(['score', {str(LOG)!r}, '-o', {str(out)!r}, '--method', 'scope', '--no-progress',"
        f" '--encoder-precision', {precision!r}]))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("precision, missing", [("bf16", "onnxruntime"), ("int8", "onnxruntime")])
@pytest.mark.slow
def test_a_missing_runtime_is_one_line_naming_the_extra(tmp_path, precision, missing):
    res = _score_without(["openvino", "onnxruntime", "onnx"], precision, tmp_path / "o.parquet")
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr[-2000:]
    assert f"'{missing}' is needed for --encoder-precision {precision}" in err[-1]
    assert "pip install 'adherence[cpu-encoders]'" in err[-1]
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.slow
def test_the_default_path_needs_none_of_the_extra(tmp_path):
    res = _score_without(["onnxruntime", "onnx"], "float32", tmp_path / "o.parquet")
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "o.parquet").exists()


@pytest.mark.slow
def test_without_openvino_the_default_path_runs_on_torch_and_says_so(tmp_path):
    res = _score_without(["openvino", "onnxruntime", "onnx"], "float32", tmp_path / "o.parquet")
    assert res.returncode == 0, res.stderr[-2000:]
    meta = json.loads((tmp_path / "o.parquet.meta.json").read_text())
    assert meta["models"]["encoder"]["runtime"].startswith("torch ")

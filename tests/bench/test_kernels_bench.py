import json

import pytest
import torch

from adherence.cli.main import main


def test_kernel_bench_writes_json(tmp_path, capsys):
    out = tmp_path / "k.json"
    assert main(["bench", "kernels", "--batch", "64", "--dim", "32", "--refs", "8", "--vocab", "16",
                 "--repeats", "2", "-o", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res == json.loads(capsys.readouterr().out)
    assert res["args"]["batch"] == 64 and res["bytes_per_call"] > 0
    eager = res["backends"]["torch_eager"]
    assert eager["rows_per_s"] > 0 and eager["min_s"] <= eager["median_s"] <= eager["max_s"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernel_bench_on_gpu_checks_correctness_first():
    from adherence.bench import bench_kernels

    res = bench_kernels(batch=8192, repeats=3)
    assert res["correctness"]["passed"] and "triton_fused" in res["backends"]

"""The dtype a model runs in: bf16 on CPU only where the CPU multiplies bf16 natively."""

import warnings

import pytest
import torch

from adherence.models import _device
from adherence.models._device import cpu_bf16_native, pick_dtype

AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
AVX512_BF16 = AVX2 | {"avx512f", "avx512bw", "avx512_bf16"}
AMX = AVX2 | {"amx_tile", "amx_bf16"}


def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch):
    monkeypatch.setattr(_device.platform, "machine", lambda: "x86_64")
    assert not cpu_bf16_native(AVX2)
    assert not cpu_bf16_native(AVX2 | {"avx512f"})  # AVX-512 without its bf16 extension is not enough
    assert cpu_bf16_native(AVX512_BF16) and cpu_bf16_native(AMX)


@pytest.mark.parametrize(
    "flags,expected", [(AVX2, torch.float32), (AVX512_BF16, torch.bfloat16), (AMX, torch.bfloat16)]
)
def test_auto_picks_bf16_on_cpu_only_with_native_support(monkeypatch, flags, expected):
    monkeypatch.setattr(_device, "cpu_features", lambda: flags)
    monkeypatch.setattr(_device.platform, "machine", lambda: "x86_64")
    assert pick_dtype(torch.device("cpu"), "auto") == expected
    assert pick_dtype(torch.device("cpu")) == torch.float32  # the default never depends on the machine
    assert pick_dtype(torch.device("cuda"), "auto") == torch.bfloat16


def test_bf16_on_a_cpu_without_it_warns_but_is_honoured(monkeypatch):
    monkeypatch.setattr(_device, "cpu_features", lambda: AVX2)
    monkeypatch.setattr(_device.platform, "machine", lambda: "x86_64")
    with pytest.warns(UserWarning, match="emulated"):
        assert pick_dtype(torch.device("cpu"), "bfloat16") == torch.bfloat16
    monkeypatch.setattr(_device, "cpu_features", lambda: AVX512_BF16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pick_dtype(torch.device("cpu"), "bf16") == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        pick_dtype(torch.device("cpu"), "int8")


def test_benchmark_json_names_the_cpu(tmp_path):
    """Every benchmark JSON written by `adherence bench` carries the CPU it ran on."""
    import json

    from adherence.bench._hardware import SIMD_FLAGS, cpu_info
    from adherence.cli.bench import BenchCommand

    info = cpu_info()
    assert set(info) >= {"model", "logical_cpus", "simd", "bf16_native"}
    assert set(info["simd"]) <= set(SIMD_FLAGS) and info["bf16_native"] == cpu_bf16_native()
    out = tmp_path / "b.json"
    BenchCommand()._write({"bench": "x"}, out)
    assert json.loads(out.read_text())["cpu"]["model"] == info["model"]

"""The llama.cpp build follows the CPU it runs on: no step of CI or the README assumes AVX-512."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
import llama_cpp_cmake_args as flags  # noqa: E402

AVX2_ONLY = {"sse4_2", "avx", "avx2", "fma", "f16c"}
AVX512 = AVX2_ONLY | {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}


def _opts(args):
    return dict(a[2:].split("=") for a in args)


def test_avx2_only_cpu_gets_no_avx512():
    o = _opts(flags.cmake_args(AVX2_ONLY))
    assert o["GGML_NATIVE"] == "OFF" and o["GGML_AVX2"] == "ON" and o["GGML_FMA"] == "ON"
    assert o["GGML_AVX512"] == "OFF"
    assert all(o[k] == "OFF" for k in ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"))


def test_avx512_cpu_gets_avx512_and_a_bare_cpu_gets_nothing():
    assert _opts(flags.cmake_args(AVX512))["GGML_AVX512"] == "ON"
    bare = _opts(flags.cmake_args(set()))
    assert [k for k, v in bare.items() if v == "ON"] == []


def test_cpuinfo_parsing(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse4_2 avx avx2 fma\n\n"
        "processor\t: 1\nflags\t\t: avx512f\n"
    )
    model, got = flags.cpu_info(str(info))
    assert model == "Some CPU" and got == {"fpu", "sse4_2", "avx", "avx2", "fma"}
    assert flags.cpu_info(str(tmp_path / "missing"))[1] == set()


def test_cli_prints_the_args_for_given_flags():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "llama_cpp_cmake_args.py"), "--flags", "avx avx2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "-DGGML_AVX2=ON" in out and "-DGGML_AVX512=OFF" in out and "-DGGML_FMA=OFF" in out


@pytest.mark.parametrize("path", [".ci/run", "README.md"])
def test_no_step_assumes_avx512(path):
    text = (ROOT / path).read_text()
    assert not re.search(r"GGML_AVX512\w*=ON|-mavx512|GGML_NATIVE=ON", text)
    assert "llama_cpp_cmake_args.py" in text  # the llama.cpp build takes its flags from the CPU

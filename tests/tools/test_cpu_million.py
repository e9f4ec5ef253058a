"""tools/cpu_million.py on a small file: each path checked, run on every turn, profiled; --reuse only of the same run."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
import cpu_million  # noqa: E402

from tests.conftest import REPO  # noqa: E402

PERSONA = REPO / "tests" / "fixtures" / "synthetic_persona_chat_head.csv"  # Jandaghi et al. 2023, CC BY 4.0


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("million") / "m.json"
    argv = ["--turns", "300", "--exact-turns", "100", "--profile-turns", "100", "--paths", "int8",
            "--persona-csv", str(PERSONA), "--out", str(out)]  # fmt: skip
    assert cpu_million.main(argv) == 0
    return out, json.loads(out.read_text())


@pytest.mark.slow
def test_each_path_is_checked_then_run_on_every_turn(small_run):
    out, res = small_run
    assert res["correct"] is True and set(res["correctness"]) == {"int8"}
    assert res["correctness"]["int8"]["job_vs_embeddings_max_abs_diff"] < 1e-4
    assert res["int8"]["rows"] == res["int8"]["ok"] == res["int8"]["turns"] == 300 == res["workload"]["turns"]
    assert res["float32"]["turns"] == 100 and res["float32"]["projected_hours_for_all_turns"] > 0
    assert res["profile"]["precision"] == "int8" and 0 < res["profile"]["encoder_runtime_s"] < res["profile"]["wall_s"]
    assert (out.parent / res["profile"]["file"]).exists()


@pytest.mark.parametrize("change", ["workload", "cpu"])
def test_reuse_keeps_only_runs_of_the_same_workload_and_cpu(tmp_path, change):
    """An earlier JSON of another workload (one turn more) or another CPU is refused before any job runs."""
    from adherence.bench._hardware import cpu_info

    earlier = {"workload": cpu_million.build(300, PERSONA, tmp_path / "turns.parquet"), "cpu": cpu_info()}
    if change == "workload":
        earlier["workload"] = dict(earlier["workload"], turns=301)
    else:
        earlier["cpu"] = dict(earlier["cpu"], simd=[*earlier["cpu"]["simd"], "amx_tile"])
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps(earlier))
    argv = ["--turns", "300", "--exact-turns", "50", "--profile-turns", "50", "--paths", "int8", "--reuse", str(bad),
            "--persona-csv", str(PERSONA), "--out", str(tmp_path / "x.json")]  # fmt: skip
    with pytest.raises(SystemExit, match="another workload or CPU"):
        cpu_million.main(argv)
    assert not (tmp_path / "x.json").exists()


def test_paths_are_checked():
    with pytest.raises(SystemExit, match="--paths takes bf16, int8 and/or float32"):
        cpu_million.main(["--paths", "fp4", "--out", "unused.json"])

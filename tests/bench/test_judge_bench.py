import json

import pytest
import torch

from adherence.bench.judge import synthetic_conversations
from adherence.cli.main import main


def test_judge_bench_checks_then_times(tmp_path, capsys):
    out = tmp_path / "j.json"
    assert main(["bench", "judge", "--random-config", "llama-tiny", "--conversations", "3", "--turns", "4",
                 "--words-per-turn", "12", "--repeats", "1", "--device", "cpu", "-o", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["correctness"]["passed"] and res["correctness"]["max_abs_p_yes_difference"] <= 1e-3
    assert res["n_turns"] == 12
    shared, separate = res["modes"]["prefix_sharing"], res["modes"]["separate"]
    assert shared["forward_tokens"] < separate["forward_tokens"] == res["prompt_tokens"]
    assert shared["turns_per_s"] > 0 and res["speedup"] > 0


def test_synthetic_conversations_are_seeded():
    a = synthetic_conversations(2, 3, 10, seed=1)
    assert a == synthetic_conversations(2, 3, 10, seed=1) and a != synthetic_conversations(2, 3, 10, seed=2)
    assert len(a[0][2]) == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_judge_bench_on_gpu_reports_flop_utilisation():
    from adherence.bench import bench_judge

    res = bench_judge(random_config="llama-tiny", conversations=4, turns=4, repeats=1)
    assert "flop_utilisation" in res["modes"]["prefix_sharing"] or "cpu" not in res["device"]

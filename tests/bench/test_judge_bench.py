import json

import pytest
import torch

from adherence.bench.judge import synthetic_conversations
from adherence.cli.main import main


@pytest.mark.slow
def test_judge_bench_checks_then_times(tmp_path, capsys):
    out = tmp_path / "j.json"
    assert (
        main(
            [
                "bench",
                "judge",
                "--random-config",
                "llama-tiny",
                "--conversations",
                "3",
                "--turns",
                "4",
                "--role-tokens",
                "30",
                "--turn-tokens",
                "24",
                "--unique",
                "4",
                "--prompt-tokens",
                "120",
                "--check-conversations",
                "2",
                "--repeats",
                "1",
                "--device",
                "cpu",
                "--engine-turns",
                "30",
                "--engine-config",
                "llama-tiny",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert res == json.loads(capsys.readouterr().out)
    assert res["bench"] == "judge" and res["correct"]
    c = res["correctness"]["fp32"]
    assert c["passed"] and c["max_abs_p_yes_difference"] <= 1e-5 and c["turns"] == 2 * 4 * 2  # two layouts
    assert 0 < c["p_yes_range"][0] <= c["p_yes_range"][1] < 1  # the exact P(yes), never a fallback
    assert set(res["correctness"]) == {"fp32"}  # a float32 run has no low-precision check
    for layout in ("user", "chained"):
        prefix = res["workloads"]["prefix"]["layouts"][layout]
        shared, separate = prefix["modes"]["prefix_sharing"], prefix["modes"]["separate"]
        assert shared["forward_tokens"] < separate["forward_tokens"] == separate["prompt_tokens"]
        assert prefix["speedup"] == pytest.approx(separate["median_s"] / shared["median_s"])
        assert shared["attended_pairs"] < separate["attended_pairs"]
        assert shared["turns_per_hour"] == pytest.approx(3600 * shared["turns_per_s"])
    per = res["workloads"]["prefix"]["layouts"]
    assert per["chained"]["forward_token_ratio"] > per["user"]["forward_token_ratio"]
    assert res["speedup"] == per["chained"]["speedup"]
    assert res["turns_per_hour"] == per["chained"]["modes"]["prefix_sharing"]["turns_per_hour"]
    assert res["turns_per_hour_of"] == {
        "layout": "chained",
        "dtype": "float32",
        "by_dtype": {"float32": res["turns_per_hour"]},
    }
    uniq = res["workloads"]["unique"]
    assert uniq["turns"] == 4 and 100 < uniq["mean_prompt_tokens"] < 200
    assert uniq["forward_tokens"] == uniq["prompt_tokens"]  # nothing shared, nothing padded in the count
    fm = res["model"]
    want = (
        2 * fm["body_parameters"] * uniq["forward_tokens"]
        + 4 * fm["layers"] * fm["attention_width"] * uniq["attended_pairs"]
        + 2 * fm["hidden"] * fm["vocab"] * 4
    )
    assert uniq["flop"] == pytest.approx(want)
    assert res["workloads"]["full_vocab"]["full_vocab_s"] > 0 and "ratio_to_peak" not in res  # no peak on CPU
    eng = res["workloads"]["engine"]
    assert eng["rows_out"] == eng["ok_rows"] == 30 and eng["forward_batches"] >= 1
    assert eng["projected_1m_turns_s"] == pytest.approx(1e6 / eng["turns_per_s"])
    assert eng["judge_stats"]["forward_tokens"] < eng["judge_stats"]["prompt_tokens"]  # shared prefixes
    # the host's time by phase, each measured in the thread that did it; no GPU, no CUDA events
    ph = eng["phases_thread_s"]
    judge_phases = ("tokenise", "plan", "layout", "forward", "read")
    assert set(ph) == {*judge_phases, "input", "score", "write"}, ph
    assert all(ph[k] > 0 for k in (*judge_phases, "score", "write")) and ph["input"] >= 0, ph
    assert sum(ph[k] for k in judge_phases) <= ph["score"] + 1e-3  # inside the worker's scoring
    assert eng["gpu_forward_s"] is None and eng["gpu_forward_share"] is None


def test_flop_model_counts_the_body_once():
    from adherence.bench.judge import _flop_model, random_backend

    b = random_backend("llama-tiny", device="cpu")
    fm = _flop_model(b)
    cfg = b.model.config
    per_layer = (
        (4 * 64 * 64 if cfg.num_key_value_heads == cfg.num_attention_heads else 2 * 64 * 64 + 2 * 64 * 32)
        + 3 * 64 * 128
        + 2 * 64
    )
    assert fm["body_parameters"] == 2 * per_layer + 64  # + the final norm
    assert fm["vocab"] == b.tokenizer.vocab_size and fm["attention_width"] == 64


def test_synthetic_conversations_are_seeded():
    a = synthetic_conversations(2, 3, 10, seed=1)
    assert a == synthetic_conversations(2, 3, 10, seed=1) and a != synthetic_conversations(2, 3, 10, seed=2)
    assert len(a[0][2]) == 3
    b = synthetic_conversations(1, 1, 10, seed=1, role_words=50)
    assert len(b[0][1].split()) > 50


def test_unknown_workload_is_refused():
    from adherence.bench import bench_judge

    with pytest.raises(ValueError, match="unknown workloads"):
        bench_judge(random_config="llama-tiny", device="cpu", workloads=("prefix", "decode"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_judge_bench_on_gpu_runs_flex_and_reports_the_peak_ratio():
    from adherence.bench import bench_judge

    res = bench_judge(
        random_config="smollm2-135m",
        conversations=4,
        turns=4,
        unique=8,
        prompt_tokens=300,
        repeats=1,
        check_conversations=2,
        float8=True,
    )
    assert res["backend"]["attention"] == "flex" and res["correct"]
    assert res["correctness"]["fp32"]["max_abs_p_yes_difference"] <= 1e-5
    assert res["correctness"]["bfloat16"]["passed"]
    # a workload this small is launch-bound: only the accounting is checked here, the rates in the bench JSON
    assert 0 < res["ratio_to_peak"] < 1
    per = res["workloads"]["prefix"]["layouts"]
    assert per["chained"]["forward_token_ratio"] > per["user"]["forward_token_ratio"] > 1
    assert all(a["max_abs_p_yes_difference"] < 0.05 for a in res["float8"]["accuracy"].values())

"""The judge race on the in-process backend alone (the vLLM side runs under the vllm marker)."""

import pytest

from adherence.bench import bench_judge_race


def test_race_checks_and_counts(tiny_llama_dir):
    res = bench_judge_race(
        model=str(tiny_llama_dir),
        backends=["transformers"],
        unique=3,
        unique_words=30,
        conversations=2,
        turns=3,
        words_per_turn=10,
    )
    uni, multi = res["workloads"]["unique"], res["workloads"]["multi_turn"]
    assert uni["turns"] == 3 and multi["turns"] == 6
    assert uni["transformers_forward_tokens"] == uni["prompt_tokens"]  # nothing to share
    assert multi["transformers_forward_tokens"] < multi["prompt_tokens"]  # turns share their prefix
    t = multi["backends"]["transformers"]
    assert t["turns_per_s"] > 0 and t["ratio_vs_transformers"] == 1.0 and t["p_yes_source"] == ["full_vocab"]
    with pytest.raises(ValueError, match="unknown backend"):
        bench_judge_race(
            model=str(tiny_llama_dir), backends=["transformers", "tgi"], unique=1, conversations=1, turns=1
        )

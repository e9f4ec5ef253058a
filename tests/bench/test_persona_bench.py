import json

import pytest

from adherence.cli.main import main
from adherence.data import example_path


@pytest.mark.slow
def test_persona_bench_times_the_parts_and_checks_a_baseline(tmp_path, capsys):
    human = example_path("persona") / "human.csv"
    base = tmp_path / "cpu.json"
    assert (
        main(
            [
                "persona",
                "--reference",
                str(human),
                "--dimensions",
                "adherence,consistency",
                "--repeats",
                "2",
                "--methods",
                "tfidf,bm25,late_interaction",
                "--no-progress",
                "--limit",
                "12",
                "-o",
                str(base),
            ]
        )
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "persona",
                str(human),
                "--repeats",
                "2",
                "--baseline",
                str(base),
                "--device",
                "cpu",
                "--limit",
                "12",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert res["bench"] == "persona" and res["correct"]
    # the same corpus, device and seed as the baseline: the AUCs agree exactly
    assert all(d < 1e-9 for d in res["correctness"]["abs_differences"].values())
    assert set(res["correctness"]["abs_differences"]) == {"tfidf", "bm25", "late_interaction"}
    assert (
        res["wall_s"] >= sum(v for v in res["parts_s"].values() if v > 0) - 1e-6 - res["parts_s"]["loading_and_models"]
    )
    assert {"adherence/late_interaction/scoring", "adherence/bm25/mrr_curve", "consistency"} <= set(res["parts_s"])
    assert res["speedup"] > 0 and res["args"]["n_documents"] == 12 == res["args"]["limit"]

"""adherence bench labels: its figures are the methods' own on the same turns, its correctness check is real, and
its JSON carries what the docs quote."""

import json

import numpy as np
import pytest

from adherence.bench.labels import support_turns
from adherence.cli.main import main

pytestmark = pytest.mark.slow


def test_bench_labels_reports_what_it_measured(tmp_path, capsys):
    out = tmp_path / "labels.json"
    argv = ["bench", "labels", "--sizes", "50", "--seeds", "1", "--support-conversations", "90", "--judge-turns", "0",
            "--throughput-turns", "150", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    r = json.loads(out.read_text())
    assert r["bench"] == "labels" and r["correct"] is True
    sup = r["sets"]["support"]
    # scope's AUC is the scope method's own on the same generated turns
    from adherence.role import Resources, RoleConfig, score_turns
    from adherence.stats import roc_auc_score

    table, y = support_turns(90, seed=11)
    cfg = RoleConfig(method="scope", progress=False)
    s = score_turns(table, "scope", config=cfg, resources=Resources(cfg)).column("score").to_numpy()
    assert sup["auc_all_turns"]["scope"] == pytest.approx(roc_auc_score(y, s), abs=1e-9)
    assert sup["turns"] == len(y) and sup["violations"] == int((y == 0).sum())
    c = sup["classifier"]["50"]
    assert 0 <= c["held_out_auc"]["min"] <= c["held_out_auc"]["mean"] <= c["held_out_auc"]["max"] <= 1
    assert set(c["baselines_on_same_turns"]) == {"reply_length", "role_overlap", "user_overlap"}
    assert "all_out_of_fold" in r["sets"]["paper_style"]["classifier"]
    tp = r["throughput"]
    assert tp["turns"] == 150 and tp["by_precision"]["float32"]["correctness"]["passed"]
    assert tp["hours_per_million_turns"] == pytest.approx(1e6 / tp["turns_per_second"] / 3600, rel=1e-2)
    assert set(r["goals"]) >= {"scope_auc_support_ge_0.80", "classifier_200_support_ge_0.95"}
    assert np.isfinite(tp["peer"]["texts_per_second"])

import json

import numpy as np
import pytest
from sklearn import metrics as skm

from adherence.cli.main import main
from adherence.data import example_path, read_turns
from adherence.role import score_turns

BENCH = example_path("role").with_name("role_benchmark.json")


@pytest.mark.slow
def test_role_paper_json_matches_direct_scoring(capsys):
    assert main(["bench", "role-paper", str(BENCH), "--sizes", "15,40", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert list(res) == ["cosine", "knn", "mahalanobis", "pca_mahalanobis", "kl"]
    for method in res:
        assert set(res[method]) == {"n=15", "n=40"}
        assert {"adherent", "violation", "separation", "auc", "ap"} <= set(res[method]["n=15"])
    assert res["kl"]["n=40"]["n_records"] == 28  # the file is shorter than 40
    # n=15 of knn: the first 15 records, references = their 15 ground truths
    first = read_turns(BENCH).slice(0, 15)
    out = score_turns(first, "knn", reference_pool="dataset", progress=False)
    y = np.array([lab == "adherent" for lab in first.column("label").to_pylist()])
    s = np.array(out.column("score").to_pylist())
    m = res["knn"]["n=15"]
    assert m["auc"] == pytest.approx(skm.roc_auc_score(y, s))
    assert m["ap"] == pytest.approx(skm.average_precision_score(y, s))
    assert m["separation"] == pytest.approx(s[y].mean() - s[~y].mean())


def test_role_paper_table_and_bad_sizes(capsys):
    assert main(["bench", "role-paper", str(BENCH), "--sizes", "15"]) == 0
    out = capsys.readouterr().out
    assert "pca_mahalanobis" in out
    # an AUC below chance is explained, not printed bare (and only for the methods that have one)
    below = [
        line.split()[0]
        for line in out.splitlines()
        if len(line.split()) == 7 and line.split()[5] not in ("AUC", "—") and float(line.split()[5]) < 0.5
    ]
    assert below == ["pca_mahalanobis"]
    assert "note: pca_mahalanobis's AUC is below 0.5 at n = 15" in out and "why: PCA keeps at most n - 1" in out
    assert "note: cosine" not in out and "note: kl" not in out
    assert main(["bench", "role-paper", str(BENCH), "--sizes", "a,b"]) == 2

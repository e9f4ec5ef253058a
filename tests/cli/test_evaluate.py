import json
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from sklearn import metrics as skm

from adherence.cli.main import main
from adherence.data import example_path, read_turns, write_table

EXAMPLE = str(example_path("role"))


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_on_bundled_example(capsys):
    code, out, _ = _run(
        capsys,
        "evaluate",
        EXAMPLE,
        "--score",
        "rater_score",
        "--label",
        "label",
        "--positive",
        "adherent",
        "--json",
        "--bootstrap",
        "200",
    )
    assert code == 0
    res = json.loads(out)
    t = read_turns(EXAMPLE)
    y = np.array([v == "adherent" for v in t.column("label").to_pylist()])
    s = np.array(t.column("rater_score").to_pylist(), dtype=float)
    for key in ("n", "n_positive", "n_negative", "auc", "ap", "mean_positive", "mean_negative", "separation"):
        assert key in res
    assert res["n"] == 28 and res["n_positive"] == int(y.sum())
    assert res["auc"] == pytest.approx(skm.roc_auc_score(y, s))
    assert res["ap"] == pytest.approx(skm.average_precision_score(y, s))
    assert res["separation"] == pytest.approx(s[y].mean() - s[~y].mean())
    assert set(res["by_label"]) == {"adherent", "scope_violation", "tone_violation", "constructive_failure"}
    lo, hi = res["ci"]["separation"]
    assert lo <= res["separation"] <= hi


def test_prediction_column_adds_classification_metrics(tmp_path, capsys):
    t = read_turns(EXAMPLE)
    pred = pa.array([int(v >= 3) if i % 5 else 0 for i, v in enumerate(t.column("rater_score").to_pylist())])
    path = write_table(t.append_column("pred", pred), tmp_path / "p.parquet")
    code, out, _ = _run(
        capsys,
        "evaluate",
        str(path),
        "--score",
        "rater_score",
        "--label",
        "label",
        "--positive",
        "adherent",
        "--prediction",
        "pred",
        "--json",
        "--bootstrap",
        "100",
    )
    assert code == 0
    res = json.loads(out)
    y = np.array([v == "adherent" for v in t.column("label").to_pylist()]).astype(int)
    p = np.array(pred.to_pylist())
    assert res["f1_positive"] == pytest.approx(skm.f1_score(y, p, pos_label=1))
    assert res["f1_negative"] == pytest.approx(skm.f1_score(y, p, pos_label=0))
    assert res["macro_f1"] == pytest.approx(skm.f1_score(y, p, average="macro"))
    assert res["kappa"] == pytest.approx(skm.cohen_kappa_score(y, p))
    assert set(res["ci"]) >= {"f1_positive", "kappa"}


def test_readable_table_and_html(tmp_path, capsys):
    html = tmp_path / "report.html"
    code, out, err = _run(
        capsys,
        "evaluate",
        EXAMPLE,
        "--score",
        "rater_score",
        "--label",
        "label",
        "--positive",
        "adherent",
        "--bootstrap",
        "50",
        "--html",
        str(html),
    )
    assert code == 0 and "auc" in out and "scope_violation" in out
    page = html.read_text()
    assert page.count("<svg") == 3  # ROC, class histogram, per fine-grained label
    assert "ROC curve" in page and "Score by label" in page
    assert "What next" in page and "adherence calibrate" in page  # the step after an evaluation
    assert "Beside trivial baselines" in page and "trivial baselines on the same rows (AUC): reply length" in out


def test_the_score_is_reported_beside_reply_length_on_the_same_rows(tmp_path, capsys):
    """On the bundled role turns, reply length alone ranks adherent turns above violations with AUC 0.93: the
    evaluation says so beside the score, computed on exactly the rows it evaluates (checked by scikit-learn)."""
    turns = read_turns(example_path("role"))
    code, out, err = _run(
        capsys, "evaluate", str(example_path("role")), "--score", "rater_score", "--positive", "adherent",
        "--bootstrap", "0", "--json",
    )  # fmt: skip
    assert code == 0
    b = json.loads(out)["baselines"]
    rows = turns.to_pylist()
    y = [int(r["label"] == "adherent") for r in rows]
    length = [len(re.findall(r"[^\W_]+", r["assistant"])) for r in rows]  # words: runs of letters and digits
    assert b["auc"]["reply_length"] == pytest.approx(skm.roc_auc_score(y, length), abs=1e-3)
    assert b["auc"]["reply_length"] > 0.9 and b["score_auc"] == pytest.approx(
        skm.roc_auc_score(y, [r["rater_score"] for r in rows])
    )
    assert set(b) >= {"cv_auc_baselines", "cv_auc_with_score", "beats_baselines"}


def test_unscored_rows_are_counted_not_dropped(tmp_path, capsys):
    t = pa.table({"score": [0.9, None, float("nan"), 0.2, 0.7], "label": ["ok", "ok", "bad", "bad", None]})
    path = write_table(t, tmp_path / "s.parquet")
    code, out, _ = _run(
        capsys, "evaluate", str(path), "--score", "score", "--label", "label", "--positive", "ok", "--json"
    )
    res = json.loads(out)
    assert code == 0
    assert (res["n_rows"], res["n"], res["n_unscored"], res["n_unlabeled"]) == (5, 2, 2, 1)


def test_one_class_label_is_flagged_undefined(tmp_path, capsys):
    t = pa.table({"score": [0.9, 0.4, 0.7], "label": ["ok", "ok", "ok"]})
    path = write_table(t, tmp_path / "s.csv")
    code, out, err = _run(
        capsys, "evaluate", str(path), "--score", "score", "--label", "label", "--positive", "ok", "--json"
    )
    res = json.loads(out)
    assert code == 0 and res["auc"] is None and "one class" in res["undefined"]["auc"]
    assert "warning: auc is undefined" in err


@pytest.mark.parametrize(
    "content, args, expected",
    [
        ("score,label\n0.1,a\nhigh,b\n", ["--score", "score"], "row 2, column 'score'"),
        ("score,label\n0.1,a\n", ["--score", "nope"], "no score column 'nope'"),
        ("", ["--score", "score"], "file is empty"),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, capsys, content, args, expected):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    code, out, err = _run(capsys, "evaluate", str(path), *args, "--label", "label", "--positive", "a")
    assert code == 2 and out == ""
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_command_line_entry_point_and_lazy_imports():
    proc = subprocess.run([sys.executable, "-m", "adherence", "--help"], capture_output=True, text=True, check=True)
    assert "evaluate" in proc.stdout
    code = (
        "import sys, adherence, adherence.cli.main;"
        "heavy = [m for m in ('torch', 'vllm', 'ray', 'faiss', 'triton', 'matplotlib') if m in sys.modules];"
        "print(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


@pytest.mark.slow
def test_page_says_where_the_scores_come_from_with_a_confusion_matrix(tmp_path, capsys, tiny_llama_dir):
    from sklearn.metrics import confusion_matrix

    scores = tmp_path / "cos.parquet"
    assert main(["score", EXAMPLE, "-o", str(scores), "--method", "cosine", "--no-progress", "--threshold", "0.6"]) == 0
    html, res_json = tmp_path / "cos.html", tmp_path / "cos.json"
    code, _, _ = _run(
        capsys,
        "evaluate",
        str(scores),
        "--score",
        "score",
        "--label",
        "label",
        "--positive",
        "adherent",
        "--prediction",
        "prediction",
        "--html",
        str(html),
        "-o",
        str(res_json),
        "--bootstrap",
        "0",
    )
    assert code == 0
    page = html.read_text()
    for needle in (
        "Where the scores come from",
        "cosine",
        "bundled:all-MiniLM-L6-v2",
        "0.6000",
        "role_turns.jsonl",
        "28 turns: ok 28",
        "Confusion matrix (prediction)",
    ):
        assert needle in page, needle
    assert "smoke-test" not in page
    res = json.loads(res_json.read_text())
    from adherence.data import read_turn_scores

    t = read_turn_scores(scores)
    y = [1 if v == "adherent" else 0 for v in t.column("label").to_pylist()]
    tn, fp, fn, tp = confusion_matrix(y, t.column("prediction").to_pylist(), labels=[0, 1]).ravel()
    assert res["confusion"] == {"tp": tp, "fn": fn, "fp": fp, "tn": tn}
    judge = tmp_path / "judge.parquet"  # a judge run names its model; the bundled one is flagged as a smoke test
    assert (
        main(
            [
                "score",
                EXAMPLE,
                "-o",
                str(judge),
                "--judge-model",
                str(tiny_llama_dir),
                "--no-progress",
                "--bootstrap",
                "0",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    meta = json.loads((tmp_path / "judge.parquet.meta.json").read_text())
    meta["models"]["judge"]["model"] = "bundled:SmolLM2-135M-Instruct::x.gguf"
    from adherence.report._evaluation import _provenance

    rows, smoke = _provenance(meta)
    assert smoke and ["judge mode", "continuous, turn granularity"] in rows
    assert ["judge", "bundled:SmolLM2-135M-Instruct::x.gguf (transformers, cpu, float32)"] in rows  # how it ran
    assert (
        main(
            [
                "evaluate",
                str(judge),
                "--score",
                "score",
                "--label",
                "label",
                "--positive",
                "adherent",
                "--html",
                str(tmp_path / "j.html"),
                "--bootstrap",
                "0",
            ]
        )
        == 0
    )
    assert str(tiny_llama_dir) in (tmp_path / "j.html").read_text()

"""`adherence calibrate`, and a calibration applied by `score --calibration` and `evaluate --calibration`."""

import json

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score

from adherence.cli.main import main
from adherence.data import example_path, metadata_path, read_turn_scores
from adherence.stats import CalibrationMap, fit_threshold


def _labelled(path, n=200, seed=0, prefix="c"):
    """A squeezed judge's scores with labels: informative, every score below 0.5."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.15, 0.25, n)
    y = rng.random(n) < 1 / (1 + np.exp(-60 * (s - 0.2)))
    rows = [
        {
            "conversation_id": f"{prefix}{i}",
            "turn_index": 0,
            "score": float(v),
            "label": "adherent" if t else "tone_violation",
        }
        for i, (v, t) in enumerate(zip(s, y))
    ]
    rows.append({"conversation_id": "unscored", "turn_index": 0, "score": None, "label": "adherent"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return y.astype(int), s


@pytest.mark.slow
def test_calibrate_writes_a_file_that_score_evaluate_understand(tmp_path, capsys):
    y, s = _labelled(tmp_path / "labelled.jsonl")
    cal_path = tmp_path / "cal.json"
    assert (
        main(
            [
                "calibrate",
                str(tmp_path / "labelled.jsonl"),
                "-o",
                str(cal_path),
                "--bootstrap",
                "200",
                "--html",
                str(tmp_path / "cal.html"),
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert "positive='adherent'" in out.err  # defaults said out loud
    assert "balanced accuracy" in out.out and "held-out, 5-fold" in out.out
    cal = json.loads(cal_path.read_text())
    assert cal["format"] == "adherence-calibration/1"
    assert cal["threshold"] == pytest.approx(fit_threshold(y, s))
    assert cal["fit"]["n"] == 200 and cal["source"]["n_unscored"] == 1
    assert cal["fit"]["before"]["balanced_accuracy"] == 0.5 and cal["fit"]["after"]["balanced_accuracy"] > 0.7
    assert cal["source"]["input_digest"].startswith("sha256:")
    page = (tmp_path / "cal.html").read_text()
    assert "Reliability diagram" in page and "Calibration" in page and page.count("<svg") >= 3
    # it ends with how to apply the file it wrote, not with advice to run the command that made it
    assert "What next" in page and f"--calibration {cal_path}" in page

    # evaluate --calibration on other labelled turns (on its own, every figure would be in-sample: refused):
    # predictions are score >= the file's threshold; balanced accuracy checked by sklearn
    y, s = _labelled(tmp_path / "held-out.jsonl", seed=1, prefix="h")
    assert (
        main(
            [
                "evaluate",
                str(tmp_path / "held-out.jsonl"),
                "--calibration",
                str(cal_path),
                "--bootstrap",
                "100",
                "--json",
                "--html",
                str(tmp_path / "ev.html"),
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    pred = (s >= cal["threshold"]).astype(int)
    assert res["calibration"]["after"]["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, pred))
    assert res["calibration"]["before"]["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, s >= 0.5))
    assert res["confusion"]["tp"] == int(((y == 1) & (pred == 1)).sum())
    probs = CalibrationMap.from_dict(cal["map"])(s)
    assert res["calibration"]["after"]["brier"] == pytest.approx(float(np.mean((probs - y) ** 2)))
    assert "Reliability diagram" in (tmp_path / "ev.html").read_text()


def test_calibrate_refuses_what_it_cannot_fit(tmp_path, capsys):
    p = tmp_path / "few.jsonl"
    p.write_text(
        "".join(
            json.dumps({"score": v, "label": lab}) + "\n"
            for v, lab in [(0.1, "adherent"), (0.2, "adherent"), (0.3, "no"), (0.4, "no")]
        )
    )
    assert main(["calibrate", str(p), "-o", str(tmp_path / "c.json"), "--positive", "adherent"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # the line before says which columns were taken
    assert "5-fold" in last and str(p) in last and "error" in last
    assert not (tmp_path / "c.json").exists()
    assert main(["calibrate", str(p), "-o", str(tmp_path / "c.json"), "--rule", "precision"]) == 2
    assert "--target" in capsys.readouterr().err


def test_calibrate_refuses_a_score_that_ranks_violations_higher(tmp_path, capsys):
    """Labels given the wrong way round (AUC below 0.5): refused in one line naming the remedy, not a file whose
    map contradicts its threshold; --allow-inverted fits it and says so."""
    path = tmp_path / "inverted.jsonl"
    _labelled(path)
    argv = ["calibrate", str(path), "-o", str(tmp_path / "c.json"), "--positive", "tone_violation", "--bootstrap", "0"]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "< 0.5" in last and "--allow-inverted" in last and str(path) in last
    assert not (tmp_path / "c.json").exists()
    assert main(argv + ["--allow-inverted"]) == 0
    assert "--allow-inverted" in json.loads((tmp_path / "c.json").read_text())["fit"]["note"]


@pytest.mark.slow
def test_score_applies_a_calibration_and_records_it(tmp_path, capsys):
    """Calibrate cosine scores of the bundled example, then score with the file: the threshold decides predictions
    and sessions, `calibrated_score` is the mapped probability, and the metadata names the file."""
    src = example_path("role")
    first = tmp_path / "cos.parquet"
    assert main(["score", str(src), "--method", "cosine", "-o", str(first), "--no-progress", "--bootstrap", "0"]) == 0
    cal_path = tmp_path / "cal.json"
    assert main(["calibrate", str(first), "-o", str(cal_path), "--bootstrap", "50", "--folds", "3"]) == 0
    cal = json.loads(cal_path.read_text())
    assert cal["source"]["method"] == "cosine"
    second = tmp_path / "cos_cal.parquet"
    assert (
        main(
            [
                "score",
                str(src),
                "--method",
                "cosine",
                "-o",
                str(second),
                "--no-progress",
                "--bootstrap",
                "0",
                "--calibration",
                str(cal_path),
            ]
        )
        == 0
    )
    t = read_turn_scores(second).to_pylist()
    m = CalibrationMap.from_dict(cal["map"])
    for r in t:
        assert r["prediction"] == int(r["score"] >= cal["threshold"])
        assert r["calibrated_score"] == pytest.approx(float(m(np.array([r["score"]]))[0]))
    meta = json.loads(metadata_path(second).read_text())
    assert meta["config"]["calibration"]["path"] == str(cal_path)
    assert meta["config"]["threshold"] == cal["threshold"]
    # Python gets what the command line gets: the file's threshold decides, not the default 0.5 (Python users got
    # the default: the rule lived in the command line)
    from adherence.engine import score

    assert cal["threshold"] != 0.5
    py = score(str(src), method="cosine", calibration=str(cal_path), n_bootstrap=0)
    assert py.column("prediction").to_pylist() == [r["prediction"] for r in t]
    assert py.column("calibrated_score").to_pylist() == pytest.approx([r["calibrated_score"] for r in t])
    with pytest.raises(ValueError, match="give --threshold or --calibration, not both"):
        score(str(src), method="cosine", calibration=str(cal_path), threshold=0.5)
    with pytest.raises(ValueError, match="fitted on cosine scores"):
        score(str(src), method="knn", calibration=str(cal_path))
    capsys.readouterr()
    # a calibration of another method's scores, or one with --threshold, is refused before anything runs
    assert (
        main(
            [
                "score",
                str(src),
                "--method",
                "bertscore",
                "-o",
                str(tmp_path / "x.parquet"),
                "--calibration",
                str(cal_path),
            ]
        )
        == 2
    )
    assert "fitted on cosine scores" in capsys.readouterr().err
    assert (
        main(
            [
                "score",
                str(src),
                "--method",
                "cosine",
                "-o",
                str(tmp_path / "x.parquet"),
                "--threshold",
                "0.4",
                "--calibration",
                str(cal_path),
            ]
        )
        == 2
    )
    assert "not both" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"threshold": 0.3}')
    assert (
        main(["score", str(src), "--method", "cosine", "-o", str(tmp_path / "x.parquet"), "--calibration", str(bad)])
        == 2
    )
    assert "not a calibration file" in capsys.readouterr().err and not (tmp_path / "x.parquet").exists()


def test_evaluate_table_threshold_predicts_score_at_or_above_it():
    import pyarrow as pa
    from sklearn.metrics import f1_score

    from adherence.stats import evaluate_table

    rng = np.random.default_rng(5)
    s = rng.random(60)
    y = (rng.random(60) < s).astype(int)
    t = pa.table({"score": s, "label": ["adherent" if v else "no" for v in y], "p": (s >= 0.3).astype(int)})
    res = evaluate_table(t, score="score", label="label", positive="adherent", threshold=0.3, n_bootstrap=0)
    assert res["f1_positive"] == pytest.approx(f1_score(y, s >= 0.3))
    assert res["confusion"]["fp"] == int(((y == 0) & (s >= 0.3)).sum())
    with pytest.raises(ValueError, match="not both"):
        evaluate_table(t, score="score", label="label", positive="adherent", prediction="p", threshold=0.3)


@pytest.mark.slow
def test_a_job_files_calibration_is_the_file_beside_it(tmp_path, capsys, monkeypatch):
    """`calibration: cal.json` in a job file names the file beside the job file, as its other paths do, wherever
    the job is started from."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    first = jobs / "cos.parquet"
    assert main(["score", str(example_path("role")), "--method", "cosine", "-o", str(first), "--no-progress"]) == 0
    assert main(["calibrate", str(first), "-o", str(jobs / "cal.json"), "--bootstrap", "20", "--folds", "3"]) == 0
    job = jobs / "job.yaml"
    job.write_text(
        f"input: {example_path('role')}\nmethod: cosine\noutput: out.parquet\ncalibration: cal.json\nno-progress: true\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["score", "--config", str(job)]) == 0
    meta = json.loads(metadata_path(jobs / "out.parquet").read_text())
    assert str(jobs / "cal.json") in json.dumps(meta)
    threshold = json.loads((jobs / "cal.json").read_text())["threshold"]
    assert all(
        r["prediction"] == int(r["score"] >= threshold) for r in read_turn_scores(jobs / "out.parquet").to_pylist()
    )


@pytest.mark.parametrize(
    "edit,field",
    [
        (lambda c: c["map"].update(method="platt", a=float("nan"), b=0.0), "map.a"),
        (lambda c: c["map"].update(method="platt", a=1.0, b=float("inf")), "map.b"),
        (lambda c: c.update(map={"method": "isotonic", "x": [0.1, float("nan")], "y": [0.2, 0.3]}), "map.x[1]"),
        (lambda c: c.update(map={"method": "isotonic", "x": [0.1, 0.2], "y": [0.2, 1.5]}), "map.y[1]"),
        (lambda c: c.update(threshold=5), "threshold"),
        (lambda c: c.update(threshold=float("nan")), "threshold"),
    ],
)
def test_a_calibration_file_edited_out_of_range_is_refused_naming_the_field(tmp_path, capsys, edit, field):
    first = tmp_path / "cos.parquet"
    assert main(["score", str(example_path("role")), "--method", "cosine", "-o", str(first), "--no-progress"]) == 0
    cal_path = tmp_path / "cal.json"
    assert main(["calibrate", str(first), "-o", str(cal_path), "--bootstrap", "20", "--folds", "3"]) == 0
    cal = json.loads(cal_path.read_text())
    edit(cal)
    cal_path.write_text(json.dumps(cal))  # json writes NaN and Infinity, as a hand edit or another tool might
    capsys.readouterr()
    out = tmp_path / "again.parquet"
    args = ["score", str(example_path("role")), "--method", "cosine", "-o", str(out), "--calibration", str(cal_path)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(cal_path) in err and f"`{field}`" in err
    assert not out.exists()


@pytest.mark.slow
def test_the_metadata_records_the_calibration_file_not_its_map(tmp_path):
    import hashlib

    first = tmp_path / "cos.parquet"
    assert main(["score", str(example_path("role")), "--method", "cosine", "-o", str(first), "--no-progress"]) == 0
    cal_path = tmp_path / "cal.json"
    args = ["calibrate", str(first), "-o", str(cal_path), "--map", "isotonic", "--bootstrap", "20", "--folds", "3"]
    assert main(args) == 0
    knots = json.loads(cal_path.read_text())["map"]["x"]
    out = tmp_path / "again.parquet"
    assert (
        main(["score", str(example_path("role")), "--method", "cosine", "-o", str(out), "--calibration", str(cal_path)])
        == 0
    )
    recorded = json.loads(metadata_path(out).read_text())["config"]["calibration"]
    assert recorded["map"] == "isotonic" and recorded["path"] == str(cal_path)
    assert recorded["file_digest"] == "sha256:" + hashlib.sha256(cal_path.read_bytes()).hexdigest()
    assert len(knots) > 2 and "x" not in json.dumps(recorded["map"])


@pytest.mark.slow
def test_an_input_column_the_calibration_would_replace_is_refused(tmp_path, capsys):
    first = tmp_path / "cos.parquet"
    assert main(["score", str(example_path("role")), "--method", "cosine", "-o", str(first), "--no-progress"]) == 0
    cal_path = tmp_path / "cal.json"
    assert main(["calibrate", str(first), "-o", str(cal_path), "--bootstrap", "20", "--folds", "3"]) == 0
    rows = [json.loads(line) for line in example_path("role").read_text().splitlines() if line.strip()]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(dict(r, calibrated_score=0.9)) + "\n" for r in rows))
    capsys.readouterr()
    out = tmp_path / "x.parquet"
    assert main(["score", str(src), "--method", "cosine", "-o", str(out), "--calibration", str(cal_path)]) == 2
    err = capsys.readouterr().err
    assert "'calibrated_score' would be replaced by the scores" in err and str(src) in err and not out.exists()
    # without a calibration the column is the user's and passes through
    assert main(["score", str(src), "--method", "cosine", "-o", str(out), "--no-progress"]) == 0
    assert set(read_turn_scores(out).column("calibrated_score").to_pylist()) == {0.9}


def test_a_calibration_edited_after_fitting_is_refused(tmp_path, capsys):
    first = tmp_path / "cos.parquet"
    assert main(["score", str(example_path("role")), "--method", "cosine", "-o", str(first), "--no-progress"]) == 0
    cal_path = tmp_path / "cal.json"
    assert main(["calibrate", str(first), "-o", str(cal_path), "--bootstrap", "20", "--folds", "3"]) == 0
    cal = json.loads(cal_path.read_text())
    cal["threshold"] = round(min(1.0, cal["threshold"] + 0.05), 4)  # a plausible hand edit, digest kept
    cal_path.write_text(json.dumps(cal))
    capsys.readouterr()
    args = ["score", str(example_path("role")), "--method", "cosine", "-o", str(tmp_path / "x.parquet")]
    assert main([*args, "--calibration", str(cal_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "edited after it was fitted" in err and str(cal_path) in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_a_calibration_of_one_judge_is_refused_for_another(tmp_path, capsys, tiny_llama_dir, tiny_yes_no_judge):
    """A judge calibration applies to the judge (model, backend, prompt layout) whose scores it was fitted on."""
    src = str(example_path("role"))
    judge_a, judge_b = str(tiny_llama_dir), str(tiny_yes_no_judge.resolved.path)
    first = tmp_path / "a.parquet"
    base = ["--device", "cpu", "--no-progress", "--bootstrap", "0"]
    assert main(["score", src, "--judge-model", judge_a, "-o", str(first), *base]) == 0
    cal_path = tmp_path / "cal.json"
    assert main(["calibrate", str(first), "-o", str(cal_path), "--bootstrap", "20", "--folds", "3"]) == 0
    capsys.readouterr()

    def score(judge, *extra):
        out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}.parquet"
        return main(
            ["score", src, "--judge-model", judge, "-o", str(out), "--calibration", str(cal_path), *base, *extra]
        )

    assert score(judge_b) == 2
    err = capsys.readouterr().err.strip()
    assert f"fitted on the scores of judge {judge_a}" in err and judge_b in err and "--calibration-any-judge" in err
    assert score(judge_a, "--judge-layout", "system") == 2
    assert "--judge-layout user" in capsys.readouterr().err
    assert score(judge_b, "--calibration-any-judge") == 0
    assert score(judge_a) == 0  # its own judge

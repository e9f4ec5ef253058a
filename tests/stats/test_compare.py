"""`adherence compare`: McNemar against statsmodels, the conversation bootstrap against a brute-force one and by
coverage (a turn-level bootstrap is too narrow on clustered turns), and the command with its gate."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from statsmodels.stats.contingency_tables import mcnemar

from adherence.cli.main import main
from adherence.data import example_path
from adherence.stats._compare import cluster_bootstrap_diff, compare_paired, mcnemar_exact


@pytest.mark.parametrize("seed", range(6))
def test_mcnemar_is_statsmodels_exact_test(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    old = rng.integers(0, 2, n)
    new = np.where(rng.random(n) < rng.uniform(0.05, 0.5), 1 - old, old)
    r = mcnemar_exact(old, new)
    want = mcnemar(np.array(r["table"]), exact=True)
    assert r["p_value"] == pytest.approx(want.pvalue, rel=1e-9)
    assert r["table"][0][1] == int(((old == 1) & (new == 0)).sum()) and sum(map(sum, r["table"])) == n


def _brute_force(diff, clusters, n_bootstrap, seed, level):
    """Resample conversations with replacement (the same draws), concatenate their turns, take the mean."""
    names, inverse = np.unique(np.asarray(clusters).astype(str), return_inverse=True)
    members = [diff[inverse == g] for g in range(len(names))]
    draws = np.random.default_rng(seed).integers(0, len(names), size=(n_bootstrap, len(names)))
    stats = [np.concatenate([members[g] for g in row]).mean() for row in draws]
    a = (1 - level) / 2
    return np.percentile(stats, [100 * a, 100 * (1 - a)])


def test_the_conversation_bootstrap_equals_a_brute_force_one():
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 12, 30)
    clusters = np.repeat([f"c{i}" for i in range(30)], sizes)
    diff = rng.normal(rng.normal(0, 1, 30).repeat(sizes), 0.5)
    r = cluster_bootstrap_diff(diff, clusters, n_bootstrap=400, seed=7, level=0.9)
    lo, hi = _brute_force(diff, clusters, 400, 7, 0.9)
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert r["diff"] == pytest.approx(diff.mean()) and r["clusters"] == 30


def test_resampling_whole_conversations_keeps_coverage_where_resampling_turns_does_not():
    """Turns of a conversation share an effect: the conversation bootstrap covers the true difference near 95% of
    the time; resampling turns as if independent (each turn its own cluster) covers it far less often."""
    rng = np.random.default_rng(0)
    covered = naive = 0
    draws = 200
    for k in range(draws):
        effect = rng.normal(0, 1, 25).repeat(12)
        diff = effect + rng.normal(0, 0.3, effect.size)  # true mean 0
        clusters = np.arange(25).repeat(12)
        r = cluster_bootstrap_diff(diff, clusters, n_bootstrap=300, seed=k)
        q = cluster_bootstrap_diff(diff, np.arange(diff.size), n_bootstrap=300, seed=k)
        covered += r["ci_low"] <= 0 <= r["ci_high"]
        naive += q["ci_low"] <= 0 <= q["ci_high"]
    assert covered / draws >= 0.88
    assert naive / draws <= 0.6


def test_compare_paired_counts_only_turns_both_scored():
    cid = ["a", "a", "b", "b"]
    r = compare_paired(
        cid, [0.2, np.nan, 0.5, 0.9], [0.4, 0.3, np.nan, 0.7], [0, 1, 1, 1], [0, 0, 1, 0], n_bootstrap=50
    )
    assert r["n_both_scored"] == 2 and r["score"]["diff"] == pytest.approx(0.0)
    assert r["violation_rate"]["old"] == pytest.approx(0.25) and r["violation_rate"]["new"] == pytest.approx(0.75)
    assert r["mcnemar"]["b"] == 2 and r["mcnemar"]["c"] == 0


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    paths = {}
    for m in ("kl", "cosine"):
        paths[m] = tmp / f"{m}.parquet"
        assert main(["score", str(example_path("role")), "-o", str(paths[m]), "--method", m, "--no-progress"]) == 0
    return paths


def test_compare_command_json_gate_and_page(tmp_path, capsys, outputs):
    """kl and cosine: two methods, so by default only their decisions are compared (no mean score, the turns whose
    decision changed), and the gate is on agreement with the labels the outputs carry; --allow-methods puts the two
    scales side by side as before."""
    old, new = outputs["kl"], outputs["cosine"]
    capsys.readouterr()
    assert main(["compare", str(old), str(new), "--json", "--bootstrap", "300", "--allow-methods"]) == 0
    r = json.loads(capsys.readouterr().out)
    a, b = pq.read_table(old).to_pandas(), pq.read_table(new).to_pandas()
    assert r["n_both_scored"] == 28 and r["only_in_old"]["count"] == 0
    assert r["violation_rate"]["old"] == pytest.approx((a["prediction"] == 0).mean())
    assert r["violation_rate"]["new"] == pytest.approx((b["prediction"] == 0).mean())
    assert r["score"]["diff"] == pytest.approx((b["score"] - a["score"]).mean())
    assert {"label", "role"} <= set(r["by"]) and "mcnemar" in r and len(r["changed_turns"]) == 20
    worst = max(abs(x - y) for x, y in zip(a["score"], b["score"]))
    assert abs(r["changed_turns"][0]["change"]) == pytest.approx(worst)
    # without --allow-methods: decisions only
    assert main(["compare", str(old), str(new), "--json", "--bootstrap", "300"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert "score" not in r and r["scales_comparable"] is False and r["changed_conversations"] == []
    assert all("score" not in x for per in r["by"].values() for x in per.values())
    flipped = {(c, t) for c, t, x, y in zip(a["conversation_id"], a["turn_index"], a["prediction"], b["prediction"])
               if x != y}  # fmt: skip
    assert {(t["conversation_id"], t["turn_index"]) for t in r["changed_turns"]} == flipped
    # agreement with the labels the outputs carry, against scikit-learn and statsmodels
    from sklearn.metrics import accuracy_score

    y = (a["label"] == "adherent").astype(int)
    ag = r["agreement"]
    assert ag["old"] == pytest.approx(accuracy_score(y, a["prediction"]))
    assert ag["new"] == pytest.approx(accuracy_score(y, b["prediction"]))
    co, cn = (a["prediction"] == y).astype(int), (b["prediction"] == y).astype(int)
    table = [[int(((co == 1) & (cn == 1)).sum()), int(((co == 1) & (cn == 0)).sum())],
             [int(((co == 0) & (cn == 1)).sum()), int(((co == 0) & (cn == 0)).sum())]]  # fmt: skip
    assert ag["mcnemar"]["table"] == table
    assert ag["mcnemar"]["p_value"] == pytest.approx(mcnemar(np.array(table), exact=True).pvalue, rel=1e-9)
    direct = cluster_bootstrap_diff((cn - co).to_numpy(float), a["conversation_id"].to_numpy(), n_bootstrap=300)
    assert (ag["diff"], ag["ci_low"], ag["ci_high"]) == (
        pytest.approx(direct["diff"]), pytest.approx(direct["ci_low"]), pytest.approx(direct["ci_high"]))  # fmt: skip
    # the gate is on agreement: one the new output cannot pass, and one it passes
    code = main(["compare", str(old), str(new), "--fail-if-worse-by", "0", "--bootstrap", "300"])
    cap = capsys.readouterr()
    assert code == (1 if ag["ci_low"] < 0 else 0)
    assert ("failed: agreement with the labels may be worse" in cap.err) == (ag["ci_low"] < 0)
    page = tmp_path / "c.html"
    assert main(["compare", str(old), str(new), "--fail-if-worse-by", "0.99", "--html", str(page)]) == 0
    assert "passed: agreement with the labels is not worse" in capsys.readouterr().err
    text = page.read_text()
    assert "<svg" in text and "McNemar" in text and "Gate passed" in text


def test_two_methods_without_labels_cannot_pass_the_gate_by_flagging_less(tmp_path, capsys, outputs):
    """The issue's repro: a new method that flags fewer violations passed the violation-rate gate. Without labels,
    two methods are refused, with nothing printed before the failure; with a labels file the gate is on agreement."""
    strip = {}
    for m in ("kl", "cosine"):
        t = pq.read_table(outputs[m])
        strip[m] = _ours(tmp_path / f"{m}.parquet", t.drop_columns(["label"]), outputs[m])
    capsys.readouterr()
    assert main(["compare", str(strip["kl"]), str(strip["cosine"]), "--fail-if-worse-by", "0.5"]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and "different methods (kl and cosine)" in cap.err and "--labels FILE" in cap.err
    assert len(cap.err.strip().splitlines()) == 1
    labels = tmp_path / "labels.jsonl"
    t = pq.read_table(outputs["kl"])
    labels.write_text("".join(json.dumps({"conversation_id": c, "turn_index": i, "label": v}) + "\n" for c, i, v in
                              zip(*(t.column(k).to_pylist() for k in ("conversation_id", "turn_index", "label")))))  # fmt: skip
    code = main(["compare", str(strip["kl"]), str(strip["cosine"]), "--labels", str(labels),
                 "--fail-if-worse-by", "0.99", "--json"])  # fmt: skip
    assert code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["gate"]["on"] == "agreement" and r["labels"]["n_matched"] == 28
    # a side that decides nothing (no prediction) cannot be gated on agreement, and the reason says how to decide
    t = pq.read_table(strip["cosine"])
    silent = _ours(tmp_path / "silent.parquet", t.drop_columns(["prediction"]), outputs["cosine"])
    assert main(["compare", str(strip["kl"]), str(silent), "--labels", str(labels), "--fail-if-worse-by", "0.1"]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and "NEW decides nothing on the labelled turns" in cap.err and "adherence calibrate" in cap.err
    # --allow-methods: the violation-rate gate, as asked
    assert main(["compare", str(strip["kl"]), str(strip["cosine"]), "--fail-if-worse-by", "0.99",
                 "--allow-methods"]) == 0  # fmt: skip
    assert "passed: the violation rate is not worse" in capsys.readouterr().err


def test_rows_in_one_output_only_are_counted_and_listed(tmp_path, capsys, outputs):
    t = pq.read_table(outputs["cosine"])
    cut = _ours(tmp_path / "cut.parquet", t.slice(0, 25), outputs["cosine"])
    capsys.readouterr()
    assert main(["compare", str(outputs["kl"]), str(cut), "--json", "--bootstrap", "50"]) == 0
    r = json.loads(capsys.readouterr().out)
    gone = [
        [str(c), i]
        for c, i in zip(t.column("conversation_id").to_pylist()[25:], t.column("turn_index").to_pylist()[25:])
    ]
    assert r["only_in_old"]["count"] == 3 and sorted(r["only_in_old"]["first"]) == sorted(gone)
    assert r["n_both_scored"] == 25
    twice = _ours(tmp_path / "twice.parquet", pa.concat_tables([t, t.slice(0, 1)]), outputs["cosine"])
    assert main(["compare", str(outputs["kl"]), str(twice)]) == 2
    assert "appears twice" in capsys.readouterr().err


def _ours(path, table, like):
    """``table`` written as a score output of ours (the run metadata of ``like`` beside it)."""
    import shutil

    pq.write_table(table, path)
    shutil.copy(str(like) + ".meta.json", str(path) + ".meta.json")
    return path


def _broken(tmp_path, outputs, name, edit):
    t = pq.read_table(outputs["kl"]).to_pandas()
    t = edit(t)
    return _ours(tmp_path / f"{name}.parquet", pa.Table.from_pandas(t, preserve_index=False), outputs["kl"])


@pytest.mark.parametrize(
    "name, edit, what",
    [
        ("errors", lambda t: t.assign(status=["error" if i % 4 else s for i, s in enumerate(t.status)],
                                      score=[np.nan if i % 4 else v for i, v in enumerate(t.score)],
                                      prediction=[None if i % 4 else v for i, v in enumerate(t.prediction)]),
         "error row(s)"),
        ("nan", lambda t: t.assign(score=np.nan, prediction=None), "unscored"),
        ("missing", lambda t: t.iloc[:6], "missing"),
    ],
)  # fmt: skip
def test_a_gate_never_passes_a_broken_new_output(tmp_path, capsys, outputs, name, edit, what):
    new = _broken(tmp_path, outputs, name, edit)
    capsys.readouterr()
    assert main(["compare", str(outputs["kl"]), str(new), "--fail-if-worse-by", "0.5", "--bootstrap", "50"]) == 1
    err = capsys.readouterr().err
    assert "failed: NEW failed to score what OLD scored" in err and what in err
    # counted as violations instead when allowed: a release that lost most of its verdicts is worse
    code = main(["compare", str(outputs["kl"]), str(new), "--fail-if-worse-by", "0.05", "--allow-missing", "--json",
                 "--bootstrap", "50"])  # fmt: skip
    r = json.loads(capsys.readouterr().out)  # valid JSON though NEW's scores are NaN
    assert sum(r["new_problems"].values()) > 0
    if name != "missing":
        assert code == 1 and r["violation_rate"]["new"] > r["violation_rate"]["old"]


def test_compare_names_different_methods_and_lists_only_changed_turns(tmp_path, capsys, outputs):
    same = _ours(tmp_path / "same.parquet", pq.read_table(outputs["kl"]), outputs["kl"])
    capsys.readouterr()
    assert main(["compare", str(outputs["kl"]), str(same), "--json", "--bootstrap", "50"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["changed_turns"] == [] and r["changed_conversations"] == [] and r["notes"] == []
    assert main(["compare", str(outputs["kl"]), str(outputs["cosine"]), "--bootstrap", "50"]) == 0
    assert "different methods (kl and cosine)" in capsys.readouterr().out


def test_compare_never_writes_its_page_over_an_input_or_reads_a_foreign_table(tmp_path, capsys, outputs):
    new = _ours(tmp_path / "new.parquet", pq.read_table(outputs["cosine"]), outputs["cosine"])
    before = new.read_bytes()
    assert main(["compare", str(outputs["kl"]), str(new), "--html", str(new)]) == 2
    assert "would overwrite the input" in capsys.readouterr().err and new.read_bytes() == before
    # a table from elsewhere (no run metadata): read by its columns, and said so once the comparison is done
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pq.read_table(outputs["cosine"]).select(["conversation_id", "turn_index", "score", "prediction"]),
                   foreign)  # fmt: skip
    assert main(["compare", str(outputs["kl"]), str(foreign)]) == 0
    cap = capsys.readouterr()
    assert f"{foreign}: no run metadata of adherence beside it: read as a score table from elsewhere" in cap.err
    assert "different methods (kl and unknown)" in cap.out


def test_the_gate_checks_both_sides_and_counts_missing_turns_when_allowed(tmp_path, capsys, outputs):
    """The issue's repros: with --allow-missing, 18 of 28 turns missing from NEW passed (missing turns were left out,
    not counted as violations); an OLD output with 21 of 28 rows `error` passed on the 7 left; NEW rows `unscored`
    that still carried scores and predictions passed. Each fails now."""
    old = outputs["kl"]
    # 18 of 28 turns missing, allowed: each counts as NEW's violation
    cut = _broken(tmp_path, outputs, "cut", lambda t: t.iloc[:10])
    capsys.readouterr()
    code = main(["compare", str(old), str(cut), "--fail-if-worse-by", "0.2", "--allow-missing", "--json",
                 "--bootstrap", "200"])  # fmt: skip
    r = json.loads(capsys.readouterr().out)
    a = pq.read_table(old).to_pandas()
    kept = (a["prediction"].iloc[:10] == 0).sum()
    assert r["new_problems"]["missing"] == 18
    assert r["violation_rate"]["new"] == pytest.approx((kept + 18) / 28)
    assert code == 1
    # a broken baseline: 21 of 28 OLD rows error
    broken_old = _broken(tmp_path, outputs, "old-errors", lambda t: t.assign(
        status=["error" if i % 4 else s for i, s in enumerate(t.status)],
        error=["judge failed" if i % 4 else None for i in range(len(t))]))  # fmt: skip
    capsys.readouterr()
    assert main(["compare", str(broken_old), str(old), "--fail-if-worse-by", "0.5", "--bootstrap", "50"]) == 1
    assert "failed: OLD has 21 error or unscored row(s)" in capsys.readouterr().err
    # NEW rows all unscored with their scores and predictions left in: no decisions
    left_in = _broken(tmp_path, outputs, "left-in", lambda t: t.assign(status="unscored"))
    assert main(["compare", str(old), str(left_in), "--fail-if-worse-by", "0.5", "--bootstrap", "50"]) == 1
    assert "28 unscored" in capsys.readouterr().err
    # a turn both sides refuse alike is the input's: not a broken baseline
    same = _broken(tmp_path, outputs, "same-error", lambda t: t.assign(
        status=["error" if i == 0 else s for i, s in enumerate(t.status)],
        error=["empty assistant turn" if i == 0 else None for i in range(len(t))]))  # fmt: skip
    assert main(["compare", str(same), str(same), "--fail-if-worse-by", "0.5", "--bootstrap", "50"]) == 0

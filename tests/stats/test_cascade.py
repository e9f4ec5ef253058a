"""Judge cascades: the binomial test against scipy's, the guarantee by simulation (and a threshold chosen without
the bound breaking it), and `adherence cascade fit` / `apply` on scored tables."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import binomtest

from adherence.cli.main import main
from adherence.stats._cascade import apply_cascade, binomial_p_value, fit_cascade, select_threshold


@pytest.mark.parametrize("errors,n,alpha", [(0, 22, 0.1), (3, 50, 0.1), (10, 40, 0.2), (7, 7, 0.5), (0, 1, 0.05)])
def test_the_p_value_is_scipys_exact_binomial_test(errors, n, alpha):
    assert binomial_p_value(errors, n, alpha) == pytest.approx(binomtest(errors, n, alpha, alternative="less").pvalue)


def _population(rng, m):
    """Confidence uniform on [0, 0.5]; the verdict is right with probability 0.5 + confidence. The error rate of the
    verdicts at confidence >= t is 0.25 - t / 2: at most alpha = 0.1 exactly when t >= 0.3."""
    c = rng.uniform(0, 0.5, m)
    return c, rng.random(m) < 0.5 + c


def test_the_guarantee_holds_by_simulation_and_a_threshold_without_the_bound_breaks_it():
    """Over 1,000 calibration sets of 500 turns, the chosen threshold's true error rate exceeds alpha in at most
    delta of them (+ binomial noise); choosing the lowest threshold whose observed error rate is <= alpha (no
    bound) exceeds it in about half."""
    rng = np.random.default_rng(0)
    alpha, delta, draws = 0.1, 0.1, 1000
    broken = naive_broken = accepted = 0
    for _ in range(draws):
        c, ok = _population(rng, 500)
        r = select_threshold(c, ok, alpha=alpha, delta=delta)
        if r["threshold"] is not None:
            broken += r["threshold"] < 0.3
            accepted += r["accepted"]
        order = np.argsort(-c)
        observed = np.cumsum(~ok[order]) / np.arange(1, 501)
        good = np.flatnonzero(observed <= alpha)
        naive_broken += len(good) > 0 and c[order][good[-1]] < 0.3
    assert broken / draws <= delta + 3 * np.sqrt(delta * (1 - delta) / draws)
    assert naive_broken / draws > 0.3  # the test can see a bug of that kind
    assert accepted / draws > 50  # and the bound still accepts a useful share (the truth allows 40%)


def test_a_cascade_of_two_stages_meets_the_bound_on_what_it_accepts():
    """Two judges on the same turns, the second sharper; delta shared between the stages. Over 300 calibration
    sets, the error rate of everything the cascade accepts (measured on 20,000 fresh turns) exceeds alpha in at
    most delta of them."""
    rng = np.random.default_rng(1)
    alpha, delta, draws = 0.1, 0.1, 300

    def turns(m):
        y = rng.integers(0, 2, m)
        c1, c2 = rng.uniform(0, 0.5, m), rng.uniform(0, 0.5, m)
        right1, right2 = rng.random(m) < 0.5 + c1, rng.random(m) < 0.6 + 0.8 * c2
        v1, v2 = np.where(right1, y, 1 - y), np.where(right2, y, 1 - y)
        return y, [(v1, c1), (v2, c2)]

    y_test, test = turns(20_000)
    broken = 0
    for _ in range(draws):
        y, stages = turns(600)
        fits = fit_cascade(stages, y, alpha=alpha, delta=delta)
        assert [f["delta"] for f in fits] == [delta / 2, delta / 2]
        verdict, decided = apply_cascade(test, [f["threshold"] for f in fits])
        if (decided > 0).any():
            broken += float((verdict[decided > 0] != y_test[decided > 0]).mean()) > alpha
    assert broken / draws <= delta + 3 * np.sqrt(delta * (1 - delta) / draws)


def test_a_stage_that_cannot_be_certified_accepts_nothing():
    r = select_threshold([0.4, 0.3, 0.2], [True, False, True], alpha=0.1, delta=0.1)
    assert r["threshold"] is None and r["accepted"] == 0
    verdict, decided = apply_cascade([(np.array([1.0, 0.0, 1.0]), np.array([0.4, 0.3, 0.2]))], [None])
    assert (decided == 0).all() and np.isnan(verdict).all()


def _stage(path, y, noise, rng, label=True, method=None):
    p = np.clip(np.where(y == 1, 0.75, 0.25) + rng.normal(0, noise, len(y)), 0, 1)
    t = {
        "conversation_id": [f"c{i // 2}" for i in range(len(y))],
        "turn_index": [i % 2 for i in range(len(y))],
        "score": p,
        "prediction": (p >= 0.5).astype("int8"),
    }
    if label:
        t["label"] = ["adherent" if v else "violation" for v in y]
    pq.write_table(pa.table(t), path)
    from adherence.data import write_run_metadata

    # a score output of ours: the cascade reads stages through the one reader, which wants our run metadata
    name = method or ("kl" if noise > 0.1 else "llm_judge")
    write_run_metadata(path, {"producer": "adherence", "config": {"method": name, "threshold": 0.5}})


def test_fit_and_apply_on_scored_tables(tmp_path, capsys):
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 1200)
    _stage(tmp_path / "cheap.parquet", y, 0.2, rng)
    _stage(tmp_path / "strong.parquet", y, 0.08, rng, label=False)
    cas = tmp_path / "cascade.json"
    stages = [str(tmp_path / "cheap.parquet"), str(tmp_path / "strong.parquet")]
    assert main(["cascade", "fit", *stages, "--alpha", "0.05", "--delta", "0.1", "-o", str(cas)]) == 0
    doc = json.loads(cas.read_text())
    assert doc["n"] == 1200 and doc["positive"] == "adherent" and doc["alpha"] == 0.05
    first, second = doc["stages"]
    assert first["threshold"] is not None and 0 < first["accepted"] < 1200
    assert second["reaching"] == 1200 - first["accepted"] and second["accepted"] > 0
    for st in doc["stages"]:
        assert len(st["digest"]) > 10 and st["p_value"] <= st["delta"]
    capsys.readouterr()
    out = tmp_path / "decided.parquet"
    assert main(["cascade", "apply", *stages, "--cascade", str(cas), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    t = pq.read_table(out)
    decided = np.array([d or 0 for d in t.column("decided_by").to_pylist()])
    assert (decided == 1).sum() == first["accepted"] and (decided == 2).sum() == second["accepted"]
    status = t.column("status").to_pylist()
    assert all((s == "abstained") == (d == 0) for s, d in zip(status, decided))
    assert "stage 1" in text and "agreement with the labels" in text
    agree = float(text.split("decided labelled turns: ")[1].split()[0])
    assert agree >= 1 - 0.05  # the calibration turns themselves: each stage's accepted errors were bounded
    assert main(["cascade", "apply", stages[0], "--cascade", str(cas), "-o", str(out)]) == 2  # wrong stage count


def test_the_page_draws_the_exact_upper_bound(tmp_path):
    """The page's curve is the one-sided Clopper-Pearson bound (statsmodels' two-sided 'beta' interval at twice the
    level), and the chosen threshold is where it last stays under alpha."""
    from statsmodels.stats.proportion import proportion_confint

    from adherence.report._cascade import bound_curve

    rng = np.random.default_rng(3)
    c, ok = _population(rng, 400)
    t, observed, upper = bound_curve(c, ok, 0.1, 0.05)
    order = np.argsort(-c)
    for k in (30, 120, 399):
        n, e = k + 1, int((~ok[order][: k + 1]).sum())
        assert upper[k] == pytest.approx(proportion_confint(e, n, alpha=0.1, method="beta")[1], rel=1e-9)
        assert observed[k] == pytest.approx(e / n)
    r = select_threshold(c, ok, alpha=0.1, delta=0.05)
    chosen = int(np.flatnonzero(t == r["threshold"])[0])
    assert upper[chosen] <= 0.1 + 1e-12  # certified there (p <= delta <=> the bound is under alpha)

    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 600)
    _stage(tmp_path / "a.parquet", y, 0.2, rng)
    _stage(tmp_path / "b.parquet", y, 0.08, rng, label=False)
    page = tmp_path / "cascade.html"
    argv = ["cascade", "fit", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"), "-o", str(tmp_path / "c.json")]
    assert main([*argv, "--html", str(page)]) == 0
    text = page.read_text()
    assert "<svg" in text and "upper bound" in text and "What next" in text and "a.parquet" in text


def _fitted(tmp_path, n=400):
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, n)
    _stage(tmp_path / "cheap.parquet", y, 0.2, rng)
    _stage(tmp_path / "strong.parquet", y, 0.08, rng, label=False)
    stages = [str(tmp_path / "cheap.parquet"), str(tmp_path / "strong.parquet")]
    cas = tmp_path / "cascade.json"
    assert main(["cascade", "fit", *stages, "--alpha", "0.1", "--delta", "0.1", "-o", str(cas)]) == 0
    return stages, cas, y


@pytest.mark.parametrize(
    "edit, what",
    [
        (lambda d: d["stages"][0].__setitem__("threshold", -5), "not a confidence in [0, 1]"),
        (lambda d: d["stages"][0].__setitem__("threshold", float("nan")), "not a confidence in [0, 1]"),
        (lambda d: d.__setitem__("alpha", 2), "alpha must be in (0, 1)"),
        (lambda d: d["stages"].reverse(), "is numbered"),
        # in range, consistent, and still refused: each would claim a guarantee nobody tested
        (lambda d: d.__setitem__("alpha", 0.01), "edited after it was fitted"),
        (lambda d: d["stages"][0].__setitem__("errors", 0), "edited after it was fitted"),
        (lambda d: d["stages"][0].__setitem__("p_value", 1e-9), "edited after it was fitted"),
        (lambda d: d.pop("digest"), "edited after it was fitted"),
    ],
)
def test_an_edited_cascade_file_is_refused(tmp_path, capsys, edit, what):
    stages, cas, _ = _fitted(tmp_path)
    doc = json.loads(cas.read_text())
    edit(doc)
    cas.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["cascade", "apply", *stages, "--cascade", str(cas), "-o", str(tmp_path / "d.parquet")]) == 2
    assert what in capsys.readouterr().err and not (tmp_path / "d.parquet").exists()


def test_swapped_stages_are_refused_and_every_turn_of_stage_one_is_decided_or_abstains(tmp_path, capsys):
    stages, cas, y = _fitted(tmp_path)
    capsys.readouterr()
    assert main(["cascade", "apply", *stages[::-1], "--cascade", str(cas), "-o", str(tmp_path / "d.parquet")]) == 2
    assert "give the stages in the fit's order" in capsys.readouterr().err
    # a later stage that scored only some of the turns: every turn still comes back, with a status
    t = pq.read_table(stages[1])
    part = tmp_path / "part.parquet"
    pq.write_table(t.slice(0, 150), part)
    import shutil

    shutil.copy(stages[1] + ".meta.json", str(part) + ".meta.json")
    out = tmp_path / "d.parquet"
    assert main(["cascade", "apply", stages[0], str(part), "--cascade", str(cas), "-o", str(out)]) == 0
    decided = pq.read_table(out)
    assert decided.num_rows == len(y) and set(decided.column("status").to_pylist()) <= {"ok", "abstained"}


def test_a_positive_that_matches_no_label_certifies_nothing(tmp_path, capsys):
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 200)
    _stage(tmp_path / "a.parquet", y, 0.2, rng)
    capsys.readouterr()
    argv = ["cascade", "fit", str(tmp_path / "a.parquet"), "-o", str(tmp_path / "c.json"), "--positive", "good"]
    assert main(argv) == 2
    assert "--positive 'good' is no label here; the labels are: adherent, violation" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_cascade_fit_reads_a_labels_file(tmp_path, capsys):
    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, 300)
    _stage(tmp_path / "a.parquet", y, 0.2, rng, label=False)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(
        json.dumps({"conversation_id": f"c{i // 2}", "turn_index": i % 2,
                    "label": "adherent" if y[i] else "violation"}) + "\n" for i in range(0, 300, 2)
    ) + json.dumps({"conversation_id": "nowhere", "turn_index": 0, "label": "adherent"}) + "\n")  # fmt: skip
    capsys.readouterr()
    argv = ["cascade", "fit", str(tmp_path / "a.parquet"), "--labels", str(labels), "-o", str(tmp_path / "c.json")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "150 of 151 label(s) joined" in err and "1 label(s) match no turn" in err and "nowhere/0" in err
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["n"] == 150 and doc["labels"]["n_unmatched"] == 1

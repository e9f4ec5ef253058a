"""--answer-format per-question: every judged answer parses, decided by the first token's P(yes)."""

import json
import math

import numpy as np
import pytest
from scipy.special import softmax

from adherence.audit import AuditConfig, load_rubric, run_audit
from adherence.audit._judge import ordered_items, question_requests
from adherence.audit._run import artifact_variables, tempered_p_yes
from adherence.cli.main import main
from adherence.data import ARTIFACTS, example_path, read_table
from adherence.judges._parse import p_yes_from_sums, variant_sets

AUDIT = example_path("role").parent / "audit"


@pytest.fixture(scope="module")
def rubric():
    return load_rubric(AUDIT / "rubric.yaml")


def _p_yes_by_hand(backend, rubric):
    """(artifact, generator, question) -> P(yes), asked of the backend directly, one request at a time."""
    items = ordered_items([i for i in rubric.items if not i.by_code])
    yes, no = variant_sets()
    out = {}
    for row in read_table(AUDIT / "artifacts.jsonl", ARTIFACTS).to_pylist():
        assert artifact_variables(row) is not None
        for item, req in zip(items, question_requests(row["filled_prompt"], row["output"], items)):
            (o,) = backend.first_token_logprobs([req], top_k=5, variants=(yes, no))
            out[(row["artifact_id"], row["generator"], item.question_id)] = p_yes_from_sums(*o.yes_no)[0]
    return out


@pytest.mark.parametrize("p", [1e-9, 0.01, 0.3, 0.5, 0.77, 0.999])
@pytest.mark.parametrize("t", [0.25, 0.7, 1.0, 2.0])
def test_tempered_p_yes_is_the_two_way_softmax_at_that_temperature(p, t):
    want = softmax(np.array([math.log(p), math.log1p(-p)]) / t)[0]
    assert tempered_p_yes(p, t) == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert tempered_p_yes(p, 0.0) == float(p >= 0.5)  # greedy


def test_greedy_verdicts_are_p_yes_at_one_half_and_every_answer_parses(rubric, tiny_judge):
    cfg = AuditConfig(runs=2, temperature=0.0, max_tokens=6, answer_format="per-question", progress=False)
    j = run_audit(rubric, AUDIT / "artifacts.jsonl", tiny_judge, config=cfg).to_pylist()
    judged = [r for r in j if r["source"] == "judge"]
    assert len(judged) == 12 * 2 * 3 and len(j) == 12 * 2 * 11
    assert all(r["answer"] in ("Yes", "No") for r in judged)  # the JSON format leaves all of these unscored
    want = _p_yes_by_hand(tiny_judge, rubric)
    for r in judged:
        raw = json.loads(r["raw"])
        p = want[(r["artifact_id"], r["generator"], r["question_id"])]
        assert raw["p_yes"] == pytest.approx(p, abs=1e-5) and raw["p_yes_source"] == "full_vocab"
        assert r["answer"] == ("Yes" if p >= 0.5 else "No") and raw["verdict"] == r["answer"]
        assert r["justification"] == ((raw["evidence"] or "").strip() or None)
    first = [(r["artifact_id"], r["question_id"], r["answer"]) for r in judged if r["run"] == 0]
    second = [(r["artifact_id"], r["question_id"], r["answer"]) for r in judged if r["run"] == 1]
    assert first == second  # temperature 0: every run the same


@pytest.mark.slow
def test_sampled_verdicts_follow_the_tempered_p_yes(rubric, tiny_judge):
    runs, t = 40, 1.0
    cfg = AuditConfig(runs=runs, temperature=t, max_tokens=1, answer_format="per-question", progress=False, seed=3)
    judged = [r for r in run_audit(rubric, AUDIT / "artifacts.jsonl", tiny_judge, config=cfg).to_pylist()]
    judged = [r for r in judged if r["source"] == "judge"]
    want = {k: tempered_p_yes(p, t) for k, p in _p_yes_by_hand(tiny_judge, rubric).items()}
    yes_rate: dict = {}
    for r in judged:
        yes_rate.setdefault((r["artifact_id"], r["generator"], r["question_id"]), []).append(r["answer"] == "Yes")
    # Over 36 questions x 40 runs: the pooled yes count is within 4 standard deviations of its expectation
    # (a planted off-by-default, e.g. greedy verdicts at temperature 1, lands tens of deviations away).
    expected = sum(runs * q for q in want.values())
    sd = math.sqrt(sum(runs * q * (1 - q) for q in want.values()))
    got = sum(sum(v) for v in yes_rate.values())
    assert abs(got - expected) <= 4 * sd + 1, (got, expected, sd)
    again = run_audit(rubric, AUDIT / "artifacts.jsonl", tiny_judge, config=cfg)
    assert [r["answer"] for r in again.to_pylist() if r["source"] == "judge"] == [r["answer"] for r in judged]


def test_a_judge_without_log_probabilities_answers_in_words(rubric, tiny_llama_dir):
    from adherence.judges._transformers import TransformersBackend

    wordy = TransformersBackend(str(tiny_llama_dir), device="cpu", progress=False)
    wordy.supports_logprobs = False  # as a provider that returns none
    cfg = AuditConfig(runs=1, temperature=0.0, max_tokens=4, answer_format="per-question", progress=False)
    judged = [r for r in run_audit(rubric, AUDIT / "artifacts.jsonl", wordy, config=cfg).to_pylist()]
    judged = [r for r in judged if r["source"] == "judge"]
    assert len(judged) == 36
    for r in judged:  # the random judge's words parse as no verdict: unscored with the reason, never "No"
        raw = json.loads(r["raw"])
        assert raw["p_yes"] is None
        assert r["answer"] is None and r["justification"].startswith("unparseable judge answer")


@pytest.mark.slow
def test_cli_per_question_exits_zero_with_every_answer_parsed(tmp_path, tiny_llama_dir, capsys):
    out = tmp_path / "audit"
    argv = ["audit", "run", "--rubric", str(AUDIT / "rubric.yaml"), "--artifacts", str(AUDIT / "artifacts.jsonl")]
    argv += ["--judge-model", str(tiny_llama_dir), "--device", "cpu", "--runs", "3", "--max-tokens", "4"]
    assert main([*argv, "--answer-format", "per-question", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "judge 108 (0 unscored)" in text
    metrics = json.loads((out / "metrics.json").read_text())
    judge_q = [m for m in metrics["questions"].values() if m["source"] == "judge"]
    assert len(judge_q) == 3 and all(m["unscored"] == 0 and m["answers"] == 36 for m in judge_q)
    meta = json.loads((out / "judgments.parquet.meta.json").read_text())
    assert meta["config"]["audit"]["answer_format"] == "per-question"


@pytest.mark.slow
def test_audit_run_writes_through_the_one_writer(tmp_path, tiny_llama_dir, capsys):
    """`audit run -o DIR` never replaces a judgments file it did not write (a user's, or one edited since)."""
    out = tmp_path / "audit"
    out.mkdir()
    theirs = out / "judgments.parquet"
    theirs.write_bytes(b"PAR1 not ours")
    argv = ["audit", "run", "--rubric", str(AUDIT / "rubric.yaml"), "--artifacts", str(AUDIT / "artifacts.jsonl"),
            "--judge-model", str(tiny_llama_dir), "--device", "cpu", "--runs", "1", "--max-tokens", "4", "-o", str(out),
            "--answer-format", "per-question"]  # fmt: skip
    assert main(argv) == 2
    assert "not written by adherence" in capsys.readouterr().err and theirs.read_bytes() == b"PAR1 not ours"
    theirs.unlink()
    assert main(argv) == 0 and main(argv) == 0  # its own, unchanged: replaced
    meta = json.loads((out / "judgments.parquet.meta.json").read_text())
    assert meta["outputs"]["kind"] == "judgments" and meta["config"]["audit"]["runs"] == 1

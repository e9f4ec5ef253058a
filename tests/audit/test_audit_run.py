import json

import pyarrow.parquet as pq
import pytest

from adherence.audit import AuditConfig, load_rubric, parse_audit_answer, repair_json, run_audit
from adherence.audit._rubric import Rubric, RubricItem, draft_rubric
from adherence.cli.main import main
from adherence.data import DataError, example_path

AUDIT = example_path("role").parent / "audit"


@pytest.fixture(scope="module")
def rubric():
    return load_rubric(AUDIT / "rubric.yaml")


def test_bundled_rubric_and_validation_errors(rubric, tmp_path):
    assert len(rubric.items) == 11 and sum(i.by_code for i in rubric.items) == 8
    assert rubric.ignored[0]["reason"].startswith("conditional")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "questions:\n  - id: q1\n    question: Is it JSON?\n    category: Format Adherence\n    kind: objective\n"
        "    check: {type: regex}\n"
    )
    with pytest.raises(DataError, match="question 'q1': unknown check type 'regex'") as err:
        load_rubric(bad)
    assert err.value.row == 1 and err.value.column == "check"
    bad.write_text("questions:\n  - {id: q1, question: x, category: c, kind: maybe}\n")
    with pytest.raises(DataError, match="objective or subjective"):
        load_rubric(bad)
    path = rubric.save(tmp_path / "copy.json")
    assert [i.question_id for i in load_rubric(path).items] == [i.question_id for i in rubric.items]


def test_repair_and_parse_answers(rubric):
    items = [i for i in rubric.items if not i.by_code]
    text = (
        "Sure! ```json\n{'Style Adherence': [{'question': 'Is the tone professional and encouraging?', "
        "'justification': 'It praises the work.', 'answer': 'YES'},\n {\"question\": \"Is the summary written in the "
        'third person", "justification": "uses she", "answer": "no."},],}\n```'
    )
    assert repair_json(text) is not None
    got = parse_audit_answer(text, items)
    assert got["style_tone"] == ("Yes", "It praises the work.")
    assert got["style_third"] == ("No", "uses she")  # close match without the question mark
    assert got["growth_specific"] == (None, None)  # missing -> unscored, never "No"
    assert all(v == (None, None) for v in parse_audit_answer("I cannot answer.", items).values())


@pytest.mark.slow
def test_run_audit_with_a_judge(rubric, tiny_judge, tmp_path):
    cfg = AuditConfig(runs=2, temperature=0.0, max_tokens=24, cache=str(tmp_path / "c.sqlite"))
    j = run_audit(rubric, AUDIT / "artifacts.jsonl", tiny_judge, config=cfg)
    assert j.num_rows == 12 * 2 * 11
    rows = j.to_pylist()
    code = [r for r in rows if r["source"] == "code"]
    judged = [r for r in rows if r["source"] == "judge"]
    assert len(code) == 12 * 2 * 8 and len(judged) == 12 * 2 * 3
    assert all(r["answer"] in ("Yes", "No") and r["justification"] for r in code)
    assert all(r["answer"] in ("Yes", "No", None) for r in judged)
    # the random tiny judge writes no parseable answers: unscored, never "No"
    assert all(r["answer"] is None for r in judged)
    first = {(r["artifact_id"], r["generator"], r["question_id"]): r["answer"] for r in code if r["run"] == 0}
    assert first[("review-01", "gen-a", "fmt_json")] == "Yes" and first[("review-01", "gen-b", "fmt_fences")] == "No"
    before = tiny_judge.stats["prompt_tokens"]
    again = run_audit(rubric, AUDIT / "artifacts.jsonl", tiny_judge, config=cfg)
    assert again.equals(j) and tiny_judge.stats["prompt_tokens"] == before  # every call came from the cache


def test_draft_rubric_runs_two_passes(tiny_judge):
    rubric, raw = draft_rubric((AUDIT / "system_prompt.txt").read_text(), tiny_judge, max_tokens=16)
    assert [r["kind"] for r in raw] == ["objective", "subjective"]
    assert isinstance(rubric, Rubric) and all(isinstance(i, RubricItem) for i in rubric.items)


@pytest.mark.slow
def test_cli_audit_run_and_report(tmp_path, tiny_llama_dir, capsys):
    out = tmp_path / "audit"
    assert (
        main(
            [
                "audit",
                "run",
                "--rubric",
                str(AUDIT / "rubric.yaml"),
                "--artifacts",
                str(AUDIT / "artifacts.jsonl"),
                "--judge-model",
                str(tiny_llama_dir),
                "--device",
                "cpu",
                "--runs",
                "3",
                "--ks",
                "2,3",
                "--max-tokens",
                "8",
                "-o",
                str(out),
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    text = captured.out
    assert "pooled stability" in text and "fmt_json" in text
    # The random-weight judge writes no parseable answer: the run is kept for debugging, but it failed.
    assert "every judged answer is unscored" in captured.err and "judge 108 (108 unscored)" in text
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ks"] == [2, 3] and metrics["judges"] == [str(tiny_llama_dir)]
    code_q = metrics["questions"]["fmt_json"]
    # deterministic code gets counts and a yes-rate, never a stability statistic presented as the judge's
    assert code_q["source"] == "code" and "k=3" not in code_q and code_q["unscored"] == 0 and code_q["answers"] == 36
    judge_q = [m for m in metrics["questions"].values() if m["source"] == "judge"]
    assert len(judge_q) == 3 and all(m["unscored"] == m["answers"] == 36 for m in judge_q)
    assert all(m["unscored_by_judge"] == {str(tiny_llama_dir): 36} for m in judge_q)
    judgments = pq.read_table(out / "judgments.parquet").to_pylist()
    assert {r["judge"] for r in judgments if r["source"] == "code"} == {"code"}
    assert all(isinstance(r["raw"], str) for r in judgments if r["source"] == "judge")  # kept for debugging
    assert "code-answered questions (deterministic" in text and "judge: " + str(tiny_llama_dir) in text
    assert main(["audit", "report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 2 and "Verdict vs reasoning stability" in page
    assert page.count(str(tiny_llama_dir)) == 1 and "Unscored judge answers: 108 of 108" in page
    assert "Code-answered questions" in page and "no stability statistic" in page
    assert "Reading the numbers" in page and "Landis and Koch" in page and "smoke-test judge" not in page
    # The same metrics from the bundled judge: the page says first that its figures mean nothing.
    from adherence.report._audit import audit_html

    bundled = dict(metrics, judges=["bundled:SmolLM2-135M-Instruct::SmolLM2-135M-Instruct.Q4_1.gguf"])
    assert audit_html(bundled).index("smoke-test judge") < audit_html(bundled).index("Pooled stability")
    assert main(["audit", "report", str(tmp_path / "nothing")]) == 2
    # A hand-edited metrics.json: one line naming the file and what is wrong, exit 2, never a traceback.
    good = (out / "metrics.json").read_text()
    edits = {
        "pooled-string": lambda m: m["pooled"]["k=2"].update(gwet_ac1="high"),
        "no-ks": lambda m: m.pop("ks"),
        "questions-list": lambda m: m.update(questions=[]),
        "artifact-no-mean": lambda m: [a.pop("mean") for a in m["artifacts"]],
    }
    capsys.readouterr()
    for name, edit in edits.items():
        m = json.loads(good)
        edit(m)
        (out / "metrics.json").write_text(json.dumps(m))
        assert main(["audit", "report", str(out)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "metrics.json" in err and "Traceback" not in err, (name, err)
    (out / "metrics.json").write_text(good[: len(good) // 2])  # cut short
    assert main(["audit", "report", str(out)]) == 2
    assert "cannot read the audit's metrics" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content,message,line",
    [
        (b"questions:\n  - id: q1\n    question: Caf\xe9?\n", "not UTF-8 text", None),
        (b"questions:\n  - id: q1\n    question: [unclosed\n    kind: objective\n", "invalid YAML (", 4),
        (
            b"questions:\n  - {id: q1, question: x, category: Format Adherance, kind: objective}\n",
            "question 'q1': unknown category 'Format Adherance'. Did you mean 'Format Adherence'?",
            None,
        ),
    ],
)
def test_a_broken_rubric_is_one_line_naming_the_file(tmp_path, content, message, line):
    bad = tmp_path / "rubric.yaml"
    bad.write_bytes(content)
    with pytest.raises(DataError) as err:
        load_rubric(bad)
    text = str(err.value)
    assert message in text and str(bad) in text and len(text.splitlines()) == 1
    assert err.value.line == line

import json

import pytest

from adherence.cli.main import main
from adherence.data import example_path

EX = example_path("persona")
FAST = ["--methods", "tfidf,bm25", "--primary", "bm25", "--limit", "20", "--repeats", "3"]


@pytest.mark.slow
def test_persona_json_table_and_html(tmp_path, capsys):
    out = tmp_path / "res" / "persona.json"
    rc = main(
        [
            "persona",
            "--reference",
            str(EX / "human.csv"),
            "--simulation",
            str(EX / "sim_faithful.csv"),
            "--simulation",
            str(EX / "sim_persona_drift.csv"),
            *FAST,
            "--json",
            "-o",
            str(out),
            "--html",
            str(tmp_path / "res" / "persona.html"),
        ]
    )
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert list(res) == ["human", "sim_faithful", "sim_persona_drift"]
    human, faithful, drift = res["human"], res["sim_faithful"], res["sim_persona_drift"]
    assert human["adherence"]["similarity"] == 1.0 and human["e4s"] == 1.0
    assert set(faithful["consistency"]) >= {"f1", "auc", "c_at_1", "f05u", "brier", "score", "similarity"}
    assert "skipped" in faithful["naturalness"] and "--nli-model" in faithful["naturalness"]["skipped"]
    assert faithful["adherence"]["similarity"] > drift["adherence"]["similarity"] + 0.2
    assert faithful["adherence"]["rank"] == 1 and drift["adherence"]["rank"] == 2
    assert faithful["e4s"] == pytest.approx(
        (faithful["adherence"]["similarity"] + faithful["consistency"]["similarity"]) / 2
    )
    assert faithful["adherence"]["offset"] == pytest.approx(
        faithful["adherence"]["score"] - human["adherence"]["score"]
    )
    assert faithful["adherence"]["curves"]["bm25"]["pool_sizes"][-1] == 19  # capped by the 20-conversation corpora
    assert json.loads(out.read_text()) == res
    page = (tmp_path / "res" / "persona.html").read_text()
    assert page.count("<svg") >= 4 and "MRR degradation (bm25)" in page and "sim_persona_drift" in page

    rc = main(
        [
            "persona",
            "--reference",
            str(EX / "human.csv"),
            "--simulation",
            str(EX / "sim_voice_swap.csv"),
            "--name",
            "people",
            "--name",
            "bots",
            "--dimensions",
            "adherence",
            *FAST,
        ]
    )
    table = capsys.readouterr().out
    assert rc == 0 and "people" in table and "bots" in table and "similarity" in table and "E4s" in table


@pytest.mark.slow
def test_persona_errors(tmp_path, capsys):
    assert main(["persona", "--reference", str(tmp_path / "nope.csv")]) == 2
    assert "nope.csv" in capsys.readouterr().err
    assert main(["persona", "--reference", str(EX / "human.csv"), "--html", str(tmp_path / "page.json")]) == 2
    assert "--html needs a .html path" in capsys.readouterr().err
    assert main(["persona", "--reference", str(EX / "human.csv"), "--dimensions", "adherance"]) == 2
    assert "adherance" in capsys.readouterr().err
    assert main(["persona", "--reference", str(EX / "human.csv"), "--methods", "bm52"]) == 2
    assert "Did you mean 'bm25'" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "user 1 personas,user 2 personas,Best Generated Conversation\n"
        'I like tea.,I like cats.,"User 1: hi\nUser 2: hello"\n'
        'I like tea.,,"User 1: hi\nUser 2: hello"\n'
    )
    # Too small for consistency: recorded as an error for that corpus, the others still scored, and the
    # job exits 1 so an orchestrator sees that a dimension is missing.
    assert (
        main(
            [
                "persona",
                "--reference",
                str(EX / "human.csv"),
                "--simulation",
                str(bad),
                "--dimensions",
                "consistency,adherence",
                *FAST,
                "--json",
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert "adherence persona: failed: 2 dimension(s)" in captured.err
    res = json.loads(captured.out)
    assert "at least 3 speakers" in res["bad"]["consistency"]["error"] and "warning: [bad]" in captured.err
    assert "score" in res["human"]["consistency"] and "no eligible distractor" in res["bad"]["adherence"]["error"]
    assert res["bad"]["e4s"] is None and res["human"]["adherence"]["score"] > 0
    broken = tmp_path / "broken.csv"
    broken.write_text("user 1 personas,Best Generated Conversation\nI like tea.,User 1: hi\n")
    assert main(["persona", "--reference", str(broken)]) == 2
    assert "broken.csv" in capsys.readouterr().err


def test_persona_on_a_dirty_synthetic_persona_chat_file(tmp_path, capsys):
    """A real split with one unprefixed conversation: the job finishes, warns, and counts it."""
    src = (EX / "human.csv").read_text(encoding="utf-8")
    dirty = tmp_path / "dirty.csv"
    header, body = src.split("\n", 1)
    dirty.write_text(header + '\n"I like tea.","I like cats.","[They sit in silence.]"\n' + body, encoding="utf-8")
    out = tmp_path / "p.json"
    with pytest.warns(UserWarning, match="dirty.csv: skipped 1 malformed conversation"):
        rc = main(
            [
                "persona",
                "--reference",
                str(dirty),
                "--dimensions",
                "adherence",
                *FAST,
                "-o",
                str(out),
                "--html",
                str(tmp_path / "p.html"),
            ]
        )
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["dirty"]["skipped_records"] == {
        "count": 1,
        "first": ["row 1"],
        "reasons": ["no 'User 1:' / 'User 2:' utterance in the conversation"],
    }
    assert res["dirty"]["n_conversations"] == 19  # --limit 20 rows, one of them skipped
    assert "1 malformed record(s) skipped (row 1)" in capsys.readouterr().out
    assert "dirty: 1 malformed record(s) skipped (row 1)" in (tmp_path / "p.html").read_text()
    assert main(["persona", "--reference", str(dirty), "--dimensions", "adherence", *FAST, "--strict-input"]) == 2
    assert "no 'User 1:' / 'User 2:' utterance" in capsys.readouterr().err

"""The language check behind the warning on score, classifier fit and evaluate: other languages named, English
logs (the bundled ones, the hand-written ones, 27,872 lines of Synthetic-Persona-Chat) left alone."""

import csv
from pathlib import Path

import pytest

from adherence.cli.main import main
from adherence.data import example_path, read_turns
from adherence.models._language import language_note, language_of

OTHER = {
    "Ihre Schadensmeldung wird von uns bearbeitet, bitte haben Sie Geduld.": "German",
    "Merci, nous avons bien reçu votre demande et nous vous répondrons.": "French",
    "Su pedido está en camino y llegará pronto, gracias por su paciencia.": "Spanish",
    "您的索赔正在处理中，请耐心等待。": "Chinese or Japanese",
    "Ваша заявка обрабатывается.": "Russian or another Cyrillic-script language",
}


@pytest.mark.parametrize("text, language", list(OTHER.items()))
def test_other_languages_are_named(text, language):
    assert language_of(text) == language


def test_english_logs_raise_no_warning():
    folder = example_path("role").parent
    for f in ("support_log.jsonl", "role_turns.jsonl", "own_logs/claims_desk.jsonl", "own_logs/pharmacy_line.jsonl"):
        replies = read_turns(folder / f).column("assistant").to_pylist()
        assert language_note(replies) is None and not any(language_of(r) for r in replies), f
    spc = (
        Path(__file__).resolve().parents[2].parent / "shared" / "data" / "persona" / "Synthetic-Persona-Chat_valid.csv"
    )
    if spc.exists():  # beside the checkout only; its few Spanish exchanges are found, and they are few
        lines = [ln for r in csv.DictReader(open(spc, encoding="utf-8")) for ln in
                 r["Best Generated Conversation"].splitlines() if ln.strip()]  # fmt: skip
        flagged = [ln for ln in lines if language_of(ln)]
        assert len(flagged) < 0.001 * len(lines) and language_note(lines) is None


def test_score_and_evaluate_warn_on_replies_the_encoder_cannot_read(tmp_path, capsys):
    """A log with a tenth of its replies in German and Chinese: the warning names them, the job still runs."""
    import json

    rows = [json.loads(x) for x in (example_path("role").parent / "support_log.jsonl").read_text().splitlines()[:30]]
    foreign = list(OTHER)
    for i, rec in enumerate(rows[:4]):
        for m in rec["messages"]:
            if m["role"] == "assistant":
                m["content"] = foreign[i % len(foreign)]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "s.parquet"
    capsys.readouterr()
    assert main(["score", str(log), "-o", str(out), "--method", "scope", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "look written in another language than English" in err and "German" in err, err

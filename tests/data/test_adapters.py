import json

import pytest

from adherence.data import (
    SPEAKER_1,
    SPEAKER_2,
    DataError,
    read_json_turns,
    read_persona_corpus,
    read_personachat,
    read_synthetic_persona_chat,
    read_turns,
)
from tests.conftest import SHARED

PYGAUSSIA = [
    {
        "session_id": "s1",
        "assistant_id": "bank-bot",
        "language": "english",
        "context": "Bank FAQ",
        "chatbot_role": "You are a bank assistant.",
        "conversation": [
            {
                "qa_id": "q1",
                "query": "Hi",
                "assistant": "Hello, how can I help?",
                "ground_truth_assistant": "Hello!",
                "observation": None,
                "agentic": {"tool": "none"},
            },
            {"qa_id": "q2", "query": "Fees?", "assistant": "2 EUR.", "ground_truth_assistant": "It costs 2 EUR."},
        ],
    },
    {
        "session_id": "s2",
        "assistant_id": "bank-bot",
        "chatbot_role": "You are a bank assistant.",
        "conversation": [{"qa_id": "q1", "query": "Bye", "assistant": "Goodbye"}],
    },
]


def test_pygaussia_json(tmp_path):
    path = tmp_path / "sessions.json"
    path.write_text(json.dumps(PYGAUSSIA))
    t = read_turns(path)
    assert t.column("conversation_id").to_pylist() == ["s1", "s1", "s2"]
    assert t.column("turn_index").to_pylist() == [0, 1, 0]
    assert t.column("user").to_pylist() == ["Hi", "Fees?", "Bye"]
    assert t.column("ground_truth_assistant").to_pylist() == ["Hello!", "It costs 2 EUR.", None]
    # extra fields pass through; nested ones as JSON text
    assert t.column("qa_id").to_pylist() == ["q1", "q2", "q1"]
    assert t.column("assistant_id").to_pylist() == ["bank-bot"] * 3
    assert json.loads(t.column("agentic").to_pylist()[0]) == {"tool": "none"}


def test_pygaussia_missing_assistant(tmp_path):
    bad = json.loads(json.dumps(PYGAUSSIA))
    del bad[0]["conversation"][1]["assistant"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(DataError) as err:
        read_json_turns(path)
    assert err.value.column == "assistant" and "conversation[1]" in str(err.value) and err.value.row == 2


def test_flat_benchmark_json(tmp_path):
    recs = [
        {
            "role": "r",
            "assistant": f"a{i}",
            "ground_truth_assistant": f"g{i}",
            "label": "adherent" if i % 2 else "scope_violation",
        }
        for i in range(12)
    ]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(recs))
    t = read_turns(path)
    assert t.num_rows == 12
    assert t.column("conversation_id").to_pylist()[:2] == ["bench-00", "bench-01"]
    assert set(t.column("turn_index").to_pylist()) == {0}
    assert t.column("label").to_pylist() == [r["label"] for r in recs]


def test_unrecognised_json_layout(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"foo": 1}))
    with pytest.raises(DataError, match="unrecognised JSON layout"):
        read_json_turns(path)
    path.write_text('[{"role": "r", "assistant": "a"},]')
    with pytest.raises(DataError, match="invalid JSON") as err:
        read_json_turns(path)
    assert err.value.line == 1


def test_personachat(fixtures):
    corpus = read_personachat(fixtures / "personachat_self_original.txt")
    conv = corpus.conversations.to_pylist()
    first = [r for r in conv if r["conversation_id"] == "personachat_self_original-0"]
    assert [r["speaker"] for r in first] == [SPEAKER_1, SPEAKER_2, SPEAKER_1, SPEAKER_2]
    assert first[1]["text"] == "i am good , just got back from skiing ."
    second = [r for r in conv if r["conversation_id"] == "personachat_self_original-1"]
    assert second[0] == {
        "conversation_id": "personachat_self_original-1",
        "turn_index": 0,
        "speaker": SPEAKER_2,
        "text": "hello ! i only eat plants .",
    }  # __SILENCE__ dropped
    personas = corpus.personas.to_pylist()
    assert personas[0] == {
        "conversation_id": "personachat_self_original-0",
        "speaker": SPEAKER_2,
        "persona": ["i like to ski.", "my wife does not like me anymore."],
    }


def test_personachat_bad_line_skips_its_dialog(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("1 your persona: x.\nno number here\n2 hi\thello\n1 your persona: y.\n2 how are you\tfine\n")
    with pytest.warns(UserWarning, match=r"p.txt: skipped 1 malformed dialog\(s\) \(dialog 1 \(line 2\)\)"):
        corpus = read_personachat(path)
    assert set(corpus.conversations.column("conversation_id").to_pylist()) == {"p-1"}
    assert corpus.personas.column("conversation_id").to_pylist() == ["p-1"]
    assert corpus.skipped == (
        ("dialog 1 (line 2)", "expected a line starting with its number ('1 your persona: ...')"),
    )
    with pytest.raises(DataError) as err:
        read_personachat(path, strict=True)
    assert err.value.line == 2


def test_synthetic_persona_chat_fixture(fixtures):
    corpus = read_synthetic_persona_chat(fixtures / "synthetic_persona_chat_head.csv")
    assert corpus.personas.num_rows == 10
    first = [r for r in corpus.conversations.to_pylist() if r["conversation_id"] == "synthetic_persona_chat_head-0"]
    assert first[0]["text"] == "Hi!" and first[0]["speaker"] == SPEAKER_1
    assert first[3]["text"] == "I like to move objects with my mind."
    p = corpus.personas.to_pylist()[0]
    assert p["speaker"] == SPEAKER_1 and p["persona"][0] == "I love to bake cookies."
    # dispatch by header through the generic reader
    assert read_persona_corpus(fixtures / "synthetic_persona_chat_head.csv", limit=2).personas.num_rows == 4


def test_synthetic_persona_chat_markdown_speakers_and_preamble(tmp_path):
    path = tmp_path / "spc.csv"
    conv = "[They meet at a cafe]\n*User 1:* Hi there!\n* * *\n* User 2: Hello.\nHow are you?\n**User 1**: Fine."
    path.write_text('user 1 personas,user 2 personas,Best Generated Conversation\n"I ski.","I cook.","' + conv + '"\n')
    rows = read_synthetic_persona_chat(path).conversations.to_pylist()
    assert [(r["speaker"], r["text"]) for r in rows] == [
        (SPEAKER_1, "Hi there!"),
        (SPEAKER_2, "Hello. How are you?"),
        (SPEAKER_1, "Fine."),
    ]
    # Real splits hold conversations without speaker prefixes: each is skipped with a warning naming
    # the file and the first 10 rows, and counted; strict=True makes the first one an error.
    good = '"I ski.","I cook.","User 1: hi\nUser 2: hello"\n'
    path.write_text(
        "user 1 personas,user 2 personas,Best Generated Conversation\n"
        + good
        + '"I ski.","I cook.","no speakers"\n' * 12
        + good
    )
    with pytest.warns(
        UserWarning, match=r"spc.csv: skipped 12 malformed conversation\(s\) \(row 2, row 3, .*row 11, \.\.\.\)"
    ):
        corpus = read_synthetic_persona_chat(path)
    assert sorted(set(corpus.conversations.column("conversation_id").to_pylist())) == ["spc-0", "spc-13"]
    assert corpus.personas.num_rows == 4 and len(corpus.skipped) == 12 and corpus.skipped[0][0] == "row 2"
    with pytest.raises(DataError) as err:
        read_synthetic_persona_chat(path, strict=True)
    assert err.value.row == 2 and err.value.column == "Best Generated Conversation"


def test_synthetic_persona_chat_missing_columns(tmp_path):
    path = tmp_path / "spc.csv"
    path.write_text("user 1 personas,Best Generated Conversation\nx,User 1: hi\n")
    with pytest.raises(DataError, match="user 2 personas"):
        read_synthetic_persona_chat(path)


def test_persona_contract_tables_need_personas(tmp_path, fixtures):
    corpus = read_synthetic_persona_chat(fixtures / "synthetic_persona_chat_head.csv")
    from adherence.data import write_table

    d = tmp_path / "corpus"
    write_table(corpus.conversations, d / "conversations.parquet")
    write_table(corpus.personas, d / "personas.jsonl")
    back = read_persona_corpus(d)
    assert back.conversations.num_rows == corpus.conversations.num_rows
    assert back.personas.to_pylist() == corpus.personas.to_pylist()
    with pytest.raises(DataError, match="personas file"):
        read_persona_corpus(d / "conversations.parquet")


@pytest.mark.skipif(
    not (SHARED / "data/persona/Synthetic-Persona-Chat_valid.csv").exists(),
    reason="the shared Synthetic-Persona-Chat file sits beside the checkout only",
)
def test_full_synthetic_persona_chat_valid():
    corpus = read_synthetic_persona_chat(SHARED / "data/persona/Synthetic-Persona-Chat_valid.csv")
    assert corpus.personas.num_rows == 2000
    assert corpus.conversations.num_rows > 10_000

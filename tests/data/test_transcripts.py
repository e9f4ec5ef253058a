"""Chat transcripts (OpenAI messages, ShareGPT) and Hugging Face datasets as turns, row by row."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import adherence
from adherence.cli.main import main
from adherence.data import TURNS, DataError, TranscriptOptions, example_path, iter_batches, read_turns

ROLE = "You are a bank assistant. Only discuss banking."

OPENAI = [
    {
        "id": "conv-a",
        "metadata": {"app": "web"},
        "messages": [
            {"role": "system", "content": ROLE},
            {"role": "developer", "content": "Answer in one sentence."},
            {"role": "user", "content": "Hi, what is my balance?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "get_balance", "arguments": '{"account": "main"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "1,204.50 EUR"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Your main account holds"},
                    {"type": "text", "text": "1,204.50 EUR."},
                ],
                "label": "adherent",
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look at this:"},
                    {"type": "image_url", "image_url": {"url": "x"}},
                ],
            },
            {"role": "user", "content": "Should I buy Tesla stock?"},
            {"role": "assistant", "content": "Buy it now, it will double!", "label": "scope_violation", "weight": 2.0},
        ],
    },
    {
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "assistant", "content": "   "},
        ]
    },
]

EXPECTED = [
    {
        "conversation_id": "conv-a",
        "turn_index": 0,
        "role": ROLE + "\n\nAnswer in one sentence.",
        "user": 'Hi, what is my balance?\n\n[tool call] get_balance({"account": "main"})\n\n[tool result t1] 1,204.50 EUR',
        "assistant": "Your main account holds\n1,204.50 EUR.",
        "label": "adherent",
        "weight": None,
    },
    {
        "conversation_id": "conv-a",
        "turn_index": 1,
        "role": ROLE + "\n\nAnswer in one sentence.",
        "user": "Look at this:\n[image_url]\n\nShould I buy Tesla stock?",
        "assistant": "Buy it now, it will double!",
        "label": "scope_violation",
        "weight": 2.0,
    },
    {
        "conversation_id": "2",
        "turn_index": 0,
        "role": "Fallback role.",
        "user": "hello",
        "assistant": "Hello! How can I help?",
        "label": None,
        "weight": None,
    },
    {  # a blank reply is a turn of its own (scored as an error row), never dropped
        "conversation_id": "2",
        "turn_index": 1,
        "role": "Fallback role.",
        "user": None,
        "assistant": "   ",
        "label": None,
        "weight": None,
    },
]

SHAREGPT = [
    {
        "id": "s1",
        "conversations": [
            {"from": "system", "value": ROLE},
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": "Hello, how can I help with your account?"},
            {"from": "human", "value": "weather?"},
            {"from": "function_call", "value": '{"name": "weather"}'},
            {"from": "observation", "value": "sunny"},
            {"from": "gpt", "value": "I can only help with banking."},
        ],
    },
]


def _rows(table):
    keys = ["conversation_id", "turn_index", "role", "user", "assistant", "label", "weight"]
    return [{k: r.get(k) for k in keys} for r in table.to_pylist()]


def _jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_openai_jsonl_row_by_row(tmp_path):
    src = _jsonl(tmp_path / "chats.jsonl", OPENAI)
    t = pa.concat_tables(iter_batches(src, TURNS, transcripts=TranscriptOptions(role="Fallback role.")))
    assert _rows(t) == EXPECTED
    assert json.loads(t.column("metadata")[0].as_py()) == {"app": "web"} and t.column("metadata")[2].as_py() is None


def test_sharegpt_json_and_jsonl(tmp_path):
    want = [
        {
            "conversation_id": "s1",
            "turn_index": 0,
            "role": ROLE,
            "user": "hi",
            "assistant": "Hello, how can I help with your account?",
            "label": None,
            "weight": None,
        },
        {
            "conversation_id": "s1",
            "turn_index": 1,
            "role": ROLE,
            "user": 'weather?\n\n[tool call] {"name": "weather"}\n\n[tool result] sunny',
            "assistant": "I can only help with banking.",
            "label": None,
            "weight": None,
        },
    ]
    (tmp_path / "s.json").write_text(json.dumps(SHAREGPT))
    assert _rows(read_turns(tmp_path / "s.json")) == want
    assert _rows(read_turns(_jsonl(tmp_path / "s.jsonl", SHAREGPT))) == want


def test_transcripts_stream_batch_by_batch(tmp_path):
    many = [{"id": f"c{i}", "messages": OPENAI[0]["messages"]} for i in range(50)]
    src = _jsonl(tmp_path / "many.jsonl", many)
    batches = list(iter_batches(src, TURNS, batch_size=7))
    assert [b.num_rows for b in batches] == [7] * 14 + [2]  # 100 turns, never more than one batch in memory


def test_malformed_transcripts_are_skipped_with_a_warning_or_refused(tmp_path):
    src = _jsonl(tmp_path / "dirty.jsonl", [OPENAI[0], {"messages": "oops"}, {"messages": [{"role": "robot"}]}])
    with pytest.warns(
        UserWarning, match=r"dirty.jsonl: skipped 2 malformed transcript record\(s\) \(record 2, record 3\)"
    ):
        assert read_turns(src).num_rows == 2
    with pytest.raises(DataError, match=r"dirty.jsonl: row 2, line 2: malformed openai transcript"):
        list(iter_batches(src, TURNS, transcripts=TranscriptOptions(bad_rows="fail")))


def test_forced_format_and_flat_turns_untouched(tmp_path):
    flat = read_turns(example_path("role"))
    assert read_turns(example_path("role")).equals(flat)  # flat turns are not mistaken for transcripts
    src = _jsonl(tmp_path / "chats.jsonl", OPENAI)
    with pytest.warns(UserWarning, match="not an sharegpt transcript"):
        with pytest.raises(DataError, match="no rows"):
            list(iter_batches(src, TURNS, transcripts=TranscriptOptions(input_format="sharegpt")))


# Arrow columns hold one type: a dataset's messages have text content and the same fields throughout.
HF_CHATS = [
    {
        "id": "h1",
        "messages": [
            {"role": "system", "content": ROLE},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Should I buy Tesla?"},
            {"role": "assistant", "content": "I can only help with banking."},
        ],
    },
    {
        "id": None,
        "messages": [
            {"role": "user", "content": "limit?"},
            {"role": "assistant", "content": "Your daily limit is 2,000 EUR."},
        ],
    },
]
HF_EXPECTED = [
    {
        "conversation_id": "h1",
        "turn_index": 0,
        "role": ROLE,
        "user": "hi",
        "assistant": "Hello! How can I help?",
        "label": None,
        "weight": None,
    },
    {
        "conversation_id": "h1",
        "turn_index": 1,
        "role": ROLE,
        "user": "Should I buy Tesla?",
        "assistant": "I can only help with banking.",
        "label": None,
        "weight": None,
    },
    {
        "conversation_id": "2",
        "turn_index": 0,
        "role": "Fallback role.",
        "user": "limit?",
        "assistant": "Your daily limit is 2,000 EUR.",
        "label": None,
        "weight": None,
    },
]


def test_hugging_face_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(HF_CHATS)
    # save_to_disk directory and a Parquet export, read by the CLI path
    ds.save_to_disk(str(tmp_path / "hf"))
    ds.to_parquet(str(tmp_path / "chats.parquet"))
    opts = lambda: TranscriptOptions(role="Fallback role.")  # noqa: E731
    for src in (tmp_path / "hf", tmp_path / "chats.parquet"):
        rows = _rows(pa.concat_tables(iter_batches(src, TURNS, transcripts=opts())))
        assert rows == HF_EXPECTED, src
    # Python API: a datasets.Dataset of flat turns, shuffled (index mapping), scores like the file
    flat = read_turns(example_path("role"))
    ref = adherence.score(example_path("role"), method="kl", n_bootstrap=0)
    got = adherence.score(datasets.Dataset.from_list(flat.to_pylist()).shuffle(seed=3), method="kl", n_bootstrap=0)

    def by_key(t):
        return dict(
            zip(
                zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()),
                t.column("score").to_pylist(),
            )
        )

    a, b = by_key(got), by_key(ref)
    # KL's vocabulary is ordered by first occurrence (the paper's tie-break), so a shuffled input sums in
    # another order: equal up to float32 rounding (no tie at this corpus's cut-off).
    assert a.keys() == b.keys() and [a[k] for k in b] == pytest.approx([b[k] for k in b], abs=1e-6)
    # a transcripts Dataset from Python
    got = pa.concat_tables(iter_batches(ds, TURNS, transcripts=opts()))
    assert _rows(got) == HF_EXPECTED


def test_arrow_ipc_file_and_dataframe(tmp_path):
    flat = read_turns(example_path("role"))
    with pa.ipc.new_file(str(tmp_path / "t.arrow"), flat.schema) as w:
        w.write_table(flat)
    assert read_turns(tmp_path / "t.arrow").equals(flat)
    ref = adherence.score(flat, method="kl", n_bootstrap=0)
    got = adherence.score(flat.to_pandas(), method="kl", n_bootstrap=0)
    assert got.column("score").to_pylist() == pytest.approx(ref.column("score").to_pylist(), abs=1e-12)


def test_cli_scores_transcripts_end_to_end(tmp_path, tiny_llama_dir, capsys):
    src = _jsonl(tmp_path / "chats.jsonl", OPENAI + [{"messages": 3}])
    role = tmp_path / "role.txt"
    role.write_text("Fallback role.\n")
    out = tmp_path / "o.parquet"
    with pytest.warns(UserWarning, match="skipped 1 malformed transcript"):
        rc = main(
            [
                "score",
                str(src),
                "-o",
                str(out),
                "--judge-model",
                str(tiny_llama_dir),
                "--device",
                "cpu",
                "--role-file",
                str(role),
                "--no-progress",
                "--bootstrap",
                "0",
                "--max-bad-rows",
                "1",
            ]
        )
    assert rc == 0
    assert "skipped 1 malformed input record(s) (record 3)" in capsys.readouterr().out
    t = pq.read_table(out)
    assert _rows(t) == EXPECTED
    assert t.column("status").to_pylist() == ["ok", "ok", "ok", "error"]  # the blank reply: a row, an error
    assert t.column("error").to_pylist()[-1] == "empty assistant turn"
    meta = json.loads((tmp_path / "o.parquet.meta.json").read_text())
    assert meta["summary"]["skipped_records"]["count"] == 1
    assert main(["score", str(src), "-o", str(tmp_path / "p.parquet"), "--method", "kl", "--strict-input"]) == 2
    assert "malformed openai transcript" in capsys.readouterr().err


def test_dirty_transcripts_cost_their_record_only_and_are_counted(tmp_path):
    """Each bad record is skipped with its reason and counted (an error with --strict-input, naming its line);
    the good ones are read. Before: a traceback, a whole-job failure, or records vanishing uncounted."""
    import json
    import warnings

    def msgs(reply, **extra):
        return [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": reply, **extra}]

    records = [
        {"id": "good-1", "messages": msgs("Hello!")},
        {"id": "calls", "messages": [{"role": "assistant", "content": "x", "tool_calls": 5}]},
        {"id": "empty", "messages": []},
        {"id": "no-reply", "messages": [{"role": "user", "content": "anyone?"}]},
        {"id": "blank", "messages": msgs("   ")},
        {"id": "bad-label", "messages": msgs("ok", label={"a": 1})},
        {"id": "bad-weight", "messages": msgs("ok", weight="heavy")},
        {"id": "good-1", "messages": msgs("again")},  # a repeated id
        {"messages": msgs("no id: record 9")},
        {"id": "9", "messages": msgs("collides with record 9's fallback id")},
        {"id": "good-2", "messages": msgs("Fine.", label=1, weight=2)},
    ]
    path = tmp_path / "chats.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(json.dumps(r) for r in records).encode() + b"\n")  # with a BOM
    opts = TranscriptOptions()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        turns = pa.concat_tables(list(iter_batches(path, TURNS, transcripts=opts)))
    # a blank reply is a turn (scored as an error row), not a malformed record
    assert turns.column("conversation_id").to_pylist() == ["good-1", "blank", "9", "good-2"]
    assert turns.column("label").to_pylist()[-1] == "1" and turns.column("weight").to_pylist()[-1] == 2.0
    reasons = dict(opts.skipped)
    assert len(opts.skipped) == 7 and "skipped 7 malformed transcript record(s)" in str(caught[-1].message)
    assert "tool_calls must be a list" in reasons["record 2"]
    assert all("no assistant message with text" in reasons[f"record {i}"] for i in (3, 4))
    assert "label must be text" in reasons["record 6"] and "weight must be a finite number" in reasons["record 7"]
    assert "'good-1' was already used by record 1" in reasons["record 8"]
    assert "'9' was already used by record 9" in reasons["record 10"] and "record number" in reasons["record 10"]
    with pytest.raises(DataError, match=r"chats.jsonl: row 2, line 2: malformed openai transcript: .*tool_calls"):
        list(iter_batches(path, TURNS, transcripts=TranscriptOptions(bad_rows="fail")))


def test_an_overlong_jsonl_line_is_one_error_before_it_is_held_in_memory(tmp_path, monkeypatch):
    import adherence.data._formats as formats

    monkeypatch.setattr(formats, "MAX_LINE_BYTES", 4096)  # the real cap is 256 MiB
    path = tmp_path / "dump.jsonl"
    path.write_text(
        '{"messages": [{"role": "assistant", "content": "ok"}]}\n'
        + '{"messages": [{"role": "assistant", "content": "'
        + "x" * 10_000
        + '"}]}\n'
    )
    with pytest.raises(DataError, match=r"dump.jsonl: row 2, line 2: a line longer than 0 MiB"):
        list(iter_batches(path, TURNS))


def test_an_empty_reply_mid_transcript_is_a_row_with_an_error_not_a_vanished_turn(tmp_path):
    """The issue's repro: an empty or null assistant reply in the middle of a transcript left no row, no status and
    no record. It is a turn now, scored as an error; an assistant message with only tool calls stays history."""
    rec = {"conversation_id": "e1", "messages": [
        {"role": "system", "content": "You help with bank cards."},
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": "lost it"}, {"role": "assistant", "content": ""},
        {"role": "user", "content": "hello?"}, {"role": "assistant", "content": None},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "block", "arguments": "{}"}}]},
        {"role": "user", "content": "?"}, {"role": "assistant", "content": "Blocked."},
    ]}  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    t = read_turns(path)
    assert t.column("assistant").to_pylist() == ["Hello, how can I help?", "", "", "Blocked."]
    assert t.column("turn_index").to_pylist() == [0, 1, 2, 3]
    assert "[tool call] block" in t.column("user").to_pylist()[3]
    from adherence.role import RoleConfig
    from adherence.role._base import get_method

    errors = get_method("scope").row_errors(t, RoleConfig(method="scope"))
    assert errors == [None, "empty assistant turn", "empty assistant turn", None]

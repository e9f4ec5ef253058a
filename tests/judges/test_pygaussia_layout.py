"""`--judge-layout pygaussia` sends what pygaussia's role-adherence judge sends, message for message and
token for token (the messages recorded from pygaussia itself: tests/fixtures/pygaussia_role_messages.json)."""

import json

import pytest

from adherence.judges import JudgeConfig, turn_requests
from adherence.judges._planner import PromptPlanner


@pytest.fixture(scope="module")
def recorded():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "fixtures" / "pygaussia_role_messages.json"
    return json.loads(path.read_text(encoding="utf-8"))


def _ours(rec, max_history=None):
    users = [t["user"] for t in rec["turns"]]
    assistants = [t["assistant"] for t in rec["turns"]]
    return turn_requests(
        rec["conversation_id"], rec["role"], users, assistants, layout="pygaussia", max_history=max_history
    )[rec["turn_index"]]


def test_messages_equal_pygaussias_on_every_record(recorded):
    records = recorded["records"]
    assert (
        len(records) >= 10 and any(r["turn_index"] == 0 for r in records) and any(r["turn_index"] >= 2 for r in records)
    )
    assert any(t["user"] == "" for r in records for t in r["turns"])  # an empty user message is covered
    for rec in records:
        assert _ours(rec).messages() == rec["messages"], (rec["conversation_id"], rec["turn_index"])


@pytest.mark.slow
def test_tokens_equal_pygaussias_through_the_bundled_judges_template(recorded):
    judge = PromptPlanner.from_model()
    tok = judge.tokenizer
    for rec in recorded["records"]:
        ref = tok.apply_chat_template(rec["messages"], tokenize=True, add_generation_prompt=True)
        ref = ref["input_ids"] if hasattr(ref, "keys") else ref
        assert judge.plan(_ours(rec)).ids == list(ref)


def test_the_default_layout_is_not_pygaussias(recorded):
    """The default stays this project's documented prompt (a check that the test above can fail)."""
    rec = recorded["records"][1]
    users = [t["user"] for t in rec["turns"]]
    default = turn_requests("c", rec["role"], users, [t["assistant"] for t in rec["turns"]])[rec["turn_index"]]
    assert default.messages() != rec["messages"]


def test_pygaussia_layout_refuses_what_would_change_its_prompt():
    with pytest.raises(ValueError, match="template"):
        JudgeConfig(layout="pygaussia", template="{assistant}")
    with pytest.raises(ValueError, match="system"):
        JudgeConfig(layout="pygaussia", system="Be strict.")
    with pytest.raises(ValueError, match="granularity"):
        JudgeConfig(layout="pygaussia", granularity="conversation", output_mode="binary")

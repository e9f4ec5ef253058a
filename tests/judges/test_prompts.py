from adherence.judges import JudgeRequest, conversation_request, turn_requests
from adherence.judges._prompts import NO_HISTORY


def test_turn_prompts_nest_and_carry_history():
    reqs = turn_requests("c", "You are a bank bot.", ["hi", None, "fees?"], ["hello", "anything else?", "2 EUR"])
    assert [r.index for r in reqs] == [0, 1, 2]
    assert NO_HISTORY in reqs[0].content and NO_HISTORY not in reqs[1].content
    for a, b in zip(reqs, reqs[1:]):
        assert b.pieces[: len(a.pieces) - 1] == a.pieces[:-1]  # shared prefix grows turn by turn
    assert "User: fees?\nAssistant: 2 EUR" in reqs[2].pieces[-1]
    assert "User: hi\nAssistant: hello" in reqs[2].content and "You are a bank bot." in reqs[2].pieces[0]
    assert "YES or NO" in reqs[2].content


def test_custom_template_and_history_cap():
    reqs = turn_requests("c", "R", ["a", "b", "c"], ["x", "y", "z"], template="{role}|{history}|{user}|{assistant}")
    assert reqs[0].content == f"R|{NO_HISTORY}|a|x" and reqs[2].content.startswith("R|User: a")
    capped = turn_requests("c", "R", ["a", "b", "c"], ["x", "y", "z"], max_history=1)
    assert "User: a" not in capped[2].content and "User: b" in capped[2].content


def test_cache_key_depends_on_everything_that_changes_the_answer():
    r = JudgeRequest(("a", "b"), group="g")
    k = r.cache_key("m", {"top_k": 20}, 0)
    assert k == JudgeRequest(("a", "b"), group="other").cache_key("m", {"top_k": 20}, 0)  # same prompt, same call
    variants = {
        k,
        r.cache_key("m2", {"top_k": 20}, 0),
        r.cache_key("m", {"top_k": 5}, 0),
        r.cache_key("m", {"top_k": 20}, 1),
        JudgeRequest(("a", "c")).cache_key("m", {"top_k": 20}, 0),
    }
    assert len(variants) == 5


def test_conversation_request_numbers_turns():
    req = conversation_request("c", "R", ["q1", "q2"], ["a1", "a2"])
    assert "Assistant (turn 2): a2" in req.content and req.meta["n_turns"] == 2

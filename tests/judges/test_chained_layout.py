"""`--judge-layout chained`: role and criteria in the shared head, the judged exchange the last piece of the
shared history, a tail that only names it. Same information as the default layout, several times fewer
forward tokens with prefix sharing, and prefix sharing still exact."""

import itertools

import numpy as np
import pytest

from adherence.data import example_path, read_turns
from adherence.judges import JudgeConfig, turn_requests
from adherence.judges._prompts import CHAINED_QUESTION


def _conversations(n=None):
    rows = read_turns(example_path("role")).to_pylist()
    out = []
    for cid, grp in itertools.groupby(rows, key=lambda r: r["conversation_id"]):
        grp = list(grp)
        out.append((cid, grp[0]["role"], [g["user"] for g in grp], [g["assistant"] for g in grp]))
    return out[:n]


def _requests(layout, n=None):
    reqs = []
    for cid, role, users, assistants in _conversations(n):
        reqs += turn_requests(cid, role, users, assistants, layout=layout)
    return reqs


def test_each_turn_sees_its_exchange_and_earlier_ones_only():
    users = ["u one", "u two", "u three"]
    assistants = ["a one", "a two", "a three"]
    reqs = turn_requests("c", "Be a bank bot.", users, assistants, layout="chained")
    for i, r in enumerate(reqs):
        text = r.content
        assert "Be a bank bot." in text and "stays within the role's scope" in text
        for j in range(3):
            assert (f"Exchange {j + 1}:\nUser: {users[j]}\nAssistant: {assistants[j]}\n" in text) == (j <= i)
        assert r.pieces[-1] == CHAINED_QUESTION.format(n=i + 1)
        assert text.index("Criteria") < text.index("Exchange 1")  # criteria before the conversation
    # every turn's prompt is the next turn's up to its question: one shared trunk per conversation
    for a, b in zip(reqs, reqs[1:]):
        assert b.pieces[: len(a.pieces) - 1] == a.pieces[:-1]


def test_chained_layout_shares_several_times_more_than_the_default():
    """On the issue's workload (10 turns, ~200-token role, ~100-token exchanges) the chained layout runs over
    5x fewer forward tokens than separate passes, and about twice fewer than the default layout shared."""
    from adherence.bench.judge import _tokenizer, synthetic_conversations
    from adherence.judges._planner import PromptPlanner

    planner = PromptPlanner(_tokenizer(), max_context=8192)
    convs = synthetic_conversations(4, 10, 67, seed=0, role_words=200)
    counts = {}
    for layout in ("user", "chained"):
        reqs = [r for c in convs for r in turn_requests(*c, layout=layout)]
        planner.prefix_sharing = True
        shared = planner.count_tokens(reqs)["forward_tokens"]
        planner.prefix_sharing = False
        separate = planner.count_tokens(reqs)["forward_tokens"]
        counts[layout] = (shared, separate)
    user_ratio = counts["user"][1] / counts["user"][0]
    chained_ratio = counts["chained"][1] / counts["chained"][0]
    assert 2.5 < user_ratio < 3.2
    assert chained_ratio > 5.0
    assert counts["user"][0] / counts["chained"][0] > 1.8


@pytest.mark.slow
def test_packed_equals_separate_in_the_chained_layout(tiny_judge):
    reqs = _requests("chained")
    tiny_judge.prefix_sharing = True
    try:
        before = tiny_judge.stats["forward_tokens"]
        packed = tiny_judge.first_token_logprobs(reqs, variants=({"yes"}, {"no"}))
        packed_tokens = tiny_judge.stats["forward_tokens"] - before
        tiny_judge.prefix_sharing = False
        before = tiny_judge.stats["forward_tokens"]
        separate = tiny_judge.first_token_logprobs(reqs, variants=({"yes"}, {"no"}))
        separate_tokens = tiny_judge.stats["forward_tokens"] - before
    finally:
        tiny_judge.prefix_sharing = True
    a = np.array([o.yes_no for o in packed])
    b = np.array([o.yes_no for o in separate])
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert separate_tokens > 2 * packed_tokens


def test_truncation_keeps_the_judged_exchange(tiny_judge):
    reqs = _requests("chained", 1)
    full = [len(tiny_judge.planner.plan(r).ids) for r in reqs]
    limit = tiny_judge.max_context
    try:
        tiny_judge.max_context = full[0] + 1
        for i, r in enumerate(reqs):
            plan = tiny_judge.planner.plan(r)
            assert plan.error is None and plan.truncated == (i > 0)
            judged = tiny_judge.planner.ids(r.pieces[-2])
            assert plan.history[-1] == judged  # the exchange under judgment stayed
        tiny_judge.max_context = full[0] - 2  # not even the head, the judged exchange and the question fit
        assert "exceeds the judge's context" in tiny_judge.planner.plan(reqs[0]).error
    finally:
        tiny_judge.max_context = limit


def test_reason_prompt_names_the_exchange():
    from adherence.judges._prompts import reason_request

    req = turn_requests("c", "Role", ["hi", "more"], ["hello", "sure"], layout="chained")[1]
    reason = reason_request(req)
    assert reason.pieces[:-1] == req.pieces[:-1]
    assert "exchange 2" in reason.pieces[-1] and "YES or NO" not in reason.pieces[-1]


def test_chained_layout_refuses_a_template_and_conversation_granularity():
    with pytest.raises(ValueError, match="template"):
        JudgeConfig(layout="chained", template="{assistant}")
    with pytest.raises(ValueError, match="granularity"):
        JudgeConfig(layout="chained", granularity="conversation", output_mode="binary")
    with pytest.raises(ValueError, match="template"):
        turn_requests("c", "r", ["u"], ["a"], layout="chained", template="{assistant}")

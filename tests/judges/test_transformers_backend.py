import itertools

import numpy as np
import pytest

from adherence.data import example_path, read_turns
from adherence.judges import p_yes_from_logprobs, turn_requests


def _requests(n_conversations=None):
    rows = read_turns(example_path("role")).to_pylist()
    reqs = []
    for k, (cid, grp) in enumerate(itertools.groupby(rows, key=lambda r: r["conversation_id"])):
        if n_conversations is not None and k >= n_conversations:
            break
        grp = list(grp)
        reqs += turn_requests(cid, grp[0]["role"], [g["user"] for g in grp], [g["assistant"] for g in grp])
    return reqs


def _p_yes(outputs):
    return np.array([p_yes_from_logprobs(o.top_logprobs)[0] for o in outputs])


def _top(outputs):
    return [dict(o.top_logprobs) for o in outputs]


@pytest.mark.parametrize("judge_name", ["tiny_judge", "smollm_judge"])
def test_packed_equals_separate_forward_passes(request, judge_name):
    judge = request.getfixturevalue(judge_name)
    reqs = _requests()
    judge.prefix_sharing = True
    before = judge.stats["forward_tokens"]
    packed = judge.first_token_logprobs(reqs)
    packed_tokens = judge.stats["forward_tokens"] - before
    judge.prefix_sharing = False
    before = judge.stats["forward_tokens"]
    separate = judge.first_token_logprobs(reqs)
    separate_tokens = judge.stats["forward_tokens"] - before
    judge.prefix_sharing = True
    np.testing.assert_allclose(_p_yes(packed), _p_yes(separate), atol=1e-4)
    # the top tokens agree and their log-probs match within tolerance (check_logprobs_close style)
    for a, b in zip(_top(packed), _top(separate)):
        shared = set(a) & set(b)
        assert len(shared) >= len(a) - 2
        for t in shared:
            assert a[t] == pytest.approx(b[t], abs=1e-3)
    assert packed_tokens < separate_tokens  # the shared prefix is computed once


def test_scores_do_not_depend_on_batch_composition(tiny_judge):
    reqs = _requests()
    everything = _p_yes(tiny_judge.first_token_logprobs(reqs))
    first_conv = [r for r in reqs if r.group == reqs[0].group]
    alone = _p_yes(tiny_judge.first_token_logprobs(first_conv))
    np.testing.assert_allclose(alone, everything[: len(first_conv)], atol=1e-5)
    shuffled = list(reversed(reqs))
    np.testing.assert_allclose(_p_yes(tiny_judge.first_token_logprobs(shuffled))[::-1], everything, atol=1e-5)


def test_small_packs_and_batches_give_the_same_scores(tiny_judge):
    reqs = _requests(3)
    base = _p_yes(tiny_judge.first_token_logprobs(reqs))
    pack, batch = tiny_judge.pack_tokens, tiny_judge.batch_tokens
    try:
        tiny_judge.pack_tokens, tiny_judge.batch_tokens = 200, 400  # forces several packs per conversation
        np.testing.assert_allclose(_p_yes(tiny_judge.first_token_logprobs(reqs)), base, atol=1e-5)
    finally:
        tiny_judge.pack_tokens, tiny_judge.batch_tokens = pack, batch


def test_history_is_left_truncated_then_errors(tiny_judge):
    reqs = [r for r in _requests() if r.group == "bank-001"]
    full = [len(tiny_judge._plan(r).ids) for r in reqs]
    limit = tiny_judge.max_context
    try:
        tiny_judge.max_context = full[0] + 1  # the first turn fits, later turns must drop history
        out = tiny_judge.first_token_logprobs(reqs)
        assert [o.truncated for o in out] == [False] + [True] * (len(reqs) - 1)
        assert all(o.error is None for o in out)
        plan = tiny_judge._plan(reqs[-1])
        assert len(plan.ids) <= tiny_judge.max_context and plan.tail == tiny_judge._plan(reqs[-1]).tail
        tiny_judge.max_context = 20
        out = tiny_judge.first_token_logprobs(reqs[:1])
        assert out[0].error and "exceeds the judge's context" in out[0].error
    finally:
        tiny_judge.max_context = limit


def test_generate_returns_text_per_request(tiny_judge):
    reqs = _requests(1)
    out = tiny_judge.generate(reqs, max_tokens=3)
    assert len(out) == len(reqs) and all(isinstance(o.text, str) for o in out)
    again = tiny_judge.generate(list(reversed(reqs)), max_tokens=3)
    assert [o.text for o in again][::-1] == [o.text for o in out]  # greedy and order-independent

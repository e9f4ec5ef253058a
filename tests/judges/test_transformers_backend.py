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


# The real judge's checks run on the bundled example's first 2 conversations (7 turns, each layout's sharing
# within and across turns); the random-weight judge runs on all 8.
REAL_CONVERSATIONS = 2


def _p_yes(outputs):
    return np.array([p_yes_from_logprobs(o.top_logprobs)[0] for o in outputs])


def _top(outputs):
    return [dict(o.top_logprobs) for o in outputs]


@pytest.mark.slow
@pytest.mark.parametrize("judge_name", ["tiny_judge", "smollm_judge"])
def test_packed_equals_separate_forward_passes(request, judge_name):
    judge = request.getfixturevalue(judge_name)
    reqs = _requests(None if judge_name == "tiny_judge" else REAL_CONVERSATIONS)
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
    full = [len(tiny_judge.planner.plan(r).ids) for r in reqs]
    limit = tiny_judge.max_context
    try:
        tiny_judge.max_context = full[0] + 1  # the first turn fits, later turns must drop history
        out = tiny_judge.first_token_logprobs(reqs)
        assert [o.truncated for o in out] == [False] + [True] * (len(reqs) - 1)
        assert all(o.error is None for o in out)
        plan = tiny_judge.planner.plan(reqs[-1])
        assert len(plan.ids) <= tiny_judge.max_context and plan.tail == tiny_judge.planner.plan(reqs[-1]).tail
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


def _independent_p_yes(judge, requests):
    """P(yes) from a plain forward pass of each chat-templated prompt over the full softmax (no packing, no
    top-k), with the yes/no token ids found from the tokenizer's own token strings."""
    import torch

    tok, model = judge.tokenizer, judge.model
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    text = [tok.convert_tokens_to_string([t]) for t in vocab]
    yes = [i for i, t in enumerate(text) if t.strip().lower() == "yes"]
    no = [i for i, t in enumerate(text) if t.strip().lower() == "no"]
    assert yes and no
    out = []
    with torch.inference_mode():
        for r in requests:
            ids = tok.apply_chat_template(r.messages(), add_generation_prompt=True, return_dict=True)["input_ids"]
            probs = torch.softmax(model(torch.tensor([ids])).logits[0, -1].double(), dim=-1)
            py, pn = float(probs[yes].sum()), float(probs[no].sum())
            out.append((py / (py + pn), py + pn))
    return np.array(out)


@pytest.mark.slow
def test_exact_p_yes_matches_an_independent_full_softmax(smollm_judge):
    from adherence.judges._parse import p_yes_from_sums, variant_sets

    reqs = _requests(REAL_CONVERSATIONS)  # packed per conversation
    outs = smollm_judge.first_token_logprobs(reqs, variants=variant_sets())
    exact = np.array([p_yes_from_sums(*o.yes_no) for o in outs])
    ref = _independent_p_yes(smollm_judge, reqs)
    np.testing.assert_allclose(exact[:, 0], ref[:, 0], atol=1e-5)
    np.testing.assert_allclose(exact[:, 1], ref[:, 1], atol=1e-5)
    top20 = _p_yes(outs)
    gap = np.abs(top20 - ref[:, 0]).max()
    assert 0 < gap < 0.05  # the top-20 estimate is close but not exact


def test_yes_and_no_variant_sets(tiny_judge):
    from adherence.judges._parse import variant_sets

    yes_ids, no_ids = tiny_judge.variant_ids(variant_sets())
    words = tiny_judge.tokenizer.convert_ids_to_tokens(yes_ids.tolist() + no_ids.tolist())
    assert {w.lower() for w in words} == {"yes", "no"}
    more_yes, _ = tiny_judge.variant_ids(variant_sets(["yes", "true", "correct"], ["no"]))
    assert len(more_yes) == 3
    reqs = _requests(1)
    base = tiny_judge.first_token_logprobs(reqs, variants=variant_sets())
    wider = tiny_judge.first_token_logprobs(reqs, variants=variant_sets(["yes", "true", "correct"], ["no"]))
    assert all(w.yes_no[0] > b.yes_no[0] and w.yes_no[1] == pytest.approx(b.yes_no[1]) for w, b in zip(wider, base))
    with pytest.raises(ValueError, match="both a yes and a no"):
        variant_sets(["yes", "No "], ["no"])


@pytest.mark.parametrize("path", ["flex", "tree", "dense", "plain"])
@pytest.mark.slow
def test_scoring_passes_build_no_key_value_cache(tiny_judge, path):
    """A scoring pass is never continued: a cache would only copy every layer's keys and values."""
    from adherence.judges import _tree_attention

    if path == "flex" and not _tree_attention.flex_available():
        pytest.skip("this torch has no FlexAttention")
    caches = []
    hook = tiny_judge.model.base_model.register_forward_hook(lambda m, i, out: caches.append(out.past_key_values))
    saved = tiny_judge.attention, tiny_judge.prefix_sharing
    try:
        tiny_judge.use_attention({"flex": "flex", "tree": "tree-sdpa"}.get(path, "dense-mask"))
        tiny_judge.prefix_sharing = path != "plain"
        tiny_judge.first_token_logprobs(_requests(None))
    finally:
        hook.remove()
        tiny_judge.attention, tiny_judge.prefix_sharing = saved
    assert caches and all(c is None for c in caches)


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_forward_passes_gpu_time_comes_from_events():
    from adherence.bench.judge import random_backend

    judge = random_backend("llama-tiny", device="cuda", dtype="bfloat16")
    judge.first_token_logprobs(_requests(None))
    s = judge.stats
    assert s["batches"] >= 1 and 0 < s["gpu_forward_s"] and not judge._events  # read once, after the sync
    assert all(s[f"{p}_s"] > 0 for p in ("tokenise", "plan", "layout", "forward", "read"))


def test_host_time_is_counted_by_phase_in_the_judges_stats(tiny_judge):
    from adherence.judges import JudgeConfig
    from adherence.judges._judge import RoleJudge

    judge = RoleJudge(JudgeConfig(), backend=tiny_judge)
    before = dict(judge.stats)
    tiny_judge.first_token_logprobs(_requests(None))
    after = judge.stats
    for phase in ("tokenise", "plan", "layout", "forward", "read"):
        assert after[f"{phase}_s"] > before.get(f"{phase}_s", 0.0), phase
    assert after["gpu_forward_s"] == before.get("gpu_forward_s", 0.0) == 0.0  # no CUDA events on CPU


def test_requests_prepared_in_chunks_of_whole_conversations_give_the_same_answers(tiny_judge, monkeypatch):
    """On a GPU a call is tokenised and planned chunk by chunk, each chunk's passes queued before the next
    chunk is prepared: the first pass starts after one chunk's preparation, not the whole call's."""
    reqs = _requests(None)
    reqs = [reqs[i] for i in np.random.default_rng(0).permutation(len(reqs))]  # conversations interleaved
    whole = tiny_judge.first_token_logprobs(reqs)
    events = []
    real = tiny_judge.planner.tokenize_all
    monkeypatch.setattr(tiny_judge.planner, "tokenize_all", lambda rs: events.append(("tokenise", rs)) or real(rs))
    hook = tiny_judge.model.base_model.register_forward_hook(lambda *a: events.append(("forward", None)))
    try:
        tiny_judge.chunk_requests = 5
        chunked = tiny_judge.first_token_logprobs(reqs)
    finally:
        tiny_judge.chunk_requests = None
        hook.remove()
    chunks = [rs for kind, rs in events if kind == "tokenise"]
    assert len(chunks) > 2 and sorted(len(c) for c in chunks)[0] >= 1
    assert sum(len(c) for c in chunks) == len(reqs)
    seen = [{r.group for r in c} for c in chunks]
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])  # a conversation in one chunk
    assert [kind for kind, _ in events].index("forward") < [kind for kind, _ in events].index("tokenise", 1)
    np.testing.assert_allclose(_p_yes(chunked), _p_yes(whole), atol=1e-6)
    assert [o.truncated for o in chunked] == [o.truncated for o in whole]


def test_a_judge_loaded_without_progress_shows_no_bar_of_transformers(tiny_llama_dir, capfd):
    from transformers.utils import logging as hf_logging

    from adherence.judges._transformers import TransformersBackend

    hf_logging.enable_progress_bar()  # as a fresh process has it
    capfd.readouterr()
    TransformersBackend(str(tiny_llama_dir), device="cpu", progress=False)
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # given back as it was
    TransformersBackend(str(tiny_llama_dir), device="cpu", progress=True)
    assert "Loading weights" in capfd.readouterr().err  # the bar this test would catch

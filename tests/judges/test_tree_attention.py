"""Tree attention (packed conversations without an L x L mask) against the dense-mask reference."""

import numpy as np
import pytest
import torch

from adherence.judges import _tree_attention
from adherence.judges._transformers import TransformersBackend

from .test_transformers_backend import REAL_CONVERSATIONS, _p_yes, _requests


def _dense_reference(q, k, v, rows, scale):
    """Attention of every non-padding position from the tree's definition, one full boolean mask per row."""
    B, H, L, D = q.shape
    rep = H // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    allowed = torch.zeros((B, 1, L, L), dtype=torch.bool)
    for b, (trunk, tails) in enumerate(rows):
        for i in range(trunk):
            allowed[b, 0, i, : i + 1] = True
        for start, n, prefix in tails:
            for j in range(n):
                allowed[b, 0, start + j, :prefix] = True
                allowed[b, 0, start + j, start : start + j + 1] = True
    used = allowed.any(-1)
    allowed |= ~used[..., None] & torch.eye(L, dtype=torch.bool)  # padding rows: themselves only
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    return out.transpose(1, 2), used[:, 0]


def test_tree_attention_matches_the_definition_with_gqa_padding_and_several_rows():
    g = torch.Generator().manual_seed(0)
    rows = [
        (7, [(7, 3, 4), (10, 5, 7), (15, 1, 0)]),  # prefixes shorter than the trunk, and an empty one
        (4, [(4, 6, 4)]),
        (0, [(0, 2, 0), (2, 3, 0)]),
    ]  # no trunk at all
    L = 20
    q = torch.randn(3, 4, L, 8, generator=g)
    k, v = torch.randn(3, 2, L, 8, generator=g), torch.randn(3, 2, L, 8, generator=g)  # 2 query heads per kv head
    with _tree_attention.layout(rows) as lay:
        got, weights = _tree_attention._attention(None, q, k, v, None, scaling=0.3)
    assert weights is None and lay.calls == 1
    ref, used = _dense_reference(q, k, v, rows, 0.3)
    assert got.shape == (3, L, 4, 8)
    diff = (got - ref).abs().amax(dim=(-1, -2))[used]
    assert float(diff.max()) < 1e-5
    assert float(got.abs().amax(dim=(-1, -2))[~used].max()) == 0.0  # padding is never computed


def test_outside_a_layout_it_is_plain_sdpa():
    class _Module(torch.nn.Module):
        num_key_value_groups = 2
        is_causal = True

    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(2, 4, 9, 8, generator=g),
        torch.randn(2, 2, 9, 8, generator=g),
        torch.randn(2, 2, 9, 8, generator=g),
    )
    got, _ = _tree_attention._attention(_Module(), q, k, v, None, scaling=None)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True
    ).transpose(1, 2)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_attention_features_it_cannot_honour_are_refused():
    q = torch.zeros(1, 2, 4, 8)
    with _tree_attention.layout([(4, [])]):
        with pytest.raises(_tree_attention.Unsupported, match="sliding_window"):
            _tree_attention._attention(None, q, q, q, None, sliding_window=2)


@pytest.mark.slow
@pytest.mark.parametrize("judge_name", ["tiny_judge", "smollm_judge"])
def test_backend_tree_path_equals_dense_mask_and_separate_passes(request, judge_name):
    judge = request.getfixturevalue(judge_name)
    assert judge.tree_attention and judge.model.config._attn_implementation == _tree_attention.NAME
    reqs = _requests(None if judge_name == "tiny_judge" else REAL_CONVERSATIONS)
    tree = _p_yes(judge.first_token_logprobs(reqs))
    assert judge.tree_attention  # the model went through the interface: no fallback happened
    chosen = judge.attention
    try:
        judge.use_attention("dense-mask")
        dense = _p_yes(judge.first_token_logprobs(reqs))
        if judge_name == "tiny_judge":  # the real judge's tree path against separate passes: test_transformers_backend
            judge.prefix_sharing = False
            separate = _p_yes(judge.first_token_logprobs(reqs))
            np.testing.assert_allclose(tree, separate, atol=1e-4)
    finally:
        judge.attention, judge.prefix_sharing = chosen, True
    np.testing.assert_allclose(tree, dense, atol=1e-5)


def _tiny(tiny_llama_dir, config_cls, attn, tree_attention=True, **extra):
    from transformers import AutoTokenizer, LlamaConfig

    base = LlamaConfig.from_pretrained(tiny_llama_dir).to_dict()
    keep = {
        k: base[k]
        for k in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
            "pad_token_id",
            "eos_token_id",
            "bos_token_id",
        )
    }
    cfg = config_cls(**keep, **extra)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return TransformersBackend(
        loaded=(model, AutoTokenizer.from_pretrained(tiny_llama_dir), "tiny"),
        device="cpu",
        progress=False,
        tree_attention=tree_attention,
    )


def test_a_sliding_window_model_takes_the_dense_mask_and_says_so(tiny_llama_dir):
    from transformers import MistralConfig

    judge = _tiny(tiny_llama_dir, MistralConfig, "sdpa", sliding_window=16)  # shorter than every conversation
    assert not judge.tree_attention  # never switched: its configuration names the window
    assert judge.describe()["tree_attention"] is False and judge.describe()["attention"] == "dense-mask"
    reqs = _requests(3)
    packed = _p_yes(judge.first_token_logprobs(reqs))
    judge.prefix_sharing = False
    separate = _p_yes(judge.first_token_logprobs(reqs))
    np.testing.assert_allclose(packed, separate, atol=1e-4)


@pytest.mark.parametrize(
    "extra,why",
    [
        ({"sliding_window": 4096, "use_sliding_window": False}, None),  # Qwen2-style: a window configured but off
        ({"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 512}, "sliding-window"),
        ({"attn_logit_softcapping": 50.0}, "softcap"),
    ],
)
def test_config_checks_name_what_the_tree_cannot_do(extra, why):
    from types import SimpleNamespace

    got = _tree_attention.config_unsupported(SimpleNamespace(**extra))
    assert (got is None) if why is None else (why in got)
    nested = _tree_attention.config_unsupported(SimpleNamespace(text_config=SimpleNamespace(**extra)))
    assert nested == got  # Gemma 3's multimodal config keeps its text model's under text_config


def test_a_window_the_configuration_hides_is_refused_when_the_judge_loads(tiny_llama_dir, monkeypatch):
    """The attention path is chosen once, at load (a probe pack through tree attention), not on a job's first
    packed pass: every request of the job then takes the same path."""
    from transformers import MistralConfig

    monkeypatch.setattr(_tree_attention, "config_unsupported", lambda config: None)
    judge = _tiny(tiny_llama_dir, MistralConfig, "sdpa", sliding_window=16)
    monkeypatch.undo()
    assert not judge.tree_attention and judge.describe()["attention"] == "dense-mask"
    assert judge.stats["forward_tokens"] == 0  # the probe is not counted as the job's work
    reqs = _requests(3)
    packed = _p_yes(judge.first_token_logprobs(reqs))
    judge.prefix_sharing = False
    separate = _p_yes(judge.first_token_logprobs(reqs))
    np.testing.assert_allclose(packed, separate, atol=1e-4)


def test_an_eager_model_keeps_its_attention(tiny_llama_dir):
    from transformers import LlamaConfig

    judge = _tiny(tiny_llama_dir, LlamaConfig, "eager")
    assert not judge.tree_attention and judge.model.config._attn_implementation == "eager"
    reqs = _requests(2)
    packed = _p_yes(judge.first_token_logprobs(reqs))
    judge.prefix_sharing = False
    np.testing.assert_allclose(packed, _p_yes(judge.first_token_logprobs(reqs)), atol=1e-4)


def _flat_layout(rows, L):
    """The per-row layouts laid end to end in one row of len(rows) * L tokens, as the CUDA path packs them."""
    T = len(rows) * L
    doc = torch.full((T,), -1, dtype=torch.long)
    tid = torch.full((T,), -1, dtype=torch.long)
    lim = torch.zeros(T, dtype=torch.long)
    for d, (trunk, tails) in enumerate(rows):
        off = d * L
        end = max([trunk] + [s + n for s, n, _ in tails])
        doc[off : off + end] = d
        lim[off : off + trunk] = off
        for b, (start, n, prefix) in enumerate(tails):
            tid[off + start : off + start + n] = b
            lim[off + start : off + start + n] = off + prefix
    return _tree_attention.FlexLayout(doc, tid, lim, block=16)


def test_flex_layout_mask_and_attention_equal_the_tree_definition():
    if not _tree_attention.flex_available():
        pytest.skip("this torch has no FlexAttention")
    g = torch.Generator().manual_seed(2)
    rows = [(7, [(7, 3, 4), (10, 5, 7), (15, 1, 0)]), (4, [(4, 6, 4)]), (0, [(0, 2, 0), (2, 3, 0)])]
    L = 32
    lay = _flat_layout(rows, L)
    # the mask of the flat row is the block-diagonal of the per-row definitions
    ref_allowed = torch.zeros((lay.T, lay.T), dtype=torch.bool)
    q = torch.randn(1, 4, lay.T, 8, generator=g)
    k, v = torch.randn(1, 2, lay.T, 8, generator=g), torch.randn(1, 2, lay.T, 8, generator=g)
    per_row_q = torch.stack([q[0, :, d * L : (d + 1) * L] for d in range(3)])
    per_row_k = torch.stack([k[0, :, d * L : (d + 1) * L] for d in range(3)])
    per_row_v = torch.stack([v[0, :, d * L : (d + 1) * L] for d in range(3)])
    ref, used = _dense_reference(per_row_q, per_row_k, per_row_v, rows, 0.3)
    for d, (trunk, tails) in enumerate(rows):
        for i in range(trunk):
            ref_allowed[d * L + i, d * L : d * L + i + 1] = True
        for start, n, prefix in tails:
            for j in range(n):
                ref_allowed[d * L + start + j, d * L : d * L + prefix] = True
                ref_allowed[d * L + start + j, d * L + start : d * L + start + j + 1] = True
    real = lay.doc >= 0
    assert torch.equal(lay.dense()[real][:, real], ref_allowed[real][:, real])
    # every block the block mask skips holds no allowed pair
    dense_blocks = lay.dense().view(lay.T // 16, 16, lay.T // 16, 16).any(dim=(1, 3))
    listed = torch.zeros_like(dense_blocks)
    for kind in ("kv", "full_kv"):
        num, idx = getattr(lay.block_mask, f"{kind}_num_blocks")[0, 0], getattr(lay.block_mask, f"{kind}_indices")[0, 0]
        for r in range(num.shape[0]):
            listed[r, idx[r, : int(num[r])].long()] = True
    assert torch.equal(listed, dense_blocks)
    with _tree_attention.layout(lay) as active:
        got, _ = _tree_attention._attention(None, q, k, v, None, scaling=0.3)
    assert active.calls == 1 and got.shape == (1, lay.T, 4, 8)
    for d in range(3):
        diff = (got[0, d * L : (d + 1) * L] - ref[d]).abs().amax(dim=(-1, -2))[used[d]]
        assert float(diff.max()) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("judge_name", ["tiny_judge", "smollm_judge"])
def test_backend_flex_path_equals_dense_mask_and_separate_passes(request, judge_name):
    if not _tree_attention.flex_available():
        pytest.skip("this torch has no FlexAttention")
    judge = request.getfixturevalue(judge_name)
    # FlexAttention run eagerly on CPU is slow: the real judge on the first conversation (4 turns, one tree)
    reqs = _requests(None if judge_name == "tiny_judge" else 1)
    batch_tokens, chosen = judge.batch_tokens, judge.attention
    try:
        judge.use_attention("flex")  # the CUDA path, run eagerly on CPU (which materialises T x T scores: short rows)
        judge.batch_tokens = 256
        before = judge.stats["forward_tokens"]
        flex = _p_yes(judge.first_token_logprobs(reqs))
        judge.batch_tokens = batch_tokens
        flex_tokens = judge.stats["forward_tokens"] - before
        judge.use_attention("tree-sdpa")
        before = judge.stats["forward_tokens"]
        tree = _p_yes(judge.first_token_logprobs(reqs))
        assert judge.stats["forward_tokens"] - before == flex_tokens  # the same tokens, only laid out differently
        judge.use_attention("dense-mask")
        dense = _p_yes(judge.first_token_logprobs(reqs))
    finally:
        judge.attention, judge.batch_tokens = chosen, batch_tokens
    np.testing.assert_allclose(flex, tree, atol=1e-5)
    np.testing.assert_allclose(flex, dense, atol=1e-5)


def test_backend_flex_refuses_a_sliding_window_when_the_judge_loads(tiny_llama_dir, monkeypatch):
    """Flex asked for, on a model whose window its configuration hides: the probe at load finds that neither flex
    nor tree attention runs it, so every call takes the dense mask (no path is switched off during a call)."""
    if not _tree_attention.flex_available():
        pytest.skip("this torch has no FlexAttention")
    from transformers import MistralConfig

    monkeypatch.setattr(_tree_attention, "config_unsupported", lambda config: None)
    judge = _tiny(tiny_llama_dir, MistralConfig, "sdpa", tree_attention="flex", sliding_window=16)
    monkeypatch.undo()
    assert judge.describe()["attention"] == "dense-mask" and not judge.flex and not judge.tree_attention
    reqs = _requests(3)
    packed = _p_yes(judge.first_token_logprobs(reqs))
    judge.prefix_sharing = False
    np.testing.assert_allclose(packed, _p_yes(judge.first_token_logprobs(reqs)), atol=1e-4)
    judge.use_attention("flex")  # forced past the probe: the pass refuses the window, it is not scored wrongly
    judge.prefix_sharing = True
    with pytest.raises(_tree_attention.Unsupported, match="sliding_window"):
        judge.first_token_logprobs(reqs)


def _flex_lengths(monkeypatch) -> list:
    """The padded length of every flex layout built from now on (the real FlexLayout, recorded)."""
    seen: list = []
    real = _tree_attention.FlexLayout.__init__

    def recording(self, doc, tid, lim, block=128):
        seen.append(int(doc.shape[0]))
        real(self, doc, tid, lim, block)

    monkeypatch.setattr(_tree_attention.FlexLayout, "__init__", recording)
    return seen


def test_warm_up_runs_every_padded_batch_length_once_and_leaves_no_work_counted(tiny_judge, monkeypatch):
    if not _tree_attention.flex_available():
        pytest.skip("this torch has no FlexAttention")
    seen = _flex_lengths(monkeypatch)
    reqs = _requests(None)
    before = _p_yes(tiny_judge.first_token_logprobs(reqs))
    batch_tokens, chosen = tiny_judge.batch_tokens, tiny_judge.attention
    try:
        assert tiny_judge.warm_up() == {"lengths": [], "s": 0.0}  # no flex path on CPU: nothing to compile
        tiny_judge.use_attention("flex")  # the CUDA path, eagerly: lengths of 128 on CPU
        tiny_judge.batch_tokens = 512
        seen.clear()
        counted = dict(tiny_judge.stats)
        got = tiny_judge.warm_up()
        assert got["lengths"] == seen == [128, 256, 384, 512] and got["s"] > 0
        assert tiny_judge.flex and tiny_judge.stats == counted  # the warm-up is not counted as work
    finally:
        tiny_judge.attention, tiny_judge.batch_tokens = chosen, batch_tokens
    np.testing.assert_allclose(_p_yes(tiny_judge.first_token_logprobs(reqs)), before, atol=1e-6)


def test_flex_buffers_are_sized_once_so_no_batch_changes_the_compiled_mask(tiny_llama_dir, monkeypatch):
    """Growing the layout buffers makes a new mask_mod closure, and on CUDA every padded length compiled
    with the old one compiles again (in the 2026-11-27 H100 profile, inside the timed engine run)."""
    if not _tree_attention.flex_available():
        pytest.skip("this torch has no FlexAttention")
    monkeypatch.setattr(_tree_attention, "_BUFFERS", {})
    judge = TransformersBackend(
        str(tiny_llama_dir), device="cpu", progress=False, tree_attention="flex", batch_tokens=512, pack_tokens=256
    )
    assert judge.flex
    doc, _, _, mask_mod = _tree_attention._BUFFERS["cpu"]
    assert doc.shape[0] == 512  # the longest padded batch, before any batch ran
    lengths = _flex_lengths(monkeypatch)
    judge.first_token_logprobs(_requests(None))
    assert max(lengths) > min(lengths) and judge.flex  # batches of several padded lengths ran on this path
    assert _tree_attention._BUFFERS["cpu"][3] is mask_mod  # the same closure throughout

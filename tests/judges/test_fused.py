"""Fused RMSNorm and gated-MLP forwards (``judges._fused``): the same outputs as transformers' own modules,
classes with another formula left eager, float8's fused quantisation equal to the unfused layer, and one
compiled kernel per dtype and width whatever the batch length."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from adherence.bench.judge import RANDOM_CONFIGS
from adherence.judges import _fused
from adherence.judges._float8 import Float8Linear, quantize_linears


def _tiny(**over):
    torch.manual_seed(0)
    cfg = dict(RANDOM_CONFIGS["llama-tiny"], vocab_size=100, **over)
    model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    for name, p in model.named_parameters():  # norms start at ones: give them weights a formula can miss
        if "norm" in name:
            p.data.uniform_(0.5, 1.5)
    return model


def _logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids).logits.double()


def test_fused_forwards_equal_the_modules_own():
    model = _tiny()
    ids = torch.randint(0, 100, (3, 11), generator=torch.Generator().manual_seed(1))
    want = _logits(model, ids)
    got = _fused.fuse(model, compiled=False)
    assert got == {"fused": {"rms_norm": 2 * 2 + 1, "silu_mul": 2}, "eager": {}}
    assert all("forward" in vars(m) for m in model.modules() if type(m).__name__ in ("LlamaRMSNorm", "LlamaMLP"))
    assert float((_logits(model, ids) - want).abs().max()) < 1e-5
    assert _fused.fuse(model, compiled=False)["fused"] == got["fused"]  # again (after a cast): the same modules


def test_off_cuda_nothing_is_fused_by_default():
    model = _tiny()
    assert _fused.fuse(model) == {"fused": {}, "eager": {}}
    assert not any("forward" in vars(m) for m in model.modules())


def test_a_norm_with_another_formula_stays_eager():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = GemmaRMSNorm(32, eps=1e-6)  # (1 + weight): looks like an RMSNorm, is not Llama's
            self.norm.weight.data.uniform_(-0.5, 0.5)

    held = Holder()
    x = torch.randn(5, 32)
    want = held.norm(x)
    got = _fused.fuse(held, compiled=False)
    assert got["fused"] == {} and "differs from the module's own forward" in got["eager"]["GemmaRMSNorm"]
    assert "forward" not in vars(held.norm) and torch.equal(held.norm(x), want)


def test_steps_under_the_size_floor_run_the_modules_own_forward(monkeypatch):
    calls = []
    real = _fused.rms_norm
    monkeypatch.setattr(_fused, "rms_norm", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    model = _tiny()
    # a norm step is fused from 40 tokens x 64 features; the model's batches reach 50 tokens
    got = _fused.fuse(model, compiled=False, tokens=50, min_elements={"rms_norm": 40 * 64, "silu_mul": 0})
    assert got["fused"] == {"rms_norm": 5, "silu_mul": 2}
    ids = torch.randint(0, 100, (1, 50), generator=torch.Generator().manual_seed(4))
    want = _logits(_tiny(), ids)
    calls.clear()
    assert torch.equal(_logits(model, ids[:, :39]), _logits(_tiny(), ids[:, :39])) and calls == []
    assert float((_logits(model, ids) - want).abs().max()) < 1e-5 and calls == [50] * 5
    # batches that can never reach a kind's floor: that kind is not fused at all (and costs no compile)
    small = _fused.fuse(_tiny(), compiled=False, tokens=30, min_elements={"rms_norm": 40 * 64, "silu_mul": 0})
    assert small["fused"] == {"silu_mul": 2}
    assert "30 tokens x 64 features stay under the 2,560 elements" in small["eager"]["LlamaRMSNorm"]


def test_the_default_floors_fuse_an_8b_batch_and_leave_a_135m_judge_eager():
    """GPU batches are up to 16384 tokens: an 8B's norms fuse from 4096 of them, its MLP from 8192; a 135M
    judge (host-bound) fuses neither."""
    big, small = RANDOM_CONFIGS["llama-3-8b"], RANDOM_CONFIGS["smollm2-135m"]
    floor = _fused.MIN_ELEMENTS
    assert 4096 * big["hidden_size"] >= floor["rms_norm"] and 8192 * big["intermediate_size"] >= floor["silu_mul"]
    assert 16384 * small["hidden_size"] < floor["rms_norm"] and 16384 * small["intermediate_size"] < floor["silu_mul"]


def test_one_row_runs_the_modules_own_forward():
    model = _tiny()
    _fused.fuse(model, compiled=False)
    norm = model.model.norm
    x = torch.randn(1, 1, 64)
    assert torch.equal(norm(x), type(norm).forward(norm, x))


def test_float8_down_projection_takes_the_fused_quantisation(monkeypatch):
    from adherence.judges import _float8

    calls = []

    def counting(x):
        calls.append(x.shape[-1])
        return _float8.quantize_rows(x)

    monkeypatch.setitem(_float8._QUANTIZERS, "cpu", counting)
    model = _tiny().to(torch.bfloat16)
    quantize_linears(model)
    mlp = model.model.layers[0].mlp
    assert isinstance(mlp.down_proj, Float8Linear)
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16)  # 32 rows: a multiple of 16, the fused path
    with torch.inference_mode():
        want = type(mlp).forward(mlp, x)
        assert calls == [64, 128]  # unfused: the input (once for gate and up), then the product
        _fused.fuse(model, compiled=False)
        calls.clear()
        got = mlp(x)
    assert calls == [64]  # the product's quantisation ran in the fused pass
    # the same bf16 product quantised the same way: equal but for a quotient at an e4m3 rounding boundary
    assert float((got.double() - want.double()).abs().max() / want.double().abs().max()) < 1e-2
    with torch.inference_mode():
        calls.clear()
        odd = mlp(x[:, :5])  # 10 rows: the layer quantises (and pads) its input itself
    assert calls == [64, 128] and odd.shape == (2, 5, 64)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8"])
def test_compiled_kernels_equal_eager_and_serve_every_length_with_one_compile(dtype):
    """Inductor on the CPU (a C compiler). In bf16 and float8 the compiled passes round where the eager
    ones do, so the model's output is the same to the bit; and the token count is dynamic, so new lengths
    compile nothing."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    _fused._KERNELS.clear()
    model = _tiny()
    if dtype != "float32":
        model = model.to(torch.bfloat16)
    if dtype == "float8":
        quantize_linears(model)
    ids = torch.randint(0, 100, (1, 48), generator=torch.Generator().manual_seed(2))
    want = _logits(model, ids)
    # no size floor: the tiny model's steps go through the compiled kernels
    assert _fused.fuse(model, compiled=True, min_elements={}) == {"fused": {"rms_norm": 5, "silu_mul": 2}, "eager": {}}
    frames = counters["stats"]["unique_graphs"]  # the probes' compiles (64 rows): each kernel once
    assert frames >= 2
    got = _logits(model, ids)
    if dtype == "float32":
        assert float((got - want).abs().max()) < 1e-5
    else:
        assert torch.equal(got, want)
    for n in (32, 80, 144):  # multiples of 16 (float8 fuses the quantisation only there: another kernel)
        _logits(model, ids.repeat(1, 3)[:, :n])
    assert counters["stats"]["unique_graphs"] == frames  # 48, 32, 80 and 144 tokens: nothing compiled again


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("float8", [False, True])
def test_compiled_on_cuda_equals_the_unfused_model(float8):
    model = _tiny(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2)
    model = model.to("cuda", torch.bfloat16)
    ids = torch.randint(0, 100, (1, 1024), generator=torch.Generator().manual_seed(3)).cuda()
    bf16 = _logits(model, ids)
    if float8:
        quantize_linears(model)
    want = _logits(model, ids)
    got = _fused.fuse(model, min_elements={})  # compiled (CUDA); no size floor, so this small model uses it
    assert got["fused"] == {"rms_norm": 5, "silu_mul": 2} and not got["eager"], got
    scale = want.abs().max()
    diff = float((_logits(model, ids) - want).abs().max() / scale)
    if not float8:
        assert diff < 1e-2  # bf16 rounding of the fused passes (CUDA's exp and Triton's may differ in a bit)
    else:  # an element at an e4m3 rounding boundary may round the other way: far less than float8's own error
        quantisation = float((want - bf16).abs().max() / scale)
        assert diff < 0.5 * quantisation, (diff, quantisation)

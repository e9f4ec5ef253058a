"""Fused element-wise steps for the in-process judge on CUDA.

An eager transformers forward spends a large share of a big batch outside its matrix products. Each RMSNorm
is six passes over the activations (to fp32, square, mean, scale, back to the model's dtype, times the
weight), and each gated MLP adds three (the activation, the product, and in float8 the product's
quantisation for the down projection). On an 8B model at 16k tokens per batch they cost a good share of
the products' time, more so in float8, whose products take half the time.

``fuse(model)`` gives those modules a forward that runs each step as one compiled kernel: ``torch.compile``
of a small function, with the token count marked dynamic, so one kernel serves every batch length.

* RMSNorm: ``weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype)``, the formula of Llama, Mistral and
  Qwen2/3, in one pass.
* Gated MLP with SiLU: ``silu(gate) * up`` in one pass. When the down projection is float8
  (``_float8.Float8Linear``), the same pass quantises the product per token and the projection takes it as
  it is.

A compiled call costs more on the host than a few eager launches (a fused norm's call took 0.23 ms of
host time in a profile on an H100: ``benchmarks/results/2026-11-27-h100-engine-profile.txt``). A judge of 135M
parameters is host-bound, so there the fused calls made each batch slower. A step is therefore fused only
where its tensor has at least ``MIN_ELEMENTS`` elements. For an RMSNorm that is 2^24 (16M: 4096 tokens of
an 8B model's 4096 features). For the MLP it is 2^26 (an 8B's from about 4700 tokens), since fusing saves
fewer bytes per element there.
Below that the module runs its own forward. A kind whose largest batch (``tokens`` x its width) is under the
minimum is not fused at all, so it costs no compilation.

A class is fused only where it computes what the fused function computes. The first module of each class
is run both ways on a probe input with its own weights, and the class is fused only when the outputs agree
to the dtype's rounding. Gemma's ``(1 + weight)`` norm, say, stays eager. A class whose probe fails to
compile stays eager too. ``fuse`` returns what it fused, and ``describe()`` records that. Off CUDA nothing is
fused (the eager passes are what the CPU runs well), except where a test asks for the eager form of the
same functions.
"""

from __future__ import annotations

import logging
import types
from typing import Any, Callable, Optional

import torch

from ._float8 import Float8Linear, quantize_rows

__all__ = ["MIN_ELEMENTS", "fuse", "rms_norm", "silu_mul", "silu_mul_quantized"]

log = logging.getLogger(__name__)

#: Elements of a step's input below which its module's own (eager) forward runs instead of the compiled one.
MIN_ELEMENTS = {"rms_norm": 1 << 24, "silu_mul": 1 << 26}


def rms_norm(x, weight, eps: float):
    """RMSNorm as Llama computes it: the mean of squares in fp32, the weight applied in ``x``'s dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


def silu_mul(gate, up):
    """``silu(gate) * up`` rounded to the inputs' dtype after each step, as the two eager passes round it
    (a compiled kernel would otherwise keep fp32 in between and differ by a unit in the last place)."""
    return (torch.nn.functional.silu(gate.float()).to(gate.dtype).float() * up.float()).to(gate.dtype)


def silu_mul_quantized(gate, up):
    """``silu_mul(gate, up)`` quantised to float8 e4m3 per row by ``_float8.quantize_rows``, the unfused
    product's own quantisation (compiled, in the same pass): ``(values, one fp32 scale per row)``."""
    return quantize_rows(silu_mul(gate, up))


_KERNELS: dict = {}


def _kernel(fn: Callable, compiled: bool) -> Callable:
    """``fn`` compiled once per process (dynamo's limits raised: a few dtypes and widths each), or as is."""
    if not compiled:
        return fn
    got = _KERNELS.get(fn)
    if got is None:
        import torch._dynamo.config as dynamo_config

        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo_config, knob):
                setattr(dynamo_config, knob, max(getattr(dynamo_config, knob), 64))
        # the casts written in each function round there, as the eager passes do (by default inductor keeps
        # fp32 between them: bf16 results a unit in the last place apart, and other float8 values)
        got = _KERNELS[fn] = torch.compile(fn, options={"emulate_precision_casts": True})
    return got


def _rows(x, compiled: bool):
    """``x`` as a 2-D ``(tokens, width)`` view. For the compiled kernels its token count is marked dynamic
    and its width static: one kernel per dtype and width, whatever the batch length."""
    x2 = x.reshape(-1, x.shape[-1])
    if compiled:
        torch._dynamo.mark_dynamic(x2, 0)
        torch._dynamo.mark_static(x2, 1)
    return x2


def _norm_forward(compiled: bool, minimum: int):
    kernel = _kernel(rms_norm, compiled)

    def forward(self, hidden_states):
        # small (or one-row: dynamo would specialise on it) inputs: the module's own passes
        if hidden_states.numel() < max(minimum, 2 * hidden_states.shape[-1]):
            return type(self).forward(self, hidden_states)
        out = kernel(_rows(hidden_states, compiled), self.weight, _eps(self))
        return out.reshape(*hidden_states.shape[:-1], out.shape[-1])

    return forward


def _mlp_forward(compiled: bool, minimum: int):
    plain, quantized = _kernel(silu_mul, compiled), _kernel(silu_mul_quantized, compiled)

    def forward(self, x):
        gate, up = self.gate_proj(x), self.up_proj(x)
        rows = gate.numel() // gate.shape[-1]
        if rows < 2 or gate.numel() < minimum:
            return self.down_proj(self.act_fn(gate) * up)
        down = self.down_proj
        if isinstance(down, Float8Linear) and rows % 16 == 0:
            xq, xs = quantized(_rows(gate, compiled), _rows(up, compiled))
            return down.product(xq, xs, gate.shape[:-1], x.dtype)
        h = plain(_rows(gate, compiled), _rows(up, compiled))
        return down(h.reshape(gate.shape))

    return forward


def _eps(module) -> Optional[float]:
    for name in ("variance_epsilon", "eps"):
        value = getattr(module, name, None)
        if isinstance(value, float):
            return value
    return None


def _kind(module) -> Optional[str]:
    """``"rms_norm"`` or ``"silu_mul"`` where a module looks like one (its probe decides), else None."""
    name = type(module).__name__
    if name.endswith("RMSNorm"):
        w = getattr(module, "weight", None)
        if isinstance(w, torch.Tensor) and w.dim() == 1 and _eps(module) is not None:
            return "rms_norm"
    if all(isinstance(getattr(module, a, None), torch.nn.Module) for a in ("gate_proj", "up_proj", "down_proj")):
        act = getattr(module, "act_fn", None)
        if isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation":
            return "silu_mul"
    return None


def _width(module, kind: str) -> int:
    """The width of the tensor the fused step reads: the norm's features, the MLP's intermediate size."""
    if kind == "rms_norm":
        return int(module.weight.shape[-1])
    lin = module.gate_proj
    return int(lin.out_features)


def _probe_input(module, kind: str):
    """64 random rows of the module's input width, on its device, in the dtype it computes in (an inference
    tensor, as the judge's activations are: the kernel compiled for the probe is the one they use)."""
    if kind == "rms_norm":
        width, ref = module.weight.shape[-1], module.weight
    else:
        lin = module.gate_proj
        width = lin.in_features
        ref = lin.weight_scale if isinstance(lin, Float8Linear) else lin.weight
    dtype = torch.bfloat16 if isinstance(getattr(module, "gate_proj", None), Float8Linear) else ref.dtype
    gen = torch.Generator(device="cpu").manual_seed(0)
    with torch.inference_mode():
        return torch.randn(64, width, generator=gen).to(device=ref.device, dtype=dtype)


def _probe(module, kind: str, forward: Callable) -> Optional[str]:
    """None when ``forward`` equals the module's own forward on a probe input, else why it does not."""
    x = _probe_input(module, kind)
    try:
        with torch.inference_mode():
            want = type(module).forward(module, x).double()
            got = types.MethodType(forward, module)(x).double()
    except Exception as exc:  # noqa: BLE001 - a kernel that fails to build: the class stays eager
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    scale = float(want.abs().max()) or 1.0
    err = float((got - want).abs().max()) / scale
    # bf16 rounding, or in float8 a product element that rounds to the next e4m3 value: each far below what
    # another formula gives (Gemma's norm: the whole scale; gate and up swapped: the order of the output)
    quantised = isinstance(getattr(module, "down_proj", None), Float8Linear)
    tol = 0.1 if quantised else 2e-2 if x.dtype in (torch.bfloat16, torch.float16) else 1e-5
    return None if err <= tol else f"differs from the module's own forward by {err:.2g} of its scale"


def fuse(
    model, *, compiled: Optional[bool] = None, tokens: Optional[int] = None, min_elements: Optional[dict] = None
) -> dict[str, Any]:
    """Give ``model``'s RMSNorm and gated-MLP modules fused forwards, in place. ``compiled`` defaults to
    "on CUDA"; False uses the same functions eagerly (a reference, fused whatever the size). ``tokens``: the
    longest batch, so kinds that could never reach ``min_elements`` (default ``MIN_ELEMENTS`` when compiled,
    none otherwise) are left alone. Returns ``{"fused": {kind: modules}, "eager": {class: reason}}``. Calling it
    again (after a cast) keeps what is fused and probes no class twice."""
    if compiled is None:
        if next(model.parameters()).device.type != "cuda":
            return {"fused": {}, "eager": {}}
        compiled = True
    if min_elements is None:
        min_elements = MIN_ELEMENTS if compiled else {}
    makers = {"rms_norm": _norm_forward, "silu_mul": _mlp_forward}
    verdicts: dict[type, Optional[str]] = getattr(model, "_adherence_fused_classes", {})
    fused: dict[str, int] = {}
    small: dict[str, str] = {}
    for module in model.modules():
        kind = _kind(module)
        if kind is None:
            continue
        cls = type(module)
        minimum = int(min_elements.get(kind, 0))
        if tokens is not None and tokens * _width(module, kind) < minimum and "forward" not in vars(module):
            small[cls.__name__] = (
                f"batches of {tokens} tokens x {_width(module, kind)} features stay under the "
                f"{minimum:,} elements where one compiled call beats the eager passes"
            )
            continue
        if cls not in verdicts:
            verdicts[cls] = _probe(module, kind, makers[kind](compiled, 0))
            if verdicts[cls]:
                log.info("%s stays eager: %s", cls.__name__, verdicts[cls])
        if verdicts[cls] is None:
            if "forward" not in vars(module):
                module.forward = types.MethodType(makers[kind](compiled, minimum), module)
            fused[kind] = fused.get(kind, 0) + 1
    model._adherence_fused_classes = verdicts
    eager = {c.__name__: why for c, why in verdicts.items() if why}
    return {"fused": fused, "eager": {**small, **eager}}

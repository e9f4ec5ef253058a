"""FP8 linear layers for the in-process judge (``--judge-dtype float8``).

Every linear layer of the model's body (attention and MLP projections; not the embeddings and not the LM
head) keeps its weight in float8 e4m3 with one scale per output channel (the row's largest magnitude maps to
448, e4m3's largest finite value), and quantises its input to e4m3 per token at run time (one scale per row
of activations, from that row's largest magnitude). The product runs as ``torch._scaled_mm`` with both
scales applied in its epilogue and its output in bfloat16; everything else (norms, RoPE, attention,
softmax, the LM head) stays bfloat16 or fp32 as in the bf16 judge.

Per-token activation scales keep a turn's score independent of the other turns in its batch (a per-tensor
scale would let one long or loud prompt change every neighbour's quantisation). Sibling projections that read
the same input (query, key and value; gate and up) quantise it once. The accuracy cost is what
the judge bench reports beside the speed: P(yes) max and mean |difference| against bf16 on the same prompts.
"""

from __future__ import annotations

import math
import threading
from typing import Optional

import torch

from .._errors import OptionError

__all__ = ["E4M3_MAX", "DESCRIPTION", "Float8Linear", "quantize_linears", "quantize_rows"]

E4M3_MAX = 448.0
DESCRIPTION = "float8 e4m3 weights (per output channel) x float8 e4m3 activations (per token), bf16 out"


class Float8Linear(torch.nn.Module):
    """A ``nn.Linear`` as float8 weights with per-output-channel scales; inputs quantised per token."""

    weight_t: torch.Tensor
    weight_scale: torch.Tensor
    bias: Optional[torch.Tensor]

    def __init__(self, linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = (w.abs().amax(dim=1).clamp(min=1e-12) / E4M3_MAX).float()
        q = (w / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        # _scaled_mm wants its second operand column-major: the transpose of a row-major (out, in) matrix
        self.register_buffer("weight_t", q.t(), persistent=False)
        self.register_buffer("weight_scale", scale[None, :].contiguous(), persistent=False)
        bias = linear.bias  # added after the product (the float8 GEMM's own bias is not on every path)
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.bfloat16), persistent=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x):
        shape = x.shape
        m = x.numel() // shape[-1]
        pad = (-m) % 16  # the fp8 GEMM wants every dimension a multiple of 16
        last = getattr(_LAST, "value", None)
        if last is not None and last[0] is x:  # q, k, v (and gate, up) read the same input: quantised once
            xq, xs = last[1]
        else:
            x2 = x.reshape(-1, shape[-1])
            if pad:
                x2 = torch.nn.functional.pad(x2, (0, 0, 0, pad))
            xq, xs = _quantizer(x2.device.type)(x2)
            _LAST.value = (x, (xq, xs))
        return self.product(xq, xs, shape[:-1], x.dtype)

    def product(self, xq, xs, lead: tuple, dtype):
        """The layer's output from an input already quantised per row (``quantize_rows``: float8 values
        and one scale per row, rows a multiple of 16 with any padding last), shaped ``(*lead, out)``."""
        out = torch._scaled_mm(xq, self.weight_t, scale_a=xs, scale_b=self.weight_scale, out_dtype=torch.bfloat16)
        if self.bias is not None:
            out = out + self.bias
        m = math.prod(lead)
        if out.shape[0] != m:
            out = out[:m]
        return out.reshape(*lead, self.out_features).to(dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, float8 e4m3"


def quantize_rows(x):
    """``(x / scale as float8 e4m3, scale)`` with one fp32 scale per row: the row's largest magnitude / 448."""
    xf = x.float()
    xs = xf.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / E4M3_MAX
    return (xf / xs).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), xs


_QUANTIZERS: dict = {}
# The last input quantised in this thread and its quantisation: sibling projections get the same tensor
# object, and it is held here, so no other tensor can share its identity while the entry lives.
_LAST = threading.local()


def _quantizer(device_type: str):
    """``quantize_rows``, compiled into one fused kernel on CUDA (eager it is five passes over an fp32 copy
    of the activations, which cost more than the float8 product saved); eager elsewhere."""
    fn = _QUANTIZERS.get(device_type)
    if fn is None:
        fn = quantize_rows
        if device_type == "cuda":
            fn = torch.compile(quantize_rows, dynamic=True)
        _QUANTIZERS[device_type] = fn
    return fn


def quantize_linears(model) -> int:
    """Replace every ``nn.Linear`` of ``model``'s body (``model.base_model``; the LM head stays) with its
    float8 version, in place; returns how many were replaced. Needs torch's float8 dtype and ``_scaled_mm``."""
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        raise OptionError(f"--judge-dtype float8 needs torch's float8 matrix product (torch {torch.__version__})")
    body = model.base_model
    todo = [(name, mod) for name, mod in body.named_modules() if isinstance(mod, torch.nn.Linear)]
    for name, mod in todo:
        if mod.in_features % 16 or mod.out_features % 16:
            raise OptionError(
                f"--judge-dtype float8: layer {name} is {mod.in_features} x {mod.out_features}; "
                "the float8 product needs multiples of 16"
            )
    for name, mod in todo:
        parent = body.get_submodule(name.rsplit(".", 1)[0]) if "." in name else body
        setattr(parent, name.rsplit(".", 1)[-1], Float8Linear(mod))
    return len(todo)

"""Tree attention for prefix-shared judge passes, without an L x L mask.

A packed row is ``[trunk][tail 1][tail 2]...[padding]``: the trunk is causal over itself, and each tail
sees the trunk up to its own prefix and itself causally, never another tail. The dense formulation
builds a ``B x L x L`` mask, which also stops SDPA from skipping the blocks above the diagonal and makes
it compute every tail against every other tail: on a 135M judge over 8-turn conversations that dense
attention took 54% of the forward time on CPU. Here the trunk is one causal SDPA call (blocks above the
diagonal skipped) and each tail one SDPA call over ``trunk[:prefix] + tail`` with a ``tail x
(prefix + tail)`` mask: exactly the pairs the tree allows, nothing materialised at ``L x L``.

On CUDA the packed conversations of a batch are laid end to end in one row (no padding between them)
and attention is one FlexAttention call per layer with a block mask built from the same tree
(``FlexLayout``): blocks no pair of which is allowed are skipped, blocks wholly allowed run
unmasked, and nothing of size ``L x L`` is kept. The per-tail SDPA formulation stays for CPU, and the
dense mask stays the reference.

It is installed as a transformers attention implementation (``adherence_tree``) that behaves as
``sdpa`` unless a layout is active (``layout``), so generation and plain passes are unchanged.
Models that do not route attention through transformers' attention interface, or whose attention has a
softcap, a sliding window or a position bias, keep the dense-mask path: those named in the model's
configuration are never switched (``install`` returns False, so the run metadata says
``tree_attention: false``), the rest are found when the judge loads, by a probe pack that raises ``Unsupported``
(``_paths.choose_path``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from typing import Any, Optional

__all__ = ["NAME", "FlexLayout", "Layout", "Unsupported", "flex_available", "install", "layout", "reserve"]

log = logging.getLogger(__name__)

NAME = "adherence_tree"
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("adherence_tree_layout", default=None)
_REGISTERED = False


class Unsupported(RuntimeError):
    """This model's attention cannot run as tree attention (use the dense mask)."""


class Layout:
    """Per batch row: ``(trunk_len, [(start, length, prefix_len), ...])``; ``calls`` counts attention
    calls that used it (zero after a forward pass means the model bypassed the interface)."""

    def __init__(self, rows: list) -> None:
        self.rows = rows
        self.calls = 0
        self._masks: dict = {}

    def tail_mask(self, n: int, prefix: int, device):
        """``n x (prefix + n)`` boolean: every trunk position, then causal over the tail."""
        key = (n, prefix, str(device))
        m = self._masks.get(key)
        if m is None:
            import torch

            m = torch.ones((n, prefix + n), dtype=torch.bool, device=device)
            m[:, prefix:] = torch.ones((n, n), dtype=torch.bool, device=device).tril()
            self._masks[key] = m
        return m


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


_FLEX: dict = {}


def _flex_fn(device_type: str):
    """flex_attention, compiled on CUDA (its fused Triton kernel); eager elsewhere (a reference)."""
    fn = _FLEX.get(device_type)
    if fn is None:
        import torch
        from torch.nn.attention.flex_attention import flex_attention

        if device_type == "cuda":
            import torch._dynamo.config as dynamo_config

            # One compiled kernel per padded row length (multiples of 1024 up to batch_tokens): more than
            # dynamo's default of 8 recompiles, after which it would fall back to the unfused version.
            for knob in ("recompile_limit", "cache_size_limit"):
                if hasattr(dynamo_config, knob):
                    setattr(dynamo_config, knob, max(getattr(dynamo_config, knob), 64))
            fn = torch.compile(flex_attention, dynamic=False)
        else:

            def fn(*args, **kwargs):
                import warnings

                with warnings.catch_warnings():  # "called without torch.compile": intended off CUDA
                    warnings.simplefilter("ignore", UserWarning)
                    return flex_attention(*args, **kwargs)

        _FLEX[device_type] = fn
    return fn


_BUFFERS: dict = {}


def _buffers(device, n: int) -> tuple:
    """Per-device layout buffers and the one ``mask_mod`` that reads them. Every batch copies its layout
    into the same tensors and passes the same function, so the compiled attention is reused (a new
    closure per batch would make dynamo recompile every batch). The buffers grow when a batch is longer,
    and growing makes a new closure, which compiles every length again: ``reserve`` sizes them for the
    longest batch before the first."""
    import torch

    key = str(device)
    got = _BUFFERS.get(key)
    if got is None or got[0].shape[0] < n:
        cap = max(n, 2 * got[0].shape[0]) if got is not None else n
        with torch.inference_mode(False):  # plain tensors, written in and out of inference mode alike
            doc, tid, lim = (torch.full((cap,), -1, dtype=torch.long, device=device) for _ in range(3))

        def mask_mod(b, h, q, kv):
            return (doc[q] == doc[kv]) & (kv <= q) & ((tid[q] == tid[kv]) | (kv < lim[q]))

        got = _BUFFERS[key] = (doc, tid, lim, mask_mod)
    return got


def reserve(device, n: int) -> None:
    """Size ``device``'s layout buffers for batches of up to ``n`` tokens now, so no later batch grows them
    (a job's batches would otherwise grow them a few times, each time compiling every length again)."""
    _buffers(device, n)


class FlexLayout:
    """Packed conversations laid end to end in one row of ``T`` tokens (``T`` a multiple of ``block``).

    Per token: ``doc`` (which conversation; -1 padding), ``tid`` (-1 trunk, else the tail's number
    within its conversation) and ``lim`` (a tail token sees trunk positions ``< lim``, its prefix end).
    A query sees a key of the same conversation at or before it that is in its own segment, or in the
    trunk before ``lim``. The layout lives in per-device buffers: one layout per device at a time (the
    next overwrites it, in stream order after the work queued with it).
    """

    def __init__(self, doc, tid, lim, block: int = 128) -> None:
        import torch

        self.T = int(doc.shape[0])
        self.block = block
        self.calls = 0
        bdoc, btid, blim, mask_mod = _buffers(doc.device, self.T)
        bdoc[: self.T].copy_(doc)
        btid[: self.T].copy_(tid)
        blim[: self.T].copy_(lim)
        self.doc, self.tid, self.lim = bdoc[: self.T], btid[: self.T], blim[: self.T]
        self.mask_mod = mask_mod
        self.block_mask = self._block_mask(torch)

    def dense(self):
        """The ``T x T`` boolean mask (tests, and the block summary below in slabs)."""
        import torch

        q = torch.arange(self.T, device=self.doc.device)
        return self._slab(q, torch)

    def _slab(self, q, torch):
        """Rows ``q`` of the mask: the attention's own ``mask_mod``, broadcast over every key."""
        kv = torch.arange(self.T, device=self.doc.device)
        return self.mask_mod(None, None, q[:, None], kv[None, :])

    def _block_mask(self, torch):
        from torch.nn.attention.flex_attention import BlockMask

        n, bs = self.T // self.block, self.block
        partial = torch.zeros((n, n), dtype=torch.bool, device=self.doc.device)
        full = torch.zeros_like(partial)
        rows_per = max(1, (1 << 24) // max(self.T, 1) // bs) * bs  # slabs of ~16M mask entries
        for r0 in range(0, self.T, rows_per):
            q = torch.arange(r0, min(self.T, r0 + rows_per), device=self.doc.device)
            m = self._slab(q, torch).view(-1, bs, n, bs)
            anyb, allb = m.any(dim=(1, 3)), m.all(dim=(1, 3))
            partial[r0 // bs : r0 // bs + anyb.shape[0]] = anyb & ~allb
            full[r0 // bs : r0 // bs + anyb.shape[0]] = allb

        def pack(sel):
            num = sel.sum(dim=1).to(torch.int32)
            idx = torch.argsort((~sel).to(torch.int8), dim=1, stable=True).to(torch.int32)
            return num[None, None], idx[None, None]

        kv_num, kv_idx = pack(partial)
        full_num, full_idx = pack(full)
        return BlockMask.from_kv_blocks(
            kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=bs, mask_mod=self.mask_mod, seq_lengths=(self.T, self.T)
        )


@functools.cache
def _sdpa_gqa() -> bool:
    """Whether this torch's SDPA takes grouped keys and values itself (``enable_gqa``, torch >= 2.5): then the
    per-tail calls skip copying each key/value head ``n_rep`` times (same output; on the random SmolLM2-135M
    architecture on 2 CPU cores the packed pass was 2% faster)."""
    import torch
    import torch.nn.functional as F

    x = torch.zeros(1, 2, 1, 4)
    try:
        F.scaled_dot_product_attention(x, x[:, :1], x[:, :1], enable_gqa=True)
    except (TypeError, RuntimeError):
        return False
    return True


def _repeat(x, n_rep: int):
    return x if n_rep == 1 or _sdpa_gqa() else x.repeat_interleave(n_rep, dim=1)


def _attention(
    module, query, key, value, attention_mask, dropout: float = 0.0, scaling: Optional[float] = None, **kwargs
):
    """transformers attention function: ``query`` ``(B, H, L, D)``, keys/values ``(B, Hkv, L, D)``;
    returns ``(B, L, H, Dv)`` and no weights."""
    lay = _ACTIVE.get()
    if lay is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    for k in ("softcap", "sliding_window", "position_bias", "s_aux", "sinks"):
        if kwargs.get(k) is not None:
            raise Unsupported(f"attention with {k}")
    import torch
    import torch.nn.functional as F

    lay.calls += 1
    if isinstance(lay, FlexLayout):
        if query.shape[0] != 1 or query.shape[2] != lay.T:
            raise Unsupported(f"flex layout for 1 x {lay.T} tokens, got {tuple(query.shape)}")
        out = _flex_fn(query.device.type)(
            query, key, value, block_mask=lay.block_mask, scale=scaling, enable_gqa=query.shape[1] != key.shape[1]
        )
        return out.transpose(1, 2).contiguous(), None
    n_rep = query.shape[1] // key.shape[1]
    gqa: dict[str, Any] = {"enable_gqa": True} if n_rep > 1 and _sdpa_gqa() else {}
    out = query.new_zeros((query.shape[0], query.shape[1], query.shape[2], value.shape[-1]))
    for b, (trunk, tails) in enumerate(lay.rows):
        q, k, v = query[b : b + 1], key[b : b + 1], value[b : b + 1]
        if trunk:
            out[b : b + 1, :, :trunk] = F.scaled_dot_product_attention(
                q[:, :, :trunk],
                _repeat(k[:, :, :trunk], n_rep),
                _repeat(v[:, :, :trunk], n_rep),
                is_causal=True,
                scale=scaling,
                **gqa,
            )
        for start, n, prefix in tails:
            end = start + n
            ks = _repeat(torch.cat([k[:, :, :prefix], k[:, :, start:end]], dim=2), n_rep)
            vs = _repeat(torch.cat([v[:, :, :prefix], v[:, :, start:end]], dim=2), n_rep)
            out[b : b + 1, :, start:end] = F.scaled_dot_product_attention(
                q[:, :, start:end], ks, vs, attn_mask=lay.tail_mask(n, prefix, query.device), scale=scaling, **gqa
            )
    return out.transpose(1, 2).contiguous(), None


def _mask(*args, **kwargs):
    """No mask while a layout is active (the attention knows the tree); ``sdpa``'s otherwise."""
    if _ACTIVE.get() is not None:
        return None
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **kwargs)


def config_unsupported(config) -> Optional[str]:
    """Why a model of this configuration cannot take tree attention (a sliding window, an attention
    softcap), or None."""
    for c in (config, getattr(config, "text_config", None)):
        if c is None:
            continue
        types = [str(t) for t in (getattr(c, "layer_types", None) or ())]
        if any("sliding" in t for t in types):
            return "sliding-window attention layers"
        if not types and getattr(c, "sliding_window", None) and getattr(c, "use_sliding_window", True) is not False:
            return f"a sliding window of {c.sliding_window} tokens"
        if getattr(c, "attn_logit_softcapping", None):
            return "an attention softcap"
    return None


def install(model) -> bool:
    """Switch ``model`` to the tree-capable attention; False when this transformers or model cannot."""
    global _REGISTERED
    why = config_unsupported(getattr(model, "config", None))
    if why:
        log.info("tree attention off (the model has %s): dense masks", why)
        return False
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface

        if not _REGISTERED:
            AttentionInterface.register(NAME, _attention)
            AttentionMaskInterface.register(NAME, _mask)
            _REGISTERED = True
        impl = getattr(model.config, "_attn_implementation", None)
        if impl == NAME:
            return True  # a model already switched (e.g. handed from one backend to another)
        if impl != "sdpa":
            return False  # eager / flash / remote code: keep what the model runs
        model.set_attn_implementation(NAME)
        return getattr(model.config, "_attn_implementation", None) == NAME
    except Exception as exc:  # noqa: BLE001 - any failure here only means "use the dense mask"
        log.info("tree attention unavailable (%s): dense masks", exc)
        return False


@contextlib.contextmanager
def layout(rows):
    """Run the enclosed forward pass with this tree layout (a per-row list for ``Layout``, or a
    ``FlexLayout``); yields it (check ``calls`` after)."""
    lay = rows if isinstance(rows, FlexLayout) else Layout(rows)
    token = _ACTIVE.set(lay)
    try:
        yield lay
    finally:
        _ACTIVE.reset(token)

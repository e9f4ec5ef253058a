"""Loading the in-process judge: the checkpoint resolved (a local path, the bundled judge, a cached hub id, one
GGUF file), its tokenizer and weights read, and its precision applied (a torch dtype, or float8 linear layers in a
bfloat16 body) with the body's fused kernels installed. ``TransformersBackend`` loads through here once and casts
through here again (``cast``)."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Any, Optional

from ..models import DEFAULT_JUDGE, pick_dtype, resolve_model

__all__ = ["convert", "load_model", "precision"]


def load_model(model: Optional[str], loaded: Optional[tuple], dtype: Any, progress: bool) -> tuple:
    """``(model, tokenizer, resolved)``: from ``loaded`` (``(model, tokenizer, name)`` already in memory, e.g. a
    random-weight model built from a config) or read from ``model`` (default: the bundled judge) in ``dtype``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..models import ResolvedModel, gguf_checkpoint, gguf_model, quiet_loading

    if loaded is not None:
        m, tokenizer, name = loaded
        return m, tokenizer, ResolvedModel(name, Path("."), "in-memory")
    resolved = resolve_model(model or DEFAULT_JUDGE)
    path, kwargs = str(resolved.path), dict[str, str]()
    if resolved.gguf_file:
        # read once, then from its de-quantised checkpoint in the cache (the same weights; seconds, not a minute)
        with _gguf_bar(progress):
            cached = gguf_checkpoint(resolved, progress)
        if cached is None:
            kwargs["gguf_file"] = resolved.gguf_file
        else:
            path = str(cached)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    # a cache that cannot be written: the GGUF file read on every load (its weights by ``gguf_model`` where it can)
    m = gguf_model(resolved, dtype, attn_implementation="sdpa") if kwargs else None
    if m is None:
        with _gguf_bar(progress or not kwargs), quiet_loading() if not progress else contextlib.nullcontext():
            try:
                m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa", **kwargs)
            except (ValueError, ImportError):
                m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)
    return m, tokenizer, resolved


def precision(device, dtype: Optional[str]) -> tuple:
    """``(float8, torch dtype)``: whether the body's linear layers are float8, and the dtype the model computes in
    (bfloat16 around float8 linear layers)."""
    float8 = dtype == "float8"
    return float8, pick_dtype(device, "bfloat16" if float8 else dtype)


def convert(model, dtype, float8: bool, batch_tokens: int) -> dict:
    """``model`` to ``dtype`` in place (a no-op when it is already), its body's linear layers to float8 when asked,
    and its fused kernels installed; returns what was fused."""
    model.to(dtype=dtype)
    if float8:
        from ._float8 import quantize_linears

        quantize_linears(model)
    from ._fused import fuse

    return fuse(model, tokens=batch_tokens)


@contextlib.contextmanager
def _gguf_bar(show: bool):
    """With ``show`` False, transformers' "de-quantizing GGUF tensors" bar stays off while a GGUF checkpoint loads:
    that bar is a plain tqdm bar bound in its module (neither transformers' progress switch nor ``progress``
    reaches it), so the module's ``tqdm`` is given ``disable=True`` for the load and put back after."""
    if show:
        yield
        return
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar

"""A GGUF file's tensors read once and de-quantised with ``gguf``'s own kernels, for the llama layout, and the model
built from them (``gguf_model``).

transformers' GGUF loader parses the whole file's metadata (the tokenizer's vocabulary included) twice for the
weights and builds its tensor-name map again for each tensor: most of a first load of the bundled 135M judge went
there, not into de-quantising (profiled: 23 s for the weights, 2 of them de-quantising, on 2 cores). Here the
header is walked once with ``struct`` (its tokenizer arrays skipped over, not parsed) and each tensor goes through
``gguf.quants.dequantize``, the function transformers calls, so the weights are the same to the bit
(tests/models/test_export.py compares them with transformers' load). Only the llama layout (SmolLM2's) is mapped;
any other architecture or tensor name, or a file this does not read, returns None and the caller uses
transformers' loader.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

__all__ = ["GGUFTensor", "gguf_model", "llama_state_dict", "read_header"]

_MAGIC = b"GGUF"
# value types of the metadata (GGUF v2 and v3): fixed-size scalars by their struct code
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    dims: tuple  # GGUF order: the fastest-varying dimension first
    qtype: int
    offset: int  # from the start of the file


class _Cursor:
    def __init__(self, buf: memoryview):
        self.buf, self.pos = buf, 0

    def take(self, code: str) -> Any:
        (v,) = struct.unpack_from("<" + code, self.buf, self.pos)
        self.pos += struct.calcsize(code)
        return v

    def string(self) -> str:
        n = self.take("Q")
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip_string(self) -> None:
        self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]

    def value(self, vtype: int) -> Any:
        """The value of type ``vtype``; an array is skipped over (None)."""
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype != _ARRAY:
            raise ValueError(f"unknown GGUF value type {vtype}")
        etype, n = self.take("I"), self.take("Q")
        if etype in _SCALARS:
            self.pos += n * struct.calcsize(_SCALARS[etype])
        elif etype == _STRING:
            for _ in range(n):
                self.skip_string()
        else:  # arrays of arrays
            for _ in range(n):
                self.value(etype)
        return None


def read_header(path: Path) -> tuple[dict, list[GGUFTensor]]:
    """``(metadata, tensors)`` of a little-endian GGUF v2/v3 file: the metadata's scalars and strings (arrays, such
    as the tokenizer's vocabulary, are skipped and absent) and each tensor's name, shape, type and file offset."""
    with open(path, "rb") as f:
        mm = np.memmap(f, dtype=np.uint8, mode="r")
    c = _Cursor(mm.data)
    if bytes(c.buf[:4]) != _MAGIC:
        raise ValueError(f"{path} is not a GGUF file")
    c.pos = 4
    version = c.take("I")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} is not read here")
    n_tensors, n_kv = c.take("Q"), c.take("Q")
    meta = {}
    for _ in range(n_kv):
        key = c.string()
        value = c.value(c.take("I"))
        if value is not None:
            meta[key] = value
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        dims = tuple(c.take("Q") for _ in range(c.take("I")))
        infos.append((name, dims, c.take("I"), c.take("Q")))
    align = int(meta.get("general.alignment", 32))
    start = -(-c.pos // align) * align
    return meta, [GGUFTensor(n, d, t, start + o) for n, d, t, o in infos]


# llama's GGUF tensor names and their transformers names
_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def _hf_name(name: str) -> Optional[str]:
    if name in _GLOBAL:
        return _GLOBAL[name]
    m = _BLOCK.fullmatch(name)
    if m and m.group(2) in _LAYER:
        return f"model.layers.{m.group(1)}.{_LAYER[m.group(2)]}.weight"
    return None


def _unrotate(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo the row order llama.cpp's converter gives the query and key projections (each head's rotary halves
    interleaved): rows (head, pair, half) back to (head, half, pair)."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_state_dict(path: Path) -> Optional[dict]:
    """The float32 weights of a llama-architecture GGUF file under transformers' names, as numpy arrays; None for
    any other architecture or a tensor this map does not know (the caller then uses transformers' loader)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    try:
        meta, tensors = read_header(path)
    except ValueError:  # not a little-endian GGUF v2/v3 file: transformers reads it or says why
        return None
    if meta.get("general.architecture") != "llama":
        return None
    heads = int(meta["llama.attention.head_count"])
    kv_heads = int(meta.get("llama.attention.head_count_kv", heads))
    names = {t.name: _hf_name(t.name) for t in tensors}
    if None in names.values():
        return None
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for t in tensors:
        name = str(names[t.name])
        qtype = GGMLQuantizationType(t.qtype)
        block, size = GGML_QUANT_SIZES[qtype]
        row = t.dims[0] // block * size
        rows = int(np.prod(t.dims[1:], dtype=np.int64))
        raw = data[t.offset : t.offset + rows * row].reshape(*t.dims[:0:-1], row)
        w = dequantize(raw, qtype)
        if w.dtype != np.float32 or not w.flags.writeable:  # float tensors come back as views of the file
            w = np.array(w, dtype=np.float32)
        if name.endswith("q_proj.weight"):
            w = _unrotate(w, heads)
        elif name.endswith("k_proj.weight"):
            w = _unrotate(w, kv_heads)
        out[name] = w
    return out


def _no_init():
    """transformers' own switch for building a model whose weights are loaded next (``from_pretrained`` uses it):
    no random initialisation. Buffers computed in the modules' constructors (rotary frequencies) are kept."""
    try:
        from transformers.initialization import no_init_weights  # transformers 5
    except ImportError:
        from transformers.modeling_utils import no_init_weights
    return no_init_weights()


def gguf_model(resolved, dtype, **kwargs):
    """The model of a llama-layout GGUF file in ``dtype``: transformers' config for it (from the file's metadata)
    and the weights de-quantised here (the same bits as transformers' own load, in a fraction of its
    time); None for another layout. ``kwargs`` go to ``from_config`` (``attn_implementation``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    weights = llama_state_dict(Path(resolved.path) / str(resolved.gguf_file))
    if weights is None:
        return None
    config = AutoConfig.from_pretrained(str(resolved.path), gguf_file=resolved.gguf_file)
    # built in float32 and cast after loading, as transformers casts its de-quantised weights
    with _no_init():  # every parameter is replaced below: its random initialisation (seconds) is skipped
        m = AutoModelForCausalLM.from_config(config, **kwargs).float()
    missing, unexpected = m.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if unexpected or set(missing) - tied:  # a layout this map does not know after all
        return None
    m.tie_weights()
    return m.to(dtype=dtype).eval()

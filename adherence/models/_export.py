"""Export a GGUF judge (the bundled one by default) to a plain transformers checkpoint.

vLLM and most servers cannot load the bundled Q4_1 GGUF; transformers de-quantises it on load, and
the de-quantised weights are saved as safetensors with the tokenizer and chat template, so every
backend can start from the same bundled default.

The in-process judge loads a GGUF checkpoint through the same export, kept in the user's cache
(``gguf_checkpoint``): a GGUF file is de-quantised on every load of it, the float32 safetensors kept beside it
load in about a second, with the same weights to the bit. A llama-layout file's tensors are read by
``_gguf.gguf_model`` in one pass; transformers' GGUF loader reads the others.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Optional, Union

from .._atomic import atomic_path
from .._errors import OptionError
from ._gguf import gguf_model
from ._resolve import DEFAULT_JUDGE, resolve_model

__all__ = ["export_judge", "gguf_checkpoint"]

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}


def export_judge(output: Union[str, os.PathLike], model: Optional[str] = None, *, dtype: str = "float32") -> Path:
    """Write ``model`` (a GGUF judge; default the bundled SmolLM2-135M-Instruct) to ``output`` as a
    transformers checkpoint (safetensors, config, tokenizer with its chat template).

    The directory is written beside ``output`` under a temporary name and renamed when complete;
    an existing ``output`` is never replaced. In float32 it is a copy of the checkpoint the in-process judge
    keeps in the cache (``gguf_checkpoint``), made there first if it is not yet.

    Raises:
        FileExistsError: ``output`` exists.
        ValueError: ``model`` is not a GGUF checkpoint (it can be used as it is), or an unknown dtype.
    """
    if dtype not in _DTYPES:
        raise OptionError(f"`dtype` must be one of {', '.join(sorted(_DTYPES))}, got {dtype!r}")
    out = Path(output)
    if out.exists():
        raise FileExistsError(f"{out} already exists; export-judge writes a new directory and replaces nothing")
    resolved = resolve_model(model or DEFAULT_JUDGE)
    if not resolved.gguf_file:
        raise OptionError(
            f"{resolved.name} is already a transformers checkpoint ({resolved.path}): give it to the backend as it is"
        )
    cached = gguf_checkpoint(resolved) if _DTYPES[dtype] == "float32" else None
    out.parent.mkdir(parents=True, exist_ok=True)
    if cached is None:
        _write(resolved, _DTYPES[dtype], out)
        return out
    with atomic_path(out) as tmp:
        shutil.copytree(cached, tmp)
    return out


def _write(resolved, dtype: str, out: Path) -> None:
    """De-quantise ``resolved``'s GGUF file in ``dtype`` and write it to ``out`` as a transformers checkpoint,
    whole or not at all."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = str(resolved.path)
    tok = AutoTokenizer.from_pretrained(path, gguf_file=resolved.gguf_file)
    m = gguf_model(resolved, getattr(torch, dtype))
    if m is None:  # not the llama layout: transformers reads the file
        m = AutoModelForCausalLM.from_pretrained(path, gguf_file=resolved.gguf_file, dtype=getattr(torch, dtype))
        # The weights are de-quantised in memory; drop the GGUF quantizer, which transformers refuses to serialise.
        m.hf_quantizer = None  # None is what transformers checks for
        if hasattr(m.config, "quantization_config"):
            del m.config.quantization_config
    with atomic_path(out) as tmp:
        m.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        meta = {"producer": "adherence", "source": resolved.describe(), "gguf_file": resolved.gguf_file, "dtype": dtype}
        (tmp / "adherence_export.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _gguf_key(resolved) -> str:
    """A digest of the GGUF file (name, size, modification time) and the versions of the code that de-quantises
    and writes it (transformers, gguf, torch)."""
    import torch
    import transformers

    f = Path(resolved.path) / str(resolved.gguf_file)
    st = f.stat()
    try:
        import gguf

        gguf_version = getattr(gguf, "__version__", "")
    except ImportError:
        gguf_version = ""
    parts = (f.name, st.st_size, st.st_mtime_ns, transformers.__version__, gguf_version, torch.__version__)
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:20]


def gguf_checkpoint(resolved, progress: bool = False) -> Optional[Path]:
    """The float32 transformers checkpoint of ``resolved`` (a GGUF judge), exported into the cache
    (``$ADHERENCE_CACHE_DIR/judges``) on first use and read from there after; None where the cache cannot be
    written (the caller then reads the GGUF file itself). Two processes exporting at once: the first to publish
    wins, the other reads its copy."""
    from ._onnx import cache_dir, cache_name

    dest = cache_dir() / "judges" / f"{cache_name(str(resolved.gguf_file))}-{_gguf_key(resolved)}"
    if (dest / "adherence_export.json").exists():
        return dest
    if progress:
        print(f"de-quantising {resolved.name} into {dest} (once per machine) ...", file=sys.stderr)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _write(resolved, "float32", dest)
    except OSError:  # an unwritable cache, or another process published first (then its copy is read)
        pass
    return dest if (dest / "adherence_export.json").exists() else None

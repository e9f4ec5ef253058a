"""Export a GGUF judge (the bundled one by default) to a plain transformers checkpoint.

vLLM and most servers cannot load the bundled Q4_1 GGUF; transformers de-quantises it on load, and
the de-quantised weights are saved as safetensors with the tokenizer and chat template, so every
backend can start from the same bundled default.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Union

from .._atomic import atomic_path
from .._errors import OptionError
from ._resolve import DEFAULT_JUDGE, resolve_model

__all__ = ["export_judge"]

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
    an existing ``output`` is never replaced.

    Raises:
        FileExistsError: ``output`` exists.
        ValueError: ``model`` is not a GGUF checkpoint (it can be used as it is), or an unknown dtype.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

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
    path = str(resolved.path)
    tok = AutoTokenizer.from_pretrained(path, gguf_file=resolved.gguf_file)
    m = AutoModelForCausalLM.from_pretrained(path, gguf_file=resolved.gguf_file, dtype=getattr(torch, _DTYPES[dtype]))
    # The weights are de-quantised in memory; drop the GGUF quantizer, which transformers refuses to serialise.
    m.hf_quantizer = None  # type: ignore[assignment]  # typed as a quantizer; None is what transformers checks for
    if hasattr(m.config, "quantization_config"):
        del m.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        m.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "adherence_export.json").write_text(
            json.dumps(
                {
                    "producer": "adherence",
                    "source": resolved.describe(),
                    "gguf_file": resolved.gguf_file,
                    "dtype": _DTYPES[dtype],
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    return out

"""Device and dtype choice shared by every model: bf16 on GPU, fp32 on CPU."""

from __future__ import annotations

from typing import Optional

__all__ = ["pick_device", "pick_dtype"]


def pick_device(device: Optional[str] = None):
    import torch

    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def pick_dtype(device, dtype: Optional[str] = None):
    import torch

    if dtype is not None:
        return {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
                "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}[dtype]
    return torch.bfloat16 if device.type == "cuda" else torch.float32

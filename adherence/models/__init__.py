"""Model resolution (local path, bundled package, Hugging Face cache) and encoders."""

from ._device import pick_device, pick_dtype
from ._encoder import Encoder
from ._export import export_judge
from ._resolve import DEFAULT_ENCODER, DEFAULT_JUDGE, ModelNotFoundError, ResolvedModel, resolve_model

__all__ = [
    "DEFAULT_ENCODER",
    "DEFAULT_JUDGE",
    "Encoder",
    "export_judge",
    "ModelNotFoundError",
    "ResolvedModel",
    "pick_device",
    "pick_dtype",
    "resolve_model",
]

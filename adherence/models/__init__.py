"""Model resolution (local path, bundled package, Hugging Face cache) and encoders."""

from ._device import pick_device, pick_dtype
from ._encoder import Encoder
from ._export import export_judge
from ._onnx import cache_dir
from ._quiet import quiet_loading
from ._resolve import DEFAULT_ENCODER, DEFAULT_JUDGE, ModelNotFoundError, ResolvedModel, resolve_model

__all__ = [
    "DEFAULT_ENCODER",
    "DEFAULT_JUDGE",
    "Encoder",
    "cache_dir",
    "export_judge",
    "ModelNotFoundError",
    "ResolvedModel",
    "pick_device",
    "pick_dtype",
    "quiet_loading",
    "resolve_model",
]

"""Model resolution (local path, bundled package, Hugging Face cache) and encoders."""

from ._device import cpu_bf16_native, cpu_features, cpu_kind, pick_device, pick_dtype
from ._encoder import Encoder
from ._export import export_judge, gguf_checkpoint
from ._gguf import gguf_model
from ._language import language_note
from ._onnx import OnnxSentenceModel, cache_dir, encoder_precision_option, export_float, rowwise_int8
from ._quiet import quiet_loading
from ._resolve import DEFAULT_ENCODER, DEFAULT_JUDGE, MODEL_ALIASES, ModelNotFoundError, ResolvedModel, resolve_model

__all__ = [
    "DEFAULT_ENCODER",
    "DEFAULT_JUDGE",
    "Encoder",
    "MODEL_ALIASES",
    "ModelNotFoundError",
    "OnnxSentenceModel",
    "ResolvedModel",
    "cache_dir",
    "cpu_bf16_native",
    "cpu_features",
    "cpu_kind",
    "encoder_precision_option",
    "export_float",
    "export_judge",
    "gguf_checkpoint",
    "gguf_model",
    "language_note",
    "pick_device",
    "pick_dtype",
    "quiet_loading",
    "resolve_model",
    "rowwise_int8",
]

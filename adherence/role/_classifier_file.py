"""The classifier file: what ``adherence classifier fit`` writes and ``--method classifier`` loads, and its checks.

A file is refused when loaded (one line naming it) unless its format, features, sizes and values add up and its
model still matches the digest written with it; scoring also refuses it over another encoder than the one it was
trained over (``Classifier.check_encoder``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

__all__ = ["CLASSIFIER_FORMAT", "FEATURES", "Classifier", "encoder_digest", "load_classifier", "model_digest"]

CLASSIFIER_FORMAT = "adherence-classifier/1"
FEATURES = (
    "reply",
    "role_similarity",
    "user_similarity",
    "reply_length",
    "role_overlap",
    "user_overlap",
)
_DIGESTS: dict = {}


def encoder_digest(encoder) -> str:
    """sha256 over the encoder checkpoint's files (names, sizes and contents of the weights, config and tokenizer):
    a classifier is only valid over the embeddings it was trained on."""
    path = Path(encoder.describe().get("path") or "")
    if path in _DIGESTS:
        return _DIGESTS[path]
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else ([path] if path.is_file() else [])
    for p in files:
        if p.suffix not in (".safetensors", ".bin", ".json", ".txt", ".model") or "onnx" in p.parts:
            continue
        h.update(str(p.relative_to(path) if path.is_dir() else p.name).encode())
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    _DIGESTS[path] = "sha256:" + h.hexdigest()
    return _DIGESTS[path]


@dataclass
class Classifier:
    """A loaded, checked classifier file."""

    data: dict
    file: str
    digest: str

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self.data["model"]["mean"], dtype=np.float64)

    @property
    def scale(self) -> np.ndarray:
        return np.asarray(self.data["model"]["scale"], dtype=np.float64)

    @property
    def coef(self) -> np.ndarray:
        return np.asarray(self.data["model"]["coef"], dtype=np.float64)

    @property
    def intercept(self) -> float:
        return float(self.data["model"]["intercept"])

    def probability(self, x: np.ndarray) -> np.ndarray:
        """P(adherent) of feature rows ``x``."""
        z = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(z, -35, 35)))

    def check_encoder(self, encoder) -> None:
        """Refuse to score with another encoder than the one the model was trained over."""
        from ..data import DataError

        want, have = self.data["encoder"].get("digest"), encoder_digest(encoder)
        if want != have:
            raise DataError(
                f"this classifier was trained over encoder {self.data['encoder'].get('name')!r} ({want}); the encoder "
                f"loaded now is {encoder.describe().get('name')!r} ({have}): fit it again with `adherence classifier "
                "fit`, or score with its encoder",
                file=self.file,
            )

    def describe(self) -> dict:
        return {"file": self.file, "digest": self.digest, "cv_auc": self.data["cv"]["auc"]}


def load_classifier(path: Union[str, os.PathLike]) -> Classifier:
    """Read and check a classifier file; a one-line ``DataError`` naming the file and what is wrong."""
    from ..data import DataError

    p = str(path)
    try:
        raw = Path(path).read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise DataError("no such classifier file", file=p) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"not a classifier file ({str(exc).splitlines()[0]})", file=p) from None
    if not isinstance(data, dict) or data.get("format") != CLASSIFIER_FORMAT:
        raise DataError(
            f'not a classifier file (no "format": "{CLASSIFIER_FORMAT}"; write one with `adherence classifier fit`)',
            file=p,
        )

    def bad(why: str) -> DataError:
        return DataError(f"malformed classifier file ({why})", file=p)

    model, enc, cv = data.get("model"), data.get("encoder"), data.get("cv")
    if not (isinstance(model, dict) and isinstance(enc, dict) and isinstance(cv, dict)):
        raise bad("needs model, encoder and cv objects")
    if tuple(data.get("features") or ()) != FEATURES:
        raise bad(f"features {data.get('features')!r} are not this version's {list(FEATURES)!r}")
    try:
        arrays = [np.asarray(model[k], dtype=np.float64) for k in ("mean", "scale", "coef")]
        intercept, l2 = float(model["intercept"]), float(model["l2"])
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(f"model: {exc}") from None
    dim = enc.get("dim")
    if not isinstance(dim, int) or dim < 1:
        raise bad(f"encoder.dim must be a positive integer, got {dim!r}")
    width = dim + 5
    for name, a in zip(("mean", "scale", "coef"), arrays):
        if a.shape != (width,):
            raise bad(f"model.{name} must hold {width} numbers for a {dim}-d encoder, got {a.size}")
        if not np.isfinite(a).all():
            raise bad(f"model.{name} holds a value that is not finite")
    if not (arrays[1] > 0).all():
        raise bad("model.scale must be > 0 everywhere")
    if not (np.isfinite(intercept) and np.isfinite(l2) and l2 > 0):
        raise bad("model.intercept must be finite and model.l2 > 0")
    shrink = model.get("shrink", 1)
    if isinstance(shrink, bool) or not isinstance(shrink, (int, float)) or not shrink >= 1:
        raise bad(f"model.shrink must be a number >= 1, got {shrink!r}")
    auc = cv.get("auc")
    if not (isinstance(auc, (int, float)) and 0.0 <= auc <= 1.0):
        raise bad(f"cv.auc must be in [0, 1], got {auc!r}")
    if data.get("digest") != model_digest(data):
        raise DataError(
            "this classifier was edited after it was fitted (its model no longer matches the digest written with "
            "it); fit it again with `adherence classifier fit`",
            file=p,
        )
    return Classifier(data, p, "sha256:" + hashlib.sha256(raw).hexdigest())


def model_digest(doc: dict) -> str:
    """sha256 of what decides a score: the model, the features and the encoder's digest."""
    body = json.dumps(
        {
            "model": doc.get("model"),
            "features": doc.get("features"),
            "encoder": (doc.get("encoder") or {}).get("digest"),
        },
        sort_keys=True,
    )
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()

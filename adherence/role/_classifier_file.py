"""The classifier file: what ``adherence classifier fit`` writes and ``--method classifier`` loads, and its checks.

A file is refused when loaded (one line naming it) unless its format, features, sizes and values add up and its
model still matches the digest written with it; scoring also refuses it over another encoder than the one it was
trained over (``Classifier.check_encoder``).

A fine-tuned classifier (``classifier fit --learner fine-tuned``) brings its encoder as one tar file beside it
(``encoder_file_of``, ``pack_encoder``) whose sha256 the file records; scoring unpacks it once into the user's cache
under that digest (``unpack_encoder``), refusing a file that is missing or does not match.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np

__all__ = [
    "CLASSIFIER_FORMAT",
    "FEATURES",
    "Classifier",
    "encoder_digest",
    "encoder_file_of",
    "load_classifier",
    "model_digest",
    "model_probability",
    "pack_encoder",
    "reply_digest",
    "training_index",
    "training_positions",
    "unpack_encoder",
]

CLASSIFIER_FORMAT = "adherence-classifier/2"
_OLD_FORMATS = ("adherence-classifier/1",)
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
    _index: Optional[dict] = field(default=None, repr=False)

    def probability(self, x: np.ndarray) -> np.ndarray:
        """P(adherent) of feature rows ``x`` by the model fit on every label."""
        return model_probability(self.data["model"], x)

    def fold_probability(self, k: int, x: np.ndarray) -> np.ndarray:
        """P(adherent) of ``x`` by the model fit without fold ``k`` (the out-of-fold score of fold ``k``'s turns)."""
        return model_probability(self.data["folds"][k], x)

    def crossfit_probability(self, x: np.ndarray) -> np.ndarray:
        """The fold models' mean P(adherent) of ``x``: what cross-prediction scores the turns no label covers by."""
        return np.mean([model_probability(m, x) for m in self.data["folds"]], axis=0)

    @property
    def threshold(self) -> float:
        """The decision threshold chosen on out-of-fold scores: a turn below it is flagged a violation."""
        return float(self.data["decision"]["threshold"])

    def check_encoder(self, encoder) -> None:
        """Refuse to score with another encoder than the one the model was trained over."""
        from ..data import DataError

        dim = getattr(encoder, "dim", None)
        if isinstance(dim, int) and dim != self.data["encoder"]["dim"]:
            raise DataError(
                f"this classifier is over {self.data['encoder']['dim']}-d embeddings; the encoder loaded now makes "
                f"{dim}-d ones: fit it again with `adherence classifier fit`, or score with its encoder",
                file=self.file,
            )
        want, have = self.data["encoder"].get("digest"), encoder_digest(encoder)
        if want != have:
            raise DataError(
                f"this classifier was trained over encoder {self.data['encoder'].get('name')!r} ({want}); the encoder "
                f"loaded now is {encoder.describe().get('name')!r} ({have}): fit it again with `adherence classifier "
                "fit`, or score with its encoder",
                file=self.file,
            )

    @property
    def learner(self) -> str:
        """``"frozen"`` (a head over the encoder as it is) or ``"fine-tuned"`` (over an encoder tuned on the labels,
        kept beside the file)."""
        return str((self.data.get("learner") or {}).get("name", "frozen"))

    def encoder_model(self) -> Optional[str]:
        """The checkpoint this classifier scores with when it brings its own (a fine-tuned one: unpacked from the
        encoder file beside it, checked against its digest), else None (the encoder named for the job)."""
        if self.learner != "fine-tuned":
            return None
        rec = self.data["learner"]
        tar = Path(self.file).parent / rec["encoder_file"]
        return str(unpack_encoder(str(tar), rec["encoder_file_digest"], file=self.file))

    def training_at(self, conversation_ids: list, turn_indices: list, replies: list, rows) -> np.ndarray:
        """For each of ``rows``, its position in the file's training record (its key and reply as recorded), else
        -1."""
        if self._index is None:
            self._index = training_index(self.data["training"])
        return training_positions(self._index, conversation_ids, turn_indices, replies, rows)

    def describe(self) -> dict:
        return {
            "file": self.file,
            "digest": self.digest,
            "learner": self.learner,
            "cv_auc": self.data["cv"]["auc"],
            "threshold": self.threshold,
            "training_turns": len(self.data["training"]["conversation_id"]),
        }


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
    if isinstance(data, dict) and data.get("format") in _OLD_FORMATS:
        raise DataError(
            f"a classifier file of an older format ({data['format']}): it does not record which turns trained it, "
            "so its scores on them cannot be told from held-out ones; fit it again with `adherence classifier fit`",
            file=p,
        )
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
    if not isinstance(model.get("balanced", False), bool):
        raise bad("model.balanced must be true or false")
    folds = data.get("folds")
    if not (isinstance(folds, list) and len(folds) >= 2 and all(isinstance(m, dict) for m in folds)):
        raise bad("folds must list the fold models (two or more)")
    for k, m in enumerate(folds):
        try:
            fa = [np.asarray(m[key], dtype=np.float64) for key in ("mean", "scale", "coef")]
            fb = float(m["intercept"])
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(f"folds[{k}]: {exc}") from None
        if any(a.shape != (width,) or not np.isfinite(a).all() for a in fa) or not (fa[1] > 0).all():
            raise bad(f"folds[{k}] must hold {width} finite numbers in mean, scale (> 0) and coef")
        if not np.isfinite(fb):
            raise bad(f"folds[{k}].intercept must be finite")
    decision = data.get("decision")
    thr = decision.get("threshold") if isinstance(decision, dict) else None
    if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not 0.0 <= thr <= 1.0:
        raise bad(f"decision.threshold must be a number in [0, 1], got {thr!r}")
    train = data.get("training")
    cols = ("conversation_id", "turn_index", "reply_digest", "fold", "oof")
    if not (isinstance(train, dict) and all(isinstance(train.get(c), list) for c in cols)):
        raise bad(f"training must hold the lists {', '.join(cols)}")
    if len({len(train[c]) for c in cols}) != 1:
        raise bad("training's lists must be of one length, a turn each")
    if not all(isinstance(f, int) and not isinstance(f, bool) and 0 <= f < len(folds) for f in train["fold"]):
        raise bad(f"training.fold must hold fold numbers in [0, {len(folds)})")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in train["turn_index"]):
        raise bad("training.turn_index must hold non-negative integers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in train["oof"]):
        raise bad("training.oof must hold probabilities in [0, 1]")
    learner = data.get("learner", {"name": "frozen"})
    if not (isinstance(learner, dict) and learner.get("name") in ("frozen", "fine-tuned")):
        raise bad('learner must be {"name": "frozen"} or {"name": "fine-tuned", ...}')
    if learner["name"] == "fine-tuned":
        tar, dig = learner.get("encoder_file"), learner.get("encoder_file_digest")
        if not (isinstance(tar, str) and tar and "/" not in tar and "\\" not in tar and tar not in (".", "..")):
            raise bad("learner.encoder_file must name the tuned encoder's file beside the classifier file")
        if not (isinstance(dig, str) and dig.startswith("sha256:")):
            raise bad("learner.encoder_file_digest must be a sha256 digest")
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
    """sha256 of what decides a score or a decision: the model and its fold models, the turns it was trained on,
    the threshold and what it does, the features and the encoder's digest."""
    learner = {"learner": doc["learner"]} if doc.get("learner") else {}  # files before learners digest without it
    body = json.dumps(
        {
            **learner,
            "model": doc.get("model"),
            "folds": doc.get("folds"),
            "training": doc.get("training"),
            "decision": doc.get("decision"),
            "features": doc.get("features"),
            "encoder": (doc.get("encoder") or {}).get("digest"),
        },
        sort_keys=True,
    )
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def training_index(record: dict) -> dict:
    """A record of training turns (``training_record``'s lists) as ``{(conversation_id, turn_index): (position,
    reply digest)}``, for ``training_positions``."""
    return {
        (str(c), int(i)): (k, d)
        for k, (c, i, d) in enumerate(zip(record["conversation_id"], record["turn_index"], record["reply_digest"]))
    }


def training_positions(index: dict, conversation_ids: list, turn_indices: list, replies, rows) -> np.ndarray:
    """For each of ``rows``, the position in a training record (``training_index``) of the turn it is -- the same
    key and, where both the record and the table have it, the same reply -- else -1. ``replies`` None: a table
    without them, matched by key."""
    out = np.full(len(rows), -1, dtype=np.int64)
    if not index:
        return out
    for j, i in enumerate(rows):
        c, t = conversation_ids[i], turn_indices[i]
        if c is None or t is None:
            continue
        hit = index.get((str(c), int(t)))
        if hit is not None and (hit[1] is None or replies is None or reply_digest(replies[i]) == hit[1]):
            out[j] = hit[0]
    return out


def reply_digest(text) -> str:
    """A short digest of a reply's text: a training turn is known by its key and this."""
    return hashlib.sha256(str(text or "").encode("utf-8")).hexdigest()[:16]


def model_probability(m: dict, x: np.ndarray) -> np.ndarray:
    """P(adherent) of feature rows ``x`` by one model (``{"mean", "scale", "coef", "intercept"}``)."""
    z = ((x - np.asarray(m["mean"], dtype=np.float64)) / np.asarray(m["scale"], dtype=np.float64)) @ np.asarray(
        m["coef"], dtype=np.float64
    ) + float(m["intercept"])
    return 1.0 / (1.0 + np.exp(-np.clip(z, -35, 35)))


def encoder_file_of(classifier_path: str) -> str:
    """Where a classifier file's tuned encoder travels: beside it, ``<name>.encoder.tar``."""
    return f"{classifier_path}.encoder.tar"


def pack_encoder(directory: os.PathLike) -> bytes:
    """A saved checkpoint directory as one tar (files sorted, times and owners zeroed: the same files give the same
    bytes, so the digest names the model)."""
    root = Path(directory)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(q for q in root.rglob("*") if q.is_file()):
            info = tarfile.TarInfo(p.relative_to(root).as_posix())
            info.size = p.stat().st_size
            info.mtime = 0
            info.mode = 0o644
            with open(p, "rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


def unpack_encoder(tar_path: str, digest: str, *, file: str) -> Path:
    """The checkpoint in a classifier's encoder file, unpacked once into the user's cache (atomically) under its
    digest; the file is checked against ``digest`` first (a one-line ``DataError`` naming ``file`` otherwise)."""
    from .._atomic import atomic_path
    from ..data import DataError
    from ..models import cache_dir

    hexd = digest.split(":", 1)[-1]
    target = cache_dir() / "tuned" / hexd[:32]
    if (target / "config.json").is_file():
        return target
    try:
        raw = Path(tar_path).read_bytes()
    except FileNotFoundError:
        raise DataError(
            f"this classifier's tuned encoder {Path(tar_path).name} is not beside it: copy it with the classifier "
            "file, or fit again",
            file=file,
        ) from None
    if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
        raise DataError(
            f"the tuned encoder {Path(tar_path).name} does not match the digest this classifier file records (was "
            "it replaced?): fit again with `adherence classifier fit --learner fine-tuned`",
            file=file,
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp, tarfile.open(fileobj=io.BytesIO(raw), mode="r") as tar:
        tmp.mkdir()
        for m in tar.getmembers():
            if not m.isfile() or m.name.startswith("/") or ".." in Path(m.name).parts:
                raise DataError(f"the tuned encoder {Path(tar_path).name} holds an unsafe entry {m.name!r}", file=file)
        tar.extractall(tmp, filter="data")
    return target

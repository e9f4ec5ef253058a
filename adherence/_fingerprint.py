"""Which options decide scores: the one place a resumed job's fingerprint is derived from.

An option field says it in its own declaration: ``metadata={"affects_scores": False}`` for options that
only change where or how fast work runs or how it is reported (a resumed job may change them freely),
and ``metadata={"score_options": fn}`` for a field of free-form options (a judge backend's constructor
options) whose score-deciding part ``fn(config, value)`` returns. Every other field is part of the
fingerprint, nested option dataclasses field by field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

__all__ = ["COSMETIC", "score_fingerprint", "score_hash"]

#: Field metadata of an option that never changes a score.
COSMETIC = {"affects_scores": False}


def score_fingerprint(config: Any) -> Any:
    """The score-deciding options of ``config`` (a dataclass, nested ones included) as plain data."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return config
    out = {}
    for f in dataclasses.fields(config):
        if f.metadata.get("affects_scores", True) is False:
            continue
        value = getattr(config, f.name)
        narrow = f.metadata.get("score_options")
        out[f.name] = narrow(config, value) if narrow is not None else score_fingerprint(value)
    return out


def score_hash(config: Any) -> str:
    """A short digest of ``score_fingerprint(config)``: equal exactly when the score-deciding options are."""
    text = json.dumps(score_fingerprint(config), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]

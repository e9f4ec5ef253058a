"""Calibration files: what ``adherence calibrate`` writes and ``score --calibration`` / ``evaluate
--calibration`` apply.

A calibration file (JSON) holds the threshold on the raw score, the probability map, what the scores it was
fitted on came from (method, judge or encoder, input digest), and the fit's held-out check. Applying it sets
the decision threshold (``prediction = score >= threshold``) and adds ``calibrated_score``, the mapped
probability; the raw ``score`` is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional, Union

import numpy as np

from .._errors import OptionError

__all__ = [
    "FORMAT",
    "Calibration",
    "calibration_document",
    "check_judge",
    "fitted_rows",
    "load_calibration",
    "map_digest",
]

FORMAT = "adherence-calibration/1"


class Calibration:
    """A loaded calibration file."""

    def __init__(self, data: dict, path: Optional[str] = None, file_digest: Optional[str] = None) -> None:
        from ..stats import CalibrationMap

        self.data = data
        self.path = path
        self.file_digest = file_digest
        self.threshold = float(data["threshold"])
        self.map = CalibrationMap.from_dict(data["map"])
        self.source = data.get("source") or {}

    @property
    def method(self) -> Optional[str]:
        return self.source.get("method")

    def describe(self) -> dict:
        """What a run's metadata records about the calibration it applied (with the turns it was fitted on, when
        the file records them: ``fitted_rows`` finds them in the output)."""
        out = {
            "path": self.path,
            "file_digest": self.file_digest,
            "digest": self.data.get("digest"),
            "threshold": self.threshold,
            "map": self.map.method,
            "rule": self.data.get("rule"),
            "target": self.data.get("target"),
            "fitted_on": self.source,
        }
        if isinstance(self.data.get("training"), dict):
            out["training"] = self.data["training"]
        return out

    def check_layout(self, layout: Optional[str]) -> None:
        """A judge's P(yes) under another prompt layout is another score."""
        fitted = self.source.get("judge_layout")
        if fitted and layout and fitted != layout:
            raise OptionError(
                f"{self.path}: this calibration was fitted on judge scores with --judge-layout {fitted}; the run "
                f"uses {layout} (fit one on its scores, or pass --calibration-any-judge)"
            )

    def check_method(self, method: str) -> None:
        """A calibration fitted on one method's scores means nothing on another's."""
        if self.method and method != self.method:
            raise OptionError(
                f"{self.path}: this calibration was fitted on {self.method} scores; the run scores with "
                f"{method} (fit one on {method} scores with `adherence calibrate`)"
            )


def resolve_calibration(config, method) -> tuple:
    """``(threshold, calibration)`` of a ``RoleConfig`` whose ``calibration`` is a calibration file's path or the
    dict a run records: the rule that a calibration decides the threshold, written once for the CLI and Python
    alike. A path is loaded and checked against the run (the method it was fitted on; a threshold given beside it;
    a scale that depends on the job, as ``method`` -- the config's ``Method`` -- says; the judge's prompt layout unless
    ``calibration_any_judge``); the dict (what workers receive) keeps a threshold already set."""
    cal = config.calibration
    if isinstance(cal, dict):
        return (cal.get("threshold") if config.threshold is None else config.threshold), cal
    loaded = load_calibration(cal)
    loaded.check_method(config.method)
    if config.threshold is not None:
        raise OptionError(
            f"give --threshold or --calibration, not both (the calibration file holds the threshold: "
            f"{loaded.threshold:.6g})"
        )
    if method.scale_depends_on_job(config):
        raise OptionError(
            f"--calibration with --method {config.method} needs a fixed --alpha: with 'median' the score's scale "
            "depends on each job, so a fitted threshold does not carry over"
        )
    if method.uses_judge and not config.calibration_any_judge and config.judge is not None:
        loaded.check_layout(getattr(config.judge, "layout", None))
    return loaded.threshold, dict(loaded.describe(), map=loaded.map.to_dict())


def check_judge(calibration: Optional[dict], backend) -> None:
    """A calibration of one judge's P(yes) means nothing for another's: refuse the job's judge when the
    calibration (as ``RoleConfig.calibration`` holds it) was fitted on another model or backend. A model
    served by OpenAI-compatible servers is the same judge on any endpoint."""
    fitted = ((calibration or {}).get("fitted_on") or {}).get("judge")

    def identity(model_id: str) -> str:  # an OpenAI-compatible server's model id names its endpoints too
        return "openai::" + model_id.rsplit("::", 1)[-1] if model_id.startswith("openai:") else model_id

    if not fitted or identity(fitted) == identity(backend.model_id):
        return
    raise OptionError(
        f"{(calibration or {}).get('path')}: this calibration was fitted on the scores of judge {fitted}; this job's judge "
        f"is {backend.model_id} (fit one on its scores, or pass --calibration-any-judge)"
    )


def map_digest(doc: dict) -> str:
    """The digest ``adherence calibrate`` writes beside a calibration's threshold and map, and the turns they were
    fitted on where recorded (and checks on load)."""
    keys = ("threshold", "map", "training") if "training" in doc else ("threshold", "map")
    text = json.dumps({k: doc.get(k) for k in keys}, sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def calibration_document(fit: dict, source: dict, training: Optional[dict] = None) -> dict:
    """A calibration file's document (what ``load_calibration`` reads): the fitted threshold and probability map of
    ``fit`` (``adherence.stats.fit_calibration``'s result), what the scores came from (``source``), the turns they
    were fitted on (``training``: ``training_record``'s lists, a reply digest None where the table had no reply),
    and the digest ``load_calibration`` checks. ``adherence calibrate`` writes it through the one owner-checked
    writer."""
    from .._version import __version__

    doc: dict = {
        "format": FORMAT,
        "threshold": fit["threshold"],
        "map": fit["map"],
        "rule": fit["rule"],
        "target": fit["target"],
        "source": source,
        "fit": fit,
        "adherence": __version__,
    }
    if training is not None:
        doc["training"] = training
    doc["digest"] = map_digest(doc)
    return doc


def fitted_rows(record: Optional[dict], table) -> Optional[np.ndarray]:
    """Which rows of ``table`` are turns the calibration ``record`` (a calibration file's document, or what a run
    records of the one it applied) was fitted on: a turn is known by its key and, where both sides have it, its
    reply. None when the record lists no turns (a file written before they were recorded): that cannot be told.

    A threshold and a map chosen on labelled turns are in-sample there: a figure computed on those turns with
    them is not a held-out figure."""
    from ._classifier_file import training_index, training_positions

    t = (record or {}).get("training")
    if not isinstance(t, dict):
        return None
    cols = table.column_names
    if "conversation_id" not in cols or "turn_index" not in cols:
        return np.zeros(table.num_rows, dtype=bool)
    replies = table.column("assistant").to_pylist() if "assistant" in cols else None
    at = training_positions(
        training_index(t),
        table.column("conversation_id").to_pylist(),
        table.column("turn_index").to_pylist(),
        replies,
        range(table.num_rows),
    )
    return at >= 0


def load_calibration(path: Union[str, os.PathLike]) -> Calibration:
    """Read and check a calibration file; a ValueError naming the file and what is wrong."""
    from ..data import DataError

    p = Path(path)
    try:
        raw = p.read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"not a calibration file ({exc})", file=str(path)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(
            f'not a calibration file (no "format": "{FORMAT}"; write one with `adherence calibrate`)', file=str(path)
        )
    try:
        cal = Calibration(data, str(path), "sha256:" + hashlib.sha256(raw).hexdigest())
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"malformed calibration file ({exc})", file=str(path)) from None
    if not (np.isfinite(cal.threshold) and 0.0 <= cal.threshold <= 1.0):
        raise DataError(
            f"malformed calibration file (`threshold` must be a score in [0, 1], got {data.get('threshold')!r})",
            file=str(path),
        )
    if data.get("digest") != map_digest(data):
        raise DataError(
            "this calibration was edited after it was fitted (its threshold and map no longer match the "
            f"digest {data.get('digest')!r} written with them); fit it again with `adherence calibrate`",
            file=str(path),
        )
    return cal

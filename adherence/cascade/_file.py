"""The cascade file ``adherence cascade fit`` writes, and the stages' scoring options read back from it."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Union

from .._errors import OptionError

__all__ = ["FORMAT", "cascade_digest", "load_cascade", "stage_configs"]

FORMAT = "adherence-cascade/1"


def load_cascade(path: Union[str, os.PathLike]) -> dict:
    """The cascade file at ``path``, checked (format, stages with thresholds); a one-line ``DataError`` naming the
    file otherwise."""
    from ..data import DataError

    try:
        raw = open(path, encoding="utf-8").read()
        doc = json.loads(raw)
    except FileNotFoundError:
        raise DataError("no such cascade file", file=str(path)) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"not a cascade file ({exc})", file=str(path)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DataError(
            f"not a cascade file (no format {FORMAT!r}; write one with `adherence cascade fit`)", file=str(path)
        )
    stages = doc.get("stages")
    if not isinstance(stages, list) or not stages or not all(isinstance(s, dict) for s in stages):
        raise DataError("malformed cascade file (no stages)", file=str(path))
    for name in ("alpha", "delta"):
        v = doc.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
            raise DataError(f"malformed cascade file ({name} must be in (0, 1), got {v!r})", file=str(path))
    for i, s in enumerate(stages, start=1):
        if s.get("stage") != i:
            raise DataError(f"malformed cascade file (stage {i} is numbered {s.get('stage')!r})", file=str(path))
        t = s.get("threshold")
        # a confidence is a distance from the score's threshold: a number in [0, 1]; None accepts nothing
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 1):
            raise DataError(
                f"malformed cascade file (stage {i}: threshold {t!r} is not a confidence in [0, 1] or null)",
                file=str(path),
            )
        st = s.get("score_threshold", 0.5)
        if isinstance(st, bool) or not isinstance(st, (int, float)) or not 0 <= st <= 1:
            raise DataError(f"malformed cascade file (stage {i}: score_threshold {st!r})", file=str(path))
    if doc.get("digest") != cascade_digest(doc):
        # an in-range alpha, p-value or error count edited by hand would claim a guarantee nobody tested
        raise DataError(
            "this cascade file was edited after it was fitted (its content no longer matches the digest written with "
            "it; a file of an older release has none): fit it again with `adherence cascade fit`",
            file=str(path),
        )
    return doc


def cascade_digest(doc: dict) -> str:
    """sha256 over everything a cascade file says (its guarantee, each stage's threshold, errors and p-value, the
    outputs' digests), but the digest itself."""
    import hashlib

    body = json.dumps({k: v for k, v in doc.items() if k != "digest"}, sort_keys=True, default=repr)
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


#: Options recorded under an earlier name by the cascade files of earlier versions.
_RENAMED = {"top_k": "top_logprobs", "timeout": "request_timeout"}


def _known(cls, d: dict) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    d = {_RENAMED.get(k, k) if _RENAMED.get(k) in names else k: v for k, v in d.items()}
    return {k: v for k, v in d.items() if k in names}


def stage_configs(doc: dict, *, path: str = "", overrides: dict | None = None) -> list:
    """Each stage's ``RoleConfig``, rebuilt from the scoring options its output's metadata recorded (the cascade
    file keeps them), with ``overrides`` (options that do not change scores: device, batch size) applied.

    A stage whose options were not recorded (a table scored elsewhere) cannot be run: a one-line error says so.
    Options that make a stage's scores depend on which turns are in its pass (Mahalanobis' ``alpha=median``, the
    ``dataset`` reference pool) are refused for the stages after the first, which score only the turns left.
    """
    from ..data import REDACTED, DataError
    from ..judges import JudgeConfig, capabilities
    from ..role import RoleConfig, get_method

    configs = []
    for i, st in enumerate(doc["stages"], start=1):
        opts = st.get("options")
        if not isinstance(opts, dict) or not opts.get("method"):
            raise DataError(
                f"stage {i} ({st.get('path')}) has no recorded scoring options (it was not written by "
                "`adherence score`), so `score --cascade` cannot run it; score it with `adherence score` and fit again",
                file=path,
            )
        opts = dict(opts)
        judge = opts.pop("judge", None)
        calibration = opts.pop("calibration", None)
        kw = _known(RoleConfig, opts)
        kw.pop("reference_file", None)  # the pass's own references are collected by its job
        if isinstance(judge, dict):
            j = _known(JudgeConfig, judge)
            backend = {
                _RENAMED.get(k, k) if k == "timeout" else k: v
                for k, v in (j.get("backend_options") or {}).items()
                if v != REDACTED
            }
            j["backend_options"] = backend  # a redacted key: the backend reads its environment variable again
            kw["judge"] = JudgeConfig(**j)
        if isinstance(calibration, dict):
            kw["calibration"] = _reload_calibration(calibration, i, path)
        over = {k: v for k, v in (overrides or {}).items() if v is not None}
        kw.update(over)
        if over.get("device") and isinstance(kw.get("judge"), JudgeConfig) and capabilities(kw["judge"].backend).device:
            opts_j = dict(kw["judge"].backend_options or {}, device=over["device"])
            kw["judge"] = dataclasses.replace(kw["judge"], backend_options=opts_j)
        try:
            config = RoleConfig(**kw)
        except (TypeError, ValueError) as exc:
            raise DataError(f"stage {i}: its recorded options are not usable ({exc})", file=path) from None
        if i > 1 and get_method(config.method).scale_depends_on_job(config):
            raise OptionError(
                f"stage {i} ({config.method}) was scored with --alpha median, whose scale depends on the turns in the "
                "job: a later stage scores only the turns left, so score it with a fixed --alpha and fit again"
            )
        if i > 1 and config.reference_pool == "dataset":
            raise OptionError(
                f"stage {i} uses --references dataset (every ground truth of the job): a later stage scores only "
                "the turns left, so its pool would differ; use per_turn references or put it first"
            )
        configs.append(config)
    return configs


def _reload_calibration(recorded: dict, stage: int, path: str) -> Any:
    """The calibration a stage applied, read again from its file and checked against the recorded digest."""
    from ..data import DataError
    from ..role import load_calibration

    where = recorded.get("path")
    if not where or not os.path.exists(where):
        raise DataError(f"stage {stage} applied the calibration {where!r}, which is not there now", file=path)
    cal = load_calibration(where)
    if recorded.get("file_digest") and cal.file_digest != recorded["file_digest"]:
        raise DataError(
            f"stage {stage}: the calibration {where} changed since the stage was scored (digest "
            f"{recorded['file_digest']} -> {cal.file_digest})",
            file=path,
        )
    return dict(cal.describe(), map=cal.map.to_dict())

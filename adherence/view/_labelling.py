"""Labelling in the viewer: a sample of turns drawn with a recorded seed, one label written durably at a time.

The labels file (``adherence.data._labels``) is an append-only log of JSON lines. It is created through the one
owner-checked writer (with its first line, the sample: seed, design, size and each sampled turn's design weight),
and then only appended to, one line per action, each flushed to disk (``fsync``) before the action is answered:
a killed server loses nothing that was answered, and a reopened one draws nothing new -- it reads the sample from
the file's first line and resumes at the first turn this labeller has not labelled.

Designs:

- ``uniform``: a simple random sample of the output's turns; every weight is population / sample, and estimates
  from it are the plain ones.
- ``by-score``: stratified by the score (five strata of equal width over the score's range, unscored turns a
  stratum of their own), the same number of turns from each: the rare low scores are drawn far more often than
  their share, for training and calibration. Each turn records its weight (stratum size / turns drawn from it) so
  ``estimate`` stays unbiased.
- ``by-uncertainty``: the turns the scorer is least sure of drawn most: five strata of equal size by how close the
  score lies to the decision threshold (the output's own, else 0.5 for probabilities), the turns drawn from each in
  proportion to its size times its mean closeness (every stratum at least one). Labels there teach a classifier
  most; each turn records its weight (stratum size / turns drawn from it), so estimates stay unbiased.

The page is blind by default: it shows the turn, its role and the conversation so far, never the scorer's score (a
label made looking at the score agrees with it more than it should); ``--show-scores`` shows it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .._errors import OptionError
from ..data import LABELS_HEADER, SKIP, DataError, read_labels

__all__ = ["DESIGNS", "LABEL_VALUES", "LabelSession", "draw_sample"]

DESIGNS = ("uniform", "by-score", "by-uncertainty")
LABEL_VALUES = ("adherent", "violation", SKIP)
_STRATA = 5


def closeness(scores: np.ndarray, threshold: Optional[float] = None) -> np.ndarray:
    """How unsure the scorer is of each turn, in [0, 1]: 1 at the decision threshold, 0 at the score range's far end
    (``threshold``: the output's; None: 0.5 for scores in [0, 1], else the median). NaN stays NaN."""
    s = np.asarray(scores, dtype=np.float64)
    finite = s[np.isfinite(s)]
    if not len(finite):
        return s.copy()
    lo, hi = float(finite.min()), float(finite.max())
    if threshold is None:
        threshold = 0.5 if lo >= 0.0 and hi <= 1.0 else float(np.median(finite))
    reach = max(threshold - min(lo, threshold), max(hi, threshold) - threshold)
    if reach <= 0:
        return np.where(np.isfinite(s), 1.0, np.nan)
    return 1.0 - np.abs(s - threshold) / reach


def _allocate(sizes: list, wants: list, n: int) -> list:
    """Turns to draw from each stratum: ``n`` in proportion to ``wants`` (largest remainders), at least one from
    every stratum while ``n`` allows, never more than a stratum holds; what one cannot take goes to the others."""
    order = sorted((i for i in range(len(sizes)) if sizes[i]), key=lambda i: -wants[i])
    take = [0] * len(sizes)
    for i in order[:n]:
        take[i] = 1
    left = n - sum(take)
    while left > 0:
        open_ = [i for i in range(len(sizes)) if take[i] < sizes[i]]
        if not open_:
            break
        w = np.array([max(float(wants[i]), 0.0) for i in open_])
        w = w if w.sum() > 0 else np.ones(len(open_))
        quota = w / w.sum() * left
        add = np.floor(quota).astype(np.int64)
        add[np.argsort(-(quota - add), kind="stable")[: left - int(add.sum())]] += 1
        for j, i in enumerate(open_):
            got = min(int(add[j]), sizes[i] - take[i])
            take[i] += got
            left -= got
    return take


def draw_sample(
    keys: list, scores: np.ndarray, n: int, design: str, seed: int, *, threshold: Optional[float] = None
) -> list:
    """``[(conversation_id, turn_index, weight), ...]`` in the order to label them: ``n`` of ``keys`` drawn by
    ``design`` with ``numpy.random.default_rng(seed)``; ``weight`` is 1 / the turn's inclusion probability
    (``threshold``: the decision threshold ``by-uncertainty`` centres on)."""
    if design not in DESIGNS:
        raise OptionError(f"--design must be one of {', '.join(DESIGNS)}, got {design!r}")
    big_n = len(keys)
    if n < 1:
        raise OptionError(f"--sample must be >= 1, got {n}")
    n = min(n, big_n)
    rng = np.random.default_rng(seed)
    if design == "uniform":
        idx = rng.choice(big_n, size=n, replace=False)
        return [(keys[i][0], keys[i][1], big_n / n) for i in idx]
    s = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(s)
    stratum = np.full(big_n, _STRATA)  # unscored turns: a stratum of their own
    if design == "by-uncertainty":
        near = closeness(s, threshold)
        if finite.any():  # equal-size strata by closeness (ranks: ties split evenly)
            order = np.argsort(near[finite], kind="stable")
            ranks = np.empty(int(finite.sum()), dtype=np.int64)
            ranks[order] = np.arange(len(order))
            stratum[finite] = ranks * _STRATA // len(order)
        groups = [np.flatnonzero(stratum == h) for h in range(_STRATA + 1)]
        groups = [g for g in groups if len(g)]
        wants = [len(g) * (float(np.nanmean(near[g])) if np.isfinite(near[g]).any() else 0.5) for g in groups]
        take = _allocate([len(g) for g in groups], wants, n)
        return _draw(keys, groups, take, rng)
    if finite.any():
        lo, hi = float(s[finite].min()), float(s[finite].max())
        edges = np.linspace(lo, hi, _STRATA + 1)[1:-1]  # equal widths: rare scores get strata of their own
        stratum[finite] = np.searchsorted(edges, s[finite], side="right")
    groups = [np.flatnonzero(stratum == h) for h in range(_STRATA + 1)]
    groups = [g for g in groups if len(g)]
    take = [0] * len(groups)
    left = n
    while left:  # equal allocation, what a small stratum cannot take goes to the others
        open_ = [i for i, g in enumerate(groups) if take[i] < len(g)]
        share = max(1, left // len(open_))
        for i in open_:
            add = min(share, len(groups[i]) - take[i], left)
            take[i] += add
            left -= add
            if not left:
                break
    return _draw(keys, groups, take, rng)


def _draw(keys: list, groups: list, take: list, rng) -> list:
    """``take[h]`` turns from each stratum ``groups[h]`` without replacement, each weighted by its stratum's size
    over the turns drawn from it, in a shuffled order."""
    out = []
    for g, k in zip(groups, take):
        if k:
            for i in rng.choice(g, size=k, replace=False):
                out.append((keys[i][0], keys[i][1], len(g) / k))
    order = rng.permutation(len(out))
    return [out[i] for i in order]


@dataclass
class _Progress:
    labelled: int
    skipped: int
    size: int


class LabelSession:
    """One labels file being written by one labeller over one score output.

    Args:
        path: the labels file (JSONL); created with the sample when it does not exist, resumed when it does.
        keys: the output's turns ``[(conversation_id, turn_index)]``, and ``scores`` their scores (NaN: none).
        sample, design, seed: the sample to draw when the file is new (given again on a resumed file, they must
            match its record).
        labeller: who labels (kept on every line).
        source: the score output (recorded in the sample).
    """

    def __init__(
        self,
        path: str,
        keys: list,
        scores: np.ndarray,
        *,
        labeller: Optional[str],
        source: str,
        sample: Optional[int] = None,
        design: Optional[str] = None,
        seed: Optional[int] = None,
        show_scores: bool = False,
        threshold: Optional[float] = None,
    ) -> None:
        self.path = Path(path)
        self.show_scores = show_scores
        self.notes: list = []  # what the command should say once (a kept labeller, another source output)
        self._lock = threading.Lock()
        self.scores = {k: float(s) for k, s in zip(keys, scores)}
        scored = np.isfinite(np.asarray(scores, dtype=np.float64))
        # every scored turn and its conversation, for the estimate the page shows after each label
        self._scored = np.asarray(scores, dtype=np.float64)[scored]
        self._scored_cids = np.array([k[0] for k, ok in zip(keys, scored) if ok])
        if self.path.exists():
            labels = read_labels(self.path)
            if labels.sample is None:
                raise DataError(
                    "this labels file has no sample record (its first line): it was not started by `adherence view "
                    "--label`; give a new file to label into",
                    file=str(self.path),
                )
            fixed = _drop_torn_tail(self.path)
            rec = _checked_sample(labels.sample, str(self.path))
            for name, given in (("size", sample), ("design", design), ("seed", seed)):
                if given is not None and rec.get(name) != given:
                    raise OptionError(
                        f"{self.path} holds a sample with {name} {rec.get(name)!r}, not {given!r}: resume it without "
                        f"--sample/--design/--seed, or label into a new file"
                    )
            present = set(self.scores)
            gone = [k for k in rec["turns"] if (k[0], k[1]) not in present]
            if gone:
                raise DataError(
                    f"{len(gone)} sampled turn(s) are not in {source} (first: {gone[0][0]}/{gone[0][1]}): is this the "
                    "labels file of this output?",
                    file=str(self.path),
                )
            self.record = rec
            if fixed:
                self.notes.append(fixed)
            if rec.get("source") and str(rec["source"]) != str(source):
                self.notes.append(f"{self.path}: its sample was drawn from {rec['source']}; labelling it over {source}")
            if labeller is None:
                names = sorted(labels.by_labeller())
                if len(names) == 1:
                    labeller = names[0]
                    self.notes.append(f"labelling as {labeller!r}, the labeller of {self.path} (--labeller NAME to "
                                      "label as another)")  # fmt: skip
        else:
            size = 100 if sample is None else sample
            design = design or "uniform"
            seed = 0 if seed is None else seed
            drawn = draw_sample(keys, scores, size, design, seed, threshold=threshold)
            self.record = {
                "size": size,
                "design": design,
                "seed": seed,
                "population": len(keys),
                "source": source,
                "created": _now(),
                "turns": [[c, t, w] for c, t, w in drawn],
            }
            from ..engine import write_owned

            header = json.dumps({LABELS_HEADER: 1, "sample": self.record}, ensure_ascii=False) + "\n"
            write_owned(self.path, header, what="the labels file", inputs=[source])
        if labeller is None:
            import getpass

            try:
                labeller = getpass.getuser()
            except (KeyError, OSError):
                labeller = "labeller"
        self.labeller = labeller
        self.turns = [(str(c), int(t)) for c, t, _ in self.record["turns"]]
        self.weights = {(str(c), int(t)): float(w) for c, t, w in self.record["turns"]}

    # ---------------------------------------------------------------- reading

    def labels(self):
        return read_labels(self.path)

    def mine(self, labels=None) -> dict:
        """This labeller's labels in force (skips included), by key (``labels``: the file as read already)."""
        out = {}
        for (cid, ti, who), e in (labels or self.labels()).latest().items():
            if who == self.labeller and e["label"] is not None:
                out[(cid, ti)] = e["label"]
        return out

    def position(self, mine: Optional[dict] = None) -> int:
        """The first sampled turn this labeller has not labelled (the sample's size when all are)."""
        mine = self.mine() if mine is None else mine
        return next((i for i, k in enumerate(self.turns) if k not in mine), len(self.turns))

    def state(self) -> dict:
        """The sample's progress, the estimate the labels give now, and the labellers' agreement (the labels file
        read once)."""
        labels = self.labels()
        mine = {k: v for k, v in self.mine(labels).items() if k in self.weights}
        done = sum(v != SKIP for v in mine.values())
        return {
            "labeller": self.labeller,
            "file": str(self.path),
            "design": self.record["design"],
            "seed": self.record["seed"],
            "size": len(self.turns),
            "population": self.record["population"],
            "labelled": done,
            "skipped": sum(v == SKIP for v in mine.values()),
            "position": self.position(mine),
            "labels": {f"{c}\x00{t}": v for (c, t), v in mine.items()},
            "estimate": self._estimate(labels),
            "agreement": _agreement(labels),
            "blind": not self.show_scores,
            "next": self._next_steps() if done + sum(v == SKIP for v in mine.values()) >= len(self.turns) else [],
        }

    def _next_steps(self) -> list:
        """The commands that use the finished sample, as the finish screen prints them."""
        import shlex

        src, lab = shlex.quote(str(self.record.get("source") or "SCORES")), shlex.quote(str(self.path))
        return [
            f"adherence classifier fit {src} --labels {lab} -o clf.json",
            f"adherence evaluate {src} --labels {lab}",
            f"adherence estimate {src} --labels {lab}",
        ]

    def _estimate(self, labels) -> Optional[dict]:
        """The adherent share the labels give now, as ``estimate`` would: prediction-powered with the output's
        scores on every scored turn when the labelled ones all have one, from the labels alone otherwise; weighted
        by the design, clustered by conversation (95% interval, as every command's)."""
        from ..stats import ppi_mean

        resolved, _, _ = labels.resolved()
        keys = [k for k in resolved if k in self.weights and resolved[k] in ("adherent", "violation")]
        if len(keys) < 2:
            return None
        y = np.array([float(resolved[k] == "adherent") for k in keys])
        w = np.array([self.weights[k] for k in keys])
        f = np.array([self.scores.get(k, np.nan) for k in keys])
        cl = np.array([k[0] for k in keys])
        if np.isfinite(f).all() and len(self._scored) > len(keys):
            r = ppi_mean(y, f, self._scored, weights=w, clusters_labelled=cl, clusters_unlabelled=self._scored_cids)
            how = "prediction-powered, 95%"
        else:  # lam 0: the labels alone (the judge's part, here zeros, carries no weight)
            r = ppi_mean(y, np.zeros(len(y)), np.zeros(1), weights=w, lam=0.0, clusters_labelled=cl)
            how = "labels only, 95%"
        # a share lies in [0, 1]: the normal interval is cut there (``estimate`` reports it uncut)
        return {"estimate": min(max(r["estimate"], 0.0), 1.0), "ci_low": max(r["ci_low"], 0.0),
                "ci_high": min(r["ci_high"], 1.0), "n": len(keys), "how": how}  # fmt: skip

    # ---------------------------------------------------------------- writing

    def write(self, index: int, label: Optional[str]) -> dict:
        """Record this labeller's ``label`` (``None``: undo) for sampled turn ``index``, on disk before returning."""
        if not isinstance(index, int) or not 0 <= index < len(self.turns):
            raise OptionError(f"index must be a sampled turn, 0 to {len(self.turns) - 1}; got {index!r}")
        if label is not None and label not in LABEL_VALUES:
            raise OptionError(f"label must be one of {', '.join(LABEL_VALUES)} or null (undo); got {label!r}")
        cid, ti = self.turns[index]
        line = json.dumps({
            "conversation_id": cid, "turn_index": ti, "label": label, "labeller": self.labeller,
            "labelled_at": _now(), "weight": self.weights[(cid, ti)],
        }, ensure_ascii=False) + "\n"  # fmt: skip
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, line.encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
        return self.state()


def _checked_sample(rec: Any, file: str) -> dict:
    """A labels file's sample record as the session uses it, or a one-line ``DataError``: its ``turns`` a list of
    ``[conversation_id, turn_index, weight]`` with an id, an index >= 0 and a design weight >= 1 (1 / an inclusion
    probability), the labels the session writes with it being ones its own reader takes."""
    if not isinstance(rec, dict):
        raise DataError("the sample record (its first line) is not an object", file=file, row=1)
    turns = rec.get("turns")
    if not isinstance(turns, list) or not turns:
        raise DataError("the sample record (its first line) has no turns: start a new labels file", file=file, row=1)
    for j, t in enumerate(turns, start=1):
        ok = isinstance(t, list) and len(t) == 3
        if ok:
            cid, ti, w = t
            ok = (isinstance(cid, (str, int)) and not isinstance(cid, bool) and str(cid).strip() != ""
                  and isinstance(ti, int) and not isinstance(ti, bool) and ti >= 0
                  and isinstance(w, (int, float)) and not isinstance(w, bool) and np.isfinite(w) and w >= 1)  # fmt: skip
        if not ok:
            raise DataError(
                f"the sample record's turn {j} is {t!r}, not [conversation_id, turn_index >= 0, weight >= 1]: the file "
                "was edited; start a new labels file or restore it",
                file=file,
                row=1,
            )
    return rec


def _drop_torn_tail(path: Path) -> Optional[str]:
    """Before anything is appended: a last line without its newline is completed when it is a whole record (an editor
    or a script that saved the file without a final newline: the label is kept), or, when a kill cut it short (the
    label being written was never made, and the reader leaves it out), moved to ``<file>.torn`` and removed, or the
    next label would be joined to it. Returns a line to print when something was changed (None when nothing)."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        f.seek(max(0, size - 65_536))
        tail = f.read()
        if tail.endswith(b"\n"):
            return None
        cut = tail.rfind(b"\n")
        if cut < 0 and size > len(tail):
            return None  # a last line longer than 64 KiB is no label of ours: left for the reader to name
        last = tail[cut + 1 :]
        try:
            whole = isinstance(json.loads(last.decode("utf-8")), dict)
        except (UnicodeDecodeError, ValueError):
            whole = False
        if whole:  # a whole record without its newline: completed, never dropped
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
            return f"{path}: its last line had no final newline; completed (the label on it is kept)"
        torn = path.with_name(path.name + ".torn")
        with open(torn, "ab") as out:
            out.write(last + b"\n")
            out.flush()
            os.fsync(out.fileno())
        f.truncate(size - len(tail) + cut + 1)
        f.flush()
        os.fsync(f.fileno())
        return f"{path}: its last line was cut short (a writer stopped mid-line); moved to {torn.name}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _agreement(labels) -> Optional[dict]:
    """Agreement of the labellers on the turns two or more of them labelled (None with fewer than two)."""
    from ..stats import UndefinedMetricError, agreement, cohen_kappa

    by = labels.by_labeller()
    if len(by) < 2:
        return None
    names = sorted(by)
    items = sorted({k for m in by.values() for k in m})
    ratings = [[by[n].get(k) for n in names] for k in items]
    shared = [r for r in ratings if sum(v is not None for v in r) >= 2]
    if not shared:
        return {"labellers": names, "n_shared": 0}
    out: dict[str, Any] = {"labellers": names, "n_shared": len(shared)}
    try:
        a = agreement(ratings)  # every labelled turn: a turn one labeller saw still tells how common each label is
        out.update(percent_agreement=a.percent_agreement, gwet_ac1=a.gwet_ac1, fleiss_kappa=a.fleiss_kappa)
    except UndefinedMetricError as exc:
        out["note"] = str(exc)
    if len(names) == 2:
        both = [r for r in shared if None not in r]
        try:
            out["cohen_kappa"] = cohen_kappa([r[0] for r in both], [r[1] for r in both]) if both else None
        except (UndefinedMetricError, ValueError, ZeroDivisionError) as exc:
            out["cohen_kappa_note"] = str(exc)
    return out

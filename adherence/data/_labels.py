"""The labels file: the human labels every statistical command reads with ``--labels FILE``.

A labels file is a table (Parquet, JSONL or CSV) with one row per label: ``conversation_id``, ``turn_index``,
``label``, and optionally ``labeller``, ``labelled_at`` and ``weight`` (the sampling design's weight, 1 / the turn's
inclusion probability). ``adherence view OUT --label FILE`` writes one as an append-only log of JSON lines: a
first line that records the sample (``{"adherence_labels": 1, "sample": {...}}``), then one line per action; a
later line for the same turn and labeller replaces an earlier one, and ``label: null`` (an undo) withdraws it.

Reading resolves it to at most one label per turn: each labeller's last word; where several labellers gave
different labels the turn is *disputed* and left out (counted, never silently). ``join_labels`` puts the labels
on a score output's rows by ``(conversation_id, turn_index)`` and counts, and names, the labels that match no turn.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np
import pyarrow as pa

from ._errors import DataError

__all__ = [
    "LABELS_HEADER",
    "POSITIVE_WORDS",
    "LabelJoin",
    "adherent_values",
    "Labels",
    "join_labels",
    "read_labels",
    "SKIP",
]

LABELS_HEADER = "adherence_labels"
#: A label value that records a turn looked at and passed over: not a label.
SKIP = "skip"
_KEYS = ("conversation_id", "turn_index")


#: Label values that read as the positive (adherent) class.
POSITIVE_WORDS = (
    "adherent",
    "adheres",
    "yes",
    "true",
    "1",
    "pass",
    "passed",
    "positive",
    "good",
    "ok",
    "compliant",
    "in_role",
    "in-role",
)


def adherent_values(values) -> list:
    """The label values among ``values`` that read as the adherent class (``POSITIVE_WORDS``, any case): one of them
    is the class a command can take as ``--positive`` unasked."""
    return [v for v in values if str(v).strip().lower() in POSITIVE_WORDS]


@dataclass
class Labels:
    """A labels file, read.

    Attributes:
        path: the file.
        events: every label event as read (dicts with the key, ``label``, ``labeller``, ``labelled_at``, ``weight``).
        sample: the viewer's sample record (seed, design, size, keys) when the file has one, else None.
    """

    path: str
    events: list
    sample: Optional[dict] = None

    def latest(self) -> dict:
        """``{(conversation_id, turn_index, labeller): event}``: each labeller's last word on each turn (undone
        and skipped turns included, with their label)."""
        out: dict = {}
        for e in self.events:
            out[(e["conversation_id"], e["turn_index"], e.get("labeller") or "")] = e
        return out

    def by_labeller(self) -> dict:
        """``{labeller: {(conversation_id, turn_index): label}}`` of the labels in force (no undone or skipped)."""
        out: dict = {}
        for (cid, ti, who), e in self.latest().items():
            if e.get("label") not in (None, SKIP):
                out.setdefault(who, {})[(cid, ti)] = e["label"]
        return out

    def resolved(self) -> tuple[dict, dict, list]:
        """``(labels, weights, disputed)``: one label per turn where the labellers agree, its design weight
        (None when the file gives none), and the keys the labellers disagree on."""
        votes: dict = {}
        weights: dict = {}
        # a row without a labeller is a plain table's, not an action in a labeller's log: every such row is a vote
        # (two rows of one key that disagree are disputed, not settled by their order)
        plain = [e for e in self.events if not e.get("labeller")]
        for e in [e for k, e in self.latest().items() if k[2]] + plain:
            if e.get("label") in (None, SKIP):
                continue
            cid, ti = e["conversation_id"], e["turn_index"]
            votes.setdefault((cid, ti), set()).add(str(e["label"]))
            if e.get("weight") is not None:
                weights[(cid, ti)] = float(e["weight"])
        labels = {k: next(iter(v)) for k, v in votes.items() if len(v) == 1}
        disputed = sorted(k for k, v in votes.items() if len(v) > 1)
        return labels, {k: weights.get(k) for k in labels}, disputed


def _key(record: dict, file: str, row: int) -> tuple:
    for c in _KEYS:
        if record.get(c) is None or (isinstance(record.get(c), str) and not record[c].strip()):
            raise DataError(f"a label needs {c}", file=file, row=row, column=c)
    ti = record["turn_index"]
    if isinstance(ti, float) and ti.is_integer():
        ti = int(ti)
    if isinstance(ti, str) and ti.strip().lstrip("-").isdigit():
        ti = int(ti)
    if isinstance(ti, bool) or not isinstance(ti, int) or ti < 0:
        raise DataError(f"turn_index must be an integer >= 0, got {record['turn_index']!r}", file=file, row=row,
                        column="turn_index")  # fmt: skip
    return str(record["conversation_id"]), ti


def _event(record: dict, file: str, row: int) -> dict:
    cid, ti = _key(record, file, row)
    label = record.get("label")
    if label is not None and not isinstance(label, (str, int, bool)):
        raise DataError(f"label must be text, got {type(label).__name__}", file=file, row=row, column="label")
    weight = record.get("weight")
    if weight is not None:
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            raise DataError(f"weight must be a number, got {weight!r}", file=file, row=row, column="weight") from None
        if not np.isfinite(weight) or weight < 1:
            raise DataError(
                f"weight is 1 / the turn's inclusion probability, so >= 1 and finite; got {weight!r}",
                file=file,
                row=row,
                column="weight",
            )
    return {
        "conversation_id": cid,
        "turn_index": ti,
        "label": None if label is None or (isinstance(label, str) and not label.strip()) else str(label),
        "labeller": None if record.get("labeller") is None else str(record["labeller"]),
        "labelled_at": None if record.get("labelled_at") is None else str(record["labelled_at"]),
        "weight": weight,
    }


def _jsonl(path: Path) -> tuple[list, Optional[dict]]:
    events: list = []
    sample = None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read the labels file ({exc.strerror or exc})", file=str(path)) from None
    lines = raw.split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            if i == len(lines) and not raw.endswith(b"\n"):
                # the last line of a writer killed mid-line: the label it was writing was never made
                warnings.warn(f"{path}: line {i} is cut short (its writer stopped mid-line): left out", stacklevel=3)
                continue
            raise DataError("not a JSON object", file=str(path), row=i) from None
        if not isinstance(rec, dict):
            raise DataError("not a JSON object", file=str(path), row=i)
        if LABELS_HEADER in rec:
            if sample is None:
                sample = rec.get("sample")
            continue
        events.append(_event(rec, str(path), i))
    return events, sample


def read_labels(path: Union[str, os.PathLike], *, format: Optional[str] = None) -> Labels:
    """Read a labels file (Parquet, JSONL or CSV; see the module docs).

    Raises:
        DataError: a missing column, key or malformed value, naming the file, row and column.
    """
    p = Path(path)
    if not p.exists():
        raise DataError("no such labels file", file=str(p))
    fmt = format or {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}.get(p.suffix.lower())
    if fmt == "jsonl":
        events, sample = _jsonl(p)
        return Labels(str(p), events, sample)
    from ._io import read_table

    try:
        if (fmt or p.suffix.lower().lstrip(".")) == "csv":
            import pyarrow.csv as pacsv

            # ids and labels as written ("007" stays "007", as a CSV score input keeps it, or nothing would join)
            text = {c: pa.string() for c in ("conversation_id", "label", "labeller", "labelled_at")}
            table = pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(column_types=text))
        else:
            table = read_table(p, format=format)
    except DataError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DataError(f"cannot read the labels file ({str(exc).splitlines()[0]})", file=str(p)) from None
    missing = [c for c in (*_KEYS, "label") if c not in table.column_names]
    if missing:
        raise DataError(
            f"a labels file needs columns conversation_id, turn_index, label; missing {', '.join(missing)} "
            f"(columns are: {', '.join(table.column_names)})",
            file=str(p),
            column=missing[0],
        )
    rows = table.to_pylist()
    return Labels(str(p), [_event(r, str(p), i + 2 if fmt == "csv" else i + 1) for i, r in enumerate(rows)])


@dataclass
class LabelJoin:
    """What ``join_labels`` did: how many labels the file held, matched, did not match (with the first keys), and
    were disputed between labellers."""

    file: str
    n_labels: int
    n_matched: int
    unmatched: list = field(default_factory=list)
    disputed: list = field(default_factory=list)
    replaced_column: bool = False
    weighted: bool = False

    def lines(self) -> list:
        """The notes a command prints: what was joined, and every label that was not."""
        out = [f"{self.file}: {self.n_matched} of {self.n_labels} label(s) joined on (conversation_id, turn_index)"]
        if self.unmatched:
            first = ", ".join(f"{c}/{t}" for c, t in self.unmatched[:5]) + (", ..." if len(self.unmatched) > 5 else "")
            out.append(f"warning: {len(self.unmatched)} label(s) match no turn and are left out: {first}")
        if self.disputed:
            first = ", ".join(f"{c}/{t}" for c, t in self.disputed[:5]) + (", ..." if len(self.disputed) > 5 else "")
            out.append(f"warning: {len(self.disputed)} turn(s) have conflicting labels (two labellers, or two rows of one key) and "
                       f"are left out: {first}")  # fmt: skip
        if self.replaced_column:
            out.append("note: the table's own `label` column is replaced by the labels file")
        return out

    def describe(self) -> dict:
        return {
            "file": self.file,
            "n_labels": self.n_labels,
            "n_matched": self.n_matched,
            "n_unmatched": len(self.unmatched),
            "unmatched_first": [list(k) for k in self.unmatched[:20]],
            "n_disputed": len(self.disputed),
            "weighted": self.weighted,
        }


def join_labels(table: pa.Table, labels: Labels, *, file: str, require_match: bool = True) -> tuple:
    """``(table, LabelJoin)``: ``table`` with a ``label`` column from ``labels`` (null on turns without one) and,
    when the file gives design weights, ``label_weight``; joined on ``(conversation_id, turn_index)``.

    Raises:
        DataError: the table has no key columns, or (``require_match``) the file holds no label or not one label
            matches a turn.
    """
    for c in _KEYS:
        if c not in table.column_names:
            raise DataError(f"--labels joins on conversation_id and turn_index; the table has no {c}", file=file,
                            column=c)  # fmt: skip
    resolved, weights, disputed = labels.resolved()
    cids = [str(c) for c in table.column("conversation_id").to_pylist()]
    tis = [None if t is None else int(t) for t in table.column("turn_index").to_pylist()]
    keys = list(zip(cids, tis))
    present = set(keys)
    col = [resolved.get(k) for k in keys]
    unmatched = sorted(k for k in resolved if k not in present)
    n_matched = len(resolved) - len(unmatched)
    if require_match and not resolved:
        raise DataError(
            "holds no labels to join (none made, or every one skipped or undone): label some turns first",
            file=labels.path,
        )
    if require_match and not n_matched:
        first = ", ".join(f"{c}/{t}" for c, t in unmatched[:3])
        raise DataError(
            f"none of the {len(resolved)} labels in {labels.path} matches a turn of this table (first: {first}); "
            "is it the labels file of this output?",
            file=file,
        )
    replaced = "label" in table.column_names and table.column("label").null_count < table.num_rows
    if "label" in table.column_names:
        table = table.drop_columns(["label"])
    table = table.append_column("label", pa.array(col, pa.string()))
    weighted = any(w is not None for w in weights.values())
    if weighted:
        w = [weights.get(k) if resolved.get(k) is not None else None for k in keys]
        if any(v is None for v, lab in zip(w, col) if lab is not None):
            raise DataError("some labels carry a design weight and some do not: give every label its weight or none",
                            file=labels.path, column="weight")  # fmt: skip
        if "label_weight" in table.column_names:
            table = table.drop_columns(["label_weight"])
        table = table.append_column("label_weight", pa.array(w, pa.float64()))
    return table, LabelJoin(labels.path, len(resolved), n_matched, unmatched, disputed, replaced, weighted)

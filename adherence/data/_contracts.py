"""Arrow data contracts: every table the engine reads or writes.

A ``Contract`` lists its columns with their Arrow type, whether the
column must be present, whether its values may be null, and for closed
vocabularies the allowed values. Columns a contract does not name pass
through untouched, after the contract's own columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa

__all__ = [
    "Column",
    "Contract",
    "TURNS",
    "TURN_SCORES",
    "SCORE_COLUMNS",
    "STAGE_SCORE",
    "stage_score",
    "GROUND_TRUTH",
    "SESSION_SCORES",
    "RUBRIC_ITEMS",
    "ARTIFACTS",
    "JUDGMENTS",
    "PERSONA_CONVERSATIONS",
    "PERSONAS",
    "CONTRACTS",
    "TURN_STATUS",
    "turns_to_score",
    "P_YES_SOURCES",
]

#: ``skipped``: a context row (``score_turn`` false), read as history for the turns after it but not scored;
#: ``abstained``: no stage of a judge cascade was confident enough to decide the turn (not an error)
TURN_STATUS = ("ok", "unscored", "error", "skipped", "abstained")
P_YES_SOURCES = ("full_vocab", "logprobs", "fallback_0.5", "binary_fallback")


@dataclass(frozen=True)
class Column:
    """One column of a contract.

    Attributes:
        name: column name.
        type: Arrow type values are cast to.
        required: the column must be present in the input.
        nullable: values may be null.
        choices: the closed set of allowed (non-null) values, if any.
        added_when: for an output column a run adds only in some jobs, which (``"calibration"``: a calibration
            applied; ``"cascade"``: a judge cascade); None: every run. (A method's own diagnostics -- a judge's
            self-consistency ``llm_judge_agreement`` -- carry its name instead.)
    """

    name: str
    type: pa.DataType
    required: bool = True
    nullable: bool = True
    choices: Optional[tuple] = None
    added_when: Optional[str] = None


@dataclass(frozen=True)
class Contract:
    """A named table layout with an optional unique key."""

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"contract {self.name!r} repeats a column name")
        unknown = [k for k in self.key if k not in names]
        if unknown:
            raise ValueError(f"contract {self.name!r}: key columns {unknown} are not columns")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if c.required]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"contract {self.name!r} has no column {name!r}")

    def schema(self, present: Optional[list[str]] = None) -> pa.Schema:
        """The Arrow schema of the contract's columns (only ``present`` ones if given)."""
        cols = [c for c in self.columns if present is None or c.name in present]
        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in cols])


_S = pa.string()

TURNS = Contract(
    "turns",
    (
        Column("conversation_id", _S, nullable=False),
        Column("turn_index", pa.int32(), nullable=False),
        Column("role", _S),
        Column("user", _S, required=False),
        Column("assistant", _S),
        Column("ground_truth_assistant", _S, required=False),
        Column("references", pa.list_(_S), required=False),
        Column("label", _S, required=False),
        Column("weight", pa.float64(), required=False),
        Column("score_turn", pa.bool_(), required=False),
    ),
    key=("conversation_id", "turn_index"),
)

GROUND_TRUTH = Contract(
    "ground_truth",
    (
        Column("conversation_id", _S, nullable=False),
        Column("turn_index", pa.int32(), nullable=False),
        Column("ground_truth_assistant", _S, required=False),
        Column("references", pa.list_(_S), required=False),
    ),
    key=("conversation_id", "turn_index"),
)

TURN_SCORES = Contract(
    "turn_scores",
    (
        Column("conversation_id", _S, nullable=False),
        Column("turn_index", pa.int32(), nullable=False),
        Column("method", _S, nullable=False),
        Column("score", pa.float64()),
        Column("prediction", pa.int8(), required=False, choices=(0, 1)),
        Column("status", _S, nullable=False, choices=TURN_STATUS),
        Column("error", _S, required=False),
        Column("reason", _S, required=False),
        Column("p_yes_source", _S, required=False, choices=P_YES_SOURCES),
        Column("truncated", pa.bool_(), required=False),
        Column("yes_no_mass", pa.float64(), required=False),
        Column("calibrated_score", pa.float64(), required=False, added_when="calibration"),
        Column("decided_by", pa.int32(), required=False, added_when="cascade"),
    ),
    key=("conversation_id", "turn_index", "method"),
)

#: The columns of a score output that hold scores (numbers; a cascade's per-stage ones match ``STAGE_SCORE``).
SCORE_COLUMNS = ("score", "calibrated_score")
#: A judge cascade's per-stage score column: ``stage1_score``, ``stage2_score``, ...
STAGE_SCORE = re.compile(r"stage(\d+)_score")


def stage_score(k: int) -> str:
    """The name of stage ``k``'s score column in a cascade's output (``STAGE_SCORE`` matches it)."""
    return f"stage{k}_score"


SESSION_SCORES = Contract(
    "session_scores",
    (
        Column("conversation_id", _S, nullable=False),
        Column("method", _S, required=False),
        Column("n_turns", pa.int32(), nullable=False),
        Column("score", pa.float64()),
        Column("ci_low", pa.float64(), required=False),
        Column("ci_high", pa.float64(), required=False),
        Column("adherent", pa.bool_()),
    ),
    key=("conversation_id", "method"),
)

RUBRIC_ITEMS = Contract(
    "rubric_items",
    (
        Column("question_id", _S, nullable=False),
        Column("question", _S, nullable=False),
        Column("category", _S, nullable=False),
        Column("kind", _S, nullable=False, choices=("objective", "subjective")),
        Column("check", _S, required=False),
    ),
    key=("question_id",),
)

ARTIFACTS = Contract(
    "artifacts",
    (
        Column("artifact_id", _S, nullable=False),
        Column("generator", _S, nullable=False),
        Column("filled_prompt", _S),
        Column("output", _S),
    ),
    key=("artifact_id", "generator"),
)

JUDGMENTS = Contract(
    "judgments",
    (
        Column("artifact_id", _S, nullable=False),
        Column("generator", _S, nullable=False),
        Column("judge", _S, nullable=False),
        Column("run", pa.int32(), nullable=False),
        Column("question_id", _S, nullable=False),
        Column("answer", _S, choices=("Yes", "No")),
        Column("justification", _S),
        Column("source", _S, nullable=False, choices=("code", "judge")),
        Column("raw", _S, required=False),
    ),
    key=("artifact_id", "generator", "judge", "run", "question_id"),
)

PERSONA_CONVERSATIONS = Contract(
    "persona_conversations",
    (
        Column("conversation_id", _S, nullable=False),
        Column("turn_index", pa.int32(), nullable=False),
        Column("speaker", _S, nullable=False),
        Column("text", _S),
    ),
    key=("conversation_id", "turn_index"),
)

PERSONAS = Contract(
    "personas",
    (
        Column("conversation_id", _S, nullable=False),
        Column("speaker", _S, nullable=False),
        Column("persona", pa.list_(_S)),
    ),
    key=("conversation_id", "speaker"),
)

CONTRACTS = {
    c.name: c
    for c in (
        TURNS,
        GROUND_TRUTH,
        TURN_SCORES,
        SESSION_SCORES,
        RUBRIC_ITEMS,
        ARTIFACTS,
        JUDGMENTS,
        PERSONA_CONVERSATIONS,
        PERSONAS,
    )
}


def turns_to_score(table: pa.Table) -> np.ndarray:
    """Which rows are scored: all, unless a ``score_turn`` column marks some false (null counts as true). A row
    marked false is context: the turns after it read it as history (a judge's prompt holds it), it gets
    ``status=skipped`` and no score, and a judge makes no call for it."""
    if "score_turn" not in table.column_names:
        return np.ones(table.num_rows, dtype=bool)
    col = table.column("score_turn").cast(pa.bool_()).fill_null(True)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=bool)

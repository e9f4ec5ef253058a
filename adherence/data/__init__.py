"""Arrow data contracts, validating readers and writers, and format adapters.

Every reader validates what it reads and raises ``DataError`` naming the
file, row and column of the first problem; columns a contract does not name
pass through untouched.
"""

from ._adapters import (
    SPEAKER_1,
    SPEAKER_2,
    PersonaCorpus,
    read_json_turns,
    read_personachat,
    read_synthetic_persona_chat,
    turns_from_flat_benchmark,
    turns_from_pygaussia,
)
from ._contracts import (
    ARTIFACTS,
    CONTRACTS,
    GROUND_TRUTH,
    JUDGMENTS,
    P_YES_SOURCES,
    PERSONA_CONVERSATIONS,
    PERSONAS,
    RUBRIC_ITEMS,
    SCORE_COLUMNS,
    SESSION_SCORES,
    STAGE_SCORE,
    TURN_SCORES,
    TURN_STATUS,
    TURNS,
    Column,
    Contract,
    stage_score,
    turns_to_score,
)
from ._errors import DataError
from ._io import FORMATS, detect_format, iter_batches, json_safe, read_table, records_to_table, write_table
from ._metadata import file_digest, metadata_path, run_metadata, write_run_metadata
from ._readers import (
    EXAMPLES,
    example_path,
    read_artifacts,
    read_ground_truth,
    read_judgments,
    read_persona_corpus,
    read_rubric_items,
    read_session_scores,
    read_turn_scores,
    read_turns,
)
from ._transcripts import TRANSCRIPT_FORMATS, TranscriptOptions, transcript_turns
from ._validate import conform

__all__ = [
    "ARTIFACTS",
    "CONTRACTS",
    "Column",
    "Contract",
    "DataError",
    "EXAMPLES",
    "FORMATS",
    "JUDGMENTS",
    "PERSONAS",
    "PERSONA_CONVERSATIONS",
    "P_YES_SOURCES",
    "PersonaCorpus",
    "RUBRIC_ITEMS",
    "SESSION_SCORES",
    "SPEAKER_1",
    "SPEAKER_2",
    "TRANSCRIPT_FORMATS",
    "TURNS",
    "TranscriptOptions",
    "TURN_SCORES",
    "SCORE_COLUMNS",
    "STAGE_SCORE",
    "stage_score",
    "GROUND_TRUTH",
    "TURN_STATUS",
    "turns_to_score",
    "conform",
    "detect_format",
    "example_path",
    "file_digest",
    "iter_batches",
    "json_safe",
    "metadata_path",
    "read_artifacts",
    "read_json_turns",
    "read_judgments",
    "read_persona_corpus",
    "read_personachat",
    "read_rubric_items",
    "read_session_scores",
    "read_synthetic_persona_chat",
    "read_table",
    "read_turn_scores",
    "read_turns",
    "read_ground_truth",
    "transcript_turns",
    "records_to_table",
    "run_metadata",
    "turns_from_flat_benchmark",
    "turns_from_pygaussia",
    "write_run_metadata",
    "write_table",
]

"""One reader per contract, and the bundled examples."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Protocol, Union

import pyarrow as pa

from .._errors import OptionError
from ._adapters import PersonaCorpus, read_personachat, read_synthetic_persona_chat
from ._contracts import (
    ARTIFACTS,
    GROUND_TRUTH,
    JUDGMENTS,
    PERSONA_CONVERSATIONS,
    PERSONAS,
    RUBRIC_ITEMS,
    SESSION_SCORES,
    TURN_SCORES,
    TURNS,
    Contract,
)
from ._errors import DataError
from ._io import Source, check_utf8, detect_format, read_table

PathLike = Union[str, os.PathLike]

__all__ = [
    "read_turns",
    "read_turn_scores",
    "read_session_scores",
    "read_rubric_items",
    "read_artifacts",
    "read_judgments",
    "read_persona_corpus",
    "read_ground_truth",
    "example_path",
    "EXAMPLES",
]

_EXAMPLE_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLES = {"role": "role_turns.jsonl", "audit": "audit", "persona": "persona"}


def example_path(name: str = "role") -> Path:
    """Path of a bundled example (``"role"``: labelled role-adherence turns; ``"audit"``: the HR-review
    audit directory; ``"persona"``: the directory of human and simulated persona corpora)."""
    if name in EXAMPLES:
        return _EXAMPLE_DIR / EXAMPLES[name]
    path = (_EXAMPLE_DIR / name).resolve()
    if name and path.is_relative_to(_EXAMPLE_DIR) and path.exists():  # a bundled file by its own name
        return path
    files = sorted(
        str(p.relative_to(_EXAMPLE_DIR))
        for p in _EXAMPLE_DIR.rglob("*")
        if p.is_file() and p.suffix in (".jsonl", ".yaml", ".csv", ".txt", ".parquet", ".json")
    )
    raise OptionError(f"no bundled example {name!r}; available: {', '.join(EXAMPLES)}, or a file: {', '.join(files)}")


def blank_text(v) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def read_ground_truth(source: Source, *, format: Optional[str] = None) -> dict:
    """Reference replies keyed by turn: ``{(conversation_id, turn_index): (ground_truth_assistant, references)}``.

    The file (any format ``read_table`` reads) has the ``GROUND_TRUTH`` columns:
    ``conversation_id``, ``turn_index`` (0-based within the conversation, as transcripts number
    their assistant turns), and ``ground_truth_assistant`` and/or ``references`` (a list of texts,
    for ``knn``). A key given twice, a missing column or a mistyped value raises ``DataError``
    naming the file, row and column.

    Example:
        >>> import pyarrow as pa
        >>> read_ground_truth(pa.table({"conversation_id": ["c1"], "turn_index": [0],
        ...                             "ground_truth_assistant": ["Hello!"]}))
        {('c1', 0): ('Hello!', None)}
    """
    table = read_table(source, GROUND_TRUTH, format=format)
    if not {"ground_truth_assistant", "references"} & set(table.column_names):
        raise DataError(
            "a ground-truth file needs a ground_truth_assistant or a references column",
            file=str(source) if isinstance(source, (str, os.PathLike)) else "<table>",
            column="ground_truth_assistant",
        )
    n = table.num_rows
    gt = (
        table.column("ground_truth_assistant").to_pylist()
        if "ground_truth_assistant" in table.column_names
        else [None] * n
    )
    refs = table.column("references").to_pylist() if "references" in table.column_names else [None] * n
    return {
        (c, int(i)): (g, r)
        for c, i, g, r in zip(
            table.column("conversation_id").to_pylist(), table.column("turn_index").to_pylist(), gt, refs
        )
    }


def read_turns(source: Source, *, format: Optional[str] = None) -> pa.Table:
    """Read turns (any supported format or adapter) validated against ``TURNS``."""
    return read_table(source, TURNS, format=format)


class _Reader(Protocol):
    def __call__(self, source: Source, *, format: Optional[str] = None) -> pa.Table: ...


def _reader(contract: Contract) -> _Reader:
    """``read_<contract>(source, *, format=None)``: any supported format, validated against ``contract``."""

    def read(source: Source, *, format: Optional[str] = None) -> pa.Table:
        return read_table(source, contract, format=format)

    read.__name__ = read.__qualname__ = f"read_{contract.name}"
    read.__doc__ = f"Read a table (any supported format) validated against ``{contract.name.upper()}``."
    return read


read_turn_scores = _reader(TURN_SCORES)
read_session_scores = _reader(SESSION_SCORES)
read_rubric_items = _reader(RUBRIC_ITEMS)
read_artifacts = _reader(ARTIFACTS)
read_judgments = _reader(JUDGMENTS)


def _is_synthetic_persona_chat(path: Path) -> bool:
    check_utf8(path)
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().strip().lower()
    return "best generated conversation" in header


def read_persona_corpus(
    conversations: PathLike,
    personas: Optional[PathLike] = None,
    *,
    limit: Optional[int] = None,
    strict: bool = False,
) -> PersonaCorpus:
    """Read a persona corpus from PersonaChat txt, Synthetic-Persona-Chat CSV or the contract tables.

    For the contract layout, ``conversations`` holds ``{conversation_id, turn_index,
    speaker, text}`` and ``personas`` (or a directory holding ``conversations.*``
    and ``personas.*``) holds ``{conversation_id, speaker, persona}``.

    Args:
        limit: keep only the first ``limit`` conversations (in file order).
        strict: a malformed conversation (PersonaChat txt, Synthetic-Persona-Chat CSV) is an
            error instead of being skipped with a warning (``corpus.skipped`` lists those).
    """
    path = Path(conversations)
    if path.is_dir() and personas is None:
        found = {p.stem: p for p in path.iterdir() if p.stem in ("conversations", "personas") and p.is_file()}
        if set(found) != {"conversations", "personas"}:
            raise DataError("a persona corpus directory needs conversations.<ext> and personas.<ext>", file=path)
        path, personas = found["conversations"], found["personas"]
    if not path.exists():
        raise DataError("no such file or directory", file=path)
    fmt = detect_format(path)
    if fmt == "personachat":
        corpus = read_personachat(path, strict=strict)
    elif fmt == "csv" and personas is None and _is_synthetic_persona_chat(path):
        return read_synthetic_persona_chat(path, limit=limit, strict=strict)
    else:
        if personas is None:
            raise DataError(
                "persona tables need a personas file too (pass personas=, or --personas on the CLI)", file=path
            )
        corpus = PersonaCorpus(read_table(path, PERSONA_CONVERSATIONS), read_table(personas, PERSONAS))
    if limit is not None:
        import pyarrow.compute as pc

        ids = pc.unique(corpus.conversations.column("conversation_id"))[:limit]
        corpus = PersonaCorpus(
            corpus.conversations.filter(pc.is_in(corpus.conversations.column("conversation_id"), value_set=ids)),
            corpus.personas.filter(pc.is_in(corpus.personas.column("conversation_id"), value_set=ids)),
            corpus.skipped,
        )
    return corpus

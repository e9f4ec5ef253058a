"""Adapters from published formats to the engine's contracts.

Turns:
    * pygaussia-style JSON: a ``Dataset`` object or a list of them, each
      ``{session_id, assistant_id, chatbot_role, conversation: [Batch{qa_id, query,
      assistant, ground_truth_assistant, ...}]}``; one turn per batch.
    * flat benchmark JSON: ``[{role, assistant, ground_truth_assistant, label}, ...]``,
      each record its own one-turn conversation.

Persona corpora:
    * PersonaChat ``*_self_original.txt`` (numbered lines; ``your persona:`` lines
      give the persona of the second speaker, ``partner's persona:`` of the first).
    * Synthetic-Persona-Chat CSV (columns ``user 1 personas``, ``user 2 personas``,
      ``Best Generated Conversation``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple, Optional, Union

import pyarrow as pa
import pyarrow.csv as pacsv

from ._contracts import PERSONA_CONVERSATIONS, PERSONAS, TURNS
from ._errors import DataError, warn_skipped
from ._formats import CSV_PARSE, check_utf8, load_json, records_to_table
from ._validate import KeyTracker, conform

PathLike = Union[str, os.PathLike]

__all__ = [
    "PersonaCorpus",
    "read_json_turns",
    "turns_from_pygaussia",
    "turns_from_flat_benchmark",
    "read_personachat",
    "read_synthetic_persona_chat",
    "SPEAKER_1",
    "SPEAKER_2",
]

SPEAKER_1 = "User 1"
SPEAKER_2 = "User 2"


class PersonaCorpus(NamedTuple):
    """A persona corpus: utterances (``conversations``) and persona sentences (``personas``).

    ``skipped`` lists the malformed records a reader left out, as ``(where, reason)`` pairs
    (e.g. ``("row 17", "no 'User 1:' / 'User 2:' utterance")``).
    """

    conversations: pa.Table
    personas: pa.Table
    skipped: tuple = ()

    def utterances(self):
        """``(conversation_id, speaker, text)`` per utterance, in conversation then turn order (text may be None)."""
        conv = self.conversations.sort_by([("conversation_id", "ascending"), ("turn_index", "ascending")])
        return zip(
            conv.column("conversation_id").to_pylist(),
            conv.column("speaker").to_pylist(),
            conv.column("text").to_pylist(),
        )


def _skip_or_raise(skipped: list[tuple[str, str]], strict: bool, error: DataError, where: str) -> None:
    """``--strict-input``: the first malformed record is an error; otherwise it is recorded and skipped."""
    if strict:
        raise error
    skipped.append((where, error.reason))


def _scalar(value: Any) -> Any:
    """Nested extra fields are kept as JSON text so every row has one column type."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return value


def _finish(records: list[dict], contract, file: str) -> pa.Table:
    if not records:
        raise DataError("no rows (the input has no data records)", file=file)
    table = conform(records_to_table(records, contract, file=file), contract, file=file)
    tracker = KeyTracker(contract, file=file)
    tracker.update(table)
    tracker.finish()
    return table


def turns_from_pygaussia(obj: Any, *, file: str = "<json>") -> pa.Table:
    """Turns from pygaussia-style ``Dataset`` objects (one dict or a list of them)."""
    datasets = obj if isinstance(obj, list) else [obj]
    records: list[dict[str, Any]] = []
    for d_i, ds in enumerate(datasets):
        where = f"dataset {d_i}"
        if not isinstance(ds, dict):
            raise DataError(f"{where}: expected an object, got {type(ds).__name__}", file=file)
        for key in ("session_id", "conversation"):
            if key not in ds:
                raise DataError(f"{where}: missing field {key!r}", file=file, column=key)
        role = ds.get("chatbot_role", ds.get("role"))
        if role is None:
            raise DataError(
                f"{where} (session_id={ds['session_id']!r}): missing field 'chatbot_role'",
                file=file,
                column="chatbot_role",
            )
        conversation = ds["conversation"]
        if not isinstance(conversation, list):
            raise DataError(f"{where}: 'conversation' must be a list of batches", file=file, column="conversation")
        session_extra = {
            k: _scalar(v) for k, v in ds.items() if k not in ("session_id", "chatbot_role", "role", "conversation")
        }
        for t_i, batch in enumerate(conversation):
            if not isinstance(batch, dict):
                raise DataError(f"{where}, conversation[{t_i}]: expected an object", file=file, row=len(records) + 1)
            if "assistant" not in batch:
                raise DataError(
                    f"{where}, conversation[{t_i}]: missing field 'assistant'",
                    file=file,
                    row=len(records) + 1,
                    column="assistant",
                )
            rec = {
                "conversation_id": str(ds["session_id"]),
                "turn_index": t_i,
                "role": role,
                "user": batch.get("query"),
                "assistant": batch.get("assistant"),
                "ground_truth_assistant": batch.get("ground_truth_assistant"),
            }
            for k, v in batch.items():
                if k not in ("query", "assistant", "ground_truth_assistant"):
                    rec[k] = _scalar(v)
            for k, v in session_extra.items():
                rec.setdefault(k, v)
            records.append(rec)
    return _finish(records, TURNS, file)


def turns_from_flat_benchmark(records_in: list, *, file: str = "<json>", prefix: str = "record") -> pa.Table:
    """Turns from ``[{role, assistant, ground_truth_assistant, label}]``; record i is conversation ``{prefix}-{i}``."""
    records = []
    width = max(1, len(str(len(records_in) - 1)))
    for i, r in enumerate(records_in):
        if not isinstance(r, dict):
            raise DataError(f"expected an object, got {type(r).__name__}", file=file, row=i + 1)
        for key in ("role", "assistant"):
            if key not in r:
                raise DataError(f"missing field {key!r}", file=file, row=i + 1, column=key)
        rec = {"conversation_id": f"{prefix}-{i:0{width}d}", "turn_index": 0}
        rec.update({k: _scalar(v) if k != "references" else v for k, v in r.items()})
        records.append(rec)
    return _finish(records, TURNS, file)


def read_json_turns(path: PathLike) -> pa.Table:
    """Read a ``.json`` file of turns in pygaussia-style or flat benchmark layout (auto-detected)."""
    obj = load_json(path)
    file = str(path)
    first = obj[0] if isinstance(obj, list) and obj else obj
    if isinstance(first, dict) and "conversation" in first:
        return turns_from_pygaussia(obj, file=file)
    if isinstance(obj, list) and isinstance(first, dict) and "assistant" in first:
        if "conversation_id" in first:
            return _finish([dict(r) for r in obj], TURNS, file)
        return turns_from_flat_benchmark(obj, file=file, prefix=Path(path).stem)
    if isinstance(obj, list) and not obj:
        raise DataError("no rows (the JSON list is empty)", file=file)
    raise DataError(
        "unrecognised JSON layout: expected pygaussia-style datasets ({session_id, chatbot_role, "
        "conversation: [...]}) or a flat list of {role, assistant, ground_truth_assistant, label}",
        file=file,
    )


_PC_LINE = re.compile(r"^(\d+) (.*)$")


def read_personachat(path: PathLike, *, strict: bool = False) -> PersonaCorpus:
    """Read PersonaChat ``*_original.txt``: ``your persona`` belongs to ``User 2``, the responder.

    A dialog holding a malformed line is skipped whole with a warning and listed in ``skipped``
    (with ``strict=True`` the first malformed line is an error).
    """
    check_utf8(path)
    file = str(path)
    stem = Path(path).stem
    conv_rows: list[dict] = []
    persona_rows: list[dict] = []
    dialog = -1
    personas: dict[str, list[str]] = {}
    turn = 0
    skipped: list = []
    bad = False  # the current dialog holds a malformed line: it is left out whole
    dialog_rows: list[dict] = []

    def flush():
        if bad:
            return
        conv_rows.extend(dialog_rows)
        for speaker, sentences in personas.items():
            persona_rows.append({"conversation_id": f"{stem}-{dialog}", "speaker": speaker, "persona": sentences})

    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            m = _PC_LINE.match(line)
            if m is None:
                _skip_or_raise(
                    skipped,
                    strict,
                    DataError(
                        "expected a line starting with its number ('1 your persona: ...')", file=file, line=line_no
                    ),
                    f"dialog {dialog + 1} (line {line_no})",
                )
                bad = True
                continue
            number, body = int(m.group(1)), m.group(2)
            if number == 1:
                if dialog >= 0:
                    flush()
                dialog += 1
                personas = {}
                dialog_rows = []
                bad = False
                turn = 0
            cid = f"{stem}-{dialog}"
            if body.startswith("your persona:"):
                personas.setdefault(SPEAKER_2, []).append(body[len("your persona:") :].strip())
                continue
            if body.startswith("partner's persona:"):
                personas.setdefault(SPEAKER_1, []).append(body[len("partner's persona:") :].strip())
                continue
            parts = body.split("\t")
            if len(parts) < 2:
                _skip_or_raise(
                    skipped,
                    strict,
                    DataError("expected 'partner utterance<TAB>own utterance'", file=file, line=line_no),
                    f"dialog {dialog + 1} (line {line_no})",
                )
                bad = True
                continue
            for speaker, text in ((SPEAKER_1, parts[0]), (SPEAKER_2, parts[1])):
                if text.strip() and text.strip() != "__SILENCE__":
                    dialog_rows.append(
                        {"conversation_id": cid, "turn_index": turn, "speaker": speaker, "text": text.strip()}
                    )
                    turn += 1
    if dialog >= 0:
        flush()
    warn_skipped(file, skipped, "dialog")
    return PersonaCorpus(
        _finish(conv_rows, PERSONA_CONVERSATIONS, file), _finish(persona_rows, PERSONAS, file), tuple(skipped)
    )


_SPC_COLUMNS = ("user 1 personas", "user 2 personas", "best generated conversation")
# Generated conversations sometimes wrap the speaker in markdown: "*User 1:* hi", "* User 2: hi".
_SPEAKER_PREFIX = re.compile(r"^[\s*_#>-]*user\s*([12])[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE)
_PUNCTUATION_ONLY = re.compile(r"^[\W_]*$")


def read_synthetic_persona_chat(path: PathLike, *, limit: Optional[int] = None, strict: bool = False) -> PersonaCorpus:
    """Read a Synthetic-Persona-Chat CSV (Jandaghi et al. 2023) into a persona corpus.

    Conversation ``i`` (0-based CSV data row) is ``<stem>-<i>``; utterance lines
    start with ``User 1:`` or ``User 2:`` (markdown emphasis around the prefix is
    tolerated); a line without a prefix continues the previous utterance; lines
    before the first utterance (stage directions) and separator lines such as
    ``* * *`` are not utterances and are left out. A conversation with no prefixed
    utterance at all is skipped with a warning and listed in ``skipped`` (with
    ``strict=True`` it is an error).
    """
    check_utf8(path)
    file = str(path)
    try:
        table = pacsv.read_csv(
            path,
            parse_options=CSV_PARSE,
            convert_options=pacsv.ConvertOptions(strings_can_be_null=False),
        )
    except pa.ArrowInvalid as exc:
        raise DataError(f"cannot parse CSV: {exc}", file=file) from None
    by_lower = {n.strip().lower(): n for n in table.column_names}
    missing = [c for c in _SPC_COLUMNS if c not in by_lower]
    if missing:
        raise DataError(
            f"missing Synthetic-Persona-Chat column(s) {', '.join(map(repr, missing))}; found: {', '.join(table.column_names)}",
            file=file,
            column=missing[0],
        )
    stem = Path(path).stem
    p1 = table.column(by_lower[_SPC_COLUMNS[0]]).to_pylist()
    p2 = table.column(by_lower[_SPC_COLUMNS[1]]).to_pylist()
    convs = table.column(by_lower[_SPC_COLUMNS[2]]).to_pylist()
    n = len(convs) if limit is None else min(limit, len(convs))
    conv_rows: list[dict[str, Any]] = []
    persona_rows: list[dict[str, Any]] = []
    skipped: list[tuple[str, str]] = []
    for i in range(n):
        cid = f"{stem}-{i}"
        utterances: list[list[str]] = []
        for line in str(convs[i] or "").splitlines():
            if _PUNCTUATION_ONLY.match(line):
                continue
            m = _SPEAKER_PREFIX.match(line)
            if m:
                utterances.append([f"User {m.group(1)}", m.group(2).strip()])
            elif utterances:
                utterances[-1][1] += " " + line.strip()
        if not utterances:
            _skip_or_raise(
                skipped,
                strict,
                DataError(
                    "no 'User 1:' / 'User 2:' utterance in the conversation",
                    file=file,
                    row=i + 1,
                    column=by_lower[_SPC_COLUMNS[2]],
                ),
                f"row {i + 1}",
            )
            continue
        for speaker, text in ((SPEAKER_1, p1[i]), (SPEAKER_2, p2[i])):
            sentences = [s.strip() for s in str(text or "").splitlines() if s.strip()]
            persona_rows.append({"conversation_id": cid, "speaker": speaker, "persona": sentences})
        for t, (speaker, text) in enumerate(utterances):
            conv_rows.append({"conversation_id": cid, "turn_index": t, "speaker": speaker, "text": text})
    warn_skipped(file, skipped, "conversation")
    return PersonaCorpus(
        _finish(conv_rows, PERSONA_CONVERSATIONS, file), _finish(persona_rows, PERSONAS, file), tuple(skipped)
    )

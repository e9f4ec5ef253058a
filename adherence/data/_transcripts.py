"""Chat transcripts as turns: OpenAI ``{"messages": [...]}`` and ShareGPT ``{"conversations": [...]}``.

One transcript (a JSONL line, a Parquet row, a JSON array item) becomes one conversation; every
assistant message becomes one turn, in order (one with no text and no tool call is a turn with an empty reply,
which scoring reports as an error row, never dropped). The system (or developer) messages are the
role definition (several are joined; ``role`` is used for logs without one). ``user`` holds what
the assistant answers: the user messages since the previous assistant turn, with the tool calls and
tool results of that window kept in place and marked (``[tool call] name(arguments)``,
``[tool result name] ...``); earlier exchanges reach the judge as the history of earlier turns. An
assistant message with only tool calls is history, never a judged turn. An assistant message may
carry the turn's reference reply (``"reference": "..."``, the ``ground_truth_assistant`` of the
reference methods) and ``"references": [...]`` (knn), besides ``label`` and ``weight``. Content given as parts
(``[{"type": "text", "text": ...}, ...]``) is joined as text; non-text parts appear as ``[image_url]``.

Transcripts are exploded batch by batch: memory follows the batch, not the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa

from ._errors import DataError, record_text
from ._formats import records_to_table

__all__ = [
    "parse_columns",
    "rename_columns",
    "TranscriptOptions",
    "TRANSCRIPT_FORMATS",
    "detect_transcript",
    "transcript_turns",
    "explode_transcripts",
]

TRANSCRIPT_FORMATS = ("openai", "sharegpt")
#: production traces (``adherence.data._traces``), read where transcripts are
TRACE_INPUT_FORMATS = ("otel", "openinference", "langfuse", "langsmith")
INPUT_FORMATS = ("auto", "turns", *TRANSCRIPT_FORMATS, *TRACE_INPUT_FORMATS)

_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "tool": "tool",
    "observation": "tool",
    "function": "tool",
    "function_call": "tool_call",
}
_OPENAI_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}


BAD_ROWS = ("fail", "skip")


@dataclass
class TranscriptOptions:
    """How an input is read: its kind (flat turns or transcripts), and what happens to a bad row.

    Attributes:
        input_format: ``auto`` (detected from the first record), ``turns``, ``openai`` or ``sharegpt``.
        role: the role definition for transcripts without a system message.
        bad_rows: ``fail``: the first bad row (a line that is not JSON, a CSV row with the wrong number of
            fields, a value of the wrong type, a malformed transcript) stops the read with one line naming it;
            ``skip``: it is left out, counted and kept in ``quarantine``; None: fail for flat rows, skip for
            transcripts (with a warning).
        skipped: filled while reading: ``(where, reason)`` of each row left out.
        quarantine: filled while reading: ``{"file", "line", "row", "error", "text"}`` of each row left out.
        source_types: filled while reading: the types of the contract's columns as the input wrote them
            (a set of type names per column), so that keys can be given back as they came.
        records: filled while reading transcripts: how many records were read, good and bad (the share left out
            is ``len(quarantine) / records``).
        columns: the input's own names of the contract's columns (``{"conversation_id": "chat_id", ...}``), for a
            flat table named otherwise; each is renamed as it is read (``parse_columns`` reads the flag's form).
    """

    input_format: str = "auto"
    role: Optional[str] = None
    bad_rows: Optional[str] = None
    skipped: list = field(default_factory=list)
    quarantine: list = field(default_factory=list)
    source_types: dict = field(default_factory=dict)
    records: int = 0
    columns: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.input_format not in INPUT_FORMATS:
            raise ValueError(f"`input_format` must be one of {', '.join(INPUT_FORMATS)}, got {self.input_format!r}")
        if self.bad_rows is not None and self.bad_rows not in BAD_ROWS:
            raise ValueError(f"`bad_rows` must be 'fail' or 'skip', got {self.bad_rows!r}")

    def probe(self) -> TranscriptOptions:
        """The same reading, recording nothing (a second pass over the input)."""
        return TranscriptOptions(self.input_format, self.role, self.bad_rows, columns=dict(self.columns))

    @property
    def strict(self) -> bool:
        """A malformed transcript stops the read."""
        return self.bad_rows == "fail"

    def skips(self, flat: bool = True) -> bool:
        """Whether a bad row is left out (flat rows: only with ``skip``; transcripts: unless ``fail``)."""
        return self.bad_rows == "skip" if flat else self.bad_rows != "fail"

    def reject(self, error: DataError, *, text: Any = None, flat: bool = True, where: Optional[str] = None) -> None:
        """A bad row: raise ``error`` under the fail policy, else leave the row out and keep it in quarantine."""
        if not self.skips(flat):
            raise error
        if where is None:
            where = "line " + str(error.line) if error.line is not None else f"row {error.row}"
        self.skipped.append((where, error.reason))
        self.quarantine.append(
            {"file": error.file, "line": error.line, "row": error.row, "error": error.reason, "text": text}
        )


def parse_columns(text: Optional[str], names: tuple, *, flag: str = "--columns") -> dict:
    """``{contract column: the input's column}`` from ``"conversation_id=chat_id,user=question,..."``; an unknown
    contract name, a pair without ``=``, or a column named twice is an ``OptionError`` naming it."""
    from .._errors import OptionError

    out: dict = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, eq, col = (x.strip() for x in part.partition("="))
        if not eq or not name or not col:
            raise OptionError(f"{flag} takes NAME=COLUMN pairs separated by commas, got {part.strip()!r}")
        if name not in names:
            raise OptionError(f"{flag}: {name!r} is not a column adherence reads; choose from {', '.join(names)}")
        if name in out:
            raise OptionError(f"{flag}: {name!r} is given twice")
        out[name] = col
    taken = list(out.values())
    if len(set(taken)) != len(taken):
        raise OptionError(f"{flag}: one input column is given for two names ({', '.join(taken)})")
    return out


def rename_columns(batch: pa.Table, columns: dict, file: str) -> pa.Table:
    """``batch`` with each mapped input column under its contract name (``columns``: contract name -> input name);
    a mapped column the input lacks is a ``DataError`` naming it and the columns there are."""
    if not columns:
        return batch
    have = batch.column_names
    missing = [c for c in columns.values() if c not in have]
    if missing:
        raise DataError(
            f"--columns names {', '.join(repr(c) for c in missing)}, which the input does not have; its columns are: "
            f"{', '.join(have)}",
            file=file,
        )
    back = {v: k for k, v in columns.items()}
    clash = [k for k in columns if k in have and k not in back]
    if clash:  # the input has a column of that name too: the mapped one wins, the other is kept aside
        batch = batch.rename_columns([f"{c}__input" if c in clash else c for c in have])
        have = batch.column_names
    return batch.rename_columns([back.get(c, c) for c in have])


def detect_transcript(record: Any) -> Optional[str]:
    """``openai`` / ``sharegpt`` for a transcript record, a trace format (``otel``, ``openinference``,
    ``langfuse``, ``langsmith``) for a trace record, None for anything else (a flat turn)."""
    if not isinstance(record, dict):
        return None
    from ._traces import detect_trace

    trace = detect_trace(record)
    if trace is not None:
        return trace
    if "messages" in record and "assistant" not in record:
        return "openai"
    if "conversations" in record and "assistant" not in record:
        return "sharegpt"
    return None


def _text(content: Any) -> Optional[str]:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, dict):
                parts.append(f"[{p.get('type', 'part')}]")
            else:
                raise ValueError(f"a content part must be text or an object, got {type(p).__name__}")
        return "\n".join(parts)
    raise ValueError(f"message content must be text or a list of parts, got {type(content).__name__}")


def _call_text(call: Any) -> str:
    fn = call.get("function", call) if isinstance(call, dict) else {}
    name = fn.get("name", "?") if isinstance(fn, dict) else "?"
    args = fn.get("arguments", "") if isinstance(fn, dict) else ""
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return f"[tool call] {name}({args})"


def _messages(record: dict, fmt: str) -> list[tuple[str, Optional[str], dict]]:
    """``(kind, text, message)`` with kind in system | user | assistant | tool | tool_call."""
    key, roles = ("messages", _OPENAI_ROLES) if fmt == "openai" else ("conversations", _SHAREGPT_ROLES)
    msgs = record.get(key)
    if not isinstance(msgs, list):
        raise ValueError(f"{key!r} must be a list of messages")
    out = []
    for k, m in enumerate(msgs, start=1):
        if not isinstance(m, dict):
            raise ValueError(f"message {k} is not an object")
        who = m.get("role") if fmt == "openai" else m.get("from")
        kind = roles.get(str(who).lower()) if who is not None else None
        if kind is None:
            raise ValueError(f"message {k} has an unknown {'role' if fmt == 'openai' else 'from'} {who!r}")
        out.append((kind, _text(m.get("content") if fmt == "openai" else m.get("value")), m))
    return out


def _label(v: Any) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (bool, int)):
        return str(v).lower() if isinstance(v, bool) else str(v)
    raise ValueError(f"a message's label must be text, got {type(v).__name__} {v!r}"[:160])


def _weight(v: Any) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v == v or v in (float("inf"), float("-inf")):
        raise ValueError(f"a message's weight must be a finite number, got {v!r}"[:160])
    return float(v)


def transcript_turns(record: dict, fmt: str, *, conversation_id: str, role: Optional[str] = None) -> list[dict]:
    """The turns of one transcript (see the module docstring); raises ValueError when malformed."""
    system, turns, pending = [], [], []
    for kind, text, m in _messages(record, fmt):
        if kind == "system":
            if text and text.strip():
                system.append(text.strip())
        elif kind == "user":
            if text is not None:
                pending.append(text)
        elif kind == "tool":
            name = m.get("name") or m.get("tool_call_id") or ""
            pending.append(f"[tool result{' ' + str(name) if name else ''}] {text or ''}".rstrip())
        elif kind == "tool_call":
            pending.append(f"[tool call] {text or ''}".rstrip())
        else:  # assistant
            tool_calls = m.get("tool_calls") or []
            if not isinstance(tool_calls, list):
                raise ValueError(f"an assistant message's tool_calls must be a list, got {type(tool_calls).__name__}")
            calls = [_call_text(c) for c in tool_calls]
            if m.get("function_call"):
                calls.append(_call_text(m["function_call"]))
            if (text is not None and text.strip()) or not calls:
                # an empty reply with no tool call is a turn that said nothing: kept, it is scored as an error
                # ("empty assistant turn") instead of vanishing with no row and no record
                turns.append(
                    {
                        "user": "\n\n".join(pending) if pending else None,
                        "assistant": text or "",
                        "label": _label(m.get("label")),
                        "weight": _weight(m.get("weight")),
                        "ground_truth_assistant": m.get("reference"),
                        "references": m.get("references"),
                    }
                )
                pending = list(calls)
            else:
                pending.extend(calls)  # tool calls alone are history, not a judged turn
    if not turns:
        raise ValueError("no assistant message with text (nothing to score)")
    role_text = "\n\n".join(system) if system else role
    cid = record.get("conversation_id", record.get("id"))
    cid = conversation_id if cid is None else str(cid)
    metadata = record.get("metadata")
    out = []
    for i, t in enumerate(turns):
        row = {"conversation_id": cid, "turn_index": i, "role": role_text, **t}
        if metadata is not None:
            row["metadata"] = json.dumps(metadata, ensure_ascii=False, default=str)
        out.append(row)
    return out


def explode_transcripts(
    records: Iterable[tuple[int, Optional[int], Any]], fmt: str, opts: TranscriptOptions, *, file: str, batch_size: int
) -> Iterator[pa.Table]:
    """Turn tables of at most ``batch_size`` rows from ``(record_no, line_no, record)`` triples.

    A malformed transcript is skipped and listed in ``opts.skipped`` and ``opts.quarantine`` (or, with
    ``bad_rows="fail"``, raises ``DataError`` naming the file, record and line).
    """
    from ._contracts import TURNS

    rows: list[dict] = []
    seen: dict = {}  # conversation id -> the record that first used it
    if fmt in TRACE_INPUT_FORMATS:
        from ._traces import explode_traces

        yield from explode_traces(records, fmt, opts, file=file, batch_size=batch_size)
        return
    for record_no, line_no, record in records:
        opts.records += 1
        try:
            if not isinstance(record, dict):
                raise ValueError(f"expected a JSON object, got {type(record).__name__}")
            if detect_transcript(record) != fmt:
                raise ValueError(
                    f"not an {fmt} transcript (no {'messages' if fmt == 'openai' else 'conversations'} list)"
                )
            turns = transcript_turns(record, fmt, conversation_id=str(record_no), role=opts.role)
            cid = turns[0]["conversation_id"]
            if cid in seen:
                hint = " (a record without an id is named by its record number)" if cid.isdigit() else ""
                raise ValueError(f"conversation id {cid!r} was already used by record {seen[cid]}{hint}")
            seen[cid] = record_no
            rows.extend(turns)
        except ValueError as exc:
            where = f"record {record_no}" + (
                f" (line {line_no})" if line_no is not None and line_no != record_no else ""
            )
            error = DataError(f"malformed {fmt} transcript: {exc}", file=file, row=record_no, line=line_no)
            opts.reject(error, text=record_text(record), flat=False, where=where)
            continue
        while len(rows) >= batch_size:
            yield records_to_table(rows[:batch_size], TURNS, file=file)
            rows = rows[batch_size:]
    if rows:
        yield records_to_table(rows, TURNS, file=file)

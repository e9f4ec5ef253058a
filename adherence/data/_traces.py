"""Production traces as turns: OpenTelemetry GenAI and OpenInference spans (OTLP JSON), Langfuse observations and
LangSmith runs.

One chat call (a span, an observation, a run) is one turn: its output text is the reply judged; ``user`` is what
its input sent after the last assistant message (tool calls and results kept in place and marked, as in
transcripts); ``role`` is its system instructions. Calls are grouped into conversations -- OpenTelemetry:
``gen_ai.conversation.id``, else ``session.id`` (span, then resource), else the trace; OpenInference: ``session.id``,
else the trace; Langfuse: ``sessionId``, else the trace; LangSmith: the ``session_id`` / ``thread_id`` /
``conversation_id`` of the run's metadata, else the trace -- and numbered by start time. Each turn keeps the ids
it came from (``trace_id``, ``span_id``: a Langfuse observation's or a LangSmith run's id) so that scores can be
written back (``adherence export``).

A call that cannot be a turn is left out with its reason and counted (as a malformed transcript is): no message
content (content capture off), an output with tool calls only (history, not a judged reply), an output with no
text part (an image), a record that is not one. Non-text input parts read as ``[image]``, ``[audio]``, ...

Records are read one at a time and only the turn's fields are kept (a span's input repeats the whole history;
its turn holds one exchange), then sorted by conversation and start time.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ._errors import DataError, record_text
from ._formats import records_to_table

__all__ = ["TRACE_FORMATS", "detect_trace", "explode_traces", "trace_turns"]

TRACE_FORMATS = ("otel", "openinference", "langfuse", "langsmith")


class Skip(ValueError):
    """A call that is not a turn, and why."""


# ----------------------------------------------------------------------------- detection


def detect_trace(record: Any) -> Optional[str]:
    """The trace format of a record (an OTLP JSON line, a Phoenix span row, a Langfuse observation or trace, a
    LangSmith run), or None."""
    if not isinstance(record, dict):
        return None
    if "resourceSpans" in record:
        return "otel"
    if "run_type" in record and ("inputs" in record or "outputs" in record):
        return "langsmith"
    if "observations" in record or (
        "traceId" in record and str(record.get("type", "")).upper() in ("GENERATION", "SPAN", "EVENT")
    ):
        return "langfuse"
    if (
        "context.span_id" in record
        or "span_kind" in record
        or (isinstance(record.get("context"), dict) and "span_id" in record["context"])
    ):
        return "openinference"
    return None


# ----------------------------------------------------------------------------- shared message handling

_ROLES = {
    "system": "system", "developer": "system", "user": "user", "human": "user", "assistant": "assistant",
    "ai": "assistant", "model": "assistant", "tool": "tool", "function": "tool", "ipython": "tool",
}  # fmt: skip


def _part_text(part: Any) -> Optional[str]:
    """A message part as text: text as it is, tool calls and results marked, other media as ``[type]``."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return None
    kind = str(part.get("type") or "text")
    if kind in ("text", "input_text", "output_text"):
        v = part.get("content", part.get("text"))
        return v if isinstance(v, str) else None
    if kind in ("tool_call", "function_call"):
        args = part.get("arguments")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)
        return f"[tool call] {part.get('name') or ''}({args if args != 'null' else ''})"
    if kind in ("tool_call_response", "tool_result", "function_response"):
        v = part.get("response", part.get("result", part.get("content")))
        v = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
        return f"[tool result] {v}"
    if kind == "reasoning":
        return None  # the model's reasoning is not what the user saw
    return f"[{part.get('modality') or kind}]"


def _content_text(content: Any) -> Optional[str]:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [t for t in (_part_text(p) for p in content) if t is not None]
        return "\n".join(texts) if texts else None
    if isinstance(content, dict):
        return _part_text(content)
    return str(content)


def _turn(messages: list, outputs: list, *, system_extra: Optional[str] = None) -> dict:
    """``{"role", "user", "assistant"}`` of one call: ``messages`` its input as ``(role, text)``, ``outputs`` its
    output as ``(role, text, has_tool_calls)``."""
    system = [system_extra] if system_extra else []
    pending: list[str] = []
    for role, text in messages:
        if role == "system":
            if text and text.strip():
                system.append(text.strip())
        elif role == "assistant":
            if text and all(line.startswith("[tool call]") for line in text.splitlines()):
                pending.append(text)  # tool calls alone are part of this turn's window, as in transcripts
            else:
                pending = []  # what came before the last reply is the history of earlier turns
        elif text is not None:
            pending.append(f"[tool result] {text}" if role == "tool" and not text.startswith("[tool") else text)
    texts = [t for _, t, _ in outputs if t and t.strip()]
    if not texts:
        if any(calls for _, _, calls in outputs):
            raise Skip("the output holds tool calls only (history, not a judged reply)")
        if outputs:
            raise Skip("the output has no text part (an image or other media)")
        raise Skip("no output message (content capture may be off)")
    if not messages and system_extra is None:
        user = None
    else:
        user = "\n\n".join(pending) if pending else None
    return {"role": "\n\n".join(system) if system else None, "user": user, "assistant": "\n".join(texts)}


def _lc_message(m: Any) -> tuple:
    """A LangChain / OpenAI message dict as ``(role, text, has_tool_calls)``."""
    if not isinstance(m, dict):
        return ("user", _content_text(m), False)
    if m.get("lc") and isinstance(m.get("kwargs"), dict):  # serialized: {"id": [..., "HumanMessage"], "kwargs": {...}}
        name = (m.get("id") or [""])[-1].lower()
        kw = m["kwargs"]
        role = next((r for k, r in (("human", "user"), ("ai", "assistant"), ("system", "system"), ("tool", "tool"))
                     if k in name), "user")  # fmt: skip
        return (role, _content_text(kw.get("content")), bool(kw.get("tool_calls")))
    if "data" in m and isinstance(m["data"], dict) and "type" in m:  # {"type": "human", "data": {...}}
        d = m["data"]
        return (_ROLES.get(str(m["type"]).lower(), "user"), _content_text(d.get("content")), bool(d.get("tool_calls")))
    role = _ROLES.get(str(m.get("role") or m.get("type") or "user").lower(), "user")
    text = _content_text(m.get("content", m.get("text")))
    calls = m.get("tool_calls") or m.get("function_call")
    if role == "assistant" and calls and not (text and text.strip()):
        return (role, None, True)
    return (role, text, bool(calls))


# ----------------------------------------------------------------------------- OTLP (GenAI and OpenInference)


def _any_value(v: Any) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value."""
    if not isinstance(v, dict):
        return v
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_any_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in v:
        return {kv["key"]: _any_value(kv.get("value")) for kv in (v["kvlistValue"] or {}).get("values", [])}
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def _attrs(items: Any) -> dict:
    return {kv["key"]: _any_value(kv.get("value")) for kv in items or [] if isinstance(kv, dict) and "key" in kv}


def _hex_id(v: Any, n: int) -> Optional[str]:
    """An OTLP id as lowercase hex (OTLP JSON writes hex; protobuf's own JSON mapping base64)."""
    if not v:
        return None
    s = str(v)
    if re.fullmatch(rf"[0-9a-fA-F]{{{2 * n}}}", s):
        return s.lower()
    try:
        raw = base64.b64decode(s, validate=True)
    except (ValueError, TypeError):
        return s
    return raw.hex() if len(raw) == n else s


def _json_attr(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _indexed(attrs: dict, prefix: str) -> list[dict]:
    """``prefix.N.rest`` attributes as a list of ``{rest: value}`` in N order."""
    found: dict[int, dict] = {}
    pat = re.compile(re.escape(prefix) + r"\.(\d+)\.(.+)$")
    for k, v in attrs.items():
        m = pat.match(k)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = v
    return [found[i] for i in sorted(found)]


def _genai_messages(attrs: dict, events: list) -> tuple[list, list, Optional[str]]:
    """Input ``(role, text)``, output ``(role, text, calls)`` and system instructions of a GenAI span, from the
    current attributes, the older indexed ones, or the older events."""
    system = None
    si = _json_attr(attrs.get("gen_ai.system_instructions"))
    if si:
        system = _content_text(si if isinstance(si, list) else [si])
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        inp = _json_attr(attrs.get("gen_ai.input.messages")) or []
        out = _json_attr(attrs.get("gen_ai.output.messages")) or []
        if not isinstance(inp, list) or not isinstance(out, list):
            raise ValueError("gen_ai.input.messages / gen_ai.output.messages must be JSON arrays of messages")
        msgs = [(_ROLES.get(str(m.get("role", "user")).lower(), "user"), _content_text(m.get("parts"))) for m in inp
                if isinstance(m, dict)]  # fmt: skip
        outs = []
        for m in out:
            if not isinstance(m, dict):
                continue
            parts = m.get("parts") or []
            texts = [p for p in parts if isinstance(p, dict) and str(p.get("type", "text")) == "text"]
            calls = any(isinstance(p, dict) and p.get("type") == "tool_call" for p in parts)
            outs.append(("assistant", _content_text(texts) if texts else None, calls))
        return msgs, outs, system
    prompts, completions = _indexed(attrs, "gen_ai.prompt"), _indexed(attrs, "gen_ai.completion")
    if prompts or completions:
        msgs = [
            (_ROLES.get(str(p.get("role", "user")).lower(), "user"), _content_text(p.get("content"))) for p in prompts
        ]
        outs = [("assistant", _content_text(c.get("content")), bool(c.get("tool_calls.0.name") or c.get("tool_calls")))
                for c in completions]  # fmt: skip
        return msgs, outs, system
    msgs, outs = [], []
    for e in events:
        name = e.get("name", "")
        ea = _attrs(e.get("attributes"))
        body = _json_attr(ea.get("gen_ai.event.content", ea.get("content", ea.get("body"))))
        if isinstance(body, dict):
            text = _content_text(
                body.get(
                    "content", body.get("message", {}).get("content") if isinstance(body.get("message"), dict) else None
                )
            )
            calls = bool(
                body.get("tool_calls") or (isinstance(body.get("message"), dict) and body["message"].get("tool_calls"))
            )
        else:
            text, calls = _content_text(body), False
        m = re.fullmatch(r"gen_ai\.(system|user|assistant|tool)\.message", name)
        if m:
            msgs.append((m.group(1), text))
        elif name == "gen_ai.choice":
            outs.append(("assistant", text, calls))
    return msgs, outs, system


def _openinference_messages(attrs: dict) -> tuple[list, list]:
    def read(prefix: str) -> list:
        out = []
        for m in _indexed(attrs, prefix):
            role = _ROLES.get(str(m.get("message.role", "user")).lower(), "user")
            text = m.get("message.content")
            if text is None:
                parts = _indexed({k: v for k, v in m.items()}, "message.contents")
                texts = [p.get("message_content.text") for p in parts if p.get("message_content.text")]
                others = [
                    f"[{p.get('message_content.type')}]"
                    for p in parts
                    if p.get("message_content.type") not in (None, "text")
                ]
                text = "\n".join(str(x) for x in texts + others) if texts or others else None
            calls = any(k.startswith("message.tool_calls.") for k in m)
            out.append((role, text, calls))
        return out

    inp = read("llm.input_messages")
    return [(r, t) for r, t, _ in inp], read("llm.output_messages")


def _otlp_rows(record: dict) -> Iterator[tuple[Optional[dict], Optional[str], Optional[str]]]:
    """``(row, None, None)`` for each chat span of an OTLP JSON ``ExportTraceServiceRequest``, or
    ``(None, span, reason)`` for a span that is a chat call but not a turn (other spans are not calls: ignored)."""
    for rs in record.get("resourceSpans") or []:
        res = _attrs((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
            for span in ss.get("spans") or []:
                attrs = _attrs(span.get("attributes"))
                events = span.get("events") or []
                trace_id, span_id = _hex_id(span.get("traceId"), 16), _hex_id(span.get("spanId"), 8)
                where = f"span {span_id}"
                genai = any(k.startswith("gen_ai.") for k in attrs) or any(
                    str(e.get("name", "")).startswith("gen_ai.") for e in events
                )
                oi = str(attrs.get("openinference.span.kind", "")).upper() == "LLM"
                if not (genai or oi):
                    continue
                op = str(attrs.get("gen_ai.operation.name", "chat"))
                if genai and not oi and op not in ("chat", "text_completion", "generate_content"):
                    continue  # embeddings, tool executions, agents: not a chat call
                try:
                    if oi:
                        msgs, outs = _openinference_messages(attrs)
                        system = None
                        conv = attrs.get("session.id") or res.get("session.id")
                    else:
                        msgs, outs, system = _genai_messages(attrs, events)
                        conv = attrs.get("gen_ai.conversation.id") or attrs.get("session.id") or res.get("session.id")
                    if not msgs and not outs and system is None:
                        raise Skip("no message content (content capture is off?)")
                    turn = _turn(msgs, outs, system_extra=system)
                except (Skip, ValueError) as exc:
                    yield None, where, str(exc)
                    continue
                yield (
                    {
                        **turn,
                        "conversation_id": str(conv or trace_id),
                        "_start": int(span.get("startTimeUnixNano") or 0),
                        "trace_id": trace_id,
                        "span_id": span_id,
                        "model": attrs.get("gen_ai.request.model") or attrs.get("llm.model_name"),
                    },
                    None,
                    None,
                )


# ----------------------------------------------------------------------------- flat records


def _ts(v: Any) -> int:
    """A start time as a sortable integer (ISO strings, epoch seconds, milliseconds or nanoseconds)."""
    if v is None:
        return 0
    if isinstance(v, (int, float)):
        return int(v)
    from datetime import datetime, timezone

    try:
        d = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    except ValueError:
        return 0
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return int(d.timestamp() * 1e9)


def _messages_of(v: Any) -> list:
    """An input or output value as a list of messages (a dict with ``messages``, LangChain's nested lists, a
    string, one message)."""
    v = _json_attr(v)
    if v is None:
        return []
    if isinstance(v, dict):
        for k in ("messages", "message", "choices", "generations", "output", "input", "prompt"):
            if k in v:
                inner = v[k]
                if k == "choices":
                    inner = [c.get("message", c) if isinstance(c, dict) else c for c in inner or []]
                if k == "generations":
                    flat = [g for row in inner or [] for g in (row if isinstance(row, list) else [row])]
                    inner = [g.get("message", {"role": "assistant", "content": g.get("text")}) if isinstance(g, dict)
                             else g for g in flat]  # fmt: skip
                return _messages_of(inner)
        return [v]
    if isinstance(v, list):
        if v and all(isinstance(x, list) for x in v):  # LangChain: one list of messages per prompt
            v = v[0]
        return list(v)
    return [{"role": "user", "content": str(v)}]


def _flat_row(record: dict, fmt: str) -> dict:
    record = {
        k: (_json_attr(v) if k in ("extra", "metadata", "attributes", "context") else v) for k, v in record.items()
    }
    if fmt == "langsmith":
        if str(record.get("run_type")) != "llm":
            raise Skip(f"a {record.get('run_type')} run, not an llm call")
        meta = ((record.get("extra") or {}).get("metadata") or {}) if isinstance(record.get("extra"), dict) else {}
        meta = {**meta, **(record.get("metadata") or {})} if isinstance(record.get("metadata"), dict) else meta
        conv = meta.get("session_id") or meta.get("thread_id") or meta.get("conversation_id")
        inputs, outputs = record.get("inputs"), record.get("outputs")
        ids = (record.get("trace_id"), record.get("id"))
        start = record.get("start_time")
        model = (meta.get("ls_model_name") or (record.get("extra") or {}).get("invocation_params", {}).get("model")
                 if isinstance(record.get("extra"), dict) else None)  # fmt: skip
    elif fmt == "langfuse":
        if str(record.get("type", "GENERATION")).upper() != "GENERATION":
            raise Skip(f"a {record.get('type')} observation, not a generation")
        conv = record.get("sessionId")
        inputs, outputs = record.get("input"), record.get("output")
        ids = (record.get("traceId"), record.get("id"))
        start = record.get("startTime")
        model = record.get("model")
    else:  # openinference: a Phoenix span row, nested (attributes: {...}) or flattened (attributes.x.y columns)
        attrs = dict(record.get("attributes") or {}) if isinstance(record.get("attributes"), dict) else {}
        attrs.update({k[len("attributes.") :]: v for k, v in record.items() if k.startswith("attributes.")})
        flat = _flatten(attrs)
        kind = str(record.get("span_kind") or flat.get("openinference.span.kind") or "").upper()
        if kind != "LLM":
            raise Skip(f"a {kind or 'non-LLM'} span, not an LLM call")
        ctx: dict = record["context"] if isinstance(record.get("context"), dict) else {}
        ids = (
            record.get("context.trace_id") or ctx.get("trace_id"),
            record.get("context.span_id") or ctx.get("span_id"),
        )
        msgs, outs = _openinference_messages(flat)
        if not msgs and not outs:
            raise Skip("no message content (content capture is off?)")
        turn = _turn(msgs, outs)
        return {**turn, "conversation_id": str(flat.get("session.id") or ids[0]), "_start": _ts(record.get("start_time")),
                "trace_id": ids[0], "span_id": ids[1], "model": flat.get("llm.model_name")}  # fmt: skip
    msgs = [_lc_message(m) for m in _messages_of(inputs)]
    outs = [_lc_message(m) for m in _messages_of(outputs)]
    outs = [("assistant", t, c) for r, t, c in outs]
    if not msgs and not outs:
        raise Skip("no input or output (content capture is off?)")
    turn = _turn([(r, t) for r, t, _ in msgs], outs)
    return {**turn, "conversation_id": str(conv or ids[0]), "_start": _ts(start), "trace_id": ids[0],
            "span_id": ids[1], "model": model}  # fmt: skip


def _flatten(d: Any, prefix: str = "") -> dict:
    """Nested attributes (``{"llm": {"input_messages": [{"message": {...}}]}}``) as dotted, indexed keys."""
    out: dict = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}.{i}"))
    else:
        out[prefix] = d
    return out


def _otlp_value(v: Any) -> dict:
    """A Python attribute value as an OTLP JSON ``AnyValue``."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [_otlp_value(x) for x in v]}}
    return {"stringValue": "" if v is None else str(v)}


def _otlp_attrs(d: Any) -> list:
    return [{"key": k, "value": _otlp_value(v)} for k, v in (d or {}).items()] if isinstance(d, dict) else []


def _sdk_span_as_otlp(record: dict) -> Optional[dict]:
    """A span as the OpenTelemetry SDK prints it (``ReadableSpan.to_json``: what ``ConsoleSpanExporter`` writes), as
    the OTLP JSON request that carries it (whose reader keeps the GenAI chat calls and passes over other spans); None
    for a Phoenix span (an OpenInference kind) or anything else."""
    ctx, attrs = record.get("context"), record.get("attributes")
    if not (isinstance(ctx, dict) and isinstance(attrs, dict) and "span_id" in ctx):
        return None
    if (
        "span_kind" in record
        or "openinference.span.kind" in attrs
        or any(str(k).startswith(("llm.", "input.", "output.")) for k in attrs)
    ):
        return None

    def hex_id(v: Any) -> Any:
        return v[2:] if isinstance(v, str) and v.lower().startswith("0x") else v

    span = {
        "traceId": hex_id(ctx.get("trace_id")),
        "spanId": hex_id(ctx.get("span_id")),
        "name": record.get("name"),
        "startTimeUnixNano": _ts(record.get("start_time")),
        "attributes": _otlp_attrs(attrs),
        "events": [
            {"name": e.get("name"), "attributes": _otlp_attrs(e.get("attributes"))}
            for e in record.get("events") or []
            if isinstance(e, dict)
        ],  # fmt: skip
    }
    resource: dict = record["resource"] if isinstance(record.get("resource"), dict) else {}
    return {"resourceSpans": [{"resource": {"attributes": _otlp_attrs(resource.get("attributes"))},
                               "scopeSpans": [{"spans": [span]}]}]}  # fmt: skip


def trace_turns(record: dict, fmt: str) -> Iterator[tuple[Optional[dict], Optional[str], Optional[str]]]:
    """``(row, None, None)`` per turn of one record, ``(None, where, reason)`` per call that is not a turn."""
    if fmt == "openinference":
        # the OpenTelemetry SDK's own span JSON (ConsoleSpanExporter) looks like a Phoenix span: GenAI attributes
        # without an OpenInference kind are read as the OTLP span they are
        as_otlp = _sdk_span_as_otlp(record)
        if as_otlp is not None:
            record, fmt = as_otlp, "otel"
    if fmt == "otel":
        yield from _otlp_rows(record)
        return
    if fmt == "langfuse" and "observations" in record:  # a trace with its observations
        for o in record.get("observations") or []:
            o = dict(
                o, sessionId=o.get("sessionId") or record.get("sessionId"), traceId=o.get("traceId") or record.get("id")
            )
            try:
                yield _flat_row(o, fmt), None, None
            except (Skip, ValueError) as exc:
                yield None, f"observation {o.get('id')}", str(exc)
        return
    try:
        yield _flat_row(record, fmt), None, None
    except (Skip, ValueError) as exc:
        kind = {"langsmith": "run", "openinference": "span"}.get(fmt, "observation")
        yield None, f"{kind} {record.get('id') or record.get('context.span_id') or ''}".rstrip(), str(exc)


def explode_traces(
    records: Iterable[tuple[int, Optional[int], Any]], fmt: str, opts, *, file: str, batch_size: int
) -> Iterator[pa.Table]:
    """Turn tables from trace records: every call read (one record at a time; only its turn kept), then sorted by
    conversation and start time and numbered. A call that is not a turn is left out with its reason (``opts``:
    the transcript options' bad-row policy; ``fail`` stops at the first with one line naming file and line)."""
    from ._contracts import TURNS

    # Turns are kept as Arrow batches while reading (one exchange each, not the span's repeated history), then
    # ordered by conversation and start time and numbered.
    names = ("conversation_id", "_start", "trace_id", "span_id", "role", "user", "assistant", "model")
    schema = pa.schema([(n, pa.int64() if n == "_start" else pa.string()) for n in names])
    parts: list = []
    rows: list[dict] = []
    # A span exported twice (a retried export, two files concatenated) is one call: read once and counted; the
    # same span id with other content is refused, naming it.
    seen: dict = {}
    repeated = 0
    for record_no, line_no, record in records:
        where_line = f"line {line_no}" if line_no is not None else f"record {record_no}"
        if detect_trace(record) != fmt:
            error = DataError(f"not a {fmt} trace record", file=file, row=record_no, line=line_no)
            opts.reject(error, text=record_text(record)[:2000], flat=False, where=where_line)
            continue
        for row, where, reason in trace_turns(record, fmt):
            if row is None:
                error = DataError(f"{where}: {reason}", file=file, row=record_no, line=line_no)
                opts.reject(error, text=None, flat=False, where=f"{where_line}, {where}")
                continue
            if not row["role"]:
                row["role"] = opts.role  # --role for calls without system instructions
            out = {n: (row.get(n) if n == "_start" or row.get(n) is None else str(row[n])) for n in names}
            if out.get("span_id"):
                key = (out.get("trace_id"), out["span_id"])
                digest = hash(tuple(out.get(n) for n in names))
                if key in seen:
                    if seen[key][0] != digest:
                        raise DataError(
                            f"span {out['span_id']} of trace {out.get('trace_id')} appears twice with different "
                            f"content (first at {seen[key][1]}): which one is the call?",
                            file=file,
                            row=record_no,
                            line=line_no,
                        )
                    repeated += 1
                    continue
                seen[key] = (digest, where_line)
            rows.append(out)
            if len(rows) >= 65_536:
                parts.append(pa.Table.from_pylist(rows, schema=schema))
                rows = []
    if rows:
        parts.append(pa.Table.from_pylist(rows, schema=schema))
    if repeated:
        import warnings

        warnings.warn(f"{file}: {repeated} span(s) appear more than once with the same content: each read once",
                      stacklevel=2)  # fmt: skip
    if not parts:
        return
    table = pa.concat_tables(parts).sort_by(
        [("conversation_id", "ascending"), ("_start", "ascending"), ("span_id", "ascending")]
    )
    del parts
    cid = table.column("conversation_id").to_numpy(zero_copy_only=False)
    starts = np.r_[True, cid[1:] != cid[:-1]] if len(cid) else np.zeros(0, dtype=bool)
    first = np.flatnonzero(starts)
    run = np.repeat(first, np.diff(np.r_[first, len(cid)]))
    table = table.drop_columns(["_start"]).append_column("turn_index", pa.array(np.arange(len(cid)) - run, pa.int32()))
    for s in range(0, table.num_rows, batch_size):
        yield records_to_table(table.slice(s, batch_size).to_pylist(), TURNS, file=file)

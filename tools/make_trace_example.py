"""Regenerate adherence/examples/role_traces.otlp.jsonl: the bundled example's conversations as OpenTelemetry GenAI
chat spans, made by the OpenTelemetry SDK and written as OTLP JSON, one ``ExportTraceServiceRequest`` a line (as
the Collector's file exporter writes them).

    python tools/make_trace_example.py

Each conversation of ``role_turns.jsonl`` is one trace of chat spans (``gen_ai.operation.name=chat``), one per
assistant turn, with the current content attributes: ``gen_ai.system_instructions`` (the role),
``gen_ai.input.messages`` (the history and the user message) and ``gen_ai.output.messages`` (the reply), and
``gen_ai.conversation.id``. Span and trace ids come from a seeded generator, start times from a fixed clock, so the
file is the same on every run. Scored with ``--ground-truth adherence/examples/role_turns.jsonl`` it gives the
flat example's scores.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "adherence" / "examples" / "role_turns.jsonl"
OUT = ROOT / "adherence" / "examples" / "role_traces.otlp.jsonl"


def otlp_json(spans) -> dict:
    """The SDK's spans as an OTLP JSON ``ExportTraceServiceRequest`` (ids hex, as OTLP JSON requires; protobuf's
    own JSON mapping would write them base64)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    d = MessageToDict(encode_spans(spans))

    def fix(o):
        if isinstance(o, dict):
            for k in ("traceId", "spanId", "parentSpanId"):
                if isinstance(o.get(k), str) and o[k]:
                    import base64

                    o[k] = base64.b64decode(o[k]).hex()
            for v in o.values():
                fix(v)
        elif isinstance(o, list):
            for v in o:
                fix(v)

    fix(d)
    return d


def main() -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import set_span_in_context

    class Seeded(IdGenerator):
        def __init__(self) -> None:
            self.rng = random.Random(0)

        def generate_span_id(self) -> int:
            return self.rng.getrandbits(64)

        def generate_trace_id(self) -> int:
            return self.rng.getrandbits(128)

    rows = [json.loads(line) for line in SRC.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_conv: dict = {}
    for r in rows:
        by_conv.setdefault(r["conversation_id"], []).append(r)
    clock = 1_764_000_000_000_000_000  # a fixed start (ns): the file does not change between runs
    lines = []
    ids = Seeded()
    for cid, turns in by_conv.items():
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource({"service.name": "support-bot"}), id_generator=ids)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("adherence.example")
        history: list = []
        parent = tracer.start_span("conversation", start_time=clock)
        context = set_span_in_context(parent)
        for t in sorted(turns, key=lambda x: x["turn_index"]):
            clock += 2_000_000_000
            history.append({"role": "user", "parts": [{"type": "text", "content": t["user"]}]})
            attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.conversation.id": cid,
                "gen_ai.system_instructions": json.dumps([{"type": "text", "content": t["role"]}]),
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": t["assistant"]}],
                            "finish_reason": "stop",
                        }
                    ]  # fmt: skip
                ),
            }
            span = tracer.start_span("chat gpt-4o-mini", context=context, attributes=attrs, start_time=clock)
            span.end(end_time=clock + 900_000_000)
            history.append({"role": "assistant", "parts": [{"type": "text", "content": t["assistant"]}]})
        clock += 2_000_000_000
        parent.end(end_time=clock)
        provider.force_flush()
        lines.append(json.dumps(otlp_json(exporter.get_finished_spans()), separators=(",", ":")))
        provider.shutdown()
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(lines)} traces, {len(rows)} chat spans)")


if __name__ == "__main__":
    main()

"""Traces in, scores out: OTLP JSON made by the OpenTelemetry SDK (GenAI conventions current and older, OpenInference
attributes), Phoenix span rows, Langfuse observations and LangSmith runs read as turns; calls that are not turns left
out with their reason; scores exported back to the spans they came from."""

import base64
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main
from adherence.data import DataError, TranscriptOptions, example_path, iter_batches, read_table
from adherence.data._contracts import TURNS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "adherence" / "examples" / "role_traces.otlp.jsonl"


def _turns(path, **kw):
    opts = TranscriptOptions(**kw)
    t = next(iter_batches(path, TURNS, transcripts=opts), None)
    return (t.to_pylist() if t is not None else []), opts


class _Spans:
    """Spans made by the OpenTelemetry SDK (in-memory exporter), written as OTLP JSON lines."""

    def __init__(self):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource({"service.name": "app", "session.id": "from-resource"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")
        self.clock = 1_700_000_000_000_000_000

    def span(self, name, attrs, events=()):
        self.clock += 1_000_000_000
        s = self.tracer.start_span(name, attributes=attrs, start_time=self.clock)
        for ev_name, ev_attrs in events:
            s.add_event(ev_name, ev_attrs, timestamp=self.clock + 1)
        s.end(end_time=self.clock + 500)
        return s

    def write(self, path):
        from make_trace_example import otlp_json

        path.write_text(json.dumps(otlp_json(self.exporter.get_finished_spans())) + "\n")
        return path


def _msgs(*pairs):
    return json.dumps([{"role": r, "parts": [{"type": "text", "content": c}]} for r, c in pairs])


@pytest.mark.slow
def test_the_bundled_trace_example_is_the_flat_example(tmp_path):
    rows, opts = _turns(EXAMPLE)
    flat = {(r["conversation_id"], r["turn_index"]): r for r in read_table(example_path("role")).to_pylist()}
    assert len(rows) == len(flat) == 28 and not opts.skipped
    for r in rows:
        f = flat[(r["conversation_id"], r["turn_index"])]
        assert (r["role"], r["user"], r["assistant"]) == (f["role"], f["user"], f["assistant"])
        assert len(r["trace_id"]) == 32 and len(r["span_id"]) == 16 and r["model"] == "gpt-4o-mini"
    # scored as the README scores the flat file: the same scores
    out, ref = tmp_path / "traces.parquet", tmp_path / "flat.parquet"
    gt = str(example_path("role"))
    assert (
        main(["score", str(EXAMPLE), "-o", str(out), "--method", "cosine", "--ground-truth", gt, "--no-progress"]) == 0
    )
    assert main(["score", gt, "-o", str(ref), "--method", "cosine", "--no-progress"]) == 0
    a = {(r["conversation_id"], r["turn_index"]): r["score"] for r in pq.read_table(out).to_pylist()}
    b = {(r["conversation_id"], r["turn_index"]): r["score"] for r in pq.read_table(ref).to_pylist()}
    assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], abs=1e-6) for k in a)


def test_genai_spans_in_every_form_the_sdk_writes(tmp_path):
    s = _Spans()
    role = "You are a travel agent."
    # current attributes, a conversation id, history, a tool call and result in the window, an image part
    s.span("chat", {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "c1",
                    "gen_ai.system_instructions": json.dumps([{"type": "text", "content": role}]),
                    "gen_ai.input.messages": _msgs(("user", "Book me a flight")),
                    "gen_ai.output.messages": _msgs(("assistant", "Where to?"))})  # fmt: skip
    s.span("chat", {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "c1",
                    "gen_ai.system_instructions": json.dumps([{"type": "text", "content": role}]),
                    "gen_ai.input.messages": json.dumps([
                        {"role": "user", "parts": [{"type": "text", "content": "Book me a flight"}]},
                        {"role": "assistant", "parts": [{"type": "text", "content": "Where to?"}]},
                        {"role": "user", "parts": [{"type": "text", "content": "Lisbon"}, {"type": "blob", "modality": "image", "content": "AAAA"}]},
                        {"role": "assistant", "parts": [{"type": "tool_call", "name": "search", "arguments": {"to": "LIS"}}]},
                        {"role": "tool", "parts": [{"type": "tool_call_response", "response": "3 flights"}]},
                    ]),
                    "gen_ai.output.messages": _msgs(("assistant", "I found 3 flights."))})  # fmt: skip
    # the older indexed attributes (OpenLLMetry), grouped by session.id
    s.span("openai.chat", {"gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": role,
                           "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Hi",
                           "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Hello!",
                           "session.id": "c2"})  # fmt: skip
    # the older events; no conversation id: the resource's session.id
    s.span("chat", {"gen_ai.operation.name": "chat"},
           [("gen_ai.system.message", {"content": role}), ("gen_ai.user.message", {"content": "Cheapest hotel?"}),
            ("gen_ai.choice", {"gen_ai.event.content": json.dumps({"message": {"content": "The Ibis."}})})])  # fmt: skip
    # not turns: content capture off, tool calls only, an image only; and spans that are not chat calls
    s.span("chat", {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "c3"})
    s.span("chat", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": _msgs(("user", "x")),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                        {"type": "tool_call", "name": "f", "arguments": {}}]}])})  # fmt: skip
    s.span("chat", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": _msgs(("user", "draw")),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                        {"type": "blob", "modality": "image", "content": "AAAA"}]}])})  # fmt: skip
    s.span("embeddings", {"gen_ai.operation.name": "embeddings", "gen_ai.input.messages": "[]"})
    s.span("http GET", {"http.method": "GET"})
    path = s.write(tmp_path / "t.otlp.jsonl")
    rows, opts = _turns(path, role="a fallback role")
    by = {(r["conversation_id"], r["turn_index"]): r for r in rows}
    assert set(by) == {("c1", 0), ("c1", 1), ("c2", 0), ("from-resource", 0)}
    assert by[("c1", 0)]["user"] == "Book me a flight" and by[("c1", 0)]["role"] == role
    assert by[("c1", 1)]["user"] == 'Lisbon\n[image]\n\n[tool call] search({"to": "LIS"})\n\n[tool result] 3 flights'
    assert by[("c1", 1)]["assistant"] == "I found 3 flights."
    assert (by[("c2", 0)]["role"], by[("c2", 0)]["user"], by[("c2", 0)]["assistant"]) == (role, "Hi", "Hello!")
    assert (by[("from-resource", 0)]["user"], by[("from-resource", 0)]["assistant"]) == ("Cheapest hotel?", "The Ibis.")
    reasons = sorted(r for _, r in opts.skipped)
    assert len(reasons) == 3
    assert any("content capture" in r for r in reasons) and any("tool calls only" in r for r in reasons)
    assert any("no text part" in r for r in reasons)
    with pytest.raises(DataError, match=r"t\.otlp\.jsonl.*line 1.*span [0-9a-f]{16}: no message content"):
        _turns(path, bad_rows="fail")


def test_openinference_spans_over_otlp_and_as_phoenix_rows(tmp_path):
    s = _Spans()
    attrs = {"openinference.span.kind": "LLM", "session.id": "s1", "llm.model_name": "gpt-4o",
             "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": "Be a chef.",
             "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": "Salt?",
             "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": "A pinch."}  # fmt: skip
    sp = s.span("ChatOpenAI", attrs)
    s.span("retriever", {"openinference.span.kind": "RETRIEVER"})
    rows, opts = _turns(s.write(tmp_path / "oi.jsonl"))
    assert [(r["conversation_id"], r["role"], r["user"], r["assistant"]) for r in rows] == [
        ("s1", "Be a chef.", "Salt?", "A pinch.")
    ]
    assert rows[0]["span_id"] == format(sp.context.span_id, "016x")
    # Phoenix's span dataframe, written as JSONL: flattened attribute columns, one LLM span and one chain span
    phoenix = [
        {"name": "ChatOpenAI", "span_kind": "LLM", "context.span_id": "ab" * 8, "context.trace_id": "cd" * 16,
         "start_time": "2025-01-01T10:00:00+00:00", "attributes.session.id": "s9",
         "attributes.llm.input_messages": [{"message.role": "user", "message.content": "Hi"}],
         "attributes.llm.output_messages": [{"message.role": "assistant", "message.content": "Hello"}]},
        {"name": "chain", "span_kind": "CHAIN", "context.span_id": "ef" * 8, "context.trace_id": "cd" * 16},
    ]  # fmt: skip
    p = tmp_path / "phoenix.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in phoenix) + "\n")
    rows, opts = _turns(p, role="You are helpful.")
    assert [(r["conversation_id"], r["user"], r["assistant"], r["span_id"]) for r in rows] == [
        ("s9", "Hi", "Hello", "ab" * 8)
    ]
    assert rows[0]["role"] == "You are helpful." and len(opts.skipped) == 1 and "CHAIN" in opts.skipped[0][1]


def test_langfuse_observations_and_langsmith_runs(tmp_path):
    obs = [
        {"id": "o2", "traceId": "t1", "type": "GENERATION", "startTime": "2025-01-01T10:00:05Z", "sessionId": "sess",
         "model": "gpt-4o", "input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                      {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}],
         "output": {"role": "assistant", "content": "Goodbye"}},
        {"id": "o1", "traceId": "t1", "type": "GENERATION", "startTime": "2025-01-01T10:00:00Z", "sessionId": "sess",
         "input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "output": "Hello"},
        {"id": "o3", "traceId": "t1", "type": "SPAN", "startTime": "2025-01-01T10:00:01Z"},
    ]  # fmt: skip
    p = tmp_path / "langfuse.jsonl"
    p.write_text("\n".join(json.dumps(o) for o in obs) + "\n")
    rows, opts = _turns(p)
    assert [(r["turn_index"], r["user"], r["assistant"], r["span_id"]) for r in rows] == [
        (0, "Hi", "Hello", "o1"),
        (1, "Bye", "Goodbye", "o2"),
    ]
    assert rows[0]["conversation_id"] == "sess" and rows[0]["role"] == "Be brief." and len(opts.skipped) == 1
    # a trace export with its observations (JSON), the session on the trace
    trace = {"id": "t9", "sessionId": "s-trace", "observations": [dict(obs[1], traceId=None, sessionId=None)]}
    j = tmp_path / "trace.json"
    j.write_text(json.dumps([trace]))
    rows, _ = _turns(j)
    assert [(r["conversation_id"], r["trace_id"], r["assistant"]) for r in rows] == [("s-trace", "t9", "Hello")]
    runs = [
        {"id": "r1", "trace_id": "tr", "run_type": "llm", "start_time": "2025-01-01T10:00:00",
         "extra": {"metadata": {"thread_id": "th-1"}},
         "inputs": {"messages": [[{"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "SystemMessage"], "kwargs": {"content": "Be a pirate."}},
                                 {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "HumanMessage"], "kwargs": {"content": "Hello"}}]]},
         "outputs": {"generations": [[{"text": "Arr!", "message": {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"], "kwargs": {"content": "Arr!"}}}]]}},
        {"id": "r2", "trace_id": "tr", "run_type": "chain", "inputs": {}, "outputs": {}},
        {"id": "r3", "trace_id": "tr2", "run_type": "llm", "start_time": "2025-01-01T10:01:00", "extra": {"metadata": {"thread_id": "th-1"}},
         "inputs": {"messages": [{"role": "user", "content": "Where's the gold?"}]},
         "outputs": {"choices": [{"message": {"role": "assistant", "content": "Buried."}}]}},
    ]  # fmt: skip
    p = tmp_path / "runs.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    rows, opts = _turns(p, role="Be a pirate.")
    assert [(r["conversation_id"], r["turn_index"], r["user"], r["assistant"], r["span_id"]) for r in rows] == [
        ("th-1", 0, "Hello", "Arr!", "r1"), ("th-1", 1, "Where's the gold?", "Buried.", "r3")]  # fmt: skip
    assert rows[0]["role"] == "Be a pirate." and len(opts.skipped) == 1


def _hex_to_b64(o):
    if isinstance(o, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId") else _hex_to_b64(v))
                for k, v in o.items()}  # fmt: skip
    if isinstance(o, list):
        return [_hex_to_b64(v) for v in o]
    return o


def test_scores_go_back_to_the_spans_they_scored(tmp_path):
    """Trace in -> score -> export: each OTLP event (parsed by the official protobuf message) names the span of its
    turn; the other formats name the same ids, with stable record ids."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    out = tmp_path / "s.parquet"
    gt = str(example_path("role"))
    assert (
        main(["score", str(EXAMPLE), "-o", str(out), "--method", "cosine", "--ground-truth", gt, "--no-progress"]) == 0
    )
    scored = {r["span_id"]: r for r in pq.read_table(out).to_pylist()}
    spans = {}
    for line in EXAMPLE.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    spans[sp["spanId"]] = sp["traceId"]
    ev = tmp_path / "events.jsonl"
    assert main(["export", str(out), "--format", "otel", "-o", str(ev)]) == 0
    seen = 0
    for line in ev.read_text().splitlines():
        req = ParseDict(_hex_to_b64(json.loads(line)), ExportLogsServiceRequest())
        for rec in req.resource_logs[0].scope_logs[0].log_records:
            span_id, trace_id = rec.span_id.hex(), rec.trace_id.hex()
            attrs = {a.key: a.value for a in rec.attributes}
            assert rec.event_name == "gen_ai.evaluation.result" and spans[span_id] == trace_id
            assert attrs["gen_ai.evaluation.score.value"].double_value == pytest.approx(scored[span_id]["score"])
            assert attrs["gen_ai.evaluation.score.label"].string_value == (
                "adherent" if scored[span_id]["prediction"] else "violation"
            )
            seen += 1
    assert seen == 28
    for fmt, id_key in (("langfuse", "observationId"), ("phoenix", "span_id"), ("langsmith", "run_id")):
        f = tmp_path / f"{fmt}.jsonl"
        assert main(["export", str(out), "--format", fmt, "-o", str(f)]) == 0
        recs = [json.loads(x) for x in f.read_text().splitlines()]
        assert sorted(r[id_key] for r in recs) == sorted(scored)
        again = tmp_path / f"{fmt}-2.jsonl"
        assert main(["export", str(out), "--format", fmt, "-o", str(again)]) == 0
        assert again.read_text() == f.read_text()  # idempotent ids: posting twice updates, never duplicates
    plain = tmp_path / "plain.parquet"
    assert main(["score", gt, "-o", str(plain), "--method", "kl", "--no-progress"]) == 0
    assert main(["export", str(plain), "--format", "otel", "-o", str(tmp_path / "x.jsonl")]) == 2


class _Receiver:
    """An OTLP/HTTP logs endpoint on 127.0.0.1 that keeps what it is sent (each body parsed with the official
    protobuf message), answering with the given statuses first."""

    def __init__(self, statuses=(), reply=b"{}"):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies, self.paths, self.headers = [], [], []
        statuses = list(statuses)
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.paths.append(self.path)
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                code = statuses.pop(0) if statuses else 200
                if code == 200:
                    outer.bodies.append(body)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(reply if code == 200 else b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_send_delivers_the_events_over_otlp_http_and_fails_loudly(tmp_path, capsys):
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    out = tmp_path / "s.parquet"
    gt = str(example_path("role"))
    assert (
        main(["score", str(EXAMPLE), "-o", str(out), "--method", "cosine", "--ground-truth", gt, "--no-progress"]) == 0
    )
    rx = _Receiver(statuses=[503])  # one refusal: retried
    try:
        args = ["export", str(out), "--format", "otel", "-o", str(tmp_path / "e.jsonl"), "--send", rx.url,
                "--header", "authorization=Bearer s3cret"]  # fmt: skip
        assert main(args) == 0
        assert rx.paths == ["/v1/logs", "/v1/logs"] and rx.headers[-1]["authorization"] == "Bearer s3cret"
        got = [ParseDict(_hex_to_b64(json.loads(b)), ExportLogsServiceRequest()) for b in rx.bodies]
        assert sum(len(r.resource_logs[0].scope_logs[0].log_records) for r in got) == 28
        assert "s3cret" not in capsys.readouterr().err
    finally:
        rx.close()
    bad = _Receiver(reply=b'{"partialSuccess": {"rejectedLogRecords": 3, "errorMessage": "bad span id"}}')
    try:
        assert main([*args[:6], "--send", bad.url]) == 1
        assert "rejected 3 of 28 record(s): bad span id" in capsys.readouterr().err
    finally:
        bad.close()
    assert main([*args[:6], "--send", "http://127.0.0.1:9"]) == 1
    assert "cannot reach http://127.0.0.1:9/v1/logs" in capsys.readouterr().err


def test_otlp_protobuf_files_and_csv_tables(tmp_path):
    """The Collector's proto format (each request preceded by its size, 4 bytes big-endian) and one request alone
    read as the JSON file does; a Langfuse observations table exported as CSV reads as its JSONL does."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    s = _Spans()
    for q, a in (("Hi", "Hello"), ("Bye", "Goodbye")):
        s.span("chat", {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "c",
                        "gen_ai.input.messages": _msgs(("user", q)), "gen_ai.output.messages": _msgs(("assistant", a))})  # fmt: skip
    spans = s.exporter.get_finished_spans()
    want, _ = _turns(s.write(tmp_path / "t.otlp.jsonl"), role="r")
    framed = tmp_path / "traces.binpb"
    with open(framed, "wb") as fh:
        for sp in spans:  # one request per span, as a Collector batching one at a time would write them
            data = encode_spans([sp]).SerializeToString()
            fh.write(len(data).to_bytes(4, "big") + data)
    single = tmp_path / "one.pb"
    single.write_bytes(encode_spans(spans).SerializeToString())
    for path in (framed, single):
        got, opts = _turns(path, role="r")
        assert got == want and not opts.skipped
    bad = tmp_path / "bad.binpb"
    bad.write_bytes(b"\x00\x00\x00\x05abc")
    with pytest.raises(DataError, match="truncated|not an OTLP trace request"):
        _turns(bad)
    import csv

    obs = [{"id": "o1", "traceId": "t1", "type": "GENERATION", "startTime": "2025-01-01T10:00:00Z", "sessionId": "s",
            "input": json.dumps([{"role": "user", "content": "Hi, with, commas\nand a newline"}]), "output": "Hello"},
           {"id": "o2", "traceId": "t1", "type": "SPAN", "startTime": "2025-01-01T10:00:01Z", "sessionId": "s",
            "input": "", "output": ""}]  # fmt: skip
    p = tmp_path / "observations.csv"
    with open(p, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(obs[0]))
        w.writeheader()
        w.writerows(obs)
    rows, opts = _turns(p, role="r")
    assert [(r["conversation_id"], r["user"], r["assistant"], r["span_id"]) for r in rows] == [
        ("s", "Hi, with, commas\nand a newline", "Hello", "o1")]  # fmt: skip
    assert len(opts.skipped) == 1


def test_a_span_repeated_in_a_file_is_one_turn_and_a_conflicting_repeat_is_refused(tmp_path):
    """A retried export (the same spans twice) reads as one export; the same span id with other content is refused,
    naming the span."""
    import json as _json
    import warnings as _warnings

    from adherence.data import DataError, example_path, read_turns

    src = example_path("role").parent / "role_traces.otlp.jsonl"
    once = read_turns(src)
    lines = src.read_text().splitlines()
    twice = tmp_path / "twice.otlp.jsonl"
    twice.write_text("\n".join(lines + lines[:3]) + "\n")
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        got = read_turns(twice)
    assert got.num_rows == once.num_rows
    assert got.column("assistant").to_pylist() == once.column("assistant").to_pylist()
    assert any("appear more than once with the same content" in str(w.message) for w in caught)
    record = _json.loads(lines[0])
    span = record["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    for a in span["attributes"]:
        if "value" in a and "stringValue" in a["value"] and "assistant" in a["value"]["stringValue"]:
            a["value"]["stringValue"] = a["value"]["stringValue"].replace("assistant", "bot")
    for e in span.get("events") or []:
        for a in e.get("attributes") or []:
            if "stringValue" in a.get("value", {}):
                a["value"]["stringValue"] += " (edited)"
    conflicting = tmp_path / "conflict.otlp.jsonl"
    conflicting.write_text("\n".join(lines + [_json.dumps(record)]) + "\n")
    with pytest.raises(DataError, match=f"span {span['spanId']} of trace .* appears twice with different content"):
        read_turns(conflicting)


@pytest.mark.parametrize("name", ["spans.json", "spans.jsonl"])
def test_the_sdks_console_exporter_output_is_read_as_the_spans_it_prints(tmp_path, name):
    """What a new user tries first: ConsoleSpanExporter's pretty-printed spans, one after another, saved to a file."""
    import io

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    from adherence.data import read_turns

    out = io.StringIO()
    provider = TracerProvider(resource=Resource({"service.name": "bank-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
    tracer = provider.get_tracer("app")
    exchanges = [("How do I block my card?", "Freeze it in the app under Cards."), ("Thanks!", "You're welcome.")]
    for q, a in exchanges:
        with tracer.start_as_current_span("chat gpt-4o") as s:
            s.set_attributes({
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.conversation.id": "c1",
                "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You are the bank's assistant."}]),
                "gen_ai.input.messages": _msgs(("user", q)), "gen_ai.output.messages": _msgs(("assistant", a)),
            })  # fmt: skip
        with tracer.start_as_current_span("db query") as s:  # not a call: ignored
            s.set_attribute("db.system", "postgresql")
    provider.shutdown()
    path = tmp_path / name
    path.write_text(out.getvalue())
    t = read_turns(path).to_pylist()
    assert [(r["conversation_id"], r["turn_index"], r["user"], r["assistant"]) for r in t] == [
        ("c1", i, q, a) for i, (q, a) in enumerate(exchanges)
    ]
    assert t[0]["role"] == "You are the bank's assistant."


def test_otlp_json_one_request_a_line_is_read_whatever_the_file_is_called(tmp_path):
    from adherence.data import example_path, read_turns

    src = example_path("role").parent / "role_traces.otlp.jsonl"
    as_json = tmp_path / "collector-export.json"
    as_json.write_bytes(src.read_bytes())
    a, b = read_turns(src), read_turns(as_json)
    assert b.num_rows == a.num_rows > 0 and b.column("assistant").to_pylist() == a.column("assistant").to_pylist()

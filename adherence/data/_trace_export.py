"""Scores back where a team looks: each scored turn of an output read from traces as the record its platform takes.

- ``otel``: OTLP JSON logs, one ``gen_ai.evaluation.result`` event per turn, parented to the span it scored
  (``traceId``, ``spanId`` hex), with ``gen_ai.evaluation.name``, ``gen_ai.evaluation.score.value``,
  ``gen_ai.evaluation.score.label`` and ``gen_ai.evaluation.explanation`` (the judge's reason); one
  ``ExportLogsServiceRequest`` per line, at most 1,000 events each.
- ``langfuse``: score records as Langfuse's public scores API takes them (``id``, ``traceId``, ``observationId``,
  ``name``, ``value``, ``dataType``, ``comment``), JSONL.
- ``phoenix``: span annotations (``span_id``, ``name``, ``annotator_kind`` LLM, ``result`` {label, score,
  explanation}), JSONL.
- ``langsmith``: feedback records (``id``, ``run_id``, ``trace_id``, ``key``, ``score``, ``value``, ``comment``), JSONL.

Record ids are derived from the output's turn and the score's name (UUID 5), so posting a file twice updates
the same scores instead of adding copies.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator, Optional

__all__ = ["EXPORT_FORMATS", "export_records"]

EXPORT_FORMATS = ("otel", "langfuse", "phoenix", "langsmith")
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "adherence:scores")  # the namespace of the scores' record ids


def _label(prediction: Any) -> Optional[str]:
    return {1: "adherent", 0: "violation"}.get(prediction)


def _attr(key: str, value: Any) -> dict:
    v: dict[str, Any]
    if isinstance(value, bool):
        v = {"boolValue": value}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    else:
        v = {"stringValue": str(value)}
    return {"key": key, "value": v}


def export_records(rows: list, fmt: str, *, name: str, version: str = "") -> Iterator[str]:
    """The lines of the export file (JSON each) for ``rows`` (scored turns with ``trace_id`` and ``span_id``)."""
    now = str(time.time_ns())
    if fmt == "otel":
        batch: list = []

        def request(records: list) -> str:
            return json.dumps(
                {
                    "resourceLogs": [
                        {
                            "resource": {"attributes": [_attr("service.name", "adherence")]},
                            "scopeLogs": [{"scope": {"name": "adherence", "version": version}, "logRecords": records}],
                        }
                    ]
                },  # fmt: skip
                ensure_ascii=False,
                separators=(",", ":"),
            )

        for r in rows:
            attrs = [_attr("gen_ai.evaluation.name", name), _attr("gen_ai.evaluation.score.value", float(r["score"]))]
            if _label(r.get("prediction")):
                attrs.append(_attr("gen_ai.evaluation.score.label", _label(r["prediction"])))
            if r.get("reason"):
                attrs.append(_attr("gen_ai.evaluation.explanation", r["reason"]))
            attrs.append(_attr("adherence.method", r.get("method") or ""))
            batch.append(
                {
                    "timeUnixNano": now,
                    "observedTimeUnixNano": now,
                    "eventName": "gen_ai.evaluation.result",
                    "severityNumber": 9,
                    "severityText": "INFO",
                    "traceId": r["trace_id"],
                    "spanId": r["span_id"],
                    "attributes": attrs,
                }  # fmt: skip
            )
            if len(batch) == 1000:
                yield request(batch)
                batch = []
        if batch:
            yield request(batch)
        return
    for r in rows:
        rid = str(uuid.uuid5(_NAMESPACE, f"{fmt}/{r['trace_id']}/{r['span_id']}/{name}"))
        label, score, reason = _label(r.get("prediction")), float(r["score"]), r.get("reason")
        if fmt == "langfuse":
            rec = {"id": rid, "traceId": r["trace_id"], "observationId": r["span_id"], "name": name, "value": score,
                   "dataType": "NUMERIC", "comment": reason or label}  # fmt: skip
        elif fmt == "phoenix":
            rec = {"span_id": r["span_id"], "name": name, "annotator_kind": "LLM",
                   "result": {"label": label, "score": score, "explanation": reason},
                   "metadata": {"method": r.get("method"), "trace_id": r["trace_id"]}}  # fmt: skip
        elif fmt == "langsmith":
            rec = {"id": rid, "run_id": r["span_id"], "trace_id": r["trace_id"], "key": name, "score": score,
                   "value": label, "comment": reason}  # fmt: skip
        else:  # pragma: no cover - the command's choices guard this
            raise ValueError(f"unknown export format {fmt!r}")
        yield json.dumps(rec, ensure_ascii=False, separators=(",", ":"))

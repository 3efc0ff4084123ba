"""The capture processor's columns for metered exchanges (docs/usage-and-budgets.md): the sidecar's exact tokens
win over the ones read off the output, a usage-only record (not sampled) becomes a row, a refused request keeps
the limit that refused it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from capture_core.capture_format import parse_capture_chunk
from capture_core.records import ChunkContext
from capture_core.redaction import Redactor

CONTEXT = ChunkContext("data-capture/abc/pod/2026/12/05/13/x.jsonl", "abc", None, datetime(2026, 12, 5, tzinfo=UTC))
SAMPLED = {
    "captureData": {
        "endpointInput": {"observedContentType": "application/json", "mode": "INPUT", "encoding": "JSON",
                          "data": json.dumps({"model": "m", "messages": [], "stream": True})},
        "endpointOutput": {"observedContentType": "text/event-stream", "mode": "OUTPUT", "encoding": "JSON",
                           "data": 'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n'},
    },
    "eventMetadata": {"eventId": "e1", "inferenceTime": "2026-12-05T13:00:00.000000Z", "callerId": "team-a",
                      "responseStatus": 200, "inputTokens": 15, "outputTokens": 9, "usageSource": "requested",
                      "servedModel": "served"},
    "eventVersion": "0",
}
USAGE_ONLY = {
    "captureData": {},
    "eventMetadata": {"eventId": "e2", "inferenceTime": "2026-12-05T13:00:01.000000Z", "callerId": "team-a",
                      "responseStatus": 200, "timeToFirstChunkMs": 12.5, "inputTokens": 40, "outputTokens": 7,
                      "usageSource": "response", "servedModel": "served"},
    "eventVersion": "0",
}
REFUSED = {
    "captureData": {},
    "eventMetadata": {"eventId": "e3", "inferenceTime": "2026-12-05T13:00:02.000000Z", "callerId": "team-b",
                      "responseStatus": 429, "usageSource": "none", "refusedBy": "tokensPerDay",
                      "servedModel": "served"},
    "eventVersion": "0",
}


@pytest.mark.parametrize("careful", [False, True], ids=["fast", "line-by-line"])
def test_metered_records_become_rows_with_exact_tokens_their_source_and_refusals(careful: bool) -> None:
    lines = [json.dumps(record).encode() for record in (SAMPLED, USAGE_ONLY, REFUSED)]
    if careful:
        lines.append(b"not json")  # one bad line sends the chunk down the careful path
    chunk = parse_capture_chunk(b"\n".join(lines) + b"\n", 1, CONTEXT, Redactor(()))
    rows = {row["event_id"]: row for row in chunk.table.to_pylist()}
    assert len(chunk.rejected) == (1 if careful else 0)
    sampled, usage_only, refused = rows["e1"], rows["e2"], rows["e3"]
    assert (sampled["gen_ai_usage_input_tokens"], sampled["gen_ai_usage_output_tokens"]) == (15, 9)
    assert sampled["usage_source"] == "requested" and sampled["gen_ai_request_model"] == "m"
    assert (usage_only["gen_ai_usage_input_tokens"], usage_only["gen_ai_usage_output_tokens"]) == (40, 7)
    assert usage_only["input_text"] is None and usage_only["gen_ai_request_model"] == "served"
    assert usage_only["time_to_first_chunk_ms"] == 12.5
    assert (refused["refused_by"], refused["http_response_status_code"], refused["usage_source"]) == (
        "tokensPerDay", 429, "none")
    assert refused["gen_ai_usage_input_tokens"] is None


def test_a_record_with_neither_side_nor_usage_is_still_refused() -> None:
    record = {**USAGE_ONLY, "eventMetadata": {"eventId": "x", "inferenceTime": "2026-12-05T13:00:00Z"}}
    chunk = parse_capture_chunk(json.dumps(record).encode() + b"\n", 1, CONTEXT, Redactor(()))
    assert chunk.table.num_rows == 0 and len(chunk.rejected) == 1

"""Sliced record encoding (bounded memory for large bodies) gives exactly the bytes of one json.dumps."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime

import pytest

from capture_sidecar import records
from capture_sidecar.records import (
    CapturedExchange,
    CapturedPayload,
    ContentTypeEncodings,
    encode_record_pieces,
    encode_record_whole,
)
from capture_sidecar.settings import DEFAULT_CSV_CONTENT_TYPES, DEFAULT_JSON_CONTENT_TYPES

ENCODINGS = ContentTypeEncodings(frozenset(DEFAULT_JSON_CONTENT_TYPES), frozenset(DEFAULT_CSV_CONTENT_TYPES))
MOMENT = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
EVENT_ID = re.compile(rb'"eventId":"[0-9a-f-]{36}"')

BODIES = [
    b"",
    b'{"prompt": "plain"}',
    ('{"prompt": "' + 'é¿"\\\n\t\x01𝄞' * 40_000 + '"}').encode(),  # escapes and every UTF-8 width
    ("x" * (records.TEXT_SLICE_BYTES - 1) + "€" + "y" * 10).encode(),  # a character across a slice cut
    os.urandom(700_000),  # not UTF-8: BASE64, in several slices
    bytes(range(256)) * 3000,
]


@pytest.mark.parametrize("body", BODIES, ids=lambda body: f"{len(body)}B")
@pytest.mark.parametrize("content_type", ["application/json", "text/csv", "application/octet-stream", None])
def test_pieces_equal_the_whole_record(body: bytes, content_type: str | None) -> None:
    for cut in (None, len(body) - 1, len(body) - 2):
        data = body if cut is None or cut < 0 else body[:cut]
        exchange = CapturedExchange(
            MOMENT,
            "id-ä",
            CapturedPayload(content_type, data, len(body)),
            CapturedPayload("text/event-stream", data[:1000], len(data)),
        )
        pieces = b"".join(encode_record_pieces(exchange, ENCODINGS))
        whole = encode_record_whole(exchange, ENCODINGS)
        assert EVENT_ID.sub(b"", pieces) == EVENT_ID.sub(b"", whole)
        json.loads(pieces)


def test_each_mode_alone() -> None:
    payload = CapturedPayload("application/json", b"{}", 2)
    for exchange in (CapturedExchange(MOMENT, None, payload, None), CapturedExchange(MOMENT, None, None, payload)):
        assert EVENT_ID.sub(b"", b"".join(encode_record_pieces(exchange, ENCODINGS))) == EVENT_ID.sub(
            b"", encode_record_whole(exchange, ENCODINGS)
        )


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {
            "caller_id": "team-a",
            "request_path": "/v1/chat/completions",
            "response_status": 200,
            "duration_ms": 1234.567,
            "time_to_first_chunk_ms": 0.0,
        },
        {"caller_id": 'odd "id" ä', "request_path": "/ä\\\u2028", "response_status": 502, "duration_ms": 0.001},
        {
            "response_status": 200,
            "duration_ms": 10.5,
            "time_to_first_chunk_ms": 3.25,
            "partial_reason": records.PARTIAL_CLIENT_DISCONNECTED,
        },
        {"duration_ms": 123456789.125, "partial_reason": records.PARTIAL_UPSTREAM_BROKEN},
    ],
    ids=lambda metadata: ",".join(metadata) or "none",
)
def test_event_metadata_pieces_equal_the_whole_record(metadata: dict) -> None:
    exchange = CapturedExchange(MOMENT, "id-1", CapturedPayload("application/json", b"{}", 2), None, **metadata)
    pieces = b"".join(encode_record_pieces(exchange, ENCODINGS))
    assert EVENT_ID.sub(b"", pieces) == EVENT_ID.sub(b"", encode_record_whole(exchange, ENCODINGS))
    written = json.loads(pieces)["eventMetadata"]
    assert set(written) - {"eventId", "inferenceTime", "inferenceId"} == {
        {
            "caller_id": "callerId",
            "request_path": "requestPath",
            "response_status": "responseStatus",
            "duration_ms": "durationMs",
            "time_to_first_chunk_ms": "timeToFirstChunkMs",
            "partial_reason": "partialReason",
        }[key]
        for key in metadata
    } | ({"partial"} if "partial_reason" in metadata else set())
    if "partial_reason" in metadata:
        assert written["partial"] is True


@pytest.mark.parametrize(
    ("target", "path"),
    [
        (b"/v1/completions?key=secret", "/v1/completions"),
        (b"/a%20b#frag", "/a%20b"),
        (b"http://host:8080/v1/x?y", "/v1/x"),
        (b"http://host", "/"),
        (b"/" + b"p" * 300, "/" + "p" * 255),
        (b"/\xff", "/\ufffd"),
    ],
)
def test_request_path_is_the_path_only(target: bytes, path: str) -> None:
    assert records.request_path(target) == path

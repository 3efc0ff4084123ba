"""Record encoding rules that are awkward to reach over HTTP."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

from capture_sidecar.records import (
    CapturedExchange,
    CapturedPayload,
    ContentTypeEncodings,
    encode_record,
    object_key,
)
from capture_sidecar.settings import DEFAULT_CSV_CONTENT_TYPES, DEFAULT_JSON_CONTENT_TYPES

ENCODINGS = ContentTypeEncodings(frozenset(DEFAULT_JSON_CONTENT_TYPES), frozenset(DEFAULT_CSV_CONTENT_TYPES))
MOMENT = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def captured_input(content_type: str | None, data: bytes, original_size: int | None = None) -> dict:
    exchange = CapturedExchange(
        inference_time=MOMENT,
        inference_id=None,
        request=CapturedPayload(content_type, data, original_size or len(data)),
        response=None,
    )
    line = encode_record(exchange, ENCODINGS)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    record = json.loads(line)
    assert record["eventMetadata"]["inferenceTime"] == "2026-03-04T05:06:07.890123Z"
    return record["captureData"]["endpointInput"]


def test_media_type_parameters_and_case_do_not_change_the_encoding() -> None:
    assert captured_input("Application/JSON; charset=utf-8", b"{}")["encoding"] == "JSON"
    assert captured_input("text/csv", b"1,2\n")["encoding"] == "CSV"
    assert captured_input("text/plain", b"hi")["encoding"] == "BASE64"
    assert captured_input(None, b"hi")["encoding"] == "BASE64"


def test_json_content_type_with_bytes_that_are_not_utf8_falls_back_to_base64() -> None:
    entry = captured_input("application/json", b'{"a": "\xff"}')

    assert entry["encoding"] == "BASE64"
    assert base64.b64decode(entry["data"]) == b'{"a": "\xff"}'


def test_a_character_split_by_the_cap_is_dropped_but_text_stays_text() -> None:
    cut = "é".encode() * 3 + "é".encode()[:1]

    entry = captured_input("application/json", cut, original_size=100)

    assert entry == {
        "observedContentType": "application/json",
        "mode": "INPUT",
        "data": "ééé",
        "encoding": "JSON",
        "truncated": True,
        "originalSizeBytes": 100,
    }


def test_non_ascii_text_is_written_as_utf8_not_escaped() -> None:
    exchange = CapturedExchange(MOMENT, "id-1", CapturedPayload("application/json", "¿Qué?".encode(), 7), None)

    assert "¿Qué?".encode() in encode_record(exchange, ENCODINGS)


def test_object_key_follows_the_sagemaker_layout() -> None:
    key = object_key("captures/pod/", MOMENT)

    assert key.startswith("captures/pod/2026/03/04/05/06-07-890-")
    assert key.endswith(".jsonl")
    assert len(key.rsplit("/", 1)[1]) == len("06-07-890-") + 36 + len(".jsonl")

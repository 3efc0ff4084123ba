"""Capture records in the SageMaker data-capture JSON Lines envelope, and their S3 keys.

The request path only stores raw bytes in a CapturedExchange; base64 and JSON encoding happen
at upload time, off the request path, a batch at a time.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

ENCODING_JSON = "JSON"
ENCODING_CSV = "CSV"
ENCODING_BASE64 = "BASE64"


@dataclass(frozen=True)
class CapturedPayload:
    """One side of an exchange, already cut to the payload cap."""

    content_type: str | None
    data: bytes
    original_size: int

    @property
    def truncated(self) -> bool:
        return self.original_size > len(self.data)


@dataclass(frozen=True)
class CapturedExchange:
    """What the request path hands to the uploader: raw bytes, no encoding work yet."""

    inference_time: datetime  # UTC, when the request arrived
    inference_id: str | None
    request: CapturedPayload | None  # None when Input is not a capture mode
    response: CapturedPayload | None  # None when Output is not a capture mode

    @property
    def size_bytes(self) -> int:
        return sum(len(payload.data) for payload in (self.request, self.response) if payload is not None)


@dataclass(frozen=True)
class ContentTypeEncodings:
    """Media types (lower case, no parameters) whose bodies are written as text, like SageMaker's
    CaptureContentTypeHeader; every other type is written as BASE64."""

    json_types: frozenset[str]
    csv_types: frozenset[str]

    def encoding_for(self, content_type: str | None) -> str:
        if not content_type:
            return ENCODING_BASE64
        media_type = content_type.partition(";")[0].strip().lower()
        if media_type in self.json_types:
            return ENCODING_JSON
        if media_type in self.csv_types:
            return ENCODING_CSV
        return ENCODING_BASE64


def _as_text(payload: CapturedPayload) -> str | None:
    """The payload as UTF-8 text, or None when it is not UTF-8 (it is then written as BASE64).

    A cut at the payload cap may split a multi-byte character; only that tail is dropped.
    """
    try:
        return payload.data.decode("utf-8")
    except UnicodeDecodeError as error:
        if payload.truncated and error.start >= len(payload.data) - 3:
            return payload.data[: error.start].decode("utf-8")
        return None


def _payload_object(payload: CapturedPayload, mode: str, encodings: ContentTypeEncodings) -> dict[str, object]:
    encoding = encodings.encoding_for(payload.content_type)
    text = _as_text(payload) if encoding != ENCODING_BASE64 else None
    if text is None:
        encoding = ENCODING_BASE64
        text = base64.b64encode(payload.data).decode("ascii")
    entry: dict[str, object] = {
        "observedContentType": payload.content_type,
        "mode": mode,
        "data": text,
        "encoding": encoding,
    }
    if payload.truncated:
        entry["truncated"] = True
        entry["originalSizeBytes"] = payload.original_size
    return entry


def format_inference_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def encode_record(exchange: CapturedExchange, encodings: ContentTypeEncodings) -> bytes:
    """One JSON Lines line (with its newline) in the SageMaker capture envelope."""
    capture_data: dict[str, object] = {}
    if exchange.request is not None:
        capture_data["endpointInput"] = _payload_object(exchange.request, "INPUT", encodings)
    if exchange.response is not None:
        capture_data["endpointOutput"] = _payload_object(exchange.response, "OUTPUT", encodings)
    event_metadata = {
        "eventId": str(uuid.uuid4()),
        "inferenceTime": format_inference_time(exchange.inference_time),
    }
    if exchange.inference_id is not None:
        event_metadata["inferenceId"] = exchange.inference_id
    record = {"captureData": capture_data, "eventMetadata": event_metadata, "eventVersion": "0"}
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def encode_records(exchanges: Iterable[CapturedExchange], encodings: ContentTypeEncodings) -> bytes:
    return b"".join(encode_record(exchange, encodings) for exchange in exchanges)


def object_key(prefix: str, first_inference_time: datetime) -> str:
    """SageMaker's layout: prefix/YYYY/MM/DD/HH/{MM}-{SS}-{mmm}-{uuid}.jsonl, by invocation hour."""
    moment = first_inference_time
    return f"{prefix}{moment:%Y/%m/%d/%H}/{moment:%M-%S}-{moment.microsecond // 1000:03d}-{uuid.uuid4()}.jsonl"


def hour_of(exchange: CapturedExchange) -> tuple[int, int, int, int]:
    moment = exchange.inference_time
    return moment.year, moment.month, moment.day, moment.hour

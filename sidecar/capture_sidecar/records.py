"""Capture records in the SageMaker data-capture JSON Lines envelope, and their S3 keys.

The request path only stores raw bytes in a CapturedExchange; base64 and JSON encoding happen
at upload time, off the request path, a batch at a time.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

ENCODING_JSON = "JSON"
ENCODING_CSV = "CSV"
ENCODING_BASE64 = "BASE64"
# eventMetadata.partialReason (the contract with the capture processor, docs/capture-sidecar.md).
PARTIAL_CLIENT_DISCONNECTED = "client_disconnected"
PARTIAL_UPSTREAM_BROKEN = "upstream_broken"
PARTIAL_REASONS = (PARTIAL_CLIENT_DISCONNECTED, PARTIAL_UPSTREAM_BROKEN)
MAX_REQUEST_PATH_CHARS = 256


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
    response: CapturedPayload | None  # None when Output is not a capture mode, or the sidecar answered itself
    # eventMetadata beyond SageMaker's (None: unknown, left out of the record).
    caller_id: str | None = None  # the caller id of the API key that authenticated the request
    request_path: str | None = None  # see request_path()
    response_status: int | None = None  # what the client got, the sidecar's own 502 included
    duration_ms: float | None = None  # rounded to 3 decimals by the proxy
    time_to_first_chunk_ms: float | None = None
    partial_reason: str | None = None  # one of PARTIAL_REASONS: the exchange did not complete
    # Metered exchanges (docs/usage-and-budgets.md): exact tokens, where they came from, the limit that refused it.
    input_tokens: int | None = None
    output_tokens: int | None = None
    usage_source: str | None = None
    refused_by: str | None = None
    served_model: str | None = None  # MODEL_NAME, for a metered exchange (its request may not be captured)

    @cached_property  # asked several times per record on the event loop; frozen, so computed once
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


# Bodies are encoded a slice at a time, so the transient copies (str, escaped str, bytes) of one
# record never exceed a few MiB whatever its size; the pieces are sent to S3 without joining.
TEXT_SLICE_BYTES = 256 * 1024
# json.dumps(text, ensure_ascii=False) for a str, without building an encoder per call.
_json_string: Callable[[str], str] = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring
)
BASE64_SLICE_BYTES = 3 * 87_381  # a multiple of 3: base64 of the slices concatenates to that of the whole


def _text_pieces(payload: CapturedPayload) -> list[bytes] | None:
    """The JSON string contents (without quotes) of the payload as UTF-8 text, in pieces, or None
    when it is not UTF-8. Same result as json.dumps of the whole text, same truncation rule."""
    data = payload.data
    size = len(data)
    pieces: list[bytes] = []
    start = 0
    while start < size:
        end = min(size, start + TEXT_SLICE_BYTES)
        while end < size and end > start and data[end] & 0xC0 == 0x80:
            end -= 1  # never cut a character in two
        if end == start:
            return None
        chunk = data[start:end]
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as error:
            if end == size and payload.truncated and start + error.start >= size - 3:
                text = chunk[: error.start].decode("utf-8")
            else:
                return None
        pieces.append(_json_string(text)[1:-1].encode("utf-8"))
        start = end
    return pieces


def _payload_pieces(payload: CapturedPayload, mode: str, encodings: ContentTypeEncodings) -> list[bytes]:
    encoding = encodings.encoding_for(payload.content_type)
    pieces = _text_pieces(payload) if encoding != ENCODING_BASE64 else None
    if pieces is None:
        encoding = ENCODING_BASE64
        data = payload.data
        pieces = [base64.b64encode(data[i : i + BASE64_SLICE_BYTES]) for i in range(0, len(data), BASE64_SLICE_BYTES)]
    head = (
        b'{"observedContentType":'
        + (b"null" if payload.content_type is None else _json_string(payload.content_type).encode("utf-8"))
        + b',"mode":"'
        + mode.encode()
        + b'","data":"'
    )
    tail = b'","encoding":"' + encoding.encode() + b'"'
    if payload.truncated:
        tail += b',"truncated":true,"originalSizeBytes":' + str(payload.original_size).encode()
    return [head, *pieces, tail + b"}"]


def encode_record_pieces(exchange: CapturedExchange, encodings: ContentTypeEncodings) -> list[bytes]:
    """encode_record's bytes as a list of pieces (bounded transient memory for large bodies)."""
    pieces = [b'{"captureData":{']  # empty for a metered exchange that was not sampled (usage only)
    if exchange.request is not None:
        pieces.append(b'"endpointInput":')
        pieces += _payload_pieces(exchange.request, "INPUT", encodings)
    if exchange.response is not None:
        pieces.append(b',"endpointOutput":' if exchange.request is not None else b'"endpointOutput":')
        pieces += _payload_pieces(exchange.response, "OUTPUT", encodings)
    # eventId and inferenceTime never need escaping; json.dumps with options builds an encoder
    # per call (~10 µs), the C string encoder does not.
    moment = format_inference_time(exchange.inference_time)
    metadata = f'}},"eventMetadata":{{"eventId":"{uuid.uuid4()}","inferenceTime":"{moment}"'
    if exchange.inference_id is not None:
        metadata += ',"inferenceId":' + _json_string(exchange.inference_id)
    if exchange.caller_id is not None:
        metadata += ',"callerId":' + _json_string(exchange.caller_id)
    if exchange.request_path is not None:
        metadata += ',"requestPath":' + _json_string(exchange.request_path)
    if exchange.response_status is not None:
        metadata += f',"responseStatus":{exchange.response_status:d}'
    # float.__repr__ is what json.dumps writes for a float.
    if exchange.duration_ms is not None:
        metadata += ',"durationMs":' + float.__repr__(exchange.duration_ms)
    if exchange.time_to_first_chunk_ms is not None:
        metadata += ',"timeToFirstChunkMs":' + float.__repr__(exchange.time_to_first_chunk_ms)
    if exchange.partial_reason is not None:
        metadata += ',"partial":true,"partialReason":' + _json_string(exchange.partial_reason)
    if exchange.input_tokens is not None:
        metadata += f',"inputTokens":{exchange.input_tokens:d}'
    if exchange.output_tokens is not None:
        metadata += f',"outputTokens":{exchange.output_tokens:d}'
    if exchange.usage_source is not None:
        metadata += ',"usageSource":' + _json_string(exchange.usage_source)
    if exchange.refused_by is not None:
        metadata += ',"refusedBy":' + _json_string(exchange.refused_by)
    if exchange.served_model is not None:
        metadata += ',"servedModel":' + _json_string(exchange.served_model)
    pieces.append(metadata.encode("utf-8") + b'},"eventVersion":"0"}\n')
    return pieces


def request_path(target: bytes) -> str:
    """eventMetadata.requestPath: the request target's path as received (percent-encoding kept), without query
    or fragment, the scheme and authority of an absolute-form target dropped, at most 256 characters."""
    path = target.partition(b"?")[0].partition(b"#")[0]
    if not path.startswith(b"/") and b"://" in path:
        path = b"/" + path.partition(b"://")[2].partition(b"/")[2]
    return path.decode("utf-8", "replace")[:MAX_REQUEST_PATH_CHARS]


def format_inference_time(moment: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.ffffffZ` (UTC); isoformat is ~4x faster than strftime."""
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def encode_record_whole(exchange: CapturedExchange, encodings: ContentTypeEncodings) -> bytes:
    """The reference encoding, one json.dumps of the whole record; tests compare the pieces with it."""
    capture_data: dict[str, object] = {}
    if exchange.request is not None:
        capture_data["endpointInput"] = _payload_object(exchange.request, "INPUT", encodings)
    if exchange.response is not None:
        capture_data["endpointOutput"] = _payload_object(exchange.response, "OUTPUT", encodings)
    event_metadata: dict[str, object] = {
        "eventId": str(uuid.uuid4()),
        "inferenceTime": format_inference_time(exchange.inference_time),
    }
    optional = {
        "inferenceId": exchange.inference_id,
        "callerId": exchange.caller_id,
        "requestPath": exchange.request_path,
        "responseStatus": exchange.response_status,
        "durationMs": exchange.duration_ms,
        "timeToFirstChunkMs": exchange.time_to_first_chunk_ms,
    }
    event_metadata.update((key, value) for key, value in optional.items() if value is not None)
    if exchange.partial_reason is not None:
        event_metadata["partial"] = True
        event_metadata["partialReason"] = exchange.partial_reason
    usage = {
        "inputTokens": exchange.input_tokens,
        "outputTokens": exchange.output_tokens,
        "usageSource": exchange.usage_source,
        "refusedBy": exchange.refused_by,
        "servedModel": exchange.served_model,
    }
    event_metadata.update((key, value) for key, value in usage.items() if value is not None)
    record = {"captureData": capture_data, "eventMetadata": event_metadata, "eventVersion": "0"}
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def encode_record(exchange: CapturedExchange, encodings: ContentTypeEncodings) -> bytes:
    """One JSON Lines line (with its newline) in the SageMaker capture envelope."""
    return b"".join(encode_record_pieces(exchange, encodings))


def encode_records(exchanges: Iterable[CapturedExchange], encodings: ContentTypeEncodings) -> bytes:
    return b"".join(encode_record(exchange, encodings) for exchange in exchanges)


def object_key(prefix: str, first_inference_time: datetime) -> str:
    """SageMaker's layout: prefix/YYYY/MM/DD/HH/{MM}-{SS}-{mmm}-{uuid}.jsonl, by invocation hour."""
    moment = first_inference_time
    return f"{prefix}{moment:%Y/%m/%d/%H}/{moment:%M-%S}-{moment.microsecond // 1000:03d}-{uuid.uuid4()}.jsonl"


def hour_of(exchange: CapturedExchange) -> tuple[int, int, int, int]:
    moment = exchange.inference_time
    return moment.year, moment.month, moment.day, moment.hour

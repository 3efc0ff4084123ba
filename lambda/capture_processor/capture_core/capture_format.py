"""SageMaker data capture JSON Lines (tier 1 `sme/`, and tier 3 `pod/`, which copies it).

Fast path: Arrow's C++ JSON reader parses a whole chunk against an explicit schema. A chunk
the fast path cannot take (a malformed line, a field of an unexpected JSON type, a line that
is not a capture record) is parsed again line by line with the stdlib, so one bad line costs
one quarantine entry and the good lines of the chunk still land.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from capture_core.records import ChunkContext, ParsedChunk, RejectedLine, constant_column, fill_missing_times
from capture_core.redaction import Redactor

_SIDE_FIELDS = (
    ("observedContentType", pa.string()),
    ("mode", pa.string()),
    ("data", pa.string()),
    ("encoding", pa.string()),
    ("truncated", pa.bool_()),  # set by our sidecar when a payload exceeded its size cap
)
_SIDE = pa.struct(list(_SIDE_FIELDS))
RAW_SCHEMA = pa.schema(
    [
        ("captureData", pa.struct([("endpointInput", _SIDE), ("endpointOutput", _SIDE)])),
        (
            "eventMetadata",
            pa.struct([("eventId", pa.string()), ("inferenceId", pa.string()), ("inferenceTime", pa.string())]),
        ),
        ("eventVersion", pa.string()),
    ]
)

TIMESTAMP = pa.timestamp("us", tz="UTC")
CURATED_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("inference_id", pa.string()),
        ("inference_time", TIMESTAMP),
        ("time_source", pa.string()),
        ("event_version", pa.string()),
        ("input_content_type", pa.string()),
        ("input_encoding", pa.string()),
        ("input_text", pa.string()),
        ("input_truncated", pa.bool_()),
        ("output_content_type", pa.string()),
        ("output_encoding", pa.string()),
        ("output_text", pa.string()),
        ("output_truncated", pa.bool_()),
        ("decode_error", pa.string()),
        ("source_key", pa.string()),
        ("deployment_hash", pa.string()),
    ]
)

_FAST_BLOCK_SIZE = 1 << 20  # several blocks per chunk let Arrow parse on all cores
_PARSE_OPTIONS = pa_json.ParseOptions(explicit_schema=RAW_SCHEMA, unexpected_field_behavior="ignore")


class MalformedLineError(ValueError):
    pass


def parse_capture_chunk(data: bytes, first_line: int, context: ChunkContext, redactor: Redactor) -> ParsedChunk:
    raw = _read_whole_chunk(data)
    rejected: tuple[RejectedLine, ...] = ()
    if raw is None:
        raw, rejected = _read_line_by_line(data, first_line)
    return ParsedChunk(_curate(raw, context, redactor), rejected, {})


def _read_whole_chunk(data: bytes) -> pa.Table | None:
    """The chunk as a raw table, or None when any line needs the careful path."""
    for block_size in (_FAST_BLOCK_SIZE, len(data) + 1):  # retry in one block when a line is > 1 MiB
        try:
            table = pa_json.read_json(io.BytesIO(data), pa_json.ReadOptions(block_size=block_size), _PARSE_OPTIONS)
        except pa.ArrowInvalid:
            continue
        try:
            table.validate(full=True)  # Arrow's JSON reader does not check UTF-8 itself
        except pa.ArrowInvalid:
            return None
        sides = table.column("captureData")
        is_capture = pc.or_(
            pc.is_valid(pc.struct_field(sides, "endpointInput")),
            pc.is_valid(pc.struct_field(sides, "endpointOutput")),
        )
        return table if pc.all(is_capture).as_py() is not False else None
    return None


def _read_line_by_line(data: bytes, first_line: int) -> tuple[pa.Table, tuple[RejectedLine, ...]]:
    rows: list[dict[str, Any]] = []
    rejected: list[RejectedLine] = []
    for offset, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        try:
            rows.append(_normalised_record(line))
        except MalformedLineError as error:
            rejected.append(RejectedLine(first_line + offset, str(error), line))
    return pa.Table.from_pylist(rows, schema=RAW_SCHEMA), tuple(rejected)


def _normalised_record(line: bytes) -> dict[str, Any]:
    """One line as a dict shaped exactly like RAW_SCHEMA, or MalformedLineError with the reason."""
    try:
        record = json.loads(line)
    except UnicodeDecodeError as error:
        raise MalformedLineError(f"not UTF-8 text: {error}") from None
    except ValueError as error:  # JSONDecodeError is a ValueError
        raise MalformedLineError(f"invalid JSON: {error}") from None
    if not isinstance(record, dict):
        raise MalformedLineError(f"a capture line must be a JSON object, got {type(record).__name__}")
    capture = record.get("captureData")
    sides = {
        name: _normalised_side(capture.get(name)) if isinstance(capture, dict) else None
        for name in ("endpointInput", "endpointOutput")
    }
    if not any(sides.values()):
        raise MalformedLineError("not a capture record: no captureData.endpointInput or endpointOutput object")
    metadata = record.get("eventMetadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    return {
        "captureData": sides,
        "eventMetadata": {name: _as_text(metadata.get(name)) for name in ("eventId", "inferenceId", "inferenceTime")},
        "eventVersion": _as_text(record.get("eventVersion")),
    }


def _normalised_side(side: Any) -> dict[str, Any] | None:
    if not isinstance(side, dict):
        return None
    normalised: dict[str, Any] = {name: _as_text(side.get(name)) for name, _ in _SIDE_FIELDS[:-1]}
    normalised["truncated"] = side.get("truncated") is True
    return normalised


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)  # a number or an inline object: keep it as JSON text


def _curate(raw: pa.Table, context: ChunkContext, redactor: Redactor) -> pa.Table:
    capture = raw.column("captureData").combine_chunks()
    metadata = raw.column("eventMetadata").combine_chunks()
    sides = {name: pc.struct_field(capture, name) for name in ("endpointInput", "endpointOutput")}
    input_text, input_errors = _decoded_texts(sides["endpointInput"], "input")
    output_text, output_errors = _decoded_texts(sides["endpointOutput"], "output")
    times, sources = fill_missing_times(_parsed_times(pc.struct_field(metadata, "inferenceTime").to_pylist()), context)
    length = raw.num_rows
    columns = {
        "event_id": pc.struct_field(metadata, "eventId"),
        "inference_id": pc.struct_field(metadata, "inferenceId"),
        "inference_time": pa.array(times, TIMESTAMP),
        "time_source": pa.array(sources, pa.string()),
        "event_version": raw.column("eventVersion").combine_chunks(),
        "input_content_type": pc.struct_field(sides["endpointInput"], "observedContentType"),
        "input_encoding": pc.struct_field(sides["endpointInput"], "encoding"),
        "input_text": redactor.redact(input_text),
        "input_truncated": _truncated_flags(sides["endpointInput"]),
        "output_content_type": pc.struct_field(sides["endpointOutput"], "observedContentType"),
        "output_encoding": pc.struct_field(sides["endpointOutput"], "encoding"),
        "output_text": redactor.redact(output_text),
        "output_truncated": _truncated_flags(sides["endpointOutput"]),
        "decode_error": _joined_errors(length, input_errors, output_errors),
        "source_key": constant_column(context.source_key, length),
        "deployment_hash": constant_column(context.deployment_hash, length),
    }
    return pa.Table.from_pydict(columns, schema=CURATED_SCHEMA)


def _truncated_flags(side: pa.Array) -> pa.Array:
    return pc.fill_null(pc.struct_field(side, "truncated"), False)


def _decoded_texts(side: pa.Array, label: str) -> tuple[pa.Array, list[str | None] | None]:
    """The side's `data` with BASE64 payloads decoded to text; errors per row (None if none)."""
    data = pc.struct_field(side, "data")
    is_base64 = pc.fill_null(pc.equal(pc.struct_field(side, "encoding"), "BASE64"), False)
    if not pc.any(is_base64).as_py():
        return data, None
    truncated = pc.filter(_truncated_flags(side), is_base64).to_pylist()
    decoded, errors = [], []
    for value, was_truncated in zip(pc.filter(data, is_base64).to_pylist(), truncated, strict=True):
        text, error = _decode_base64(value, was_truncated)
        decoded.append(text)
        errors.append(f"{label}: {error}" if error else None)
    all_errors: list[str | None] = [None] * len(data)
    for index, error in zip(pc.indices_nonzero(is_base64).to_pylist(), errors, strict=True):
        all_errors[index] = error
    return pc.replace_with_mask(data, is_base64, pa.array(decoded, pa.string())), all_errors


def _decode_base64(value: str | None, truncated: bool) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    try:
        payload = base64.b64decode(value)
    except (binascii.Error, ValueError):
        if not truncated:
            return value, "invalid BASE64; kept as captured"
        # A payload cut at the sidecar's size cap: decode the complete 4-character groups.
        try:
            payload = base64.b64decode(value[: len(value) // 4 * 4])
        except (binascii.Error, ValueError):
            return value, "invalid BASE64; kept as captured"
    try:
        return payload.decode("utf-8"), None
    except UnicodeDecodeError as error:
        if truncated and error.start >= len(payload) - 3:  # the cut split a multi-byte character
            return payload[: error.start].decode("utf-8"), None
        return value, "BASE64 payload is not UTF-8 text; kept as BASE64"


def _joined_errors(length: int, *per_side: list[str | None] | None) -> pa.Array:
    present = [errors for errors in per_side if errors is not None]
    if not present:
        return pa.nulls(length, pa.string())
    joined = ["; ".join(filter(None, row)) or None for row in zip(*present, strict=True)]
    return pa.array(joined, pa.string())


def _parsed_times(values: list[str | None]) -> list[datetime | None]:
    cache: dict[str | None, datetime | None] = {}
    return [cache[value] if value in cache else cache.setdefault(value, _parse_time(value)) for value in values]


def _parse_time(value: str | None) -> datetime | None:
    """ISO-8601 as SageMaker writes it (`...Z`, second precision) or as the SDK tests do
    (fractional seconds, no zone: taken as UTC); None for anything else, e.g. "{%s}"."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)

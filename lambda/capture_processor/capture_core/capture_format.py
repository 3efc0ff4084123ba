"""SageMaker data capture JSON Lines (tier 1 `sme/`, and tier 3 `pod/`, which copies it).

Fast path: Arrow's C++ JSON reader parses a whole chunk against an explicit schema. A chunk
the fast path cannot take (a malformed line, a field of an unexpected JSON type, a line that
is not a capture record) is parsed again line by line with the stdlib, so one bad line costs
one quarantine entry and the good lines of the chunk still land.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from capture_core import fast_json, openai_format
from capture_core.documents import DocumentBatch
from capture_core.payloads import DecodedSide, decode_side
from capture_core.records import (
    ChunkContext,
    ParsedChunk,
    RejectedLine,
    RejectedRun,
    constant_column,
    fill_missing_times,
    parse_iso_time,
)
from capture_core.redaction import MAX_CANDIDATES_PER_DOCUMENT, Redactor

_SIDE_FIELDS = (
    ("observedContentType", pa.string()),
    ("mode", pa.string()),
    ("data", pa.string()),
    ("encoding", pa.string()),
    ("truncated", pa.bool_()),  # set by our sidecar when a payload exceeded its size cap
)
_SIDE = pa.struct(list(_SIDE_FIELDS))
# eventMetadata: SageMaker's three fields, then what the capture sidecar adds (docs/capture-sidecar.md).
_TEXT_METADATA = (
    "eventId", "inferenceId", "inferenceTime", "callerId", "requestPath", "partialReason", "usageSource", "refusedBy",
    "servedModel",
)
_METADATA_FIELDS = (
    *((name, pa.string()) for name in _TEXT_METADATA),
    ("responseStatus", pa.int64()),
    ("durationMs", pa.float64()),
    ("timeToFirstChunkMs", pa.float64()),
    ("partial", pa.bool_()),
    # The sidecar's exact tokens of a metered exchange (docs/usage-and-budgets.md); they win over the output's.
    ("inputTokens", pa.int64()),
    ("outputTokens", pa.int64()),
)
RAW_SCHEMA = pa.schema(
    [
        ("captureData", pa.struct([("endpointInput", _SIDE), ("endpointOutput", _SIDE)])),
        ("eventMetadata", pa.struct(list(_METADATA_FIELDS))),
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
        # What the exchange was (OpenTelemetry GenAI semantic conventions, openai_format.SEMCONV_VERSION)
        ("gen_ai_operation_name", pa.string()),
        ("gen_ai_request_model", pa.string()),
        ("gen_ai_response_model", pa.string()),
        ("gen_ai_usage_input_tokens", pa.int64()),
        ("gen_ai_usage_output_tokens", pa.int64()),
        ("gen_ai_response_finish_reasons", pa.list_(pa.string())),
        ("streamed", pa.bool_()),
        # Who asked and how it went, as the capture sidecar saw it (null on the operator's tiers)
        ("caller_id", pa.string()),
        ("request_path", pa.string()),
        ("http_response_status_code", pa.int32()),
        ("request_duration_ms", pa.float64()),
        ("time_to_first_chunk_ms", pa.float64()),
        ("partial", pa.bool_()),
        ("partial_reason", pa.string()),
        ("redaction_rules", pa.list_(pa.string())),
        # Metered exchanges (docs/usage-and-budgets.md): where the token counts came from (response: the server's
        # usage as the client got it; requested: the sidecar asked a stream for it; none: unknown), and the caller
        # limit that refused the request (429), if one did.
        ("usage_source", pa.string()),
        ("refused_by", pa.string()),
    ]
)

_FAST_BLOCK_SIZE = 1 << 20  # several blocks per chunk let Arrow parse on all cores
_PARSE_OPTIONS = pa_json.ParseOptions(explicit_schema=RAW_SCHEMA, unexpected_field_behavior="ignore")
INT32_MAX = (1 << 31) - 1
TOKENS_MAX = (1 << 53) - 1


class MalformedLineError(ValueError):
    pass


NESTED_TOO_DEEP = "JSON nested too deeply to read"
NOT_A_CAPTURE_RECORD = "not a capture record: no captureData.endpointInput or endpointOutput object"


def parse_capture_chunk(data: bytes, first_line: int, context: ChunkContext, redactor: Redactor) -> ParsedChunk:
    early, parsed, kept_lines = _prefiltered(data, first_line)
    whole = _read_whole_chunk(parsed)
    rejected: list[RejectedLine] = []
    if whole is None:
        raw, line_numbers, rejected = _read_line_by_line(parsed, first_line, kept_lines)
        lines = _LineIndex(data, first_line, line_numbers)
    else:
        raw, is_capture = whole
        lines = _LineIndex(data, first_line, kept_lines)
        if is_capture is not None:  # JSON objects that are not capture records: rejected by row, in one pass
            others = pc.indices_nonzero(pc.invert(is_capture)).to_pylist()
            rejected = lines.rejected(others, NOT_A_CAPTURE_RECORD)
            kept = pc.indices_nonzero(is_capture)
            lines = lines.subset(kept.to_pylist())
            raw = raw.take(kept)
    table, row_rejections = _curate(raw, context, redactor, lines)
    # In any order: the quarantine groups equal lines into runs and sorts each run's lines (outputs.QuarantineFile).
    return ParsedChunk(table, (*early, *rejected, *row_rejections), {})


# Every capture record names `captureData` or (a metered exchange's usage record) `usageSource`, as written or with a
# `\` escape in the key: a line with neither name and no backslash cannot be one.
PREFILTER = True  # False: every line goes to the reader (the plain path of the differential test)


def _prefiltered(data: bytes, first_line: int) -> tuple[list[RejectedRun], bytes, list[int] | None]:
    """JSON objects that cannot be capture records, rejected before Arrow builds a row for each (200,000 lines of
    `{}` cost a row, a rejection by row and a line lookup each), with the reason both paths give them, as one run per
    distinct line; the other lines as one text for the reader, and their line numbers (None when no line was taken
    out: `data` as it is). The output is the same as without the pre-filter
    (tests/capture_processor/test_fast_path.py)."""
    early: list[RejectedRun] = []
    if not PREFILTER:
        return early, data, None
    # The lines as one Arrow array, walked in C++: no Python object per line, and no hash of a line that names
    # `captureData` (every line of an ordinary chunk, found near its start); each distinct other line judged once.
    lines = pc.split_pattern(_as_binary_array(data), pattern=b"\n").values
    others = lines.filter(pc.invert(pc.match_substring(lines, b"captureData")))
    if not len(others):
        return early, data, None
    rejected_lines = [line for line in pc.unique(others).to_pylist() if _prefilter_verdict(line)]
    if not rejected_lines:
        return early, data, None
    rejected_set = pa.array(rejected_lines, pa.large_binary())
    flags = pc.is_in(lines, value_set=rejected_set)
    numbers = pc.add(pc.indices_nonzero(flags), first_line).to_pylist()
    if len(rejected_lines) == 1:  # one line repeated (200,000 lines of `{}`): one run, no loop
        early = [RejectedRun(numbers, NOT_A_CAPTURE_RECORD, rejected_lines[0])]
    else:
        runs: list[list[int]] = [[] for _ in rejected_lines]
        for number, which in zip(numbers, pc.index_in(lines.filter(flags), value_set=rejected_set).to_pylist(),
                                 strict=True):
            runs[which].append(number)
        early = [RejectedRun(run, NOT_A_CAPTURE_RECORD, line) for line, run in zip(rejected_lines, runs, strict=True)]
    # Arrow's reader skips blank lines (bytes.strip()'s whitespace only), so its rows are the other kept lines.
    kept_mask = pc.and_not(pc.invert(pc.match_substring_regex(lines, r"^[ \t\n\r\x0b\x0c]*$")), flags)
    kept = pc.indices_nonzero(kept_mask).to_pylist()
    return early, b"\n".join(lines.filter(kept_mask).to_pylist()) + b"\n", kept


def _as_binary_array(data: bytes) -> pa.Array:
    """`data` as an Arrow array of one value, without a copy (the lines split from it are the one copy, as
    `bytes.split` made)."""
    offsets = pa.array([0, len(data)], pa.int64()).buffers()[1]
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)])


def _prefilter_verdict(line: bytes) -> bool:
    """True for a JSON object that cannot be a capture record: no `captureData`, no `usageSource`, no backslash
    (which could escape a letter of either name), and the careful path rejects it as not a capture record. Any other
    line (not JSON, or JSON that Arrow's reader may judge otherwise) is left to the reader, as without the filter."""
    if b"\\" in line or b"captureData" in line or b"usageSource" in line or not line.strip():
        return False
    return _line_rejection(line) == NOT_A_CAPTURE_RECORD


def _line_rejection(line: bytes) -> str | None:
    """Why the careful path rejects the line, or None when it reads it as a capture record."""
    try:
        _normalised_record(line)
    except MalformedLineError as error:
        return str(error)
    except RecursionError:
        return NESTED_TOO_DEEP
    return None


class _LineIndex:
    """Line number and bytes of each row, worked out only when a row is rejected."""

    def __init__(self, data: bytes, first_line: int, line_numbers: list[int] | None = None) -> None:
        self._data, self._first_line, self._line_numbers = data, first_line, line_numbers
        self._lines: list[bytes] | None = None

    def line(self, row: int, reason: str = "") -> RejectedLine:
        lines, line_numbers = self._index()
        index = line_numbers[row]
        return RejectedLine(self._first_line + index, reason, lines[index])

    def rejected(self, rows: list[int], reason: str) -> list[RejectedLine]:
        lines, line_numbers = self._index()
        first = self._first_line
        return [RejectedLine(first + line_numbers[row], reason, lines[line_numbers[row]]) for row in rows]

    def subset(self, rows: list[int]) -> _LineIndex:
        """The index of the rows kept, in order (`rows` are this index's rows)."""
        lines, line_numbers = self._index()
        subset = _LineIndex(self._data, self._first_line, [line_numbers[row] for row in rows])
        subset._lines = lines
        return subset

    def _index(self) -> tuple[list[bytes], list[int]]:
        if self._lines is None:
            self._lines = self._data.split(b"\n")
        if self._line_numbers is None:  # Arrow's reader skips blank lines, so rows are the others
            self._line_numbers = [index for index, line in enumerate(self._lines) if line.strip()]
        return self._lines, self._line_numbers


def _read_whole_chunk(data: bytes) -> tuple[pa.Table, pa.Array | None] | None:
    """The chunk as a raw table and, when some rows are JSON objects but not capture records, which rows are;
    or None when any line needs the careful path."""
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
        metadata = table.column("eventMetadata")
        has_side = [pc.is_valid(pc.struct_field(sides, name)) for name in ("endpointInput", "endpointOutput")]
        usage_record = pc.is_valid(pc.struct_field(metadata, "usageSource"))  # a metered exchange's usage record
        is_capture = pc.fill_null(pc.or_(pc.or_(*has_side), usage_record), False)
        return table, (None if pc.all(is_capture).as_py() is not False else is_capture)
    return None


def _read_line_by_line(
    data: bytes, first_line: int, numbers: list[int] | None = None
) -> tuple[pa.Table, list[int], list[RejectedLine]]:
    """`numbers`: the line number (less `first_line`) of each line of `data`, when it is not its position."""
    rows: list[dict[str, Any]] = []
    line_numbers: list[int] = []
    rejected: list[RejectedLine] = []
    for position, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        offset = numbers[position] if numbers is not None else position
        try:
            rows.append(_normalised_record(line))
            line_numbers.append(offset)
        except MalformedLineError as error:
            rejected.append(RejectedLine(first_line + offset, str(error), line))
        except RecursionError:
            rejected.append(RejectedLine(first_line + offset, NESTED_TOO_DEEP, line))
    return pa.Table.from_pylist(rows, schema=RAW_SCHEMA), line_numbers, rejected


def _normalised_record(line: bytes) -> dict[str, Any]:
    """One line as a dict shaped exactly like RAW_SCHEMA, or MalformedLineError with the reason."""
    try:
        record = fast_json.loads(line)
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
    metadata = record.get("eventMetadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    if not any(sides.values()) and not isinstance(metadata.get("usageSource"), str):
        raise MalformedLineError(NOT_A_CAPTURE_RECORD)
    return {
        "captureData": sides,
        "eventMetadata": {
            **{name: _as_text(metadata.get(name)) for name in _TEXT_METADATA},
            "responseStatus": _as_int(metadata.get("responseStatus"), INT32_MAX),
            "durationMs": _as_number(metadata.get("durationMs")),
            "timeToFirstChunkMs": _as_number(metadata.get("timeToFirstChunkMs")),
            "partial": metadata.get("partial") is True,
            "inputTokens": _as_int(metadata.get("inputTokens"), TOKENS_MAX),
            "outputTokens": _as_int(metadata.get("outputTokens"), TOKENS_MAX),
        },
        "eventVersion": _as_text(record.get("eventVersion")),
    }


def _normalised_side(side: Any) -> dict[str, Any] | None:
    if not isinstance(side, dict):
        return None
    normalised: dict[str, Any] = {name: _as_text(side.get(name)) for name, _ in _SIDE_FIELDS[:-1]}
    normalised["truncated"] = side.get("truncated") is True
    return normalised


def _as_text(value: Any) -> str | None:
    text: str | None = value
    if value is not None and not isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)  # a number or an inline object: keep it as JSON text
    if text is not None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedLineError("a lone surrogate escape (\\ud800-\\udfff) that UTF-8 cannot hold") from None
    return text


def _as_int(value: Any, maximum: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= maximum:
        return value
    return None


def _as_number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _curate(
    raw: pa.Table, context: ChunkContext, redactor: Redactor, lines: _LineIndex
) -> tuple[pa.Table, list[RejectedLine]]:
    capture = raw.column("captureData").combine_chunks()
    metadata = raw.column("eventMetadata").combine_chunks()
    sides = {name: pc.struct_field(capture, name) for name in ("endpointInput", "endpointOutput")}
    side_values = {
        name: [pc.struct_field(side, field).to_pylist() for field in ("data", "encoding", "observedContentType")]
        + [_truncated_flags(side).to_pylist()]
        for name, side in sides.items()
    }
    paths = pc.struct_field(metadata, "requestPath").to_pylist()
    batch = DocumentBatch(redactor)
    kept: list[int] = []
    exchanges: list[_Exchange] = []
    rejected: list[RejectedLine] = []
    for row in range(raw.num_rows):
        try:
            exchange = _exchange(
                *(_side_of(side_values["endpointInput"], row), _side_of(side_values["endpointOutput"], row)),
                paths[row],
                batch,
            )
        except Exception as error:  # any failure of one row is that row's, not the chunk's
            entry = lines.line(row)
            reason = f"could not curate: {type(error).__name__}: {error}"
            rejected.append(RejectedLine(entry.line_number, reason, entry.raw))
            continue
        if exchange.quarantine_reason is not None:
            entry = lines.line(row)
            rejected.append(RejectedLine(entry.line_number, exchange.quarantine_reason, entry.raw))
        kept.append(row)
        exchanges.append(exchange)
    batch.redact()
    for row, exchange in zip(kept, exchanges, strict=True):
        for label, document in (("input", exchange.input_document), ("output", exchange.output_document)):
            if document is not None and batch.over_budget(document):  # replaced whole: the row says so
                exchange.errors = "; ".join(filter(None, (exchange.errors, f"{label}: {OVER_BUDGET_NOTE}")))
        if exchange.probe_document is not None and _split_across_events(batch, exchange):
            exchange.output_document = None
            reason = "stream of unknown shape carries a value split across events; its text is withheld"
            exchange.errors = "; ".join(filter(None, (exchange.errors, f"output: {reason}")))
            entry = lines.line(row)
            rejected.append(RejectedLine(entry.line_number, reason, entry.raw))
    if len(kept) < raw.num_rows:
        raw = raw.take(pa.array(kept, pa.int64()))
    try:
        return _table(raw, exchanges, batch, context), rejected
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        # A value Arrow refuses (none is known; this is the net under the checks above): find the
        # rows one by one, quarantine them, and keep the others.
        good: list[int] = []
        for position, row in enumerate(kept):
            try:
                _table(raw.slice(position, 1), exchanges[position : position + 1], batch, context)
                good.append(position)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as row_error:
                entry = lines.line(row)
                reason = f"could not convert to the curated schema: {type(row_error).__name__}: {row_error}"
                rejected.append(RejectedLine(entry.line_number, reason[:500], entry.raw))
        table = _table(raw.take(pa.array(good, pa.int64())), [exchanges[p] for p in good], batch, context)
        return table, rejected


@dataclass
class _Exchange:
    input_document: int | None
    output_document: int | None
    facts: openai_format.ExchangeFacts
    errors: str | None
    quarantine_reason: str | None
    probe_document: int | None = None


_MARKER = "[REDACTED:"
OVER_BUDGET_NOTE = (
    f"more than {MAX_CANDIDATES_PER_DOCUMENT} candidate matches (the redaction budget); the text is replaced whole"
)


def _split_across_events(batch: DocumentBatch, exchange: _Exchange) -> bool:
    """True when redacting the stream's values joined finds more than redacting it event by event."""
    assert exchange.output_document is not None and exchange.probe_document is not None
    (text, _), (probe, _) = batch.result(exchange.output_document), batch.result(exchange.probe_document)
    original_text, original_probe = batch.original(exchange.output_document), batch.original(exchange.probe_document)
    found_in_events = text.count(_MARKER) - original_text.count(_MARKER)
    found_joined = probe.count(_MARKER) - original_probe.count(_MARKER)
    return found_joined > found_in_events


def _side_of(values: list[list[Any]], row: int) -> DecodedSide:
    data, encoding, content_type, truncated = values  # the columns (no generator per row: ~1% of a chunk)
    return decode_side(data[row], encoding[row], content_type[row], bool(truncated[row]))


def _exchange(request: DecodedSide, response: DecodedSide, path: str | None, batch: DocumentBatch) -> _Exchange:
    facts = openai_format.exchange_facts(request.parsed, response.parsed, streamed=response.streamed, path=path)
    labelled = (("input", request), ("output", response))
    notes = [f"{label}: {side.error or side.note}" for label, side in labelled if side.error or side.note]
    undecodable = ", ".join(label for label, side in labelled if side.error)
    return _Exchange(
        batch.add(request.text, as_json=request.as_json) if request.text is not None else None,
        batch.add(response.text, as_json=response.as_json) if response.text is not None else None,
        facts,
        "; ".join(notes) or None,
        f"payload not decodable ({undecodable}); its text is left out of the curated table" if undecodable else None,
        batch.add(response.probe, as_json=False) if response.probe is not None else None,
    )


def _table(raw: pa.Table, exchanges: list[_Exchange], batch: DocumentBatch, context: ChunkContext) -> pa.Table:
    capture, metadata = raw.column("captureData").combine_chunks(), raw.column("eventMetadata").combine_chunks()
    sides = {name: pc.struct_field(capture, name) for name in ("endpointInput", "endpointOutput")}
    length = raw.num_rows
    texts: dict[str, list[str | None]] = {"input": [], "output": []}
    rules: list[list[str] | None] = []
    for exchange in exchanges:
        hit: set[str] = set()
        for label, document in (("input", exchange.input_document), ("output", exchange.output_document)):
            if document is None:
                texts[label].append(None)
                continue
            text, document_rules = batch.result(document)
            texts[label].append(text)
            hit |= document_rules
        rules.append(sorted(hit) or None)
    times, sources = fill_missing_times(_parsed_times(pc.struct_field(metadata, "inferenceTime").to_pylist()), context)
    facts = [exchange.facts for exchange in exchanges]
    status = pc.struct_field(metadata, "responseStatus")
    columns = {
        "event_id": pc.struct_field(metadata, "eventId"),
        "inference_id": pc.struct_field(metadata, "inferenceId"),
        "inference_time": pa.array(times, TIMESTAMP),
        "time_source": pa.array(sources, pa.string()),
        "event_version": raw.column("eventVersion").combine_chunks(),
        "input_content_type": pc.struct_field(sides["endpointInput"], "observedContentType"),
        "input_encoding": pc.struct_field(sides["endpointInput"], "encoding"),
        "input_text": pa.array(texts["input"], pa.string()),
        "input_truncated": _truncated_flags(sides["endpointInput"]),
        "output_content_type": pc.struct_field(sides["endpointOutput"], "observedContentType"),
        "output_encoding": pc.struct_field(sides["endpointOutput"], "encoding"),
        "output_text": pa.array(texts["output"], pa.string()),
        "output_truncated": _truncated_flags(sides["endpointOutput"]),
        "decode_error": pa.array([exchange.errors for exchange in exchanges], pa.string()),
        "source_key": constant_column(context.source_key, length),
        "deployment_hash": constant_column(context.deployment_hash, length),
        "gen_ai_operation_name": pa.array([fact.operation_name for fact in facts], pa.string()),
        "gen_ai_request_model": pc.coalesce(
            pa.array([fact.request_model for fact in facts], pa.string()), pc.struct_field(metadata, "servedModel")
        ),
        "gen_ai_response_model": pa.array([fact.response_model for fact in facts], pa.string()),
        "gen_ai_usage_input_tokens": pc.coalesce(
            _non_negative_int(pc.struct_field(metadata, "inputTokens")),
            pa.array([fact.input_tokens for fact in facts], pa.int64()),
        ),
        "gen_ai_usage_output_tokens": pc.coalesce(
            _non_negative_int(pc.struct_field(metadata, "outputTokens")),
            pa.array([fact.output_tokens for fact in facts], pa.int64()),
        ),
        "gen_ai_response_finish_reasons": pa.array([fact.finish_reasons for fact in facts], pa.list_(pa.string())),
        "streamed": pa.array([fact.streamed for fact in facts], pa.bool_()),
        "caller_id": pc.struct_field(metadata, "callerId"),
        "request_path": pc.struct_field(metadata, "requestPath"),
        "http_response_status_code": pc.if_else(
            pc.and_(pc.greater_equal(status, 0), pc.less_equal(status, INT32_MAX)), status, None
        ).cast(pa.int32()),
        "request_duration_ms": _non_negative(pc.struct_field(metadata, "durationMs")),
        "time_to_first_chunk_ms": _non_negative(pc.struct_field(metadata, "timeToFirstChunkMs")),
        "partial": pc.fill_null(pc.struct_field(metadata, "partial"), False),
        "partial_reason": pc.struct_field(metadata, "partialReason"),
        "redaction_rules": pa.array(rules, pa.list_(pa.string())),
        "usage_source": pc.struct_field(metadata, "usageSource"),
        "refused_by": pc.struct_field(metadata, "refusedBy"),
    }
    return pa.Table.from_pydict(columns, schema=CURATED_SCHEMA)


def _non_negative_int(values: pa.Array) -> pa.Array:
    return pc.if_else(pc.greater_equal(values, 0), values, None)


def _non_negative(values: pa.Array) -> pa.Array:
    finite = pc.and_(pc.is_finite(values), pc.greater_equal(values, 0))
    return pc.if_else(finite, values, None)


def _truncated_flags(side: pa.Array) -> pa.Array:
    return pc.fill_null(pc.struct_field(side, "truncated"), False)


def _parsed_times(values: list[str | None]) -> list[datetime | None]:
    """As SageMaker writes them (`...Z`, second precision) or as the SDK tests do (fractional seconds,
    no zone); None for anything else, e.g. "{%s}"."""
    cache: dict[str | None, datetime | None] = {}
    return [cache[value] if value in cache else cache.setdefault(value, parse_iso_time(value)) for value in values]

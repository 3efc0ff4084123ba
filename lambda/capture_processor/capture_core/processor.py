"""Process one S3 object: stream it, parse it chunk by chunk, write Parquet per hour, upload."""

from __future__ import annotations

import gc
import hashlib
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from boto3.s3.transfer import TransferConfig

from capture_core import alb_format, capture_format
from capture_core.documents import DocumentBatch
from capture_core.erasure import DeletionRegister, scrub_conversion
from capture_core.iceberg_sink import IcebergSink, PendingObject
from capture_core.line_chunks import (
    DecodeStatus,
    LineChunk,
    OversizedLine,
    Readable,
    decoded_blocks,
    line_chunks,
)
from capture_core.outputs import (
    PartitionedParquetFiles,
    PartitionFile,
    QuarantineFile,
    QuarantineSource,
)
from capture_core.records import ChunkContext, ParsedChunk, RejectedLine, Rejection
from capture_core.redaction import Redactor
from capture_core.routing import Tier, route_object
from capture_core.s3_events import S3ObjectRef
from capture_core.settings import Settings

CHUNK_BYTES = 2 << 20  # decoded bytes parsed at a time: bounds memory (see docs/capture-processor.md)
PARSE_WORKERS = 2
MAX_LINE_BYTES = 48 << 20  # a tier-3 line holds two 10 MiB payloads as BASE64 (~27 MiB) with room to spare

# A few upload threads with 16 MiB parts: enough for throughput, small enough for a 1 GiB function.
_TRANSFER = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=16 << 20, max_concurrency=4)

ChunkParser = Callable[[bytes, int, ChunkContext, Redactor], ParsedChunk]


@dataclass(frozen=True)
class TierFormat:
    parse: ChunkParser
    schema: pa.Schema
    time_column: str
    payload_columns: tuple[str, ...] = ()


_CAPTURE = TierFormat(
    capture_format.parse_capture_chunk,
    capture_format.CURATED_SCHEMA,
    "inference_time",
    payload_columns=("input_text", "output_text"),
)
_FORMATS = {
    Tier.SME: _CAPTURE,
    Tier.POD: _CAPTURE,
    Tier.ALB: TierFormat(alb_format.parse_alb_chunk, alb_format.CURATED_SCHEMA, "time"),
}


@dataclass
class ObjectReport:
    bucket: str
    key: str
    tier: str | None = None
    skip_reason: str | None = None
    records: int = 0
    bytes_read: int = 0
    bytes_decoded: int = 0
    quarantined: int = 0
    output_keys: list[str] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)
    parser_counts: Counter[str] = field(default_factory=Counter)
    over_limit: bool = False
    erased: int = 0  # rows and quarantined lines an erasure of the register covers
    over_budget_fields: int = 0

    def metrics(self) -> dict[str, int]:
        if self.tier is None:
            return {"SkippedObjects": 1}
        counts = {
            "Objects": 1,
            "Records": self.records,
            "SourceBytes": self.bytes_decoded,
            "QuarantinedLines": self.quarantined,
            "FilesWritten": len(self.output_keys),
            "ObjectsOverSizeLimit": int(self.over_limit),
            "ErasedRowsDropped": self.erased,
            "FieldsOverRedactionBudget": self.over_budget_fields,
        }
        counts.update({f"Redactions_{rule}": count for rule, count in self.redactions.items()})
        if self.tier == Tier.ALB:
            counts["AlbLinesWithExtraFields"] = self.parser_counts["alb_lines_with_extra_fields"]
        return counts


JEMALLOC_DECAY_MS = 1000  # see use_frugal_memory_pool; the peak RSS on a 1 GiB object is measured with it


def use_frugal_memory_pool() -> None:
    """Let Arrow allocate from jemalloc (else the system allocator) instead of its default,
    mimalloc, whose per-thread heaps kept ~75 MiB more resident with two parser threads and a
    writer thread (docs/capture-processor.md, "Memory"). A layer's pyarrow may be built without
    jemalloc, hence the fallback."""
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        pool = pa.system_memory_pool()
    else:
        # Freed pages go back to the OS after JEMALLOC_DECAY_MS, not at once (Arrow's default, 0): every chunk
        # allocates the same buffers again, and faulting fresh pages in cost 5-8% of the CPU time of a conversion.
        pa.jemalloc_set_decay_ms(JEMALLOC_DECAY_MS)
    pa.set_memory_pool(pool)


def output_file_id(bucket: str, key: str, version: str) -> str:
    """Stable per source object version: reprocessing the same version overwrites its files."""
    return hashlib.sha256(f"{bucket}/{key}@{version}".encode()).hexdigest()[:20]


@dataclass
class Conversion:
    """The local result of converting one source stream, before anything is uploaded."""

    quarantine: QuarantineFile
    partition_files: list[PartitionFile] = field(default_factory=list)
    records: int = 0
    bytes_read: int = 0
    bytes_decoded: int = 0
    redactions: dict[str, int] = field(default_factory=dict)
    parser_counts: Counter[str] = field(default_factory=Counter)
    over_limit: bool = False
    over_budget_fields: int = 0  # documents replaced whole: more candidate matches than the redaction budget


def process_object(
    s3: Any, ref: S3ObjectRef, settings: Settings, sink: IcebergSink | None = None, message_id: str = "",
    register: DeletionRegister | None = None,
) -> ObjectReport:
    """Converts one object; its curated rows go to per-object Parquet files (uploaded here) and/or, given a
    ``sink``, to the invocation's Iceberg commit (``settings.curated_output``). The quarantine file is uploaded
    either way. The erasures of ``register`` are applied to both first (capture_core.erasure)."""
    report = ObjectReport(ref.bucket, ref.key)
    route = route_object(ref.key, skip_prefixes=(settings.output_prefix, settings.quarantine_prefix))
    if route.tier is None:
        report.skip_reason = route.skip_reason
        return report
    report.tier = route.tier.value
    version_request = {"VersionId": ref.version_id} if ref.version_id else {}
    response = s3.get_object(Bucket=ref.bucket, Key=ref.key, **version_request)
    # Name outputs after what was actually read (S3 returns the same ETag the event carried).
    version = response.get("VersionId") or response["ETag"].strip('"')
    if register and register.rewritten_by_erasure(response.get("Metadata") or {}):
        response["Body"].close()  # an erasure's rewrite: the rows it kept are in the outputs already
        report.tier, report.skip_reason = None, "rewritten by an erasure (audit/erasure-register/)"
        return report
    context = ChunkContext(ref.key, route.deployment_hash, route.key_time, response["LastModified"])
    with tempfile.TemporaryDirectory(prefix="capture-") as directory:
        try:
            conversion = convert_stream(
                response["Body"],
                route.tier,
                context,
                Redactor(settings.redaction_rules),
                Path(directory),
                QuarantineSource(ref.bucket, ref.key, version),
                settings.max_object_bytes,
            )
        finally:
            response["Body"].close()
        if register:
            report.erased = scrub_conversion(register, conversion, route.tier)
        file_id = output_file_id(ref.bucket, ref.key, version)
        if sink is not None and settings.iceberg is not None:
            _add_to_sink(sink, settings, route.tier, message_id, file_id, ref.key, response["LastModified"],
                         conversion)
        report.output_keys = _upload_outputs(s3, settings, ref.bucket, route.tier, file_id, conversion)
    report.records, report.quarantined = conversion.records, conversion.quarantine.lines
    report.bytes_read, report.bytes_decoded = conversion.bytes_read, conversion.bytes_decoded
    report.redactions, report.parser_counts = conversion.redactions, conversion.parser_counts
    report.over_limit = conversion.over_limit
    report.over_budget_fields = conversion.over_budget_fields
    return report


def convert_stream(
    stream: Readable,
    tier: Tier,
    context: ChunkContext,
    redactor: Redactor,
    directory: Path,
    source: QuarantineSource,
    max_object_bytes: int | None = None,
) -> Conversion:
    """Stream -> Parquet files per hour and a quarantine file, all under `directory`."""
    tier_format = _FORMATS[tier]
    status = DecodeStatus()
    parquet = PartitionedParquetFiles(
        directory, tier_format.schema, tier_format.time_column, tier_format.payload_columns
    )
    conversion = Conversion(quarantine=QuarantineFile(directory / "quarantine.jsonl", source))
    last_line = 0
    collector = _CollectorPaused()
    try:
        blocks = decoded_blocks(stream, status, max_decoded_bytes=max_object_bytes)
        chunks = line_chunks(blocks, chunk_bytes=CHUNK_BYTES, max_line_bytes=MAX_LINE_BYTES, status=status)
        for item, parsed in _parsed_in_order(chunks, tier_format.parse, context, redactor):
            if parsed is None:
                reason = f"line longer than {MAX_LINE_BYTES} bytes; skipped"
                _quarantine(conversion, redactor, RejectedLine(item.line_number, reason, item.prefix))
                last_line = item.line_number
                continue
            parquet.write(parsed.table)
            conversion.records += parsed.table.num_rows
            conversion.parser_counts.update(parsed.counters)
            _quarantine_all(conversion, redactor, parsed.rejected)
            last_line = item.first_line + item.line_count
            collector.between_chunks()
        if status.ended_early:
            reason = "gzip stream ends early (object cut short); the lines before the cut were processed"
            _quarantine(conversion, redactor, RejectedLine(last_line, reason, b""))
        if status.over_limit:
            reason = (
                f"object decodes to more than MAX_OBJECT_BYTES ({max_object_bytes} bytes); the lines after "
                f"line {last_line} were not processed (the source object keeps them)"
            )
            _quarantine(conversion, redactor, RejectedLine(last_line + 1, reason, b""))
    finally:
        collector.resume()
        conversion.partition_files = parquet.close()
        conversion.quarantine.close()
    conversion.bytes_read, conversion.bytes_decoded = status.bytes_read, status.bytes_decoded
    conversion.over_limit = status.over_limit
    conversion.redactions = dict(redactor.counts)
    conversion.over_budget_fields = redactor.over_budget
    return conversion


class _CollectorPaused:
    """Python's cyclic garbage collector paused while an object is converted. Parsing a chunk allocates hundreds of
    thousands of short-lived containers (the JSON of payloads and stream events, pieces of documents) that reference
    counting frees; the collector, triggered every 700 allocations, walked them and every long-lived object again,
    8-11% of the time (issue 27's profile). Between chunks the young generations are collected once, so a cycle
    made by a chunk lives no longer than the next chunk, and memory stays as bounded as before."""

    def __init__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def between_chunks(self) -> None:
        gc.collect(1)

    def resume(self) -> None:
        if self._was_enabled:
            gc.enable()


def _parsed_in_order(
    chunks: Iterator[LineChunk | OversizedLine], parse: ChunkParser, context: ChunkContext, redactor: Redactor
) -> Iterator[tuple[Any, ParsedChunk | None]]:
    """Each chunk with its parsed result (None for an oversized line), in input order, while up
    to PARSE_WORKERS chunks are parsed at once: Arrow's reader and compute kernels release the
    GIL, so a second core is put to work; holding a few chunks keeps memory bounded."""
    with ThreadPoolExecutor(max_workers=PARSE_WORKERS, thread_name_prefix="parse") as pool:
        in_flight: deque[tuple[Any, Future[ParsedChunk] | None]] = deque()
        try:
            for item in chunks:
                future = None
                if isinstance(item, LineChunk):
                    future = pool.submit(parse, item.data, item.first_line, context, redactor)
                in_flight.append((item, future))
                if len(in_flight) > PARSE_WORKERS:
                    yield _completed(in_flight.popleft())
            while in_flight:
                yield _completed(in_flight.popleft())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _completed(entry: tuple[Any, Future[ParsedChunk] | None]) -> tuple[Any, ParsedChunk | None]:
    item, future = entry
    return item, future.result() if future is not None else None


_RAW = attrgetter("raw")


def _quarantine(conversion: Conversion, redactor: Redactor, rejected: RejectedLine) -> None:
    _quarantine_all(conversion, redactor, (rejected,))


def _quarantine_all(conversion: Conversion, redactor: Redactor, rejected: Sequence[Rejection]) -> None:
    """The rejected lines (and runs of equal lines) of a chunk, redacted in one batch (string by string when quoted):
    one RE2 pass for all of them, not one per line (200,000 lines of `{}` took 281 s one by one)."""
    if not rejected:
        return
    batch = DocumentBatch(redactor)
    raws = list(map(_RAW, rejected))
    texts = {raw: raw.decode("utf-8", errors="replace") for raw in dict.fromkeys(raws)}  # each line once
    documents = {text: batch.add(text, as_json='"' in text) for text in dict.fromkeys(texts.values())}
    batch.redact()
    redacted = {raw: batch.result(documents[text])[0] for raw, text in texts.items()}
    conversion.quarantine.add_many_redacted(rejected, list(map(redacted.__getitem__, raws)))


def _upload_outputs(
    s3: Any, settings: Settings, source_bucket: str, tier: Tier, file_id: str, conversion: Conversion
) -> list[str]:
    bucket = settings.output_bucket_for(source_bucket)
    uploads = [
        (file.path, f"{file.partition.key_prefix(settings.output_prefix, tier.value)}part-{file_id}.parquet")
        for file in conversion.partition_files
        if settings.writes_parquet
    ]
    if conversion.quarantine.entries:
        uploads.append(
            (conversion.quarantine.path, f"{settings.quarantine_prefix}tier={tier.value}/part-{file_id}.jsonl")
        )
    for path, key in uploads:
        s3.upload_file(str(path), bucket, key, ExtraArgs=settings.upload_arguments or None, Config=_TRANSFER)
    return [key for _, key in uploads]


def _add_to_sink(
    sink: IcebergSink,
    settings: Settings,
    tier: Tier,
    message_id: str,
    file_id: str,
    key: str,
    last_modified: Any,
    conversion: Conversion,
) -> None:
    """The object's curated rows (read back from its local Parquet files: the conversion stays streaming and
    bounded) join the invocation's commit."""
    if not conversion.partition_files or settings.iceberg is None:
        return
    schema = _FORMATS[tier].schema
    table = pa.concat_tables([pq.read_table(file.path, schema=schema) for file in conversion.partition_files])
    name = settings.iceberg.alb_table if tier == Tier.ALB else settings.iceberg.capture_table
    sink.add(name, PendingObject(message_id, file_id, key, last_modified, table))

"""Process one S3 object: stream it, parse it chunk by chunk, write Parquet per hour, upload."""

from __future__ import annotations

import hashlib
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from boto3.s3.transfer import TransferConfig

from capture_core import alb_format, capture_format
from capture_core.line_chunks import DecodeStatus, OversizedLine, decoded_blocks, line_chunks
from capture_core.outputs import QUARANTINE_RAW_LIMIT, PartitionedParquetFiles, QuarantineFile
from capture_core.records import ChunkContext, ParsedChunk, RejectedLine
from capture_core.redaction import Redactor
from capture_core.routing import Route, Tier, route_object
from capture_core.s3_events import S3ObjectRef
from capture_core.settings import Settings

CHUNK_BYTES = 8 << 20  # decoded bytes parsed at a time: bounds memory, keeps Arrow's batches large
MAX_LINE_BYTES = 48 << 20  # a tier-3 line holds two 10 MiB payloads as BASE64 (~27 MiB) with room to spare

# A few upload threads with 16 MiB parts: enough for throughput, small enough for a 1 GiB function.
_TRANSFER = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=16 << 20, max_concurrency=4)

ChunkParser = Callable[[bytes, int, ChunkContext, Redactor], ParsedChunk]


@dataclass(frozen=True)
class TierFormat:
    parse: ChunkParser
    schema: pa.Schema
    time_column: str


_FORMATS = {
    Tier.SME: TierFormat(capture_format.parse_capture_chunk, capture_format.CURATED_SCHEMA, "inference_time"),
    Tier.POD: TierFormat(capture_format.parse_capture_chunk, capture_format.CURATED_SCHEMA, "inference_time"),
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

    def metrics(self) -> dict[str, int]:
        if self.tier is None:
            return {"SkippedObjects": 1}
        counts = {
            "Objects": 1,
            "Records": self.records,
            "SourceBytes": self.bytes_decoded,
            "QuarantinedLines": self.quarantined,
            "FilesWritten": len(self.output_keys),
        }
        counts.update({f"Redactions_{rule}": count for rule, count in self.redactions.items()})
        if self.tier == Tier.ALB:
            counts["AlbLinesWithExtraFields"] = self.parser_counts["alb_lines_with_extra_fields"]
        return counts


def output_file_id(bucket: str, key: str, version: str) -> str:
    """Stable per source object version: reprocessing the same version overwrites its files."""
    return hashlib.sha256(f"{bucket}/{key}@{version}".encode()).hexdigest()[:20]


def process_object(s3: Any, ref: S3ObjectRef, settings: Settings) -> ObjectReport:
    report = ObjectReport(ref.bucket, ref.key)
    route = route_object(ref.key, skip_prefixes=(settings.output_prefix, settings.quarantine_prefix))
    if route.tier is None:
        report.skip_reason = route.skip_reason
        return report
    report.tier = route.tier.value
    request = {"Bucket": ref.bucket, "Key": ref.key} | (
        {"VersionId": ref.version_id} if ref.version_id else {}
    )
    response = s3.get_object(**request)
    # Name outputs after what was actually read (S3 returns the same ETag the event carried).
    version = response.get("VersionId") or response["ETag"].strip('"')
    file_id = output_file_id(ref.bucket, ref.key, version)
    with tempfile.TemporaryDirectory(prefix="capture-") as directory:
        try:
            partition_files, quarantine = _convert(
                response, ref, version, route, Path(directory), report, settings
            )
        finally:
            response["Body"].close()
        _upload_outputs(s3, settings, ref, route.tier, file_id, partition_files, quarantine, report)
    return report


def _convert(
    response: dict[str, Any],
    ref: S3ObjectRef,
    version: str,
    route: Route,
    directory: Path,
    report: ObjectReport,
    settings: Settings,
) -> tuple[list, QuarantineFile]:
    assert route.tier is not None
    tier_format = _FORMATS[route.tier]
    context = ChunkContext(ref.key, route.deployment_hash, route.key_time, response["LastModified"])
    redactor = Redactor(settings.redaction_rules)
    status = DecodeStatus()
    parquet = PartitionedParquetFiles(directory, tier_format.schema, tier_format.time_column)
    quarantine = QuarantineFile(directory / "quarantine.jsonl", ref.bucket, ref.key, version)
    last_line = 0
    try:
        blocks = decoded_blocks(response["Body"], status)
        for item in line_chunks(blocks, chunk_bytes=CHUNK_BYTES, max_line_bytes=MAX_LINE_BYTES):
            if isinstance(item, OversizedLine):
                reason = f"line longer than {MAX_LINE_BYTES} bytes; skipped"
                _quarantine(quarantine, redactor, RejectedLine(item.line_number, reason, item.prefix))
                last_line = item.line_number
                continue
            parsed = tier_format.parse(item.data, item.first_line, context, redactor)
            parquet.write(parsed.table)
            report.records += parsed.table.num_rows
            report.parser_counts.update(parsed.counters)
            for rejected in parsed.rejected:
                _quarantine(quarantine, redactor, rejected)
            last_line = item.first_line + item.data.count(b"\n")
        if status.ended_early:
            reason = "gzip stream ends early (object cut short); the lines before the cut were processed"
            _quarantine(quarantine, redactor, RejectedLine(last_line, reason, b""))
    finally:
        partition_files = parquet.close()
        quarantine.close()
    report.bytes_read, report.bytes_decoded = status.bytes_read, status.bytes_decoded
    report.quarantined = quarantine.entries
    report.redactions = dict(redactor.counts)
    return partition_files, quarantine


def _quarantine(quarantine: QuarantineFile, redactor: Redactor, rejected: RejectedLine) -> None:
    text = rejected.raw[:QUARANTINE_RAW_LIMIT].decode("utf-8", errors="replace")
    quarantine.add(rejected, redactor.redact_text(text))


def _upload_outputs(
    s3: Any,
    settings: Settings,
    ref: S3ObjectRef,
    tier: Tier,
    file_id: str,
    partition_files: list,
    quarantine: QuarantineFile,
    report: ObjectReport,
) -> None:
    bucket = settings.output_bucket_for(ref.bucket)
    for partition_file in partition_files:
        key = (
            f"{partition_file.partition.key_prefix(settings.output_prefix, tier.value)}part-{file_id}.parquet"
        )
        s3.upload_file(str(partition_file.path), bucket, key, Config=_TRANSFER)
        report.output_keys.append(key)
    if quarantine.entries:
        key = f"{settings.quarantine_prefix}tier={tier.value}/part-{file_id}.jsonl"
        s3.upload_file(str(quarantine.path), bucket, key, Config=_TRANSFER)
        report.output_keys.append(key)

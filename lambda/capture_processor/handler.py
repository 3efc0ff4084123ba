"""Lambda entry point: SQS messages carrying S3 event notifications -> curated Parquet (and the Iceberg tables).

Returns the ids of the messages that failed (`batchItemFailures`), so SQS retries only those;
the event source mapping must enable ReportBatchItemFailures.

A scheduled event ``{"captureTablesRetention": {"olderThanDays": N, "bucket": B}}`` (CaptureTables' daily
EventBridge rule) applies the capture policy's retention to the Iceberg tables instead: rows older than N days
deleted, the snapshots holding them expired, an audit record per table under ``audit/table-deletions/`` of B, and,
with ``AUDIT_TRAIL_BUCKET``, those records and the tables' daily manifest as links of the hash-chained audit trail
(capture_core.trail).
"""

from __future__ import annotations

import os
import traceback
from functools import lru_cache
from typing import Any

import boto3

from capture_core.erasure import Registers
from capture_core.iceberg_sink import IcebergSink, catalog_for
from capture_core.processor import ObjectReport, process_object, use_frugal_memory_pool
from capture_core.s3_events import objects_in_message
from capture_core.settings import Settings
from capture_core.telemetry import emit_metrics, log

use_frugal_memory_pool()  # once per container, before any Arrow allocation


def handler(event: dict[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
    settings = Settings.from_environment(os.environ)  # a bad setting fails the whole batch, loudly
    s3 = _s3_client(os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_REGION"))
    if "captureTablesRetention" in event:
        _retention(event["captureTablesRetention"], settings, s3)
        return {"batchItemFailures": []}
    sink = None
    if settings.iceberg is not None:  # the rows of the whole batch go to the Iceberg tables in one commit each
        endpoint, region = os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_REGION")
        catalog = catalog_for(settings.iceberg, endpoint, region, settings.output_kms_key_id)  # (names the key)
        sink = IcebergSink(catalog, settings.iceberg)
    failures = []
    registers = Registers(s3)  # the erasures to apply (capture_core.erasure), read once per invocation and bucket
    for message in event.get("Records", []):
        message_id = message["messageId"]
        try:
            for ref in objects_in_message(message["body"]):
                register = registers.of(settings.output_bucket_for(ref.bucket))
                _report(process_object(s3, ref, settings, sink, message_id, register))
        except Exception as error:  # any failure: report the message so SQS retries it, then DLQ
            if sink is not None:
                sink.discard(message_id)
            log(
                "ERROR",
                "message failed; it will be retried",
                message_id=message_id,
                error=f"{type(error).__name__}: {error}",
                traceback=traceback.format_exc(limit=5),
            )
            emit_metrics(_pipeline(), {"FailedMessages": 1})
            failures.append({"itemIdentifier": message_id})
    if sink is not None:
        outcome = sink.commit()
        failed = sorted(outcome.failed_messages - {failure["itemIdentifier"] for failure in failures})
        failures += [{"itemIdentifier": message_id} for message_id in failed]
        emit_metrics(_pipeline(), {
            "IcebergCommits": outcome.commits, "IcebergCommitConflicts": outcome.conflicts,
            "IcebergRowsAppended": outcome.rows, "IcebergObjectsAlreadyPresent": len(outcome.already_present),
            "IcebergFailedMessages": len(failed),
        })
    return {"batchItemFailures": failures}


def _retention(request: dict[str, Any], settings: Settings, s3: Any) -> None:
    """The scheduled retention run (an error fails the invocation: EventBridge retries it, and the log says why)."""
    from capture_core.capture_tables import apply_retention

    if settings.iceberg is None:
        raise ValueError("captureTablesRetention needs the Iceberg tables (CURATED_OUTPUT iceberg or both)")
    days, bucket = request.get("olderThanDays"), request.get("bucket")
    if isinstance(days, bool) or not isinstance(days, int) or days < 1 or not isinstance(bucket, str) or not bucket:
        raise ValueError("captureTablesRetention needs olderThanDays (a whole number >= 1) and bucket, "
                         f"got {request!r}")
    endpoint, region = os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_REGION")
    requested_by = boto3.client("sts").get_caller_identity()["Arn"]
    tables = {"capture": settings.iceberg.capture_table, "alb": settings.iceberg.alb_table}
    for report in apply_retention(catalog_for(settings.iceberg, endpoint, region, settings.output_kms_key_id),
                                  settings.iceberg.database, tables,
                                  bucket, days, requested_by, s3, trail_bucket=os.environ.get("AUDIT_TRAIL_BUCKET"),
                                  # the records name the capture key (OUTPUT_KMS_KEY_ID), as every output does
                                  put_arguments=settings.upload_arguments):
        log("INFO", "retention applied", **report)


@lru_cache(maxsize=4)
def _s3_client(endpoint_url: str | None, region: str | None) -> Any:
    # Keyed on the settings boto3 reads from the environment, so a warm container reuses its
    # client and tests that point AWS_ENDPOINT_URL elsewhere get a fresh one.
    return boto3.client("s3")


def _pipeline() -> dict[str, str]:
    """The Pipeline dimension of every metric: the construct path the pipeline gives as METRICS_PIPELINE."""
    return {"Pipeline": os.environ.get("METRICS_PIPELINE", "capture-processor")}


def _report(report: ObjectReport) -> None:
    if report.tier is None:
        log("INFO", "object skipped", bucket=report.bucket, key=report.key, reason=report.skip_reason)
        emit_metrics(_pipeline(), report.metrics())
        return
    log(
        "INFO",
        "object processed",
        bucket=report.bucket,
        key=report.key,
        tier=report.tier,
        records=report.records,
        bytes_read=report.bytes_read,
        bytes_decoded=report.bytes_decoded,
        quarantined=report.quarantined,
        redactions=report.redactions,
        files_written=len(report.output_keys),
        output_keys=report.output_keys,
    )
    emit_metrics({**_pipeline(), "Tier": report.tier}, report.metrics())

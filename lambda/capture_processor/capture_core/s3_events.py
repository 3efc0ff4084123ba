"""S3 event notifications as delivered through SQS."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus


class InvalidMessageError(ValueError):
    """The SQS message body is not an S3 event notification."""


@dataclass(frozen=True)
class S3ObjectRef:
    bucket: str
    key: str  # decoded: S3 URL-encodes keys in notifications, with '+' for spaces
    size: int | None
    version_id: str | None
    etag: str | None


def objects_in_message(body: str) -> tuple[S3ObjectRef, ...]:
    """The created objects a message announces; () for the s3:TestEvent sent when a
    notification is configured, and for events other than ObjectCreated."""
    try:
        payload = json.loads(body)
    except ValueError as error:
        raise InvalidMessageError(f"SQS message body is not JSON: {error}") from error
    if not isinstance(payload, dict):
        raise InvalidMessageError("SQS message body is not a JSON object")
    if payload.get("Event") == "s3:TestEvent":
        return ()
    records = payload.get("Records")
    if not isinstance(records, list):
        raise InvalidMessageError("SQS message body has no 'Records' list; expected an S3 event notification")
    return tuple(
        _object_ref(record)
        for record in records
        if str(record.get("eventName", "ObjectCreated:")).startswith("ObjectCreated:")
    )


def _object_ref(record: dict[str, Any]) -> S3ObjectRef:
    try:
        bucket = record["s3"]["bucket"]["name"]
        obj = record["s3"]["object"]
        key = unquote_plus(obj["key"])
    except (KeyError, TypeError) as error:
        raise InvalidMessageError(f"S3 event record lacks s3.bucket.name or s3.object.key: {error!r}") from error
    size = obj.get("size")
    return S3ObjectRef(
        bucket=bucket,
        key=key,
        size=int(size) if size is not None else None,
        version_id=obj.get("versionId") or None,
        etag=obj.get("eTag") or None,
    )

"""The tamper-evident audit trail: erasure and retention records and a daily manifest of the curated tables, each a
link of a hash chain, written under S3 Object Lock in the audit bucket (docs/capture-processor.md, "The audit
trail").

A link is one JSON object at ``trail/<sequence, 12 digits>-<kind>.json``::

    {"sequence": 7, "kind": "erasure", "written_at": "…", "previous_digest": "<sha256 of link 6's bytes>",
     "content": {…the record…}}

Link 0 names ``previous_digest`` 64 zeros. A link is written once: ``If-None-Match: *`` (two writers cannot take
one sequence number; the second retries with the next), with the bucket's default Object Lock retention, or the
mode and days given (``capture.auditLock``). The bucket is versioned (Object Lock requires it): a later version put
over a key cannot remove the first, which Object Lock keeps until its retention ends, and the verification reads
the **first** version of each key and says so when there are others.

:func:`verify_trail` walks the links in sequence order and names the first problem: a ``missing`` link (a sequence
number skipped: every version of the link deleted, which Object Lock refuses until its retention ends), a
``reordered`` one (its body's sequence is not its key's), a ``broken`` one (its ``previous_digest`` is not the
digest of the link before: that link was altered, or this one forged), and ``overwritten`` keys (a newer version or
a delete marker over the original, which is still read). The chain cannot tell a trail cut after its last link; the
daily manifest bounds that: a trail whose last manifest is older than a day is reported ``stale``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

TRAIL_PREFIX = "trail/"
GENESIS = "0" * 64
LOCK_MODES = ("GOVERNANCE", "COMPLIANCE")
_ATTEMPTS = 5


@dataclass(frozen=True)
class AuditLock:
    """The Object Lock retention of each link (``capture.auditLock``); None: the bucket's default retention."""

    mode: str
    retention_days: int


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _sequence(key: str, prefix: str) -> int | None:
    name = key[len(prefix):]
    head = name.split("-", 1)[0]
    return int(head) if len(head) == 12 and head.isdigit() else None


def _originals(s3: Any, bucket: str, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Each key's versions, oldest first (delete markers included, marked)."""
    keys: dict[str, list[dict[str, Any]]] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("DeleteMarkers", []):
            keys.setdefault(item["Key"], []).append({**item, "marker": True})
        for item in page.get("Versions", []):
            keys.setdefault(item["Key"], []).append({**item, "marker": False})
    for items in keys.values():
        # S3 lists a key's versions newest first (and two puts can share a second): oldest first is the reverse,
        # a delete marker placed by its time
        items.reverse()
        items.sort(key=lambda item: (item["LastModified"], item["marker"]))
    return keys


def _read(s3: Any, bucket: str, key: str, version_id: str | None = None) -> bytes:
    request = {"VersionId": version_id} if version_id else {}
    body: bytes = s3.get_object(Bucket=bucket, Key=key, **request)["Body"].read()
    return body


def _head(s3: Any, bucket: str, prefix: str) -> tuple[int, str]:
    """The next sequence number and the digest it must name (from the first version of the last key)."""
    keys = [(seq, key) for key in _originals(s3, bucket, prefix) if (seq := _sequence(key, prefix)) is not None]
    if not keys:
        return 0, GENESIS
    sequence, key = max(keys)
    first = _originals(s3, bucket, key)[key][0]
    return sequence + 1, digest(_read(s3, bucket, key, first.get("VersionId")))


def append(s3: Any, bucket: str, kind: str, content: Mapping[str, Any], *, prefix: str = TRAIL_PREFIX,
           lock: AuditLock | None = None, now: datetime | None = None) -> str:
    """Writes ``content`` as the next link; its key."""
    for _ in range(_ATTEMPTS):
        sequence, previous = _head(s3, bucket, prefix)
        moment = now or datetime.now(UTC)
        link = {"sequence": sequence, "kind": kind, "written_at": moment.isoformat(timespec="seconds"),
                "previous_digest": previous, "content": content}
        body = json.dumps(link, sort_keys=True, separators=(",", ":"), default=str).encode()
        key = f"{prefix}{sequence:012d}-{kind}.json"
        arguments: dict[str, Any] = {}
        if lock is not None:
            arguments = {"ObjectLockMode": lock.mode,
                         "ObjectLockRetainUntilDate": moment + timedelta(days=lock.retention_days)}
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json", IfNoneMatch="*",
                          ChecksumAlgorithm="SHA256", **arguments)
        except s3.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                continue  # another writer took this sequence number: chain after its link
            raise
        return key
    raise RuntimeError(f"could not append to s3://{bucket}/{prefix} after {_ATTEMPTS} attempts (concurrent writers)")


def verify_trail(s3: Any, bucket: str, prefix: str = TRAIL_PREFIX, *, now: datetime | None = None,
                 manifest_within: timedelta = timedelta(days=1, hours=6)) -> dict[str, Any]:
    """Walks the chain; ``intact`` when no link is missing, reordered or broken; ``first_problem`` names the first
    (its sequence, key and what is wrong); ``overwritten``, ``unlocked`` and ``stale`` are reported beside."""
    keys = _originals(s3, bucket, prefix)
    links = sorted((seq, key) for key in keys if (seq := _sequence(key, prefix)) is not None)
    report: dict[str, Any] = {"bucket": bucket, "prefix": prefix, "links": 0, "intact": True, "first_problem": None,
                              "overwritten": [], "unlocked": [], "head_digest": GENESIS, "last_manifest": None}
    expected, previous = 0, GENESIS
    for sequence, key in links:
        versions = keys[key]
        originals = [version for version in versions if not version["marker"]]
        if sequence != expected or not originals:
            _problem(report, expected, None, f"missing: link {expected} is not in the trail")
            return report
        first = originals[0]
        if len(versions) > 1:
            report["overwritten"].append(key)  # a newer version or a delete marker over the original
        body = _read(s3, bucket, key, first.get("VersionId"))
        try:
            link = json.loads(body)
        except ValueError:
            _problem(report, sequence, key, "broken: the link is not JSON")
            return report
        if link.get("sequence") != sequence:
            _problem(report, sequence, key, f"reordered: the link at sequence {sequence} says it is "
                                            f"{link.get('sequence')!r}")
            return report
        if link.get("previous_digest") != previous:
            _problem(report, sequence, key, f"broken: previous_digest does not match link {sequence - 1}'s digest "
                                            f"(link {sequence - 1} altered, or this one forged)")
            return report
        if not _locked(s3, bucket, key, first.get("VersionId")):
            report["unlocked"].append(key)
        if link.get("kind") == "manifest":
            report["last_manifest"] = link.get("written_at")
        previous, expected = digest(body), expected + 1
        report["links"], report["head_digest"] = expected, previous
    last = report["last_manifest"]
    moment = now or datetime.now(UTC)
    report["stale"] = last is None or datetime.fromisoformat(last) < moment - manifest_within
    return report


def _problem(report: dict[str, Any], sequence: int, key: str | None, text: str) -> None:
    report["intact"] = False
    report["first_problem"] = {"sequence": sequence, "key": key, "problem": text}


def _locked(s3: Any, bucket: str, key: str, version_id: str | None) -> bool:
    request = {"VersionId": version_id} if version_id else {}
    head = s3.head_object(Bucket=bucket, Key=key, **request)
    return bool(head.get("ObjectLockMode")) or head.get("ObjectLockLegalHoldStatus") == "ON"


# ---- the daily manifest of the curated tables ---------------------------------------------------------------


def table_manifest(s3: Any, table: Any) -> dict[str, Any]:
    """What a table holds now: its current snapshot, the snapshots retained, and per data file its path, rows,
    size, S3 version id and ETag (the version id pins the bytes in the versioned bucket; reading every data file
    daily for a SHA-256 would read the whole table), and the SHA-256 of the manifest list and every manifest (which
    list each data file with its size and row count)."""
    snapshot = table.current_snapshot()
    content: dict[str, Any] = {"table": ".".join(table.name()), "current_snapshot_id": None, "snapshot_ids": [],
                               "data_files": [], "metadata_digests": {}}
    if snapshot is None:
        return content
    content["current_snapshot_id"] = snapshot.snapshot_id
    content["snapshot_ids"] = sorted(s.snapshot_id for s in table.snapshots())
    metadata = [snapshot.manifest_list, *(m.manifest_path for m in snapshot.manifests(table.io))]
    for path in metadata:
        with table.io.new_input(path).open() as stream:
            content["metadata_digests"][path] = digest(stream.read())
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            data = entry.data_file
            bucket, _, key = data.file_path.removeprefix("s3://").partition("/")
            head = s3.head_object(Bucket=bucket, Key=key)
            content["data_files"].append({"path": data.file_path, "record_count": data.record_count,
                                          "file_size_in_bytes": data.file_size_in_bytes,
                                          "version_id": head.get("VersionId"), "etag": head.get("ETag")})
    content["data_files"].sort(key=lambda item: item["path"])
    return content


def write_manifest(s3: Any, trail_bucket: str, tables: Iterable[Any], *, prefix: str = TRAIL_PREFIX,
                   lock: AuditLock | None = None, now: datetime | None = None) -> str:
    return append(s3, trail_bucket, "manifest", {"tables": [table_manifest(s3, table) for table in tables]},
                  prefix=prefix, lock=lock, now=now)

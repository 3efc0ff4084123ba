"""The audit trail tried as a tamperer would, on moto's S3 server with Object Lock: a link altered, a link missing, two
links swapped, a link overwritten by a newer version; verify-trail names the first problem each time; a locked link
can be neither overwritten in place nor deleted; the daily manifest pins what the tables hold."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.test_erasure import capture_lines
from tests.capture_processor.test_iceberg_tables import DAY, catalog, database  # noqa: F401 (fixtures)


def trail_bucket(s3: Any, *, locked: bool = True, mode: str = "GOVERNANCE") -> str:
    name = f"audit-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    if locked:
        s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": mode, "Days": 1}}})
    return name


def write_links(s3: Any, bucket: str, count: int) -> list[str]:
    from capture_core.trail import append

    return [append(s3, bucket, "erasure", {"erasure_id": f"e{n}", "rows": n}) for n in range(count)]


def verify(s3: Any, bucket: str) -> dict[str, Any]:
    from capture_core.trail import verify_trail

    return verify_trail(s3, bucket)


def first_version(s3: Any, bucket: str, key: str) -> str:
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]
    return str(versions[-1]["VersionId"])  # S3 lists a key's versions newest first


def test_an_intact_chain_verifies_and_each_link_names_the_previous_digest(s3: Any) -> None:
    from capture_core.trail import GENESIS, digest

    bucket = trail_bucket(s3)
    keys = write_links(s3, bucket, 3)
    assert keys == [f"trail/{n:012d}-erasure.json" for n in range(3)]
    bodies = [s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys]
    assert json.loads(bodies[0])["previous_digest"] == GENESIS
    assert [json.loads(body)["previous_digest"] for body in bodies[1:]] == [digest(body) for body in bodies[:2]]
    report = verify(s3, bucket)
    assert report["intact"] and report["links"] == 3 and report["first_problem"] is None
    assert report["head_digest"] == digest(bodies[2]) and report["unlocked"] == []


def test_a_locked_link_can_be_neither_deleted_nor_replaced(s3: Any) -> None:
    bucket = trail_bucket(s3, mode="COMPLIANCE")
    [key] = write_links(s3, bucket, 1)
    version = first_version(s3, bucket, key)
    head = s3.head_object(Bucket=bucket, Key=key, VersionId=version)
    assert head["ObjectLockMode"] == "COMPLIANCE"
    with pytest.raises(ClientError) as refused:
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version)
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError):  # not even by a governance bypass: the mode is COMPLIANCE
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version, BypassGovernanceRetention=True)
    # The writer never overwrites (If-None-Match); a tamperer's PUT makes a new version, and the original stays,
    # still read by the verification, which reports the key as overwritten.
    s3.put_object(Bucket=bucket, Key=key, Body=b'{"sequence": 0, "forged": true}')
    assert s3.get_object(Bucket=bucket, Key=key, VersionId=version)["Body"].read().startswith(b'{"content"')
    report = verify(s3, bucket)
    assert report["intact"] and report["overwritten"] == [key]
    # A delete without a version id only adds a marker: the locked original is still read.
    s3.delete_object(Bucket=bucket, Key=key)
    report = verify(s3, bucket)
    assert report["intact"] and report["links"] == 1 and report["overwritten"] == [key]


def test_an_altered_link_breaks_the_chain_at_the_next_link(s3: Any) -> None:
    bucket = trail_bucket(s3, locked=False)  # what Object Lock prevents, done where it is off
    keys = write_links(s3, bucket, 4)
    link = json.loads(s3.get_object(Bucket=bucket, Key=keys[1])["Body"].read())
    link["content"]["rows"] = 0
    s3.delete_object(Bucket=bucket, Key=keys[1], VersionId=first_version(s3, bucket, keys[1]))
    s3.put_object(Bucket=bucket, Key=keys[1], Body=json.dumps(link, sort_keys=True, separators=(",", ":")).encode())
    report = verify(s3, bucket)
    assert not report["intact"] and report["links"] == 2
    assert report["first_problem"]["sequence"] == 2 and report["first_problem"]["problem"].startswith("broken")


def test_a_missing_link_is_named(s3: Any) -> None:
    bucket = trail_bucket(s3, locked=False)
    keys = write_links(s3, bucket, 4)
    s3.delete_object(Bucket=bucket, Key=keys[2], VersionId=first_version(s3, bucket, keys[2]))
    report = verify(s3, bucket)
    assert not report["intact"] and report["first_problem"] == {
        "sequence": 2, "key": None, "problem": "missing: link 2 is not in the trail"}


def test_reordered_links_are_named(s3: Any) -> None:
    bucket = trail_bucket(s3, locked=False)
    keys = write_links(s3, bucket, 3)
    one, two = (s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys[1:])
    for key in keys[1:]:
        s3.delete_object(Bucket=bucket, Key=key, VersionId=first_version(s3, bucket, key))
    s3.put_object(Bucket=bucket, Key=keys[1], Body=two)
    s3.put_object(Bucket=bucket, Key=keys[2], Body=one)
    report = verify(s3, bucket)
    assert not report["intact"] and report["first_problem"]["sequence"] == 1
    assert report["first_problem"]["problem"].startswith("reordered")


def test_a_link_under_governance_needs_the_bypass_and_the_cli_exits_1_on_a_broken_chain(s3: Any) -> None:
    from capture_core import capture_tables

    bucket = trail_bucket(s3)
    keys = write_links(s3, bucket, 3)
    version = first_version(s3, bucket, keys[1])
    with pytest.raises(ClientError):
        s3.delete_object(Bucket=bucket, Key=keys[1], VersionId=version)
    # A principal allowed s3:BypassGovernanceRetention can: that permission is what GOVERNANCE leaves open.
    s3.delete_object(Bucket=bucket, Key=keys[1], VersionId=version, BypassGovernanceRetention=True)
    assert capture_tables.main(["verify-trail", "--trail-bucket", bucket]) == 1
    assert capture_tables.main(["verify-trail"]) == 2


def test_the_daily_manifest_pins_snapshots_and_files_and_erasures_chain_into_the_trail(
    pipeline: Pipeline, catalog: Any, database: str, s3: Any  # noqa: F811
) -> None:
    from capture_core import capture_tables
    from capture_core.trail import write_manifest

    bucket = trail_bucket(s3)
    s3.put_bucket_versioning(Bucket=pipeline.bucket, VersioningConfiguration={"Status": "Enabled"})
    assert pipeline.run(pipeline.put(f"data-capture/h/pod/{DAY}/10/a.jsonl", capture_lines("a", ["team-a"]))) == {
        "batchItemFailures": []}
    table = catalog.load_table((database, "capture_records"))
    write_manifest(s3, bucket, [table, catalog.load_table((database, "alb_access_logs"))],
                   now=datetime.now(UTC) - timedelta(days=3))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("builtins.print", lambda *a, **k: None)
        assert capture_tables.main(["delete", "--database", database, "--bucket", pipeline.bucket, "--caller-id",
                                    "team-a", "--trail-bucket", bucket], catalog_factory=lambda args: catalog) == 0
    links = [json.loads(s3.get_object(Bucket=bucket, Key=k["Key"])["Body"].read())
             for k in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    manifest, erasure = links
    [records, alb] = manifest["content"]["tables"]
    assert records["current_snapshot_id"] == table.current_snapshot().snapshot_id
    [data] = records["data_files"]
    assert data["record_count"] == 1 and data["version_id"] and data["etag"]
    assert all(len(value) == 64 for value in records["metadata_digests"].values())
    assert alb["current_snapshot_id"] is None
    assert erasure["kind"] == "erasure" and erasure["content"]["predicate"] == "caller_id = 'team-a'"
    report = verify(s3, bucket)
    assert report["intact"] and report["links"] == 2 and report["stale"]  # the last manifest is 3 days old
    write_manifest(s3, bucket, [catalog.load_table((database, "capture_records"))])
    assert not verify(s3, bucket)["stale"]


def test_the_scheduled_retention_chains_its_records_and_the_daily_manifest(
    pipeline: Pipeline, catalog: Any, database: str, s3: Any, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """CaptureTables' daily rule (AUDIT_TRAIL_BUCKET set by the construct): one retention link per table, then the
    manifest, each chained to the previous link; the trail verifies."""
    from handler import handler

    bucket = trail_bucket(s3)
    monkeypatch.setenv("AUDIT_TRAIL_BUCKET", bucket)
    assert pipeline.run(pipeline.put(f"data-capture/h/pod/{DAY}/10/r.jsonl", capture_lines("r", ["team-a"]))) == {
        "batchItemFailures": []}
    age = (datetime.now(UTC) - datetime(2026, 11, 30, tzinfo=UTC)).days
    assert handler({"captureTablesRetention": {"olderThanDays": age + 1, "bucket": pipeline.bucket}}, None) == {
        "batchItemFailures": []}
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert [key.split("-", 1)[1] for key in keys] == ["retention.json", "retention.json", "manifest.json"]
    report = verify(s3, bucket)
    assert report["intact"] and report["links"] == 3 and not report["stale"] and report["unlocked"] == []

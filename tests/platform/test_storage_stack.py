"""Capture storage: snapshot of the template plus the security properties reviewers ask about."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template
from syrupy.extensions.json import JSONSnapshotExtension

from tests.support.synth import Assembly, mask_volatile


@pytest.fixture(scope="module")
def storage(assembly: Assembly) -> dict[str, Any]:
    return assembly.template("-storage")


@pytest.fixture(scope="module")
def template(storage: dict[str, Any]) -> Template:
    return Template.from_json(storage)


def _buckets(storage: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in storage["Resources"].items() if v["Type"] == "AWS::S3::Bucket"}


def test_snapshot(storage: dict[str, Any], snapshot: Any) -> None:
    assert mask_volatile(storage) == snapshot(extension_class=JSONSnapshotExtension)


def test_three_buckets_with_deterministic_names(storage: dict[str, Any]) -> None:
    names = sorted(p["BucketName"] for p in _buckets(storage).values())
    assert names == [
        "hyperpod-tls-llm-platform-111122223333-us-west-2",
        "llm-platform-capture-111122223333-us-west-2",
        "llm-platform-s3-logs-111122223333-us-west-2",
    ]


def test_every_bucket_blocks_public_access_versioned_and_owner_enforced(storage: dict[str, Any]) -> None:
    for name, props in _buckets(storage).items():
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True}, name
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}, name
        assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}, name


def test_data_buckets_use_the_customer_key_with_bucket_key(storage: dict[str, Any]) -> None:
    key_ids = [k for k, v in storage["Resources"].items() if v["Type"] == "AWS::KMS::Key"]
    assert len(key_ids) == 1
    for props in _buckets(storage).values():
        rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        if props["BucketName"].startswith("llm-platform-s3-logs"):
            # S3 server access logs can only be delivered to SSE-S3 buckets.
            assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
            continue
        assert rule["BucketKeyEnabled"] is True
        assert rule["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": [key_ids[0], "Arn"]}}


LOG_BUCKET = "llm-platform-s3-logs-111122223333-us-west-2"


def test_data_buckets_log_to_the_log_bucket(storage: dict[str, Any]) -> None:
    for props in _buckets(storage).values():
        if props["BucketName"] == LOG_BUCKET:
            assert "LoggingConfiguration" not in props
        else:
            assert props["LoggingConfiguration"] == {"DestinationBucketName": LOG_BUCKET,
                                                     "LogFilePrefix": props["BucketName"] + "/"}


def test_the_log_bucket_admits_log_delivery_from_the_platform_buckets_only(storage: dict[str, Any]) -> None:
    policy = next(v["Properties"]["PolicyDocument"] for v in storage["Resources"].values()
                  if v["Type"] == "AWS::S3::BucketPolicy"
                  and "AccessLogBucket" in json.dumps(v["Properties"]["Bucket"]))
    deliveries = [s for s in policy["Statement"] if s.get("Principal") == {"Service": "logging.s3.amazonaws.com"}]
    sources = sorted(s["Condition"]["ArnLike"]["aws:SourceArn"] for s in deliveries)
    assert sources == [f"arn:aws:s3:::{name}-111122223333-us-west-2" for name in (
        "hyperpod-tls-llm-platform", "llm-platform-capture", "llm-platform-hp-lifecycle")]
    for statement in deliveries:
        name = statement["Condition"]["ArnLike"]["aws:SourceArn"].removeprefix("arn:aws:s3:::")
        assert statement["Resource"]["Fn::Join"][1][-1] == f"/{name}/*"  # only under its own prefix
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "111122223333"}


def test_capture_lifecycle_expires_after_retention(template: Template) -> None:
    template.has_resource_properties("AWS::S3::Bucket", {
        "BucketName": "llm-platform-capture-111122223333-us-west-2",
        "LifecycleConfiguration": {"Rules": Match.array_with([{
            "Id": "expire-captures", "Status": "Enabled", "ExpirationInDays": 30,
            "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}])},
    })


def test_every_bucket_policy_denies_plain_http(storage: dict[str, Any]) -> None:
    policies = [v["Properties"] for v in storage["Resources"].values() if v["Type"] == "AWS::S3::BucketPolicy"]
    assert len(policies) == 3
    for policy in policies:
        denies = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)
        assert any(s["Condition"] == {"NumericLessThan": {"s3:TlsVersion": 1.2}} for s in denies)


def test_key_rotation_alias_and_scoped_policy(template: Template, storage: dict[str, Any]) -> None:
    template.has_resource_properties("AWS::KMS::Alias", {"AliasName": "alias/llm-platform/capture"})
    key = next(v for v in storage["Resources"].values() if v["Type"] == "AWS::KMS::Key")
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain"
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    # Nobody gets kms:* and nobody outside this account is trusted.
    for statement in statements:
        assert statement["Action"] != "kms:*" and "kms:*" not in statement["Action"]
        principals = statement["Principal"]["AWS"]
        for principal in principals if isinstance(principals, list) else [principals]:
            assert ":111122223333:" in principal
    use = next(s for s in statements if s["Sid"] == "UseThroughS3AndSqsInThisAccount")
    assert use["Condition"]["StringEquals"] == {"kms:CallerAccount": "111122223333"}
    assert use["Condition"]["StringLike"]["kms:ViaService"] == ["s3.us-west-2.amazonaws.com",
                                                                "sqs.us-west-2.amazonaws.com"]
    admin = next(s for s in statements if s["Sid"] == "KeyAdministration")
    assert not {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*"} & set(admin["Action"])


def test_capture_readers_are_granted_in_bucket_and_key_policy(storage: dict[str, Any]) -> None:
    reader = "arn:aws:iam::111122223333:role/ml-analysts"
    policy = next(v["Properties"]["PolicyDocument"] for v in storage["Resources"].values()
                  if v["Type"] == "AWS::S3::BucketPolicy"
                  and any(s.get("Sid") == "CaptureReadersGetObjects" for s in v["Properties"]["PolicyDocument"]
                          ["Statement"]))
    reads = next(s for s in policy["Statement"] if s.get("Sid") == "CaptureReadersGetObjects")
    assert reads["Principal"] == {"AWS": reader}
    assert reads["Action"] == ["s3:GetObject", "s3:GetObjectVersion"]
    key = next(v for v in storage["Resources"].values() if v["Type"] == "AWS::KMS::Key")
    decrypt = next(s for s in key["Properties"]["KeyPolicy"]["Statement"]
                   if s["Sid"] == "CaptureReadersDecryptThroughS3")
    assert decrypt["Action"] == "kms:Decrypt"
    bucket = "arn:aws:s3:::llm-platform-capture-111122223333-us-west-2"
    assert decrypt["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-west-2.amazonaws.com"},
                                    "StringLike": {"kms:EncryptionContext:aws:s3:arn": [bucket, f"{bucket}/*"]}}


def test_data_is_retained_when_the_stack_is_deleted(storage: dict[str, Any]) -> None:
    for resource in storage["Resources"].values():
        if resource["Type"] in ("AWS::S3::Bucket", "AWS::KMS::Key"):
            assert resource["DeletionPolicy"] == "Retain"

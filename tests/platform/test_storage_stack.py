"""Capture storage: snapshot of the template plus the security properties reviewers ask about."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template
from syrupy.extensions.json import JSONSnapshotExtension

from tests.support.policy_eval import Request, decision
from tests.support.synth import Assembly, snapshot_view


@pytest.fixture(scope="module")
def storage(assembly: Assembly) -> dict[str, Any]:
    return assembly.template("-storage")


@pytest.fixture(scope="module")
def template(storage: dict[str, Any]) -> Template:
    return Template.from_json(storage)


def _buckets(storage: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in storage["Resources"].items() if v["Type"] == "AWS::S3::Bucket"}


def test_snapshot(storage: dict[str, Any], acknowledgment_refs: dict[tuple[str, str], str], snapshot: Any) -> None:
    """Each acknowledgment's reason is a reference here, its text in test_acknowledgments.py's snapshot."""
    assert snapshot_view(storage, acknowledgment_refs) == snapshot(extension_class=JSONSnapshotExtension)


def test_three_buckets_with_deterministic_names(storage: dict[str, Any]) -> None:
    names = sorted(p["BucketName"] for p in _buckets(storage).values())
    assert names == [
        "hyperpod-tls-llm-platform-111122223333-us-west-2",
        "llm-platform-audit-trail-111122223333-us-west-2",  # the audit trail, Object Lock (issue 27)
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


def test_data_buckets_use_the_customer_key(storage: dict[str, Any]) -> None:
    # (The alarm topic has a key of its own: CloudWatch may use it, which the capture key's policy never allows.)
    topic_keys = [v["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0] for v in storage["Resources"].values()
                  if v["Type"] == "AWS::SNS::Topic"]
    key_ids = [k for k, v in storage["Resources"].items() if v["Type"] == "AWS::KMS::Key" and k not in topic_keys]
    assert len(key_ids) == 1
    for props in _buckets(storage).values():
        rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        if props["BucketName"].startswith(("llm-platform-s3-logs", "llm-platform-capture")):
            # S3 server access logs, and ALB access logs (Tier 2, on in the default config), can be delivered
            # only to SSE-S3 buckets; the capture bucket's policy makes every other writer name the key.
            assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
            continue
        assert rule["BucketKeyEnabled"] is True
        assert rule["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": [key_ids[0], "Arn"]}}


def _policy(storage: dict[str, Any], bucket_logical_id_part: str) -> list[dict[str, Any]]:
    return next(v["Properties"]["PolicyDocument"]["Statement"] for v in storage["Resources"].values()
                if v["Type"] == "AWS::S3::BucketPolicy"
                and bucket_logical_id_part in json.dumps(v["Properties"]["Bucket"]))


def _sid(statements: list[dict[str, Any]], sid: str) -> dict[str, Any]:
    return next(s for s in statements if s.get("Sid") == sid)


def test_capture_writes_must_name_the_capture_key(storage: dict[str, Any]) -> None:
    statements = _policy(storage, "CaptureBucket")
    other_key = _sid(statements, "CapturesNoOtherKey")
    assert other_key["Effect"] == "Deny" and other_key["Action"] == "s3:PutObject"
    allowed = other_key["Condition"]["StringNotEquals"]["s3:x-amz-server-side-encryption-aws-kms-key-id"]
    assert other_key["Condition"]["Null"] == {"s3:x-amz-server-side-encryption-aws-kms-key-id": "false"}
    assert allowed[0] == {"Fn::GetAtt": [next(k for k, v in storage["Resources"].items()
                                             if v["Type"] == "AWS::KMS::Key"), "Arn"]}
    assert allowed[1] == "arn:aws:kms:us-west-2:111122223333:alias/llm-platform/capture"
    name_it = _sid(statements, "CapturesWritesNameTheKey")
    assert name_it["Condition"]["Null"] == {"s3:x-amz-server-side-encryption-aws-kms-key-id": "true"}
    # ... except ELB's log delivery (service principal, and the Region's legacy ELB account).
    assert name_it["Condition"]["BoolIfExists"] == {"aws:PrincipalIsAWSService": "false"}
    assert "797873946194" in json.dumps(name_it["Condition"]["ArnNotLike"])
    elb = _sid(statements, "CapturesElbDeliversAccessLogs")
    assert elb["Principal"] == {"Service": "logdelivery.elasticloadbalancing.amazonaws.com"}
    assert elb["Resource"]["Fn::Join"][1][-1] == "/data-capture/*/alb/AWSLogs/111122223333/*"


def test_only_listed_principals_touch_capture_objects(storage: dict[str, Any]) -> None:
    statements = _policy(storage, "CaptureBucket")
    unlisted = _sid(statements, "CapturesOnlyListedPrincipals")
    assert unlisted["Effect"] == "Deny" and unlisted["Principal"] == "*"
    assert set(unlisted["Action"]) == {"s3:GetObject*", "s3:PutObject*", "s3:RestoreObject", "s3:DeleteObject*"}
    listed = json.dumps(unlisted["Condition"]["ArnNotLike"]["aws:PrincipalArn"])
    for principal in ("role/ml-analysts", "role/SageMakerHyperPodInference-llm-platform",
                      "role/llm-platform-qwen3-8b-portable", "CapturePipelineRole"):
        assert principal in listed
    # Nobody deletes captures (lifecycle rules expire them), nobody but its writers writes.
    assert "ml-analysts" in json.dumps(_sid(statements, "CapturesNoDelete"))


def test_key_policy_names_its_users_and_never_grants_freely(template: Template, storage: dict[str, Any]) -> None:
    template.has_resource_properties("AWS::KMS::Alias", {"AliasName": "alias/llm-platform/capture"})
    key = next(v for v in storage["Resources"].values() if v["Type"] == "AWS::KMS::Key")
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain"
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert not [a for a in actions if a in ("kms:*", "kms:Create*", "kms:CreateGrant")], statement["Sid"]
        principals = statement["Principal"]["AWS"]
        for principal in principals if isinstance(principals, list) else [principals]:
            assert ":111122223333:" in json.dumps(principal)
        assert "sqs" not in json.dumps(statement)
    admin = _sid(statements, "KeyAdministrationWithoutUse")
    assert not {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom"} & set(admin["Action"])
    uses = [s for s in statements if s["Sid"] != "KeyAdministrationWithoutUse"]
    # (The Iceberg tables' writers and Lake Formation's role for curated-iceberg/ only; the table reader for its
    # workgroup's query results only: docs/security.md#capture-tables.)
    one_prefix = {"CapturesReadCuratedThroughS3ForNamedRoles", "CapturesWriteCuratedIcebergThroughS3",
                  "CapturesWriteAthenaResultsLlmPlatformCaptureUsageThroughS3ForNamedRoles",
                  # GpuCost's sampler (the cluster stack's role, by its fixed name): its own table only
                  "CapturesWriteCuratedIcebergGpuNodeHoursThroughS3"}
    assert {s["Sid"] for s in uses} == one_prefix | {"CapturesWriteThroughS3", "TlsCertificatesReadThroughS3",
                                                     "TlsCertificatesWriteThroughS3",
                                                     "AuditTrailWriteThroughS3"}  # the retention run's links
    for use in uses:  # named principals, through S3, for one bucket's objects
        condition = use["Condition"]
        assert condition["StringEquals"] == {"kms:ViaService": "s3.us-west-2.amazonaws.com"}
        assert len(condition["StringLike"]["kms:EncryptionContext:aws:s3:arn"]) == (
            1 if use["Sid"] in one_prefix else 2)
        # The library's grantees: the account, narrowed to them, enabling the IAM statement the grant wrote.
        assert condition.get("ArnLike", {}).get("aws:PrincipalArn") or use["Sid"].endswith("ForNamedRoles")
    # Readers' IAM policies are not ours: the key policy names them and grants on its own, for curated/ only
    # (the capture bucket has no S3 Bucket Key, so the encryption context is the object's ARN).
    readers = _sid(statements, "CapturesReadCuratedThroughS3ForNamedRoles")
    assert readers["Action"] == ["kms:Decrypt"]
    assert readers["Principal"] == {"AWS": "arn:aws:iam::111122223333:role/ml-analysts"}
    assert readers["Condition"]["StringLike"] == {"kms:EncryptionContext:aws:s3:arn": [
        "arn:aws:s3:::llm-platform-capture-111122223333-us-west-2/curated/*"]}


def test_capture_readers_read_curated_data_only(storage: dict[str, Any]) -> None:
    reader = "arn:aws:iam::111122223333:role/ml-analysts"
    statements = _policy(storage, "CaptureBucket")
    allows = [s for s in statements if s["Effect"] == "Allow" and s["Principal"] == {"AWS": reader}]
    assert {json.dumps(s["Resource"]) for s in allows if "s3:GetObject" in s["Action"]} == {
        json.dumps({"Fn::Join": ["", [{"Fn::GetAtt": [_capture_bucket_id(storage), "Arn"]}, "/curated/*"]]})}
    (listing,) = [s for s in allows if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["curated", "curated/*"]}}
    # Whatever an IAM policy of theirs says: reads outside curated/ are denied, writes everywhere.
    (limit,) = [s for s in statements if s.get("Sid", "").startswith("CapturesReadOnlyUnderOwnPrefixes")
                and s["Condition"]["ArnLike"]["aws:PrincipalArn"] == [reader]]
    assert limit["NotResource"]["Fn::Join"][1][-1] == "/curated/*"
    assert reader in _sid(statements, "CapturesNoWrite")["Condition"]["ArnLike"]["aws:PrincipalArn"]


def _capture_bucket_id(storage: dict[str, Any]) -> str:
    return next(k for k, v in storage["Resources"].items() if v["Type"] == "AWS::S3::Bucket"
                and v["Properties"]["BucketName"].startswith("llm-platform-capture"))


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
        "hyperpod-tls-llm-platform", "llm-platform-audit-trail", "llm-platform-capture", "llm-platform-hp-lifecycle")]
    for statement in deliveries:
        name = statement["Condition"]["ArnLike"]["aws:SourceArn"].removeprefix("arn:aws:s3:::")
        assert statement["Resource"]["Fn::Join"][1][-1] == f"/{name}/*"  # only under its own prefix
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "111122223333"}


def test_capture_lifecycle_expires_after_retention(template: Template) -> None:
    """Per prefix, never under curated-iceberg/ (the tables' manifests outlive their rows' age); every overwritten
    or deleted version, the tables' included, is purged after the noncurrent retention."""
    rules = [{"Id": f"expire-{name}", "Prefix": prefix, "Status": "Enabled", "ExpirationInDays": 30,
              "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}
             for name, prefix in (("captures", "data-capture/"), ("curated", "curated/"), ("quarantine", "quarantine/"),
                                  ("query-results", "athena-results/"))]
    rules.append({"Id": "purge-old-versions", "Status": "Enabled", "ExpiredObjectDeleteMarker": True,
                  "NoncurrentVersionExpiration": {"NoncurrentDays": 7}})
    template.has_resource_properties("AWS::S3::Bucket", {
        "BucketName": "llm-platform-capture-111122223333-us-west-2",
        "LifecycleConfiguration": {"Rules": Match.array_with(rules)},
    })


def test_every_bucket_policy_denies_plain_http(storage: dict[str, Any]) -> None:
    policies = [v["Properties"] for v in storage["Resources"].values() if v["Type"] == "AWS::S3::BucketPolicy"]
    assert len(policies) == 4  # captures, TLS certificates, the audit trail, access logs
    for policy in policies:
        denies = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)
        assert any(s["Condition"] == {"NumericLessThan": {"s3:TlsVersion": 1.2}} for s in denies)


def test_data_is_retained_when_the_stack_is_deleted(storage: dict[str, Any]) -> None:
    for resource in storage["Resources"].values():
        if resource["Type"] in ("AWS::S3::Bucket", "AWS::KMS::Key"):
            assert resource["DeletionPolicy"] == "Retain"


# -- the access-log bucket admits S3 log delivery for the platform's buckets only, each under its prefix ------
PLATFORM_BUCKETS = [f"{name}-111122223333-us-west-2" for name in (
    "llm-platform-capture", "hyperpod-tls-llm-platform", "llm-platform-hp-lifecycle")]


def _log_bucket_statements(storage: dict[str, Any]) -> list[dict[str, Any]]:
    """The log bucket's policy with its own ARN resolved (the evaluator matches plain strings)."""
    (log_bucket_id,) = [k for k, v in storage["Resources"].items() if v["Type"] == "AWS::S3::Bucket"
                        and v["Properties"]["BucketName"] == LOG_BUCKET]
    text = json.dumps(_policy(storage, "AccessLogBucket"))
    text = text.replace(json.dumps({"Fn::GetAtt": [log_bucket_id, "Arn"]}), json.dumps(f"arn:aws:s3:::{LOG_BUCKET}"))
    statements = json.loads(text)
    for statement in statements:
        for field in ("Resource", "NotResource"):
            values = statement.get(field)
            if isinstance(values, list):
                statement[field] = [_join(v) for v in values]
            elif values is not None:
                statement[field] = _join(values)
    return statements


def _join(value: Any) -> str:
    if isinstance(value, dict):
        separator, parts = value["Fn::Join"]
        return separator.join(parts)
    return value


def _delivery(source_bucket: str, key: str, account: str = "111122223333") -> Request:
    return Request(action="s3:PutObject", resource=f"arn:aws:s3:::{LOG_BUCKET}/{key}",
                   service="logging.s3.amazonaws.com",
                   context={"aws:SourceArn": f"arn:aws:s3:::{source_bucket}", "aws:SourceAccount": account,
                            "aws:SecureTransport": "true", "s3:TlsVersion": "1.3"})


@pytest.mark.parametrize("bucket", PLATFORM_BUCKETS)
def test_log_delivery_from_a_platform_bucket_is_admitted_under_its_own_prefix_only(
        storage: dict[str, Any], bucket: str) -> None:
    statements = _log_bucket_statements(storage)
    assert decision(statements, _delivery(bucket, f"{bucket}/2026-01-01-00-00-00-ABCDEF")) == "allow"
    for other in PLATFORM_BUCKETS:
        if other != bucket:  # a bucket cannot write (or overwrite) another bucket's logs
            assert decision(statements, _delivery(bucket, f"{other}/2026-01-01-00-00-00-ABCDEF")) == "neutral"


@pytest.mark.parametrize(("source", "key", "account"), [
    ("somebody-elses-bucket", "somebody-elses-bucket/log", "111122223333"),  # not a platform bucket
    ("somebody-elses-bucket", f"{PLATFORM_BUCKETS[0]}/log", "111122223333"),  # ... posing under a platform prefix
    (PLATFORM_BUCKETS[0], f"{PLATFORM_BUCKETS[0]}/log", "444455556666"),  # a same-named bucket of another account
])
def test_log_delivery_for_anything_else_is_not_admitted(storage: dict[str, Any], source: str, key: str,
                                                        account: str) -> None:
    assert decision(_log_bucket_statements(storage), _delivery(source, key, account)) == "neutral"


def test_nothing_but_s3_log_delivery_is_admitted_to_the_log_bucket(storage: dict[str, Any]) -> None:
    allows = [s for s in _log_bucket_statements(storage) if s["Effect"] == "Allow"]
    assert {json.dumps(s["Principal"]) for s in allows} == {json.dumps({"Service": "logging.s3.amazonaws.com"})}
    assert {s["Action"] for s in allows} == {"s3:PutObject"}
    assert all(set(s["Condition"]) == {"ArnLike", "StringEquals"} for s in allows)

"""The erasure register and the audit records name the caller (personal data): they are written under the capture
key, whatever the capture bucket's default encryption. With ALB access logs accepted (``load_balancer_logs``) that
default is SSE-S3 and the bucket policy refuses every write that does not name the capture key; the objects the
real command and the real handler's retention run put are recorded (boto3's own request parameters) and judged
against the synthesized bucket policy with the policy evaluator, and so are the same puts without the key, which it
refuses. The audit trail's links go to the audit bucket, whose default is the capture key and whose policy refuses
any other."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from hyperpod_inference_iac import CapturePipeline, CaptureStorage, CaptureTables
from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.test_erasure import RAW, both, capture_lines, cli  # noqa: F401 (fixtures)
from tests.capture_processor.test_iceberg_tables import catalog, database  # noqa: F401 (fixtures)
from tests.support.policy_eval import Request, decision
from tests.unit.test_data_perimeter import ACCOUNT, REGION, resolve

BUCKET, AUDIT = "captures-erasure-encryption", "capture-audit-erasure-encryption"
ERASER = f"arn:aws:iam::{ACCOUNT}:role/capture-eraser"
SSE, KEY_ID = "s3:x-amz-server-side-encryption", "s3:x-amz-server-side-encryption-aws-kms-key-id"


@pytest.fixture
def policies(erasure_storage_policies: dict[str, Any]) -> dict[str, Any]:
    """The synthesized policies, built once per worker (tests/capture_processor/conftest.py: this module's and
    tests/capture_processor/test_tables_encryption.py's tests read the same; a module-scoped fixture imported into
    another module is built once per module)."""
    return erasure_storage_policies


def synthesized_policies() -> dict[str, Any]:
    """The capture and audit bucket policies of a small stack, the capture key's ARN, the audit bucket and the
    processor's role, with an eraser role granted ``grant_erase`` of the storage and the tables."""
    app = App()
    stack = Stack(app, "Storage", env=Environment(account=ACCOUNT, region=REGION))
    storage = CaptureStorage(stack, "Storage", capture_bucket_name=BUCKET, audit_bucket_name=AUDIT,
                             load_balancer_logs=True)
    pipeline = CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                               capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
                               quarantine_prefix=storage.quarantine_prefix)
    tables = CaptureTables(stack, "Tables", pipeline=pipeline, audit_trail=storage, row_retention_days=30,
                           tables_layer_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:tables:1")
    role = iam.Role(stack, "Eraser", role_name="capture-eraser", assumed_by=iam.AccountRootPrincipal())
    storage.grant_erase(role)
    tables.grant_erase(role)
    resources = Template.from_stack(stack).to_json()["Resources"]

    def bucket_policy(name: str) -> list[dict[str, Any]]:
        policy = next(r for r in resources.values() if r["Type"] == "AWS::S3::BucketPolicy"
                      and name in str(r["Properties"]["Bucket"]))
        return resolve(policy["Properties"]["PolicyDocument"]["Statement"], resources)  # type: ignore[no-any-return]

    key_id = next(k for k, r in resources.items() if r["Type"] == "AWS::KMS::Key")
    processor = next(k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role" and k.startswith("PipelineRole"))
    audit = next(r for r in resources.values() if r["Type"] == "AWS::S3::Bucket"
                 and r["Properties"].get("BucketName") == AUDIT)
    return {"capture": bucket_policy("CaptureBucket"), "audit": bucket_policy("AuditBucket"),
            "key_arn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{key_id}", "audit_bucket": audit,
            "processor": f"arn:aws:iam::{ACCOUNT}:role/{processor}"}


def recording(puts: list[dict[str, Any]]) -> Callable[..., Any]:
    """boto3.client, with every PutObject's parameters recorded as boto3 sends them."""
    def client(service: str, *args: Any, **kwargs: Any) -> Any:
        made = boto3.client(service, *args, **kwargs)
        if service == "s3":
            made.meta.events.register("provide-client-params.s3.PutObject",
                                      lambda params, **_: puts.append(dict(params)))
        return made
    return client


def judged(policies: dict[str, Any], principal: str, put: dict[str, Any], moto_key: str | None) -> str:
    """The capture bucket policy's decision on one recorded put (moto's key stands for the synthesized one)."""
    context = {}
    if "ServerSideEncryption" in put:
        context[SSE] = put["ServerSideEncryption"]
    if "SSEKMSKeyId" in put:
        context[KEY_ID] = policies["key_arn"] if put["SSEKMSKeyId"] == moto_key else put["SSEKMSKeyId"]
    return decision(policies["capture"], Request("s3:PutObject", f"arn:aws:s3:::{BUCKET}/{put['Key']}", principal,
                                                 context=context))


def unencrypted(put: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in put.items() if k not in ("ServerSideEncryption", "SSEKMSKeyId")}


@pytest.fixture
def moto_key(both: Pipeline) -> str:  # noqa: F811
    return str(boto3.client("kms", endpoint_url=both.s3.meta.endpoint_url, region_name="us-east-1")
               .create_key(Description="capture")["KeyMetadata"]["Arn"])


def erase(both: Pipeline, catalog: Any, database: str, *extra: str) -> list[dict[str, Any]]:  # noqa: F811
    from capture_core import capture_tables

    pipeline = both
    pipeline.run(pipeline.put(f"{RAW}a.jsonl", capture_lines("a", ["team-a", "team-b"])))
    puts: list[dict[str, Any]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("builtins.print", lambda *a, **k: None)
        status = capture_tables.main(["delete", "--database", database, "--bucket", pipeline.bucket, "--caller-id",
                                      "team-a", "--no-trail", *extra], catalog_factory=lambda args: catalog,
                                     clients=recording(puts))
    assert status == 0
    return [put for put in puts if put["Key"].startswith("audit/")]


def test_the_register_and_the_erasure_record_name_the_capture_key_and_the_policy_refuses_them_otherwise(
    policies: dict[str, Any], both: Pipeline, catalog: Any, database: str, moto_key: str  # noqa: F811
) -> None:
    audit = erase(both, catalog, database, "--kms-key-id", moto_key)
    assert sorted(put["Key"].split("/")[1] for put in audit) == ["erasure-register", "erasures"], audit
    for put in audit:
        assert (put["ServerSideEncryption"], put["SSEKMSKeyId"]) == ("aws:kms", moto_key), put["Key"]
        assert judged(policies, ERASER, put, moto_key) != "deny", put["Key"]
        # ... and the same write under the bucket's default (SSE-S3), or under S3's own key: refused.
        assert judged(policies, ERASER, unencrypted(put), moto_key) == "deny", put["Key"]
        assert judged(policies, ERASER, {**unencrypted(put), "ServerSideEncryption": "AES256"}, moto_key) == "deny"
        head = both.s3.head_object(Bucket=both.bucket, Key=put["Key"])
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", moto_key)


def test_without_the_key_the_first_write_is_the_register_and_the_policy_refuses_it(
    policies: dict[str, Any], both: Pipeline, catalog: Any, database: str  # noqa: F811
) -> None:
    """Where the bucket's default is the capture key (no ALB logs) the command may omit the key; where it is SSE-S3
    the register, written before anything is erased, is what the policy refuses: nothing is erased half-way."""
    audit = erase(both, catalog, database)
    assert audit[0]["Key"].startswith("audit/erasure-register/")
    assert judged(policies, ERASER, audit[0], None) == "deny"


def test_the_scheduled_retention_records_name_the_capture_key(
    policies: dict[str, Any], both: Pipeline, catalog: Any, database: str, moto_key: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import handler as handler_module

    pipeline = both
    pipeline.run(pipeline.put(f"{RAW}r.jsonl", capture_lines("r", ["team-a"])))
    puts: list[dict[str, Any]] = []
    monkeypatch.setenv("OUTPUT_KMS_KEY_ID", moto_key)
    monkeypatch.setattr(handler_module, "_s3_client", lambda *_: recording(puts)("s3"))
    age = (datetime.now(UTC) - datetime(2026, 11, 30, tzinfo=UTC)).days
    assert handler_module.handler({"captureTablesRetention": {"olderThanDays": age + 1, "bucket": pipeline.bucket}},
                                  None) == {"batchItemFailures": []}
    records = [put for put in puts if put["Key"].startswith("audit/table-deletions/")]
    assert len(records) == 2, puts  # one per table
    for put in records:
        assert put["SSEKMSKeyId"] == moto_key
        assert judged(policies, policies["processor"], put, moto_key) != "deny"
        assert judged(policies, policies["processor"], unencrypted(put), moto_key) == "deny"


def test_the_trail_is_under_the_capture_key_and_its_bucket_refuses_any_other(policies: dict[str, Any]) -> None:
    [rule] = policies["audit_bucket"]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    link = f"arn:aws:s3:::{AUDIT}/trail/000000000001-erasure.json"
    for principal in (ERASER, policies["processor"]):
        assert decision(policies["audit"], Request("s3:PutObject", link, principal)) != "deny"  # the default: the key
        for context in ({SSE: "AES256"}, {SSE: "aws:kms"}, {SSE: "aws:kms", KEY_ID: "arn:aws:kms:x:1:key/other"}):
            assert decision(policies["audit"], Request("s3:PutObject", link, principal, context=context)) == "deny"

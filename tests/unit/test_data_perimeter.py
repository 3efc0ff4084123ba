"""Who can read captured prompts: CaptureStorage's bucket and key policies, evaluated with their conditions
for each kind of principal (tests/support/policy_eval.py), and the ways a grant could fail to be listed."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import CapturePipeline, CaptureStorage, ConfigError
from tests.support.policy_eval import Request, decision

ACCOUNT, REGION = "111122223333", "us-west-2"
BUCKET = "captures-111122223333-us-west-2"
ANALYST = f"arn:aws:iam::{ACCOUNT}:role/ml-analysts"
REVIEWER = f"arn:aws:iam::{ACCOUNT}:role/privacy-review"
RESPONDER = f"arn:aws:iam::{ACCOUNT}:role/incident-response"
WRITER = f"arn:aws:iam::{ACCOUNT}:role/service-capture-writer"  # a role of another stack, by its fixed name
ADMIN = f"arn:aws:iam::{ACCOUNT}:role/Administrator"  # IAM AdministratorAccess, not listed anywhere
ELB_ACCOUNT = "arn:aws:iam::797873946194:root"  # us-west-2's Elastic Load Balancing account


def resolve(value: Any, resources: dict[str, Any]) -> Any:
    """Enough of CloudFormation's intrinsics for these templates (names from the logical ids)."""
    if isinstance(value, list):
        return [resolve(v, resources) for v in value]
    if not isinstance(value, dict):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(resolve(p, resources)) for p in parts)
    if "Ref" in value:
        return {"AWS::Partition": "aws", "AWS::AccountId": ACCOUNT, "AWS::Region": REGION}.get(
            value["Ref"], value["Ref"])
    if "Fn::GetAtt" in value:
        logical_id, _ = value["Fn::GetAtt"]
        resource = resources[logical_id]
        kind = resource["Type"]
        if kind == "AWS::S3::Bucket":
            return f"arn:aws:s3:::{resource['Properties']['BucketName']}"
        if kind == "AWS::IAM::Role":
            return f"arn:aws:iam::{ACCOUNT}:role/{resource['Properties'].get('RoleName', logical_id)}"
        if kind == "AWS::KMS::Key":
            return f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{logical_id}"
        raise AssertionError(f"GetAtt of {kind}")
    return {k: resolve(v, resources) for k, v in value.items()}


def build(*, load_balancer_logs: bool = True) -> tuple[App, Stack, CaptureStorage]:
    app = App()
    env = Environment(account=ACCOUNT, region=REGION)
    stack = Stack(app, "Storage", env=env)
    storage = CaptureStorage(stack, "Storage", capture_bucket_name=BUCKET, key_alias="alias/test/capture",
                             reader_role_arns=[ANALYST], raw_reader_role_arns=[REVIEWER],
                             break_glass_role_arns=[RESPONDER], load_balancer_logs=load_balancer_logs)
    CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                    capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
                    quarantine_prefix=storage.quarantine_prefix)
    other = Stack(app, "Service", env=env)
    writer = iam.Role(other, "Writer", role_name="service-capture-writer",
                      assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    storage.grant_write_captures(writer, prefix="data-capture/my-service/")
    return app, stack, storage


@pytest.fixture(scope="module")
def policies() -> dict[str, Any]:
    _, stack, _ = build()
    template = Template.from_stack(stack).to_json()
    resources = template["Resources"]
    bucket_policy = next(r for r in resources.values() if r["Type"] == "AWS::S3::BucketPolicy"
                         and "CaptureBucket" in str(r["Properties"]["Bucket"]))
    key = next(r for r in resources.values() if r["Type"] == "AWS::KMS::Key")
    processor = next(k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role" and k.startswith("PipelineRole"))
    key_id = next(k for k, r in resources.items() if r["Type"] == "AWS::KMS::Key")
    return {"bucket": resolve(bucket_policy["Properties"]["PolicyDocument"]["Statement"], resources),
            "key": resolve(key["Properties"]["KeyPolicy"]["Statement"], resources),
            "key_arn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{key_id}",
            "processor": f"arn:aws:iam::{ACCOUNT}:role/{processor}"}


def s3(policies: dict[str, Any], principal: str | None, action: str, key: str, *, with_key: bool = True,
       service: str | None = None, key_id: str | None = None) -> str:
    context = {"s3:x-amz-server-side-encryption": "aws:kms",
               "s3:x-amz-server-side-encryption-aws-kms-key-id": key_id or policies["key_arn"]} \
        if with_key and action == "s3:PutObject" else {}
    return decision(policies["bucket"], Request(action, f"arn:aws:s3:::{BUCKET}/{key}", principal, service, context))


RAW = "data-capture/a1b2/pod/2026/12/01/10/x.jsonl"
CURATED = "curated/tier=pod/dt=2026-12-01/hour=10/part-1.parquet"
QUARANTINED = "quarantine/tier=pod/part-1.jsonl"


def test_an_administrator_with_iam_rights_alone_reads_no_prompt(policies: dict[str, Any]) -> None:
    for key in (RAW, CURATED, QUARANTINED):
        assert s3(policies, ADMIN, "s3:GetObject", key) == "deny"
        assert s3(policies, ADMIN, "s3:GetObjectVersion", key) == "deny"
    assert s3(policies, ADMIN, "s3:PutObject", RAW) == "deny"
    assert s3(policies, ADMIN, "s3:DeleteObject", RAW) == "deny"


def test_readers_read_curated_data_only_whatever_their_iam_policy(policies: dict[str, Any]) -> None:
    assert s3(policies, ANALYST, "s3:GetObject", CURATED) == "allow"  # granted by the bucket policy itself
    for key in (RAW, QUARANTINED):
        assert s3(policies, ANALYST, "s3:GetObject", key) == "deny"
    assert s3(policies, ANALYST, "s3:PutObject", CURATED) == "deny"


def test_raw_readers_are_named_and_read_raw_and_quarantine(policies: dict[str, Any]) -> None:
    for key in (RAW, CURATED, QUARANTINED):
        assert s3(policies, REVIEWER, "s3:GetObject", key) == "allow"
    assert s3(policies, REVIEWER, "s3:PutObject", RAW) == "deny"
    assert s3(policies, REVIEWER, "s3:DeleteObject", RAW) == "deny"


def test_break_glass_roles_are_exempt_but_still_need_iam(policies: dict[str, Any]) -> None:
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"):
        assert s3(policies, RESPONDER, action, RAW) == "neutral"  # not denied; their own IAM policy decides


def test_the_processor_reads_captures_and_writes_its_outputs_only(policies: dict[str, Any]) -> None:
    processor = policies["processor"]
    assert s3(policies, processor, "s3:GetObject", RAW) == "neutral"
    assert s3(policies, processor, "s3:GetObject", CURATED) == "deny"
    for key in (CURATED, QUARANTINED):
        assert s3(policies, processor, "s3:PutObject", key) == "neutral"
        assert s3(policies, processor, "s3:PutObject", key, with_key=False) == "deny"  # must name the key
    assert s3(policies, processor, "s3:PutObject", RAW) == "deny"
    assert s3(policies, processor, "s3:DeleteObject", RAW) == "deny"


def test_a_writer_of_another_stack_writes_its_prefix_only(policies: dict[str, Any]) -> None:
    mine = "data-capture/my-service/x.jsonl"
    assert s3(policies, WRITER, "s3:PutObject", mine) == "neutral"
    assert s3(policies, WRITER, "s3:PutObject", RAW) == "deny"
    assert s3(policies, WRITER, "s3:GetObject", mine) == "deny"


def test_writes_must_name_the_capture_key(policies: dict[str, Any]) -> None:
    mine = "data-capture/my-service/x.jsonl"
    alias = f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/test/capture"
    assert s3(policies, WRITER, "s3:PutObject", mine, key_id=alias) == "neutral"
    assert s3(policies, WRITER, "s3:PutObject", mine, key_id=f"arn:aws:kms:{REGION}:{ACCOUNT}:key/other") == "deny"
    assert s3(policies, WRITER, "s3:PutObject", mine, with_key=False) == "deny"


def test_load_balancers_deliver_access_logs_under_alb_only(policies: dict[str, Any]) -> None:
    log = f"data-capture/a1b2/alb/AWSLogs/{ACCOUNT}/elasticloadbalancing/us-west-2/2026/12/01/x.log.gz"
    service = "logdelivery.elasticloadbalancing.amazonaws.com"
    assert s3(policies, None, "s3:PutObject", log, with_key=False, service=service) == "allow"
    assert s3(policies, None, "s3:PutObject", CURATED, with_key=False, service=service) == "neutral"  # no grant
    assert s3(policies, ELB_ACCOUNT, "s3:PutObject", log, with_key=False) == "allow"
    assert s3(policies, ELB_ACCOUNT, "s3:PutObject", CURATED, with_key=False) == "deny"
    assert s3(policies, ELB_ACCOUNT, "s3:GetObject", log) == "deny"


def kms(policies: dict[str, Any], principal: str, action: str, *, bucket: str = BUCKET, key: str | None = CURATED,
        via: str = "s3.us-west-2.amazonaws.com", **extra: str) -> str:
    """A KMS request S3 makes for an object of ``bucket`` (the capture bucket uses no S3 Bucket Key, so the
    encryption context is the object's ARN; ``key=None``: the bucket's ARN, as for a bucket key)."""
    arn = f"arn:aws:s3:::{bucket}" + (f"/{key}" if key is not None else "")
    context = {"kms:ViaService": via, "kms:EncryptionContext:aws:s3:arn": arn, **extra}
    return decision(policies["key"], Request(action, policies["key_arn"], principal, None, context))


def test_only_listed_principals_use_the_key_through_s3_for_their_bucket(policies: dict[str, Any]) -> None:
    # Readers are named by the key policy itself (their IAM policies are not ours): it grants on its own.
    assert kms(policies, ANALYST, "kms:Decrypt") == "allow"
    assert kms(policies, REVIEWER, "kms:Decrypt") == "allow"
    assert kms(policies, RESPONDER, "kms:Decrypt") == "allow"
    assert kms(policies, ANALYST, "kms:GenerateDataKey") == "neutral"
    assert kms(policies, ANALYST, "kms:Decrypt", via="lambda.us-west-2.amazonaws.com") == "neutral"
    assert kms(policies, ANALYST, "kms:Decrypt", bucket="some-other-bucket") == "neutral"
    # The library's grantees: the key policy enables the IAM statement the same grant wrote ("iam").
    assert kms(policies, WRITER, "kms:GenerateDataKey") == "iam"
    assert kms(policies, policies["processor"], "kms:Decrypt") == "iam"
    assert kms(policies, ADMIN, "kms:Decrypt") == "neutral"  # IAM alone cannot: the key policy names no admin


def test_readers_decrypt_only_what_they_may_read(policies: dict[str, Any]) -> None:
    # The bucket policy already limits their reads; the key policy says the same on its own, so a copy of a raw
    # object (another path to it) or a bucket policy removed by the root user still decrypts nothing for them.
    assert kms(policies, ANALYST, "kms:Decrypt", key=CURATED) == "allow"
    for key in (RAW, QUARANTINED, "athena-results/q.csv", "curatedx/y.parquet"):
        assert kms(policies, ANALYST, "kms:Decrypt", key=key) == "neutral", key
    for key in (RAW, QUARANTINED, CURATED):
        assert kms(policies, REVIEWER, "kms:Decrypt", key=key) == "allow", key
    assert kms(policies, REVIEWER, "kms:Decrypt", key="athena-results/q.csv") == "neutral"
    assert kms(policies, RESPONDER, "kms:Decrypt", key="athena-results/q.csv") == "allow"  # break-glass: all
    # An object under a bucket key has the bucket's ARN as its context: no reader's prefix covers it.
    assert kms(policies, ANALYST, "kms:Decrypt", key=None) == "neutral"
    assert kms(policies, REVIEWER, "kms:Decrypt", key=None) == "neutral"
    reader = next(s for s in policies["key"] if s["Sid"] == "CapturesReadCuratedThroughS3ForNamedRoles")
    assert reader["Principal"] == {"AWS": ANALYST}
    assert reader["Condition"]["StringLike"] == {
        "kms:EncryptionContext:aws:s3:arn": [f"arn:aws:s3:::{BUCKET}/curated/*"]}


def test_library_reader_grants_decrypt_their_prefix_only() -> None:
    _, stack, storage = build()
    role = iam.Role(stack, "Dashboards", role_name="dashboards", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    storage.grant_read_curated(role)
    resources = Template.from_stack(stack).to_json()["Resources"]
    policy = next(r for k, r in resources.items() if r["Type"] == "AWS::IAM::Policy" and k.startswith("Dashboards"))
    decrypt = next(s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "kms:Decrypt")
    assert resolve(decrypt["Condition"]["StringLike"], resources) == {
        "kms:EncryptionContext:aws:s3:arn": [f"arn:aws:s3:::{BUCKET}/curated/*"]}
    key = next(r for r in resources.values() if r["Type"] == "AWS::KMS::Key")
    statements = resolve(key["Properties"]["KeyPolicy"]["Statement"], resources)
    dashboards = f"arn:aws:iam::{ACCOUNT}:role/dashboards"
    via = {"kms:ViaService": "s3.us-west-2.amazonaws.com"}
    arn = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/x"

    def decrypt_of(key_name: str) -> str:
        context = {**via, "kms:EncryptionContext:aws:s3:arn": f"arn:aws:s3:::{BUCKET}/{key_name}"}
        return decision(statements, Request("kms:Decrypt", arn, dashboards, None, context))

    assert decrypt_of(CURATED) == "iam"
    assert decrypt_of(RAW) == "neutral"


def test_the_account_administers_the_key_but_creates_no_grant(policies: dict[str, Any]) -> None:
    assert kms(policies, ADMIN, "kms:PutKeyPolicy") == "iam"  # the account's IAM policies decide
    assert kms(policies, ADMIN, "kms:ScheduleKeyDeletion") == "iam"
    for principal in (ADMIN, ANALYST, WRITER, RESPONDER):
        assert kms(policies, principal, "kms:CreateGrant", **{"kms:GrantIsForAWSResource": "true"}) == "neutral"
    assert "sqs" not in str(policies["key"])


def test_grants_for_aws_resources_can_be_allowed_to_a_named_principal() -> None:
    _, stack, storage = build()
    assert storage.key_allowlist is not None
    storage.key_allowlist.allow_grants_for_aws_resources(WRITER)
    resources = Template.from_stack(stack).to_json()["Resources"]
    key = next(r for r in resources.values() if r["Type"] == "AWS::KMS::Key")
    statements = resolve(key["Properties"]["KeyPolicy"]["Statement"], resources)
    arn = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/x"
    grant = Request("kms:CreateGrant", arn, WRITER, None, {"kms:GrantIsForAWSResource": "true"})
    assert decision(statements, grant) == "iam"
    assert decision(statements, Request("kms:CreateGrant", arn, WRITER, None, {})) == "neutral"


def test_default_key_mode_lets_writers_omit_headers_but_not_choose_weaker_ones() -> None:
    _, stack, _ = build(load_balancer_logs=False)
    resources = Template.from_stack(stack).to_json()["Resources"]
    bucket = next(r for r in resources.values() if r["Type"] == "AWS::S3::Bucket"
                  and r["Properties"].get("BucketName") == BUCKET)
    rule = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    # No S3 Bucket Key: the encryption context is each object's ARN, which the readers' prefixes need.
    assert rule["BucketKeyEnabled"] is False
    policy = next(r for r in resources.values() if r["Type"] == "AWS::S3::BucketPolicy"
                  and "CaptureBucket" in str(r["Properties"]["Bucket"]))
    statements = resolve(policy["Properties"]["PolicyDocument"]["Statement"], resources)
    put = "arn:aws:s3:::" + BUCKET + "/data-capture/my-service/x"

    def writer(**headers: str) -> str:
        return decision(statements, Request("s3:PutObject", put, WRITER, None, headers))

    assert writer() == "neutral"  # the bucket's default: the capture key
    assert writer(**{"s3:x-amz-server-side-encryption": "AES256"}) == "deny"
    assert writer(**{"s3:x-amz-server-side-encryption": "aws:kms"}) == "deny"  # would be aws/s3
    assert "ElbDeliversAccessLogs" not in str(statements)


def test_a_grant_to_an_unnamed_role_of_another_stack_fails_synthesis() -> None:
    app, _, storage = build()
    other = Stack(app, "Unnamed", env=Environment(account=ACCOUNT, region=REGION))
    role = iam.Role(other, "Anonymous", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    storage.grant_read_curated(role)
    errors = Annotations.from_stack(other).find_error("*", Match.string_like_regexp("give the role a fixed role_name"))
    assert errors and re.search(r"Anonymous", errors[0].id)


def test_prefixes_and_role_lists_are_checked() -> None:
    with pytest.raises(ConfigError) as error:
        CaptureStorage(Stack(App(), "S"), "Storage", curated_prefix="data-capture/curated/",
                       quarantine_prefix="quarantine", raw_reader_role_arns=["analysts"])
    codes = {problem.code for problem in error.value.problems}
    assert codes == {"CaptureStorage.PrefixesOverlap", "CaptureStorage.BadPrefix", "CaptureStorage.BadReaderRoleArn"}

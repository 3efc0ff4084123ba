"""What moto enforces, and what it does not, shown on the rehearsal's own server (docs/rehearsal.md, with the
places in moto's source). Each test pins one claim the rehearsal's docstrings and doc rely on: if a moto upgrade
changes it, the test fails and says which claim to revisit. Probe roles here are the rehearsal's own, not the
templates'."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError

from tests.support.rehearsal import Credentials, Rehearsal
from tests.support.waiting import eventually

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

PROBE_BUCKET = "rehearsal-moto-probe"


@pytest.fixture(scope="module")
def probe_bucket(rehearsal: Rehearsal) -> str:
    rehearsal.create_bucket(PROBE_BUCKET)
    s3 = rehearsal.client("s3")
    for key in ("mine/a.txt", "other/a.txt"):
        s3.put_object(Bucket=PROBE_BUCKET, Key=key, Body=b"a")
    return PROBE_BUCKET


def probe_role(rehearsal: Rehearsal, name: str, *statements: dict[str, Any]) -> Any:
    """A role of this module with exactly these statements, and an S3 client under its credentials."""
    policies = {"probe": {"Version": "2012-10-17", "Statement": list(statements)}} if statements else {}
    arn = rehearsal.create_role(f"rehearsal-probe-{name}", policies)
    return arn, rehearsal.credentials(arn)


def code(call: Any) -> int:
    try:
        call()
    except ClientError as error:
        return error.response["ResponseMetadata"]["HTTPStatusCode"]
    return 200


def test_identity_policies_are_enforced_with_iam_action_names_and_object_arns(
    rehearsal: Rehearsal, probe_bucket: str
) -> None:
    _, credentials = probe_role(rehearsal, "get-mine", {
        "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{probe_bucket}/mine/*"})
    s3 = rehearsal.client("s3", credentials)
    assert code(lambda: s3.get_object(Bucket=probe_bucket, Key="mine/a.txt")) == 200
    assert code(lambda: s3.head_object(Bucket=probe_bucket, Key="mine/a.txt")) == 200  # HeadObject = s3:GetObject
    assert code(lambda: s3.get_object(Bucket=probe_bucket, Key="other/a.txt")) == 403
    assert code(lambda: s3.list_objects_v2(Bucket=probe_bucket)) == 403  # ListObjectsV2 = s3:ListBucket
    assert code(lambda: s3.put_object(Bucket=probe_bucket, Key="mine/b.txt", Body=b"b")) == 403


def test_conditions_of_identity_policies_are_not_evaluated(rehearsal: Rehearsal, probe_bucket: str) -> None:
    """An allow whose condition can never hold still allows; a deny whose condition can never hold still denies."""
    never = {"StringEquals": {"aws:username": "nobody-at-all"}}
    _, credentials = probe_role(rehearsal, "conditions", {
        "Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{probe_bucket}",
        "Condition": {"StringLike": {"s3:prefix": ["mine/*"]}, **never}}, {
        "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{probe_bucket}/*"}, {
        "Effect": "Deny", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{probe_bucket}/other/*",
        "Condition": never})
    s3 = rehearsal.client("s3", credentials)
    assert code(lambda: s3.list_objects_v2(Bucket=probe_bucket, Prefix="other/")) == 200
    assert code(lambda: s3.get_object(Bucket=probe_bucket, Key="other/a.txt")) == 403


def test_s3_encrypts_with_sse_kms_without_asking_kms(rehearsal: Rehearsal, probe_bucket: str) -> None:
    """No KMS permission and a key that does not exist: moto's S3 stores the object anyway."""
    _, credentials = probe_role(rehearsal, "put-no-kms", {
        "Effect": "Allow", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{probe_bucket}/*"})
    s3 = rehearsal.client("s3", credentials)
    missing = f"arn:aws:kms:{rehearsal.region}:{rehearsal.account}:key/00000000-0000-0000-0000-000000000000"
    assert code(lambda: s3.put_object(Bucket=probe_bucket, Key="mine/sse.txt", Body=b"x",
                                      ServerSideEncryption="aws:kms", SSEKMSKeyId=missing)) == 200


def test_kms_checks_identity_policies_against_resource_star_only(rehearsal: Rehearsal) -> None:
    """Why the rehearsal checks KMS with moto's evaluator on the key's ARN: moto's KMS authorizes every call
    against resource "*", so a grant scoped to the key (what the templates write) is refused by the server."""
    key_arn = next(iter(rehearsal.created.keys))
    scoped_arn, scoped = probe_role(rehearsal, "kms-scoped", {
        "Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": key_arn})
    _, star = probe_role(rehearsal, "kms-star", {"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": "*"})
    generate = {"KeyId": key_arn, "KeySpec": "AES_256"}
    assert code(lambda: rehearsal.client("kms", scoped).generate_data_key(**generate)) == 403
    assert code(lambda: rehearsal.client("kms", star).generate_data_key(**generate)) == 200
    assert rehearsal.identity_allows(scoped_arn, "kms:GenerateDataKey", key_arn)
    assert not rehearsal.identity_allows(scoped_arn, "kms:Decrypt", key_arn)


def test_a_bucket_policy_grants_nothing_and_its_conditions_are_ignored(rehearsal: Rehearsal) -> None:
    """A bucket policy naming the caller does not let it in; a deny for TLS below 1.2 (which never applies to an
    HTTPS request with TLS 1.2, nor to plain HTTP where the key is absent) refuses everything in moto. Hence the
    loader installs only a bucket policy's statements without a condition."""
    bucket = "rehearsal-moto-probe-policies"
    rehearsal.create_bucket(bucket)
    admin = rehearsal.client("s3")
    admin.put_object(Bucket=bucket, Key="a.txt", Body=b"a")
    arn, credentials = probe_role(rehearsal, "no-identity-policy")
    admin.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": arn}, "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{bucket}/*"}]}))
    assert code(lambda: rehearsal.client("s3", credentials).get_object(Bucket=bucket, Key="a.txt")) == 403
    admin.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*",
        "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
        "Condition": {"NumericLessThan": {"s3:TlsVersion": 1.2}}}]}))
    assert code(lambda: admin.get_object(Bucket=bucket, Key="a.txt")) == 403  # even the admin user


def test_trust_policies_are_checked_only_for_aws_principals_and_break_on_service_principals(
    rehearsal: Rehearsal
) -> None:
    """With enforcement on, sts:AssumeRole evaluates the trust policy against the caller's ARN: a role trusting
    another principal refuses the admin; a statement with a Service principal (every role of the templates has
    one, or a Federated one) makes moto fail with HTTP 500. Hence roles are assumed with enforcement paused, and
    the rehearsal proves nothing about trust."""
    sts = rehearsal.client("sts")
    own = rehearsal.create_role("rehearsal-probe-trusts-admin", {}, trusted=rehearsal.admin.arn)
    other = rehearsal.create_role("rehearsal-probe-trusts-other", {},
                                  trusted=f"arn:aws:iam::{rehearsal.account}:user/someone-else")
    assert code(lambda: sts.assume_role(RoleArn=own, RoleSessionName="probe")) == 200
    assert code(lambda: sts.assume_role(RoleArn=other, RoleSessionName="probe")) == 403
    service_trusted = next(arn for arn, spec in rehearsal.created.roles.items()
                           if "Service" in json.dumps(spec.trust))
    with pytest.raises(ResponseParserError, match="500 Internal Server Error"):  # an HTML error page, not XML
        sts.assume_role(RoleArn=service_trusted, RoleSessionName="probe")
    # The server writes the traceback after the response.
    eventually(lambda: "is not iterable" in rehearsal.server.log_path.read_text())
    assert "TypeError: argument of type 'NoneType' is not iterable" in rehearsal.server.log_path.read_text()


def test_the_rehearsal_assumes_template_roles_with_enforcement_paused_and_restores_it(
    rehearsal: Rehearsal, probe_bucket: str
) -> None:
    role_arn = next(iter(rehearsal.created.roles))
    assert rehearsal.credentials(role_arn, session="pause-probe").arn.endswith("/pause-probe")
    assert rehearsal.server.enforcing
    stranger = Credentials("AKIAREHEARSALSTRANGER", "not-a-secret", None, "nobody")
    assert code(lambda: rehearsal.client("s3", stranger).get_object(Bucket=probe_bucket, Key="mine/a.txt")) == 403


def test_a_deny_with_not_resource_is_read_as_an_allow_everywhere(rehearsal: Rehearsal, probe_bucket: str) -> None:
    """A statement without ``Resource`` is taken as applying (the shortcut moto uses for trust policies), whatever
    its effect: a role whose only statement denies GetObject outside mine/ may read other/. Hence the readers'
    emulation never hands moto a NotResource."""
    _, credentials = probe_role(rehearsal, "deny-not-resource", {
        "Effect": "Deny", "Action": "s3:GetObject", "NotResource": f"arn:aws:s3:::{probe_bucket}/mine/*"})
    s3 = rehearsal.client("s3", credentials)
    assert code(lambda: s3.get_object(Bucket=probe_bucket, Key="other/a.txt")) == 200


def test_secrets_manager_checks_identity_policies_against_resource_star_only(rehearsal: Rehearsal) -> None:
    """Why the API key rotation's calls are decided by `CallGate` in its own process: moto's Secrets Manager
    authorizes every call against resource "*", so a grant scoped to the secret (what the templates write) is
    refused by the server, and a grant on another secret is not told apart from it."""
    sm = rehearsal.client("secretsmanager")
    arn = sm.create_secret(Name="rehearsal-probe/secret", SecretString="a")["ARN"]
    _, scoped = probe_role(rehearsal, "sm-scoped", {
        "Effect": "Allow", "Action": "secretsmanager:DescribeSecret", "Resource": arn})
    _, star = probe_role(rehearsal, "sm-star", {
        "Effect": "Allow", "Action": "secretsmanager:DescribeSecret", "Resource": "*"})
    assert code(lambda: rehearsal.client("secretsmanager", scoped).describe_secret(SecretId=arn)) == 403
    assert code(lambda: rehearsal.client("secretsmanager", star).describe_secret(SecretId=arn)) == 200


def test_rotate_secret_with_a_function_moto_lacks_leaves_the_rotation_started(rehearsal: Rehearsal) -> None:
    """What the rotation rehearsal's set-up relies on (test_api_key_rotation.start_rotation): moto's RotateSecret
    adds an empty AWSPENDING version and enables rotation before it looks the function up in its own Lambda, and
    keeps both when that fails: Secrets Manager's state when it first invokes a rotation function."""
    sm = rehearsal.client("secretsmanager")
    arn = sm.create_secret(Name="rehearsal-probe/rotated", SecretString="a")["ARN"]
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        sm.rotate_secret(SecretId=arn, RotationLambdaARN=f"arn:aws:lambda:{rehearsal.region}:{rehearsal.account}"
                         ":function:not-in-moto", RotationRules={"AutomaticallyAfterDays": 30}, RotateImmediately=True)
    described = sm.describe_secret(SecretId=arn)
    assert described["RotationEnabled"]
    assert sorted(map(sorted, described["VersionIdsToStages"].values())) == [["AWSCURRENT"], ["AWSPENDING"]]
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        sm.get_secret_value(SecretId=arn, VersionStage="AWSPENDING")  # empty, as Secrets Manager makes it


def test_eks_requests_fail_moto_signature_check_with_enforcement_on(rehearsal: Rehearsal) -> None:
    """Why the sampler's set-up creates its node groups with enforcement paused (test_node_hours_sampler.py): moto's
    own signature check refuses its EKS requests, the admin user's too (moto 5.2.1)."""
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        rehearsal.client("eks").list_clusters()
    with rehearsal.server.enforcement_paused():
        assert "clusters" in rehearsal.client("eks").list_clusters()

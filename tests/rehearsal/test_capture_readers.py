"""Rehearsal of the capture readers (`capture.readerRoleArns` in the config). They are not roles of the templates:
the capture bucket's policy and the key's policy grant them. Each is created in moto as the config names it, with
no identity policy at all, as it exists in the account before the platform does.

moto gives an authenticated caller nothing through a resource policy (docs/rehearsal.md: moto/iam/access_control.py
collects identity policies only; a bucket policy is applied to object requests without principal and without
conditions, moto/s3/responses.py `_key_response`, and only a ``Deny`` of it changes an authenticated request), so
what the readers may do is rehearsed by emulation: the statements of the templates' bucket and key policies that
name the reader, attached to it as an identity policy (in one account either kind of allow suffices). Readers
read `curated/` only, never raw captures or the quarantine (the bucket policy's allowlist denies them the rest:
the grants emulated here are its statements)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

from tests.rehearsal.conftest import Platform, capture_sidecars
from tests.support.rehearsal import Rehearsal, function_runtimes
from tests.support.synth import REPO, Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

EMULATED = "emulated-resource-policy-grants"


@pytest.fixture(scope="module")
def readers(rehearsal: Rehearsal, platform: Platform) -> list[str]:
    assert platform.reader_role_arns, "the config names no capture reader: nothing to rehearse"
    for arn in platform.reader_role_arns:
        assert arn not in rehearsal.created.roles, f"{arn} is a role of the templates now: rehearse it as one"
        assert rehearsal.create_role(arn.rsplit("/", 1)[-1], {}) == arn
    return list(platform.reader_role_arns)


@pytest.fixture(scope="module")
def probes(rehearsal: Rehearsal, assembly: Assembly, readers: list[str]) -> Iterator[dict[str, tuple[str, str]]]:
    """One object under each of the capture bucket's prefixes (raw captures, curated, quarantine), put by the admin
    as the platform's writers put theirs: SSE-KMS with the capture key they name (the sidecar's KMS_KEY_ID)."""
    [bucket] = [name for name, policy in rehearsal.created.bucket_policies.items()
                if all(reader in json.dumps(policy) for reader in readers)]
    [processor] = [f for f in function_runtimes(rehearsal.resolver) if f.queue_arns]
    raw_prefix = yaml.safe_load((REPO / "config" / "default.yaml").read_text())["capture"]["prefix"]
    prefixes = {"raw": raw_prefix, "curated": processor.environment["OUTPUT_PREFIX"],
                "quarantine": processor.environment["QUARANTINE_PREFIX"]}
    key_arn = rehearsal.key_arn(capture_sidecars(assembly)[0].env["KMS_KEY_ID"])
    s3 = rehearsal.client("s3")
    objects = {}
    for name, prefix in prefixes.items():
        key = f"{prefix}reader-probe/{name}.jsonl"  # no sme/pod/alb segment: the processor skips the raw one
        s3.put_object(Bucket=bucket, Key=key, Body=b'{"probe": true}\n', ServerSideEncryption="aws:kms",
                      SSEKMSKeyId=key_arn)
        objects[name] = (bucket, key)
    yield objects
    # Gone with every version: the tables' retention and the eraser read each place whole, and a probe is not a
    # capture (the same shared moto server serves the modules after this one).
    for bucket, key in objects.values():
        for version in s3.list_object_versions(Bucket=bucket, Prefix=key).get("Versions", []):
            s3.delete_object(Bucket=bucket, Key=key, VersionId=version["VersionId"])


def status(client: Any, bucket: str, key: str) -> int:
    try:
        client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        return error.response["ResponseMetadata"]["HTTPStatusCode"]
    return 200


def test_moto_grants_nothing_through_the_bucket_policy(
    rehearsal: Rehearsal, readers: list[str], probes: dict[str, tuple[str, str]]
) -> None:
    """What moto cannot do, shown on the real thing: the capture bucket in moto holding the templates' grant to the
    reader (its statements as the emulation reads them, without conditions), the reader (no identity policy) is
    refused even the curated object. Should a moto release start evaluating resource policies, this fails: then
    rehearse readers without the emulation."""
    bucket, key = probes["curated"]
    s3 = rehearsal.client("s3")
    installed = s3.get_bucket_policy(Bucket=bucket)["Policy"]
    grants = [{**statement, "Principal": {"AWS": reader}} for reader in readers
              for statement in rehearsal.resource_policy_grants(reader, [("s3:GetObject", arn(bucket, key))]).get(
                  bucket, []) if statement["Effect"] == "Allow"]
    assert grants, "the templates' bucket policy grants the readers nothing"
    policy = json.loads(installed)
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({**policy, "Statement": policy["Statement"] + grants}))
    try:
        for reader in readers:
            assert status(rehearsal.client("s3", rehearsal.credentials(reader)), bucket, key) == 403
    finally:
        s3.put_bucket_policy(Bucket=bucket, Policy=installed)


def arn(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


@pytest.fixture
def emulated_readers(rehearsal: Rehearsal, readers: list[str], probes: dict[str, tuple[str, str]]) -> Any:
    """Each reader with what the bucket and key policies say to it about the probes' GetObject (and the key's
    Decrypt) attached as its identity policy; a dict reader -> (S3 client, the emulated grants by resource)."""
    s3 = rehearsal.client("s3")
    key_arn = s3.head_object(Bucket=probes["curated"][0], Key=probes["curated"][1])["SSEKMSKeyId"]
    requests = [("s3:GetObject", arn(*probe)) for probe in probes.values()] + [("kms:Decrypt", key_arn)]
    iam = rehearsal.client("iam")
    emulated = {}
    for reader in readers:
        grants = rehearsal.resource_policy_grants(reader, requests)
        statements = [statement for found in grants.values() for statement in found]
        iam.put_role_policy(RoleName=reader.rsplit("/", 1)[-1], PolicyName=EMULATED,
                            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
        emulated[reader] = (rehearsal.client("s3", rehearsal.credentials(reader)), grants, key_arn)
    yield emulated
    for reader in readers:
        iam.delete_role_policy(RoleName=reader.rsplit("/", 1)[-1], PolicyName=EMULATED)


def test_readers_read_curated_captures_and_may_decrypt_them(
    rehearsal: Rehearsal, probes: dict[str, tuple[str, str]], emulated_readers: dict[str, Any]
) -> None:
    for reader, (s3, grants, key_arn) in emulated_readers.items():
        assert status(s3, *probes["curated"]) == 200, reader
        # S3's kms:Decrypt for the reader: granted by the key policy to the reader itself. A statement whose
        # principal is the account root (aws:PrincipalArn condition or not) only lets IAM policies grant it
        # (AWS KMS: "Allows access to the AWS account and enables IAM policies"), and readers' IAM policies
        # are not the platform's: then the curated objects are readable but cannot be decrypted.
        assert rehearsal.statements_allow(grants.get(key_arn, []), "kms:Decrypt", key_arn), (
            f"the key policy does not let {reader} decrypt by itself: {rehearsal.created.key_policies[key_arn]}")


def test_readers_are_refused_raw_captures_and_the_quarantine(
    probes: dict[str, tuple[str, str]], emulated_readers: dict[str, Any]
) -> None:
    refused = {}
    for reader, (s3, _, _) in emulated_readers.items():
        for name in ("raw", "quarantine"):
            refused[(reader, name)] = status(s3, *probes[name])
    assert refused == {key: 403 for key in refused}

"""The loader itself: everything the templates grant reaches moto, nothing a rehearsed runtime depends on is left
out, every role a manifest or function names exists, and the intrinsics it resolves resolve as CloudFormation
would. A loader that dropped a grant would make the rehearsal refuse for the wrong reason; one that dropped a role
would make it pass by rehearsing nothing."""

from __future__ import annotations

import pytest

from tests.support.rehearsal import Rehearsal, Resolver, Unresolvable, container_runtimes, function_runtimes
from tests.support.synth import Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]


def test_every_role_and_identity_policy_of_the_templates_is_in_moto(rehearsal: Rehearsal, assembly: Assembly) -> None:
    templates_roles = sum(1 for t in assembly.templates.values() for r in t["Resources"].values()
                          if r["Type"] == "AWS::IAM::Role")
    assert len(rehearsal.created.roles) == templates_roles
    iam = rehearsal.client("iam")
    for spec in rehearsal.created.roles.values():
        in_moto = iam.list_role_policies(RoleName=spec.name)["PolicyNames"]
        assert sorted(in_moto) == sorted(name for name, doc in spec.inline.items() if doc["Statement"]), spec.name
        for name in in_moto:
            stored = iam.get_role_policy(RoleName=spec.name, PolicyName=name)["PolicyDocument"]
            assert stored["Statement"] == spec.inline[name]["Statement"], f"{spec.name}/{name}"


def test_every_role_a_runtime_runs_under_is_a_role_of_the_templates(rehearsal: Rehearsal,
                                                                     assembly: Assembly) -> None:
    """The cluster's way of finding a role (the service account's IRSA annotation) must name a role the templates
    create, with nothing of it left out by the loader (no statement dropped, no AWS managed policy it needs)."""
    named = {runtime.role_arn for runtime in container_runtimes(assembly.manifests) if runtime.role_arn}
    named |= {function.role_arn for function in function_runtimes(rehearsal.resolver) if function.queue_arns
              or function.handler in ("rotation.handler", "node_hours_sampler.handler")}  # (the rehearsed ones)
    assert named
    for arn in named:
        spec = rehearsal.role(arn)
        assert spec.aws_managed == [], f"{arn}: permissions from AWS managed policies cannot be rehearsed"
        assert [entry for entry in spec.dropped if " trust: " not in entry] == [], arn


def test_the_resolver_resolves_like_cloudformation() -> None:
    templates = {
        "a": {"Conditions": {"IsAws": {"Fn::Equals": [{"Ref": "AWS::Partition"}, "aws"]}},
              "Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "named-bucket"}},
                            "Unnamed": {"Type": "AWS::S3::Bucket"},
                            "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}},
                            "Claims": {"Type": "Custom::AWSCDKCfnJson"}},
              "Outputs": {"Out": {"Value": {"Fn::GetAtt": ["Bucket", "Arn"]}, "Export": {"Name": "a:BucketArn"}}}},
        "b": {"Resources": {}},
    }
    resolver = Resolver(templates, account="111122223333", region="us-west-2")
    assert resolver.resolve("b", {"Fn::ImportValue": "a:BucketArn"}) == "arn:aws:s3:::named-bucket"
    assert resolver.resolve("a", {"Fn::Sub": "${Bucket}/${AWS::Region}/${!Literal}"}) == (
        "named-bucket/us-west-2/${Literal}")
    assert resolver.resolve("a", {"Fn::If": ["IsAws", "yes", "no"]}) == "yes"
    assert resolver.resolve("a", ["x", {"Ref": "AWS::NoValue"}]) == ["x"]
    assert resolver.resolve("a", {"Fn::Select": [1, {"Fn::Split": ["/", "p/q/r"]}]}) == "q"
    assert resolver.resolve("a", {"Fn::GetAtt": ["Role", "Arn"]}) == "arn:aws:iam::111122223333:role/a-Role"
    assert resolver.resolve("a", {"Ref": "Unnamed"}) == "a-unnamed"
    with pytest.raises(Unresolvable):
        resolver.resolve("a", {"Fn::GetAtt": ["Claims", "Value"]})
    trust, dropped = resolver.policy("a", {"Statement": [
        {"Effect": "Allow", "Action": "sts:AssumeRoleWithWebIdentity",
         "Condition": {"StringEquals": {"Fn::GetAtt": ["Claims", "Value"]}}}]}, where="trust")
    assert trust["Statement"] == [{"Effect": "Allow", "Action": "sts:AssumeRoleWithWebIdentity"}] and dropped
    with pytest.raises(Unresolvable):  # dropping a deny would allow more: never silently
        resolver.policy("a", {"Statement": [{"Effect": "Deny", "Action": "*",
                                             "Resource": {"Fn::GetAtt": ["Claims", "Value"]}}]}, where="x")


def test_the_resource_policy_emulation_decides_what_applies_to_the_principal() -> None:
    """The shapes a capture bucket or key policy may take (an allowlist among them): a deny for insecure transport
    does not apply to a TLS request, an allowlist deny does not apply to a principal on the list and does to one
    off it, a grant with a condition on the request itself is kept as if it held, an undecidable deny stops."""
    from tests.support.rehearsal import _conditions_hold, _names_principal, request_context

    reader, other = "arn:aws:iam::111122223333:role/ml-analysts", "arn:aws:iam::111122223333:role/other"
    context = request_context(reader, "111122223333")
    assert _conditions_hold({"Bool": {"aws:SecureTransport": "false"}}, context) is False
    assert _conditions_hold({"Bool": {"aws:SecureTransport": False}}, context) is False
    assert _conditions_hold({"NumericLessThan": {"s3:TlsVersion": 1.2}}, context) is False
    assert _conditions_hold({"StringNotLike": {"aws:PrincipalArn": [reader]}}, context) is False
    assert _conditions_hold({"StringNotLike": {"aws:PrincipalArn": [other]}}, context) is True
    assert _conditions_hold({"StringLike": {"kms:ViaService": "s3.*"}}, context) is None
    assert _conditions_hold({"StringLikeIfExists": {"s3:prefix": "curated/*"}}, context) is True
    assert _names_principal({"Effect": "Deny", "NotPrincipal": {"AWS": [reader]}}, reader) is False
    assert _names_principal({"Effect": "Deny", "NotPrincipal": {"AWS": [other]}}, reader) is True
    root = {"AWS": "arn:aws:iam::111122223333:root"}
    assert _names_principal({"Effect": "Allow", "Principal": root}, reader) is False
    assert _names_principal({"Effect": "Deny", "Principal": root}, reader) is True
    assert _names_principal({"Effect": "Allow", "Principal": {"AWS": [reader]}}, reader) is True


def test_the_emulation_turns_not_resource_into_the_requested_resources_outside_it() -> None:
    """moto would read a deny without Resource as an allow everywhere: the emulation names the requested objects
    the deny reaches instead, and stops (NotEmulable, never an AssertionError) on a deny it cannot decide."""
    from types import SimpleNamespace

    from tests.support.rehearsal import NotEmulable

    reader = "arn:aws:iam::111122223333:role/ml-analysts"
    only_curated = {"Sid": "OwnPrefix", "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject*",
                    "NotResource": "arn:aws:s3:::b/curated/*",
                    "Condition": {"ArnLike": {"aws:PrincipalArn": [reader]}}}
    other_key = {"Sid": "NoOtherKey", "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
                 "Resource": "arn:aws:s3:::b/*",
                 "Condition": {"Null": {"s3:x-amz-server-side-encryption-aws-kms-key-id": "false"}}}
    fake = SimpleNamespace(account="111122223333", created=SimpleNamespace(
        bucket_policies={"b": {"Statement": [only_curated, other_key]}}, key_policies={}))
    raw = "arn:aws:s3:::b/data-capture/x"
    requests = [("s3:GetObject", "arn:aws:s3:::b/curated/x"), ("s3:GetObject", raw)]
    assert Rehearsal.resource_policy_grants(fake, reader, requests) == {"b": [
        {"Sid": "OwnPrefix", "Effect": "Deny", "Action": "s3:GetObject*", "Resource": [raw]}]}
    with pytest.raises(NotEmulable):
        Rehearsal.resource_policy_grants(fake, reader, [("s3:PutObject", "arn:aws:s3:::b/curated/x")])

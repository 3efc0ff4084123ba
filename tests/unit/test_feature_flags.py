"""Behaviours that used to follow an app's feature flags, decided by the constructs themselves (no context at all
here, as in an app without cdk.json); tests/examples/test_feature_flags.py compares whole apps with and without."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import App, Aws, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import InferenceCluster
from hyperpod_inference_iac.security.data_perimeter import _accounts
from hyperpod_inference_iac.security.hardened_bucket import hardened_bucket
from tests.support.security_view import normalise, security_view, statement_atoms

ENV = Environment(account="123456789012", region="us-west-2")
LOG_WARNING = "@hyperpod-inference-iac/hardened_bucket:logBucketPolicy"


def _log_delivery_sources(stack: Stack) -> list[Any]:
    policies = Template.from_stack(stack).find_resources("AWS::S3::BucketPolicy")
    atoms = [json.loads(atom) for policy in policies.values()
             for atom in statement_atoms(normalise(policy["Properties"]["PolicyDocument"]))]
    return [atom["Condition"]["ArnLike"]["aws:SourceArn"] for atom in atoms
            if atom.get("Principal") == {"Service": "logging.s3.amazonaws.com"}]


def _warnings(stack: Stack, path: str) -> list[str]:
    found = Annotations.from_stack(stack).find_warning(f"/{stack.stack_name}/{path}", Match.any_value())
    return [str(message.entry.data) for message in found]


def test_a_named_bucket_logs_into_a_bucket_of_another_stack_without_partition_literals() -> None:
    """Without @aws-cdk/core:enablePartitionLiterals a literal name's ARN holds a partition token: the log bucket's
    policy still admits it (it used to warn, calling the bucket imported, and add nothing)."""
    app = App(context={})
    storage, cluster = Stack(app, "Storage", env=ENV), Stack(app, "Cluster", env=ENV)
    logs = hardened_bucket(storage, "Logs", bucket_name="access-logs-x", encryption_key=None, access_logs_bucket=None)
    hardened_bucket(cluster, "Lifecycle", bucket_name="lifecycle-x", encryption_key=None, access_logs_bucket=logs,
                    name_property="lifecycle_bucket_name")
    assert _log_delivery_sources(storage) == ["arn:aws:s3:::lifecycle-x"]
    assert _warnings(cluster, "Lifecycle") == []
    app.synth()  # no cross-stack cycle


def test_log_bucket_warnings_say_why_the_statement_is_missing() -> None:
    app = App(context={})
    storage, cluster = Stack(app, "Storage", env=ENV), Stack(app, "Cluster", env=ENV)
    logs = hardened_bucket(storage, "Logs", bucket_name="access-logs-x", encryption_key=None, access_logs_bucket=None)
    hardened_bucket(cluster, "Unnamed", bucket_name=None, encryption_key=None, access_logs_bucket=logs,
                    name_property="lifecycle_bucket_name")
    imported = s3.Bucket.from_bucket_name(cluster, "Central", "central-access-logs")
    hardened_bucket(cluster, "ToImported", bucket_name="to-imported-x", encryption_key=None,
                    access_logs_bucket=imported)

    assert _log_delivery_sources(storage) == []
    (unnamed,) = _warnings(cluster, "Unnamed")
    assert "imported" not in unnamed and "Storage/Logs" in unnamed and "another stack" in unnamed
    assert "lifecycle_bucket_name" in unnamed and LOG_WARNING in unnamed
    (to_imported,) = _warnings(cluster, "ToImported")
    assert "an imported bucket" in to_imported and LOG_WARNING in to_imported


def test_key_policy_accounts_are_read_from_arns_with_a_partition_token() -> None:
    stack = Stack(App(context={}), "Probe", env=ENV)
    roots = _accounts(stack, [f"arn:{Aws.PARTITION}:iam::444455556666:role/reader"])
    assert normalise({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::444455556666:root"]]}) == \
        normalise(stack.resolve(roots))


def test_inference_cluster_makes_the_native_oidc_provider_without_the_flag() -> None:
    """aws_eks_v2 makes a Lambda-backed custom resource without @aws-cdk/aws-eks:useNativeOidcProvider; the
    cluster's IRSA roles trust the native AWS::IAM::OIDCProvider whatever the app says."""
    for context in ({}, {"@aws-cdk/aws-eks:useNativeOidcProvider": False}):
        stack = Stack(App(context=context), "Probe", env=ENV)
        vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
        cluster = InferenceCluster(stack, "Eks", cluster_name="c", vpc=vpc, install_device_plugin=False)
        assert cluster.cluster.open_id_connect_provider.open_id_connect_provider_arn
        template = Template.from_stack(stack)
        template.resource_count_is("AWS::IAM::OIDCProvider", 1)
        template.resource_count_is("Custom::AWSCDKOpenIdConnectProvider", 0)


def test_security_view_ignores_how_statements_are_written_but_not_what_they_allow() -> None:
    merged = {"Resources": {"P": {"Type": "AWS::IAM::Policy", "Properties": {"PolicyDocument": {"Statement": [
        {"Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject"],
         "Resource": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::b/*"]]}}]}}}}}
    split = {"Resources": {"P": {"Type": "AWS::IAM::Policy", "Properties": {"PolicyDocument": {"Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"},
        {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/*"}]}}}}}
    assert security_view(merged) == security_view(split)
    split["Resources"]["P"]["Properties"]["PolicyDocument"]["Statement"].pop()
    assert security_view(merged) != security_view(split)

"""PreflightPolicy: read-only, each read scoped to its one resource where IAM has a resource type, the rest held to
the platform's region; and it grants every call the preflight makes."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from hyperpod_inference_iac import ConfigError, PreflightPolicy
from hyperpod_inference_iac.foundation.nag import REASONS

ENV = {"account": "111122223333", "region": "us-west-2"}
LAYER = "arn:aws:lambda:us-west-2:111122223333:layer:capture-tables:3"
CERT = "arn:aws:acm:us-west-2:111122223333:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
# Every AWS call of hyperpod_inference_iac.preflight (tests/unit/test_preflight.py stubs each) and its IAM action;
# sts:GetCallerIdentity needs none.
CALLS = {"ssm.get_parameter": "ssm:GetParameter",
         "lakeformation.get_data_lake_settings": "lakeformation:GetDataLakeSettings",
         "lambda.get_layer_version_by_arn": "lambda:GetLayerVersion",
         "ec2.describe_instance_types": "ec2:DescribeInstanceTypes",
         "service-quotas.get_service_quota": "servicequotas:GetServiceQuota",
         "service-quotas.list_service_quotas": "servicequotas:ListServiceQuotas",
         "route53.get_hosted_zone": "route53:GetHostedZone", "acm.describe_certificate": "acm:DescribeCertificate",
         "eks.describe_addon_versions": "eks:DescribeAddonVersions",
         "eks.describe_addon_configuration": "eks:DescribeAddonConfiguration",
         "eks.describe_cluster": "eks:DescribeCluster", "ecr.describe_images": "ecr:DescribeImages"}


def _statements(**props: Any) -> list[dict[str, Any]]:
    stack = Stack(App(), "Preflight", env=ENV)
    PreflightPolicy(stack, "Preflight", **props)
    (policy,) = Template.from_stack(stack).find_resources("AWS::IAM::ManagedPolicy").values()
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


FULL = {"tables_layer_arn": LAYER, "hosted_zone_id": "Z0123456789ABC", "certificate_arn": CERT,
        "cluster_name": "llm-platform", "sidecar_repositories": ["capture-sidecar"]}


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def test_it_grants_every_call_the_preflight_makes() -> None:
    granted = {action for statement in _statements(**FULL) for action in _actions(statement)}
    assert set(CALLS.values()) <= granted


def test_it_only_reads() -> None:
    for statement in _statements(**FULL):
        assert statement["Effect"] == "Allow"
        for action in _actions(statement):
            assert action.split(":")[1].startswith(("Get", "Describe", "List")), action


def test_a_wildcard_only_where_iam_has_no_resource_type_and_held_to_the_region() -> None:
    for statement in _statements(**FULL):
        if statement["Resource"] == "*":
            # The platform's region; the public Price List's reads, its endpoint's region (and nothing else there)
            region = "us-east-1" if statement["Sid"] == "PriceList" else "us-west-2"
            assert statement["Condition"] == {"StringEquals": {"aws:RequestedRegion": region}}
            assert statement["Sid"] != "PriceList" or _actions(statement) == ["pricing:GetProducts"]
            assert not {"ssm:GetParameter", "lambda:GetLayerVersion", "route53:GetHostedZone",
                        "acm:DescribeCertificate", "eks:DescribeCluster", "ecr:DescribeImages"} & set(
                _actions(statement))
    scoped = {statement["Sid"]: statement["Resource"] for statement in _statements(**FULL)}
    assert scoped["TablesLayer"] == LAYER and scoped["Certificate"] == CERT
    assert "parameter/cdk-bootstrap/hnb659fds/version" in str(scoped["BootstrapVersion"])


def test_a_resource_not_given_is_granted_nothing() -> None:
    sids = {statement["Sid"] for statement in _statements()}
    assert sids == {"BootstrapVersion", "AccountReads", "PriceList"}


def test_a_bad_qualifier_is_one_coded_error() -> None:
    with pytest.raises(ConfigError, match=r"PreflightPolicy.BadQualifier.*bootstrap_qualifier"):
        PreflightPolicy(Stack(App(), "Bad", env=ENV), "Preflight", bootstrap_qualifier="no-dashes!")


def test_cdk_nag_finds_only_the_acknowledged_wildcard() -> None:
    """The reason `preflight-account-reads` (the default platform does not create the policy) matches the finding."""
    stack = Stack(App(), "Nag", env=ENV)
    PreflightPolicy(stack, "Preflight", **FULL)
    report = AwsSolutionsChecks(stack.node.root).validate_scope(stack)
    assert [(v.rule_name, [r.resource_name for r in v.violating_resources]) for v in report.violations] == []
    assert REASONS["preflight-account-reads"][0] == "AwsSolutions-IAM5"
    unacknowledged = Stack(App(), "Bare", env=ENV)  # (the control: the same wildcard without the acknowledgment)
    iam.ManagedPolicy(unacknowledged, "Bare", statements=[iam.PolicyStatement(
        actions=["eks:DescribeAddonVersions"], resources=["*"])])
    assert "AwsSolutions-IAM5[Resource::*]" in {v.rule_name for v in AwsSolutionsChecks(
        unacknowledged.node.root).validate_scope(unacknowledged).violations}

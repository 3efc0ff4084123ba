"""The operator add-on's version table and what the add-on's roles may do: the KEDA role reads exactly what the
autoscaling triggers name, the gated-model role exists only for gated JumpStart models, and the execution role
holds what each release's notes ask for."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from hyperpod_inference_iac import InferenceOperator
from hyperpod_inference_iac.foundation.operator_versions import (
    BEYOND_VENDORED_CRDS,
    DEFAULT_ADDON_VERSION,
    EXECUTION_ROLE_ADDITIONS,
    FEATURES,
    AddonVersion,
    features_used,
    missing_features,
)
from hyperpod_inference_iac.foundation.scaling_metrics import PrometheusWorkspace, ScalingMetrics
from tests.support.synth import REPO
from tests.unit.test_platform_constructs import CONTEXT, ENV, _cluster

WORKSPACE = PrometheusWorkspace("us-west-2", "ws-0123abcd")
GATED_ROLE_ARN = "arn:aws:iam::123456789012:role/existing-gated-download"


def test_versions_order_as_numbers_not_text() -> None:
    versions = ["v1.10.0-eksbuild.1", "v1.2.0-eksbuild.1", "v1.2.0-eksbuild.10", "v1.2.0-eksbuild.2"]
    ordered = sorted(versions, key=lambda v: AddonVersion.parse(v))  # type: ignore[arg-type, return-value]
    assert ordered == ["v1.2.0-eksbuild.1", "v1.2.0-eksbuild.2", "v1.2.0-eksbuild.10", "v1.10.0-eksbuild.1"]
    assert AddonVersion.parse("1.2.0") is None
    assert str(AddonVersion.parse(DEFAULT_ADDON_VERSION)) == DEFAULT_ADDON_VERSION


def test_every_row_cites_a_source_and_the_docs_list_it() -> None:
    page = (REPO / "docs" / "operator-versions.md").read_text()
    for feature in FEATURES:
        assert feature.source.startswith("https://"), feature.name
        assert AddonVersion.parse(feature.minimum) is not None, feature.name
        assert f"| {feature.name} | {feature.operator} | `{feature.minimum}` |" in page, feature.name


def test_the_default_version_has_every_feature_the_vendored_crds_describe() -> None:
    """The default is the add-on the vendored CRDs describe: it has every feature of theirs, and none of the newer
    ones (those validate against charts/crd_overlays/ and need a newer add-on)."""
    default = AddonVersion.parse(DEFAULT_ADDON_VERSION)
    assert default is not None
    described = [feature for feature in FEATURES if feature not in BEYOND_VENDORED_CRDS]
    assert all(feature.minimum_version <= default for feature in described)
    assert max(feature.minimum_version for feature in described) == default
    assert all(feature.minimum_version > default for feature in BEYOND_VENDORED_CRDS)


@pytest.mark.parametrize(("spec", "expected"), [
    ({"modelSourceConfig": {"modelSourceType": "huggingface"}}, ["modelSourceType huggingface"]),
    ({"loadBalancer": {"healthCheckPath": "/health"}}, []),
    ({"loadBalancer": {"idleTimeoutSeconds": 300}}, ["loadBalancer.idleTimeoutSeconds"]),
    ({"kubernetes": {"initContainers": [{}], "volumes": [{}]}},
     ["kubernetes.initContainers / volumes / schedulerName"] * 2),
    ({"metricsSidecarResources": {}, "s3UploaderResources": {}},
     ["metricsSidecarResources / metricsCollectorResources / s3UploaderResources"] * 2),
    ({"inferenceGateway": {"enabled": True}},
     ["Inference Gateway (InferenceGatewayConfig kind, spec.inferenceGateway)"]),
    ({"kubernetes": {"podTemplateAnnotations": {"a": "b"}}}, ["kubernetes.podTemplateAnnotations"]),
])
def test_features_are_found_by_the_fields_a_spec_emits(spec: dict[str, Any], expected: list[str]) -> None:
    assert [feature.name for feature, _ in features_used("InferenceEndpointConfig", spec)] == expected


def test_a_missing_feature_is_reported_once_at_its_first_field() -> None:
    spec = {"kubernetes": {"initContainers": [{}], "volumes": [{}]}}
    assert [keys for _, keys in missing_features("InferenceEndpointConfig", spec, "v1.0.0-eksbuild.1")] == [
        ("kubernetes", "initContainers")]
    assert list(missing_features("InferenceEndpointConfig", spec, "not-a-version")) == []


# -- the roles ---------------------------------------------------------------------------------------------------
def _operator(stack_id: str, **props: Any) -> tuple[InferenceOperator, dict[str, Any]]:
    stack = Stack(App(context=CONTEXT), stack_id, env=ENV)
    operator = InferenceOperator(stack, "Operator", cluster=_cluster(stack), hyperpod_cluster_arn="arn",
                                 tls_bucket=s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x"), **props)
    return operator, Template.from_stack(stack).to_json()


@pytest.fixture(scope="module")
def bare() -> tuple[InferenceOperator, dict[str, Any]]:
    return _operator("Bare")


@pytest.fixture(scope="module")
def full() -> tuple[InferenceOperator, dict[str, Any]]:
    return _operator("Full", scaling_metrics=ScalingMetrics(cloudwatch=True, prometheus_workspaces=(WORKSPACE,)),
                     gated_model_namespaces=("inference",))


def _statements(template: dict[str, Any], role: Any) -> list[dict[str, Any]]:
    role_id = Stack.of(role).get_logical_id(role.node.default_child)
    return [statement for policy in template["Resources"].values() if policy["Type"] == "AWS::IAM::Policy"
            and {"Ref": role_id} in policy["Properties"]["Roles"]
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]]


def test_keda_may_read_nothing_when_no_workload_scales(bare: tuple[InferenceOperator, dict[str, Any]]) -> None:
    operator, template = bare
    assert _statements(template, operator.keda_role) == []


def test_keda_reads_exactly_what_the_triggers_name(full: tuple[InferenceOperator, dict[str, Any]]) -> None:
    operator, template = full
    statements = {s["Sid"]: s for s in _statements(template, operator.keda_role)}
    assert set(statements) == {"ReadScalingMetrics", "QueryPrometheusWorkspaces"}
    assert statements["ReadScalingMetrics"]["Action"] == "cloudwatch:GetMetricData"
    assert statements["ReadScalingMetrics"]["Resource"] == "*"
    assert statements["QueryPrometheusWorkspaces"]["Action"] == "aps:QueryMetrics"
    workspace = statements["QueryPrometheusWorkspaces"]["Resource"]
    assert workspace == "arn:aws:aps:us-west-2:123456789012:workspace/ws-0123abcd"


def test_no_gated_model_role_without_gated_models(bare: tuple[InferenceOperator, dict[str, Any]]) -> None:
    operator, _ = bare
    assert operator.gated_model_role is None
    assert "jumpstartGatedModelDownloadRoleArn" not in operator.configuration


def test_gated_model_role_is_trusted_by_the_namespaces_jumpstart_accounts_only(
        full: tuple[InferenceOperator, dict[str, Any]]) -> None:
    operator, template = full
    assert operator.gated_model_role is not None
    assert "jumpstartGatedModelDownloadRoleArn" in operator.configuration
    role = template["Resources"][Stack.of(operator).get_logical_id(operator.gated_model_role.node.default_child)]
    statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    service = next(s for s in statements if "Service" in s["Principal"])
    assert service["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}
    web = next(s for s in statements if "Federated" in s["Principal"])
    subjects_id = web["Condition"]["StringEquals"]["Fn::GetAtt"][0]
    subjects = json.dumps(template["Resources"][subjects_id]["Properties"]["Value"])
    assert "system:serviceaccount:inference:hyperpod-inference-service-account\\\"]" in subjects  # exact, last
    assert "StringLike" not in web["Condition"] and "service-account*" not in subjects
    assert "sts.amazonaws.com" in subjects
    (permission,) = _statements(template, operator.gated_model_role)
    assert permission["Action"] == "sagemaker:CreateHubContentPresignedUrls"
    assert "SageMakerPublicHub" in json.dumps(permission["Resource"])
    assert permission["Condition"] == {"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}}


def test_an_existing_gated_model_role_is_configured_not_created() -> None:
    stack = Stack(App(context=CONTEXT), "Existing", env=ENV)
    existing = iam.Role.from_role_arn(stack, "Gated", GATED_ROLE_ARN)
    operator = InferenceOperator(stack, "Operator", cluster=_cluster(stack), hyperpod_cluster_arn="arn",
                                 tls_bucket=s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x"),
                                 gated_model_namespaces=("inference",), gated_model_download_role=existing)
    assert operator.configuration["jumpstartGatedModelDownloadRoleArn"] == GATED_ROLE_ARN
    assert "GatedModelRole" not in json.dumps(Template.from_stack(stack).to_json())


def test_execution_role_holds_what_each_release_asks_for() -> None:
    stack = Stack(App(context=CONTEXT), "Certificate", env=ENV)
    certificate = acm.Certificate.from_certificate_arn(
        stack, "Certificate", "arn:aws:acm:us-west-2:123456789012:certificate/00000000-0000-0000-0000-000000000000")
    operator = InferenceOperator(stack, "Operator", cluster=_cluster(stack), hyperpod_cluster_arn="arn",
                                 tls_bucket=s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x"),
                                 certificate=certificate)
    granted = json.dumps(_statements(Template.from_stack(stack).to_json(), operator.execution_role))
    for addition in EXECUTION_ROLE_ADDITIONS:
        for action in addition.actions:
            assert f'"{action}"' in granted, (addition.operator, action)


def test_sagemaker_may_assume_the_execution_role_for_the_operator_s_cluster_and_resources_only(
        bare: tuple[InferenceOperator, dict[str, Any]]) -> None:
    """Not for any SageMaker resource of the account (a notebook, a training job, another HyperPod cluster): the
    operator's HyperPod cluster by its exact ARN, and the resource types the operator creates."""
    operator, template = bare
    role = template["Resources"][Stack.of(operator).get_logical_id(operator.execution_role.node.default_child)]
    statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    service = next(s for s in statements if "Service" in s["Principal"])
    sources = service["Condition"]["ArnLike"]["aws:SourceArn"]
    assert sources[0] == "arn"  # the hyperpod_cluster_arn the operator was given
    assert [s.split(":", 5)[5] for s in sources[1:]] == ["model/*", "endpoint-config/*", "endpoint/*",
                                                         "inference-component/*"]
    assert not any(s.endswith(":*") for s in sources)

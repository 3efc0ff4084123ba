"""Constructs of the cluster platform, synthesized in small stacks: identities, domain, validation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from hyperpod_inference_iac.eks_cluster import kubectl_layer_for
from hyperpod_inference_iac.endpoint_domain import EndpointDomain
from hyperpod_inference_iac.inference_operator import InferenceOperator
from hyperpod_inference_iac.validation import ConfigError
from hyperpod_inference_iac.workload_identity import IdentityBinding, WorkloadIdentity
from tests.support.synth import REPO

CONTEXT = json.loads((REPO / "cdk.json").read_text())["context"]
ENV = Environment(account="123456789012", region="us-west-2")


def _stack() -> Stack:
    return Stack(App(context=CONTEXT), "Probe", env=ENV)


def _cluster(stack: Stack) -> eks.Cluster:
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
    return eks.Cluster(stack, "Cluster", version=eks.KubernetesVersion.V1_34, vpc=vpc,
                       default_capacity_type=eks.DefaultCapacityType.NODEGROUP, default_capacity=0)


@pytest.fixture(scope="module")
def identities() -> dict[str, Any]:
    stack = _stack()
    cluster = _cluster(stack)
    weights = s3.Bucket.from_bucket_name(stack, "Weights", "model-weights")
    WorkloadIdentity(stack, "Irsa", cluster=cluster, namespace="inference", service_account="qwen",
                     role_name="p-qwen", weights_bucket=weights, weights_prefix="qwen3-8b/")
    WorkloadIdentity(stack, "PodIdentity", cluster=cluster, namespace="inference", service_account="llama",
                     role_name="p-llama", binding=IdentityBinding.POD_IDENTITY)
    return Template.from_stack(stack).to_json()


def _role(template: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    return next((k, v) for k, v in template["Resources"].items()
                if v["Type"] == "AWS::IAM::Role" and v["Properties"].get("RoleName") == name)


def test_irsa_identity_trusts_exactly_one_service_account(identities: dict[str, Any]) -> None:
    _, role = _role(identities, "p-qwen")
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    conditions_id = statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]
    value = json.dumps(identities["Resources"][conditions_id]["Properties"]["Value"])
    assert 'system:serviceaccount:inference:qwen\\"' in value
    assert ':aud\\":\\"sts.amazonaws.com' in value
    assert "*" not in value


def test_irsa_identity_reads_only_its_weights_prefix(identities: dict[str, Any]) -> None:
    role_id, _ = _role(identities, "p-qwen")
    (policy,) = [v for v in identities["Resources"].values()
                 if v["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in v["Properties"]["Roles"]]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["ListWeightsPrefix"]["Condition"] == {"StringLike": {"s3:prefix": ["qwen3-8b", "qwen3-8b/*"]}}
    assert statements["ReadWeights"]["Action"] == "s3:GetObject"
    assert "qwen3-8b/*" in json.dumps(statements["ReadWeights"]["Resource"])
    assert set(statements) == {"ListWeightsPrefix", "ReadWeights"}


def test_pod_identity_binds_one_service_account(identities: dict[str, Any]) -> None:
    role_id, role = _role(identities, "p-llama")
    statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {s["Principal"]["Service"] for s in statements} == {"pods.eks.amazonaws.com"}
    assert sorted(s["Action"] for s in statements) == ["sts:AssumeRole", "sts:TagSession"]
    for statement in statements:
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    (association,) = [v for v in identities["Resources"].values() if v["Type"] == "AWS::EKS::PodIdentityAssociation"]
    assert association["Properties"]["Namespace"] == "inference"
    assert association["Properties"]["ServiceAccount"] == "llama"
    assert association["Properties"]["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"namespace": "Inference"}, "WorkloadIdentity.BadNamespace"),
    ({"service_account": "bad_name"}, "WorkloadIdentity.BadServiceAccount"),
    ({"role_name": "x" * 65}, "WorkloadIdentity.BadRoleName"),
    ({"weights_prefix": "/"}, "WorkloadIdentity.WholeBucket"),
])
def test_workload_identity_validation(kwargs: dict[str, Any], code: str) -> None:
    stack = Stack(App(context=CONTEXT), "V", env=ENV)
    cluster = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c")
    props: dict[str, Any] = {"cluster": cluster, "namespace": "inference", "service_account": "sa",
                             "role_name": "r", "weights_bucket": s3.Bucket.from_bucket_name(stack, "B", "weights"),
                             "weights_prefix": "p/", **kwargs}
    with pytest.raises(ConfigError) as caught:
        WorkloadIdentity(stack, "Identity", **props)
    assert caught.value.codes == [code]


def test_new_domain_creates_zone_and_dns_validated_certificate() -> None:
    stack = _stack()
    EndpointDomain(stack, "Domain", zone_name="inference.example.com",
                   endpoint_domains=["a.inference.example.com", "b.inference.example.com"])
    template = Template.from_stack(stack).to_json()
    (zone_id,) = [k for k, v in template["Resources"].items() if v["Type"] == "AWS::Route53::HostedZone"]
    (certificate,) = [v for v in template["Resources"].values() if v["Type"] == "AWS::CertificateManager::Certificate"]
    props = certificate["Properties"]
    assert props["DomainName"] == "a.inference.example.com"
    assert props["SubjectAlternativeNames"] == ["b.inference.example.com"]
    assert props["ValidationMethod"] == "DNS"
    assert props["DomainValidationOptions"] == [
        {"DomainName": name, "HostedZoneId": {"Ref": zone_id}}
        for name in ("a.inference.example.com", "b.inference.example.com")]


def test_existing_zone_and_certificate_create_nothing() -> None:
    stack = _stack()
    domain = EndpointDomain(stack, "Domain", zone_name="inference.example.com",
                            endpoint_domains=["a.inference.example.com"], existing_hosted_zone_id="Z0123456789ABC",
                            existing_certificate_arn="arn:aws:acm:us-west-2:123456789012:certificate/abc-123")
    created = {type(c).__name__ for c in domain.node.find_all()}
    assert not created & {"CfnHostedZone", "CfnCertificate"}
    assert domain.hosted_zone.hosted_zone_id == "Z0123456789ABC"


@pytest.mark.parametrize(("domains", "code"), [
    ([], "EndpointDomain.NoDomains"),
    (["*.inference.example.com"], "EndpointDomain.Wildcard"),
    (["api.other.org"], "EndpointDomain.OutsideZone"),
])
def test_endpoint_domain_validation(domains: list[str], code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        EndpointDomain(_stack(), "Domain", zone_name="inference.example.com", endpoint_domains=domains)
    assert caught.value.codes == [code]


def test_missing_kubectl_layer_names_the_package_to_install() -> None:
    with pytest.raises(ConfigError) as caught:
        kubectl_layer_for(_stack(), "1.99")
    assert caught.value.codes == ["InferenceCluster.MissingKubectlLayer"]
    assert "pip install 'aws-cdk.lambda-layer-kubectl-v99'" in str(caught.value)


def test_operator_execution_role_needs_the_required_prefix() -> None:
    with pytest.raises(ConfigError) as caught:
        InferenceOperator(_stack(), "Operator", cluster=None, hyperpod_cluster_arn="", storage=None,  # type: ignore[arg-type]
                          capture_prefix="", certificate_arn="", hosted_zone_id="", execution_role_name="MyRole",
                          addon_version="v1.0.0-eksbuild.1")
    assert caught.value.codes == ["InferenceOperator.ExecutionRoleName"]

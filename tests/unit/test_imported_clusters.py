"""InferenceOperator and ExternalDns on an imported cluster (``eks.Cluster.from_cluster_attributes``): they work when
it is given what they use (the OIDC provider for their IRSA roles; the kubectl provider for ExternalDNS's Helm
releases) and refuse it with one coded error per missing attribute otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from hyperpod_inference_iac import ConfigError, ExternalDns, InferenceOperator

ACCOUNT = "123456789012"
OIDC_ARN = f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE"
HYPERPOD_ARN = f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:cluster/abcdef123456"


def _imported(*, oidc: bool = True, kubectl: bool = True) -> tuple[Stack, eks.ICluster]:
    stack = Stack(App(), "Imported", env=Environment(account=ACCOUNT, region="us-west-2"))
    attributes: dict[str, Any] = {}
    if kubectl:
        attributes["kubectl_provider"] = eks.KubectlProvider.from_kubectl_provider_attributes(
            stack, "Kubectl", service_token=f"arn:aws:lambda:us-west-2:{ACCOUNT}:function:kubectl",
            role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/kubectl"))
    if oidc:
        attributes["open_id_connect_provider"] = \
            iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(stack, "Oidc", OIDC_ARN)
    return stack, eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="platform", **attributes)


def _operator(stack: Stack, cluster: eks.ICluster) -> InferenceOperator:
    return InferenceOperator(stack, "Operator", cluster=cluster, hyperpod_cluster_arn=HYPERPOD_ARN,
                             tls_bucket=s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-platform"))


def _external_dns(stack: Stack, cluster: eks.ICluster) -> ExternalDns:
    zone = route53.HostedZone.from_hosted_zone_attributes(stack, "Zone", hosted_zone_id="Z0123456789ABC",
                                                          zone_name="inference.example.com")
    return ExternalDns(stack, "Dns", cluster=cluster, hosted_zones=[zone], owner_id="platform",
                       namespaces=["models"], hostnames=["api.inference.example.com"])


def test_the_operator_installs_on_an_imported_cluster_with_its_oidc_provider() -> None:
    stack, cluster = _imported(kubectl=False)  # add-ons only: no kubectl provider needed
    operator = _operator(stack, cluster)
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::EKS::Addon", {"AddonName": "amazon-sagemaker-hyperpod-inference",
                                                         "ClusterName": "platform"})
    trusts = [r["Properties"]["AssumeRolePolicyDocument"] for r in
              template.find_resources("AWS::IAM::Role").values()]
    assert sum(OIDC_ARN in str(trust) for trust in trusts) >= 4  # operator, ALB controller, KEDA, S3 CSI driver
    assert operator.props.cluster is cluster


def test_external_dns_installs_on_an_imported_cluster_with_both_providers() -> None:
    stack, cluster = _imported()
    dns = _external_dns(stack, cluster)
    template = Template.from_stack(stack)
    assert len(template.find_resources("Custom::AWSCDK-EKS-HelmChart")) == 1
    trusts = [r["Properties"]["AssumeRolePolicyDocument"] for r in template.find_resources("AWS::IAM::Role").values()]
    assert sum(OIDC_ARN in str(trust) for trust in trusts) == 1  # its one IRSA role
    assert set(dns.charts) == {"models"}


@pytest.mark.parametrize(("oidc", "kubectl", "build", "codes"), [
    (False, True, _operator, ["InferenceOperator.NoOidcProvider"]),
    (False, True, _external_dns, ["ExternalDns.NoOidcProvider"]),
    (True, False, _external_dns, ["ExternalDns.NoKubectlProvider"]),
    (False, False, _external_dns, ["ExternalDns.NoOidcProvider", "ExternalDns.NoKubectlProvider"]),
])
def test_an_imported_cluster_without_what_it_needs_is_one_clear_error_each(oidc: bool, kubectl: bool, build: Any,
                                                                            codes: list[str]) -> None:
    stack, cluster = _imported(oidc=oidc, kubectl=kubectl)
    with pytest.raises(ConfigError) as caught:
        build(stack, cluster)
    assert caught.value.codes == codes
    message = str(caught.value)
    for attribute, code in (("open_id_connect_provider", "NoOidcProvider"), ("kubectl_provider", "NoKubectlProvider")):
        assert (f"has no {attribute}" in message) == any(c.endswith(code) for c in codes)
    assert "Traceback" not in message and "] cluster: has no " in message

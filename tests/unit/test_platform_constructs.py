"""Constructs of the cluster platform, synthesized in small stacks: identities, domain, operator, ExternalDNS,
validation, closed sets that fail closed, warnings, and no dependence on an app's feature flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Annotations as CdkAnnotations
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_logs as logs
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import (
    CaptureStorage,
    ClusterEndpointAccess,
    EndpointDomain,
    ExternalDns,
    FlowLogTraffic,
    IdentityBinding,
    InferenceCluster,
    InferenceOperator,
    PlatformVpc,
    WorkloadIdentity,
    existing_vpc,
)
from hyperpod_inference_iac.foundation.validation import ConfigError
from hyperpod_inference_iac.serving.external_dns import release_name
from tests.support.policy_eval import Request, decision
from tests.support.synth import REPO

CONTEXT = json.loads((REPO / "cdk.json").read_text())["context"]
ENV = Environment(account="123456789012", region="us-west-2")


def _stack(context: dict[str, Any] | None = None) -> Stack:
    return Stack(App(context=CONTEXT if context is None else context), "Probe", env=ENV)


def _cluster(stack: Stack) -> eks.Cluster:
    from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
    return eks.Cluster(stack, "Cluster", version=eks.KubernetesVersion.V1_34, vpc=vpc,
                       default_capacity_type=eks.DefaultCapacityType.NODEGROUP, default_capacity=0,
                       kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV34Layer(stack, "L")))


@pytest.fixture(scope="module")
def identities() -> dict[str, Any]:
    stack = _stack()
    cluster = _cluster(stack)
    irsa = WorkloadIdentity(stack, "Irsa", cluster=cluster, namespace="inference", service_account="qwen",
                            role_name="p-qwen")
    irsa.grant_read_objects(bucket_arn="arn:aws:s3:::model-weights", prefix="qwen3-8b/")
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
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statements == [
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": "arn:aws:s3:::model-weights",
         "Condition": {"StringLike": {"s3:prefix": ["qwen3-8b", "qwen3-8b/*"]}}},
        {"Action": "s3:GetObject", "Effect": "Allow", "Resource": "arn:aws:s3:::model-weights/qwen3-8b/*"},
    ]


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


def test_role_names_take_every_character_iam_allows_and_bindings_their_value() -> None:
    stack = _stack()
    cluster = _cluster(stack)
    WorkloadIdentity(stack, "A", cluster=cluster, namespace="ns", service_account="sa",
                     role_name="team+llm=a,b.c@d_e-f")
    identity = WorkloadIdentity(stack, "B", cluster=cluster, namespace="ns", service_account="sb",
                                binding="pod-identity")
    assert identity.binding is IdentityBinding.POD_IDENTITY and identity.association is not None


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"namespace": "Inference"}, "WorkloadIdentity.BadNamespace"),
    ({"service_account": "bad_name"}, "WorkloadIdentity.BadServiceAccount"),
    ({"role_name": "x" * 65}, "WorkloadIdentity.BadRoleName"),
    ({"role_name": "rôle"}, "WorkloadIdentity.BadRoleName"),
    ({"binding": "oidc"}, "WorkloadIdentity.BadBinding"),
])
def test_workload_identity_validation(kwargs: dict[str, Any], code: str) -> None:
    stack = Stack(App(context=CONTEXT), "V", env=ENV)
    cluster = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c")
    props: dict[str, Any] = {"cluster": cluster, "namespace": "inference", "service_account": "sa",
                             "role_name": "r", **kwargs}
    with pytest.raises(ConfigError) as caught:
        WorkloadIdentity(stack, "Identity", **props)
    assert caught.value.codes == [code]


def test_a_whole_bucket_is_never_granted() -> None:
    stack = _stack()
    identity = WorkloadIdentity(stack, "Identity", cluster=_cluster(stack), namespace="inference", service_account="sa")
    with pytest.raises(ConfigError) as caught:
        identity.grant_read_objects(bucket_arn="arn:aws:s3:::weights", prefix="/")
    assert caught.value.codes == ["WorkloadIdentity.WholeBucket"]


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
    from aws_cdk import aws_certificatemanager as acm

    stack = _stack()
    zone = route53.HostedZone.from_hosted_zone_attributes(stack, "Zone", hosted_zone_id="Z0123456789ABC",
                                                          zone_name="inference.example.com")
    certificate = acm.Certificate.from_certificate_arn(
        stack, "Certificate", "arn:aws:acm:us-west-2:123456789012:certificate/abc-123")
    domain = EndpointDomain(stack, "Domain", zone_name="inference.example.com",
                            endpoint_domains=["a.inference.example.com"], hosted_zone=zone, certificate=certificate)
    created = {type(c).__name__ for c in domain.node.find_all()}
    assert not created & {"CfnHostedZone", "CfnCertificate"}
    assert domain.hosted_zone is zone and domain.certificate is certificate


@pytest.mark.parametrize(("domains", "code"), [
    ([], "EndpointDomain.NoDomains"),
    (["*.inference.example.com"], "EndpointDomain.Wildcard"),
    (["api.other.org"], "EndpointDomain.OutsideZone"),
    (["Api.inference.example.com"], "EndpointDomain.BadDomainName"),
    (["a.inference.example.com", "a.inference.example.com"], "EndpointDomain.Duplicate"),
])
def test_endpoint_domain_validation(domains: list[str], code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        EndpointDomain(_stack(), "Domain", zone_name="inference.example.com", endpoint_domains=domains)
    assert caught.value.codes == [code]


def test_closed_sets_fail_closed() -> None:
    """A misspelt enum value is refused, never read as the other choice."""
    stack = _stack()
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
    with pytest.raises(ConfigError) as caught:
        InferenceCluster(stack, "Eks", cluster_name="c", vpc=vpc, endpoint_access="privat")  # type: ignore[arg-type]
    assert caught.value.codes == ["InferenceCluster.EndpointAccess"]


def test_unsupported_kubernetes_version_says_which_are() -> None:
    stack = _stack()
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
    with pytest.raises(ConfigError) as caught:
        InferenceCluster(stack, "Eks", cluster_name="c", vpc=vpc, kubernetes_version="1.99")
    assert caught.value.codes == ["InferenceCluster.UnsupportedKubernetesVersion"]
    assert "1.33, 1.34, 1.35" in str(caught.value)


@pytest.mark.parametrize("version", ["1.33", "1.34", "1.35"])
def test_every_supported_kubernetes_version_builds_with_its_kubectl_layer(version: str) -> None:
    stack = _stack()
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
    cluster = InferenceCluster(stack, "Eks", cluster_name="c", vpc=vpc, kubernetes_version=version)
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::EKS::Cluster", {"Version": version})
    layers = [c for c in cluster.node.find_all() if type(c).__name__ == f"KubectlV{version.split('.')[1]}Layer"]
    assert layers, f"no kubectl layer for {version}"


def test_public_endpoint_is_warned_and_the_warning_can_be_acknowledged() -> None:
    stack = _stack()
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
    cluster = InferenceCluster(stack, "Eks", cluster_name="c", vpc=vpc,
                               endpoint_access=ClusterEndpointAccess.PUBLIC_AND_PRIVATE)
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp(".*reachable from the internet.*"))
    other = _stack()
    vpc2 = ec2.Vpc(other, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
    quiet = InferenceCluster(other, "Eks", cluster_name="c", vpc=vpc2,
                             endpoint_access=ClusterEndpointAccess.PUBLIC_AND_PRIVATE)
    CdkAnnotations.of(quiet).acknowledge_warning("@hyperpod-inference-iac/InferenceCluster:publicEndpoint",
                                                 "reviewed: CI runners outside the VPC")
    Annotations.from_stack(other).has_no_warning("*", Match.string_like_regexp(".*reachable from the internet.*"))
    assert cluster.cluster is not None


def test_capture_storage_needs_no_feature_flag() -> None:
    """Outside an app's cdk.json (no context at all), the construct still synthesizes, with server access
    logs through the log bucket's policy (not a LogDeliveryWrite ACL)."""
    stack = _stack(context={})
    CaptureStorage(stack, "Storage", capture_bucket_name="captures-123456789012", key_alias="alias/capture")
    template = Template.from_stack(stack).to_json()
    buckets = [v for v in template["Resources"].values() if v["Type"] == "AWS::S3::Bucket"]
    assert len(buckets) == 4  # captures, TLS certificates, the audit trail (Object Lock), access logs
    assert all("AccessControl" not in b["Properties"] for b in buckets)
    logged = [b for b in buckets if "LoggingConfiguration" in b["Properties"]]
    assert len(logged) == 3


def test_capture_storage_brings_your_own_key_and_log_bucket() -> None:
    from aws_cdk import aws_kms as kms

    stack = _stack(context={})
    key = kms.Key.from_key_arn(stack, "Key", "arn:aws:kms:us-west-2:123456789012:key/1a2b3c4d-0000-1111-2222-3333")
    logs = s3.Bucket.from_bucket_name(stack, "Logs", "central-access-logs")
    storage = CaptureStorage(stack, "Storage", encryption_key=key, access_logs_bucket=logs)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::KMS::Key", 0)
    template.resource_count_is("AWS::S3::Bucket", 3)  # captures, TLS certificates, the audit trail
    assert storage.key is key and storage.access_log_bucket is logs


def test_vpc_without_zones_warns_that_a_concrete_environment_means_a_lookup() -> None:
    stack = _stack()
    PlatformVpc(stack, "Network")
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp(".*looks its availability zones up.*"))


def test_vpc_in_an_environment_agnostic_stack_needs_no_lookup() -> None:
    app = App(context={})
    stack = Stack(app, "Agnostic")
    PlatformVpc(stack, "Network")
    assembly = app.synth()
    manifest = json.loads((Path(assembly.directory) / "manifest.json").read_text())
    assert "missing" not in manifest
    messages = assembly.get_stack_by_name(stack.stack_name).messages
    assert not [m for m in messages if "availability zones" in str(m.entry.data)]


def test_operator_execution_role_needs_the_required_prefix() -> None:
    stack = _stack()
    cluster = _cluster(stack)
    tls = s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x")
    with pytest.raises(ConfigError) as caught:
        InferenceOperator(stack, "Operator", cluster=cluster, hyperpod_cluster_arn="arn", tls_bucket=tls,
                          execution_role_name="MyRole")
    assert caught.value.codes == ["InferenceOperator.ExecutionRoleName"]


def test_operator_takes_buckets_and_keys_without_certificate_or_zone() -> None:
    stack = _stack()
    cluster = _cluster(stack)
    tls = s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x")
    captures = s3.Bucket.from_bucket_name(stack, "Captures", "captures-x")
    operator = InferenceOperator(stack, "Operator", cluster=cluster, hyperpod_cluster_arn="arn", tls_bucket=tls,
                                 capture_bucket=captures)
    statements = json.dumps(Template.from_stack(stack).find_resources("AWS::IAM::Policy"))
    assert "captures-x/data-capture/*" in statements
    assert "UseEndpointCertificate" not in statements and "route53:" not in statements
    assert operator.addon.addon_name


def test_the_gateway_controller_gets_a_role_of_its_own_that_may_only_describe_the_platform_certificate() -> None:
    from aws_cdk import aws_certificatemanager as acm

    stack = _stack()
    cluster = _cluster(stack)
    tls = s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x")
    arn = "arn:aws:acm:us-west-2:111122223333:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
    certificate = acm.Certificate.from_certificate_arn(stack, "Certificate", arn)
    operator = InferenceOperator(stack, "Operator", cluster=cluster, hyperpod_cluster_arn="arn", tls_bucket=tls,
                                 certificate=certificate, addon_version="v2.0.0-eksbuild.2", inference_gateway=True)
    role = operator.gateway_controller_role
    assert role is not None
    template = Template.from_stack(stack)
    resolved = stack.resolve(role.role_arn)
    assert operator.configuration["inferenceGateway"]["enabled"] is True
    assert stack.resolve(operator.configuration["inferenceGateway"]["serviceAccount"]["roleArn"]) == resolved
    policies = [p for p in template.find_resources("AWS::IAM::Policy").values()
                if {"Ref": stack.resolve(role.node.default_child.logical_id)} in p["Properties"]["Roles"]
                or p["Properties"]["Roles"] == [stack.resolve(role.role_name)]]
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
    assert statements == [{"Sid": "DescribeGatewayCertificate", "Action": "acm:DescribeCertificate",
                           "Effect": "Allow", "Resource": arn}]
    trust = template.find_resources("AWS::IAM::Role")[stack.resolve(
        role.node.default_child.logical_id)]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Action"] for s in trust] == ["sts:AssumeRoleWithWebIdentity"]  # (the subject: a CfnJson, below)
    assert "system:serviceaccount:hyperpod-inference-system:inference-gateway-controller" in json.dumps(
        template.to_json())


@pytest.mark.parametrize(("changes", "codes"), [
    ({"addon_version": "v1.5.0-eksbuild.1"}, ["OperatorVersion.FeatureUnavailable"]),
    ({"certificate": None}, ["InferenceOperator.GatewayNeedsCertificate"]),
])
def test_the_gateway_controller_needs_an_addon_that_has_it_and_the_certificate(changes: dict[str, Any],
                                                                              codes: list[str]) -> None:
    from aws_cdk import aws_certificatemanager as acm

    stack = _stack()
    certificate = acm.Certificate.from_certificate_arn(
        stack, "Certificate", "arn:aws:acm:us-west-2:111122223333:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f")
    props: dict[str, Any] = {"certificate": certificate, "addon_version": "v2.0.0-eksbuild.2", **changes}
    with pytest.raises(ConfigError) as caught:
        InferenceOperator(stack, "Operator", cluster=_cluster(stack), hyperpod_cluster_arn="arn",
                          tls_bucket=s3.Bucket.from_bucket_name(stack, "Tls", "hyperpod-tls-x"),
                          inference_gateway=True, **props)
    assert caught.value.codes == codes


def test_operator_of_another_stack_than_its_tls_bucket_is_told_to_name_its_s3_csi_role() -> None:
    """The TLS bucket's allowlist (CaptureStorage, another stack) can name the Mountpoint driver's role only by a fixed
    name: the error names the property that gives it one, which the consumer can set, not the role's role_name."""
    app = App(context={})  # (with cdk.json's annotationsInValidationReport, the errors would fail the synth here)
    storage = CaptureStorage(Stack(app, "Storage", env=ENV), "Storage")
    stack = Stack(app, "Cluster", env=ENV)
    InferenceOperator(stack, "Operator", cluster=_cluster(stack), hyperpod_cluster_arn="arn",
                      tls_bucket=storage.tls_bucket, tls_bucket_key=storage.key)
    errors = [str(e.entry.data) for e in Annotations.from_stack(stack).find_error("*", Match.any_value())]
    assert errors and all("InferenceOperator(s3_csi_role_name=...)" in e for e in errors), errors
    assert all("S3CsiDriverRole" in e.id for e in Annotations.from_stack(stack).find_error("*", Match.any_value()))

    app = App(context=CONTEXT)
    storage = CaptureStorage(Stack(app, "Storage", env=ENV), "Storage")
    named = Stack(app, "Named", env=ENV)
    InferenceOperator(named, "Operator", cluster=_cluster(named), hyperpod_cluster_arn="arn",
                      tls_bucket=storage.tls_bucket, tls_bucket_key=storage.key, s3_csi_role_name="named-s3-csi")
    Annotations.from_stack(named).has_no_error("*", Match.any_value())


def _external_dns(stack: Stack, **props: Any) -> ExternalDns:
    zone = route53.HostedZone.from_hosted_zone_attributes(stack, "Zone", hosted_zone_id="Z0123456789ABC",
                                                          zone_name="inference.example.com")
    defaults: dict[str, Any] = {"hosted_zones": [zone], "owner_id": "c", "role_name": "c-external-dns",
                                "namespaces": ["inference"], "hostnames": ["qwen.inference.example.com"]}
    return ExternalDns(stack, "Dns", cluster=_cluster(stack), **{**defaults, **props})


def _external_dns_statements(stack: Stack) -> dict[str, dict[str, Any]]:
    policies = Template.from_stack(stack).find_resources("AWS::IAM::Policy")
    (policy,) = [p for p in policies.values() if "ChangeRecordsInNamedZones" in json.dumps(p)]
    return {s["Sid"]: {**s, "Principal": "*"} for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def test_external_dns_changes_records_in_its_zones_only() -> None:
    stack = _stack()
    dns = _external_dns(stack)
    statements = _external_dns_statements(stack)
    assert "hostedzone/Z0123456789ABC" in json.dumps(statements["ChangeRecordsInNamedZones"]["Resource"])
    assert statements["FindTheZones"]["Action"] == "route53:ListHostedZones"
    release = dns.releases["inference"]
    assert release.values["extraArgs"] == ["--zone-id-filter=Z0123456789ABC", "--namespace=inference"]
    assert release.values["serviceAccount"] == {"name": "external-dns-inference", "annotations": {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/c-external-dns"}}
    assert (release.release, release.namespace, release.values["policy"]) == (
        "external-dns-inference", "kube-system", "upsert-only")


def test_external_dns_changes_only_the_records_of_its_hostnames() -> None:
    """Evaluated with the conditions (tests/support/policy_eval.py): the names ExternalDNS 0.16 writes for a
    Service behind a load balancer (alias A and AAAA, TXT ownership records in both formats), created or upserted."""
    stack = _stack()
    _external_dns(stack)
    statements = list(_external_dns_statements(stack).values())
    zone = "arn:aws:route53:::hostedzone/Z0123456789ABC"

    def change(names: tuple[str, ...], types: tuple[str, ...] = ("A", "TXT"),
               actions: tuple[str, ...] = ("UPSERT",), resource: str = zone) -> str:
        role = "arn:aws:iam::123456789012:role/c-external-dns"
        return decision(statements, Request("route53:ChangeResourceRecordSets", resource, role, None, {
            "route53:ChangeResourceRecordSetsNormalizedRecordNames": names,
            "route53:ChangeResourceRecordSetsRecordTypes": types,
            "route53:ChangeResourceRecordSetsActions": actions}))

    published = ("qwen.inference.example.com", "cname-qwen.inference.example.com", "aaaa-qwen.inference.example.com",
                 "a-qwen.inference.example.com")
    assert change(published, ("A", "AAAA", "TXT"), ("CREATE",)) == "allow"
    assert change(published[:2]) == "allow"
    assert change(("api.inference.example.com",)) == "neutral"  # another name of the zone
    assert change((*published[:1], "inference.example.com")) == "neutral"  # one name outside spoils the batch
    assert change(published[:1], actions=("DELETE",)) == "neutral"  # upsert-only never deletes
    assert change(published[:1], actions=("DELETE", "CREATE")) == "neutral"
    assert change(published[:1], types=("NS",)) == "neutral"
    assert change(published[:1], resource="arn:aws:route53:::hostedzone/ZOTHER") == "neutral"


def test_external_dns_watches_its_namespaces_only_one_release_each() -> None:
    stack = _stack()
    dns = _external_dns(stack, namespaces=["inference", "team-b"], hostnames=None)
    assert [r.values["extraArgs"][-1] for r in dns.releases.values()] == ["--namespace=inference",
                                                                        "--namespace=team-b"]
    template = Template.from_stack(stack)
    charts = template.find_resources("Custom::AWSCDK-EKS-HelmChart")
    assert sorted(c["Properties"]["Release"] for c in charts.values()) == ["external-dns-inference",
                                                                          "external-dns-team-b"]
    assert all(c["Properties"]["Namespace"] == "kube-system" for c in charts.values())
    trust = json.dumps(template.find_resources("Custom::AWSCDKCfnJson"))  # IRSA conditions (deploy-time issuer)
    assert "system:serviceaccount:kube-system:external-dns-inference" in trust
    assert "system:serviceaccount:kube-system:external-dns-team-b" in trust
    names = _external_dns_statements(stack)["ChangeRecordsInNamedZones"]["Condition"]["ForAllValues:StringEquals"]
    assert "route53:ChangeResourceRecordSetsNormalizedRecordNames" not in names
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp(".*no hostnames given.*"))
    long_namespace = "n" * 63
    assert len(release_name(long_namespace)) == 53 and release_name(long_namespace) != release_name("n" * 62)


@pytest.mark.parametrize(("props", "codes"), [
    ({"namespaces": []}, ["ExternalDns.NoNamespaces"]),
    ({"namespaces": ["Inference", "inference", "inference"]},
     ["ExternalDns.BadNamespace", "ExternalDns.DuplicateNamespace"]),
    ({"hostnames": ["*.inference.example.com", "api.other.org"]},
     ["ExternalDns.BadHostname", "ExternalDns.HostnameOutsideZones"]),
    ({"hosted_zones": []}, ["ExternalDns.NoHostedZones"]),
])
def test_external_dns_validation(props: dict[str, Any], codes: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        _external_dns(_stack(), **props)
    assert caught.value.codes == codes


# -- flow logs, network policies, log retention ------------------------------------------------------------
def _flow_logs(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [v["Properties"] for v in template["Resources"].values() if v["Type"] == "AWS::EC2::FlowLog"]


@pytest.mark.parametrize(("traffic", "expected"), [(FlowLogTraffic.REJECT, ["REJECT"]), ("ACCEPT", ["ACCEPT"]),
                                                   (None, [])])
def test_platform_vpc_flow_log_traffic_or_none(traffic: FlowLogTraffic | None, expected: list[str]) -> None:
    stack = _stack()
    network = PlatformVpc(stack, "Network", availability_zones=["us-west-2a", "us-west-2b"], flow_log_traffic=traffic)
    assert [f["TrafficType"] for f in _flow_logs(Template.from_stack(stack).to_json())] == expected
    assert (network.flow_log is None) == (traffic is None)


def test_existing_vpc_gets_a_flow_log_only_when_asked() -> None:
    attributes = {"vpc_id": "vpc-0123456789abcdef0", "vpc_cidr": "10.0.0.0/16",
                  "availability_zones": ["us-west-2a", "us-west-2b"],
                  "private_subnet_ids": ["subnet-01234567", "subnet-89abcdef"]}
    quiet = _stack()
    existing_vpc(quiet, "Network", **attributes)
    assert not [c for c in quiet.node.find_all() if isinstance(c, ec2.CfnFlowLog)]  # (an empty stack: no synth)
    logged = _stack()
    existing_vpc(logged, "Network", **attributes, flow_log_traffic=FlowLogTraffic.ALL,
                 flow_log_retention=logs.RetentionDays.ONE_MONTH)
    template = Template.from_stack(logged)
    (flow_log,) = _flow_logs(template.to_json())
    assert flow_log["ResourceId"] == "vpc-0123456789abcdef0" and flow_log["TrafficType"] == "ALL"
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})


def test_flow_log_traffic_is_a_closed_set() -> None:
    with pytest.raises(ConfigError) as caught:
        PlatformVpc(_stack(), "Network", flow_log_traffic="everything")  # type: ignore[arg-type]
    assert caught.value.codes == ["Network.FlowLogTraffic"]


def test_inference_cluster_without_network_policies_leaves_the_vpc_cni_alone() -> None:
    stack = _stack()
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"])
    cluster = InferenceCluster(stack, "Eks", cluster_name="c", vpc=vpc, enforce_network_policies=False,
                               control_plane_log_retention=logs.RetentionDays.TWO_YEARS)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EKS::Addon", 0)
    template.has_resource_properties("AWS::Logs::LogGroup", {"LogGroupName": "/aws/eks/c/cluster",
                                                             "RetentionInDays": 731})
    assert cluster.vpc_cni_addon is None

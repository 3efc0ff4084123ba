"""Reference parity: what the constructs synthesize, compared with AWS's own references (aws/, SOURCES.md).

Every action, key or component of a reference is present on our side (narrowed by conditions where the request it
stands for still passes) or named in exclusions.yaml with why and what breaks; the control tests show that each
comparison fails when a reference item goes missing from our side or appears in the reference only."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from aws_cdk import App, CfnElement, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from hyperpod_inference_iac import (
    NVIDIA_DEVICE_PLUGIN,
    HyperPodCluster,
    InferenceCluster,
    InferenceOperator,
    InstanceGroup,
)
from hyperpod_inference_iac.cluster.eks_cluster import VPC_CNI_MANAGED_POLICY, VPC_CNI_SERVICE_ACCOUNT
from hyperpod_inference_iac.cluster.hyperpod_dependencies import (
    HEALTH_MONITORING_AGENT_ACCOUNTS,
    HEALTH_MONITORING_AGENT_INSTANCE_TYPES,
    HEALTH_MONITORING_AGENT_TAG,
    HYPERPOD_CHART_REVISION,
    HYPERPOD_NAMESPACE,
    HYPERPOD_NVIDIA_INSTANCE_TYPES,
    INSTALLED_COMPONENTS,
    NODE_HEALTH_TOLERATION,
    dependency_manifests,
    health_monitoring_agent_image,
)
from hyperpod_inference_iac.foundation.scaling_metrics import PrometheusWorkspace, ScalingMetrics
from tests.references import parity
from tests.unit.test_platform_constructs import CONTEXT, ENV

REGION, ACCOUNT = "us-west-2", "123456789012"


@dataclass
class Synth:
    stack: Stack
    template: dict[str, Any]
    cluster: InferenceCluster
    hyperpod: HyperPodCluster
    operator: InferenceOperator

    def logical_id(self, construct: Any) -> str:
        element = construct.node.default_child or next(
            c for c in construct.node.find_all() if isinstance(c, CfnElement))  # (a KubernetesManifest's resource)
        return self.stack.get_logical_id(element)

    def ours(self) -> parity.Ours:
        resolve = self.stack.resolve
        vpc = self.hyperpod.props.vpc or self.cluster.props.vpc
        return parity.Ours(
            account=ACCOUNT, region=REGION,
            vpc_arn=parity.flatten(resolve(self.stack.format_arn(service="ec2", resource="vpc",
                                                                 resource_name=vpc.vpc_id))),
            cluster_arn=parity.flatten(resolve(self.cluster.cluster.cluster_arn)),
            bucket_arn=parity.flatten(resolve(self.hyperpod.lifecycle_bucket.bucket_arn)))

    def execution_statements(self) -> list[dict[str, Any]]:
        return parity.identity_statements(self.template, self.logical_id(self.hyperpod.execution_role), ACCOUNT)


@pytest.fixture(scope="module")
def synth() -> Synth:
    stack = Stack(App(context=CONTEXT), "Parity", env=ENV)
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    cluster = InferenceCluster(stack, "Eks", cluster_name="parity", vpc=vpc)
    hyperpod = HyperPodCluster(
        stack, "HyperPod", cluster_name="parity-hp", eks_cluster=cluster.cluster, subnets=vpc.private_subnets,
        security_groups=[cluster.cluster.cluster_security_group],
        instance_groups=[InstanceGroup(name="gpu", instance_type="ml.g5.12xlarge", instance_count=1,
                                       deep_health_checks=["InstanceStress"])])
    operator = InferenceOperator(stack, "Operator", cluster=cluster.cluster, hyperpod_cluster_arn=hyperpod.cluster_arn,
                                 tls_bucket=s3.Bucket.from_bucket_name(stack, "Tls", "parity-tls"),
                                 gated_model_namespaces=("inference",),
                                 # (every scaler the platform supports, so KEDA's role holds all it may)
                                 scaling_metrics=ScalingMetrics(cloudwatch=True, prometheus_workspaces=(
                                     PrometheusWorkspace(REGION, "ws-0123abcd"),)))
    return Synth(stack, Template.from_stack(stack).to_json(), cluster, hyperpod, operator)


# -- The HyperPod execution role (sagemaker-iam-role-template.yaml) ------------------------------------------------

def test_execution_role_has_every_grant_of_awss_setup_template(synth: Synth) -> None:
    reference, _ = parity.execution_role_reference()
    assert parity.missing_grants(reference, synth.execution_statements(), synth.ours(),
                                 parity.EXECUTION_ROLE_TEMPLATE.name) == []


def test_execution_role_has_the_templates_managed_policy_and_trust(synth: Synth) -> None:
    _, managed = parity.execution_role_reference()
    role = synth.template["Resources"][synth.logical_id(synth.hyperpod.execution_role)]["Properties"]
    ours = [parity.flatten(arn).rsplit("/", 1)[1] for arn in role["ManagedPolicyArns"]]
    assert ours == managed == ["AmazonSageMakerClusterInstanceRolePolicy"]
    reference = yaml.safe_load(parity.EXECUTION_ROLE_TEMPLATE.read_text())["Resources"]["ExecutionRole"]
    reference_trust = reference["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
    assert [s["Principal"]["Service"] for s in role["AssumeRolePolicyDocument"]["Statement"]] == reference_trust


def test_execution_role_still_narrows_what_the_template_leaves_open(synth: Synth) -> None:
    """Narrower than the reference where the reference's request still passes: another VPC's interface, another
    region, another bucket prefix are not allowed."""
    statements, ours = synth.execution_statements(), synth.ours()
    other_vpc = parity.Request("ec2:AssignPrivateIpAddresses", ours.arn("network-interface/eni-1"), "arn:x", None,
                               {"aws:RequestedRegion": REGION, "ec2:Vpc": ours.arn("vpc/vpc-other")})
    assert parity.decision(statements, other_vpc) == "neutral"
    other_region = parity.Request("ec2:DescribeInstances", "*", "arn:x", None, {"aws:RequestedRegion": "eu-west-1"})
    assert parity.decision(statements, other_region) == "neutral"
    other_object = parity.Request("s3:GetObject", f"{ours.bucket_arn}/elsewhere/x", "arn:x", None, {})
    assert parity.decision(statements, other_object) == "neutral"


# -- The VPC CNI (AmazonEKS_CNI_Policy) ----------------------------------------------------------------------------

def test_the_vpc_cni_addon_has_its_own_role_with_the_managed_cni_policy(synth: Synth) -> None:
    addon = synth.template["Resources"][synth.logical_id(synth.cluster.vpc_cni_addon)]["Properties"]
    assert synth.cluster.vpc_cni_role is not None
    role_id = synth.logical_id(synth.cluster.vpc_cni_role)
    assert addon["AddonName"] == "vpc-cni"
    assert addon["ServiceAccountRoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    role = synth.template["Resources"][role_id]["Properties"]
    assert [parity.flatten(arn).rsplit("/", 1)[1] for arn in role["ManagedPolicyArns"]] == [VPC_CNI_MANAGED_POLICY]
    trust = json.dumps(role["AssumeRolePolicyDocument"])
    namespace, service_account = VPC_CNI_SERVICE_ACCOUNT
    conditions = next(r for r in synth.template["Resources"].values() if r["Type"] == "Custom::AWSCDKCfnJson"
                      and f"system:serviceaccount:{namespace}:{service_account}" in json.dumps(r))
    assert "sts:AssumeRoleWithWebIdentity" in trust and conditions


def test_the_execution_role_grants_every_action_of_the_cni_policy(synth: Synth) -> None:
    """aws-node on a HyperPod node runs with the execution role when the add-on has no role of its own
    (enforce_network_policies=False, an imported cluster): the role grants the whole CNI policy, in our VPC."""
    assert parity.missing_grants(parity.cni_policy_reference(), synth.execution_statements(), synth.ours(),
                                 parity.CNI_POLICY.name) == []


# -- The inference add-on's configuration (helm_to_addon.sh) --------------------------------------------------------

def test_the_addon_configuration_has_every_key_awss_migration_writes(synth: Synth) -> None:
    assert parity.missing_addon_keys(synth.operator.configuration) == []


# -- The inference add-on's roles (inference-addon-iam-roles-template.yaml) ----------------------------------------

def _addon_role(synth: Synth, name: str) -> parity.RoleView | None:
    operator = synth.operator
    role = {"S3CsiDriverRole": operator.s3_csi_role, "KedaRole": operator.keda_role,
            "AlbControllerRole": operator.alb_controller_role, "JumpstartGatedModelRole": operator.gated_model_role,
            "InferenceOperatorExecutionRole": operator.execution_role}.get(name)
    return parity.role_view(synth.template, synth.logical_id(role), ACCOUNT) if role is not None else None


@pytest.mark.parametrize("name", sorted(parity.addon_roles_reference()))
def test_each_addon_role_has_every_item_of_awss_template(synth: Synth, name: str) -> None:
    reference = parity.addon_roles_reference()[name]
    assert parity.missing_role_items(name, reference, _addon_role(synth, name)) == []


def test_control_an_addon_role_without_an_action_or_with_a_wider_trust_fails(synth: Synth) -> None:
    reference = parity.addon_roles_reference()["AlbControllerRole"]
    ours = _addon_role(synth, "AlbControllerRole")
    assert ours is not None
    without = parity.RoleView(ours.subjects, ours.managed,
                              tuple(a for a in ours.actions if a != "elasticloadbalancing:RegisterTargets"))
    assert parity.missing_role_items("AlbControllerRole", reference, without) == [
        "AlbControllerRole elasticloadbalancing:RegisterTargets"]
    elsewhere = parity.RoleView(("other-namespace:aws-load-balancer-controller",), ours.managed, ours.actions)
    assert parity.missing_role_items("AlbControllerRole", reference, elsewhere) == [
        "AlbControllerRole trust hyperpod-inference-system:aws-load-balancer-controller"]


# -- The dependency chart (HyperPodHelmChart) -----------------------------------------------------------------------

def test_every_default_component_of_the_dependency_chart_is_installed_or_excluded(synth: Synth) -> None:
    ours = [*INSTALLED_COMPONENTS, *(["nvidia-device-plugin"] if synth.cluster.device_plugin is not None else [])]
    assert parity.missing_components(ours) == []


def test_every_resiliency_component_of_the_readme_is_a_default_component() -> None:
    """The README's "Required For: HyperPod Resiliency" rows are subcharts the comparison above covers."""
    names = {"Deep health check": "deep-health-check", "Health monitoring agent": "health-monitoring-agent",
             "Job auto restart": "job-auto-restart", "MPI Operator": "mpi-operator",
             "HyperPod patching": "hyperpod-patching"}
    required = [re.sub(r"\[(.*?)\]\(.*?\)", r"\1", name) for name in parity.resiliency_components()]
    charts = [names.get(name, name) for name in required]
    assert {"deep-health-check", "health-monitoring-agent", "hyperpod-patching"} <= set(charts) <= (
        set(parity.default_components()))


@pytest.mark.parametrize("component", INSTALLED_COMPONENTS)
def test_each_installed_component_matches_its_subchart(component: str) -> None:
    ours = dependency_manifests(agent_image=health_monitoring_agent_image(REGION))
    assert parity.missing_objects(component, ours, REGION) == []


def test_the_manifests_are_what_the_cluster_applies_before_hyperpod(synth: Synth) -> None:
    assert synth.hyperpod.dependencies is not None
    manifest_id = synth.logical_id(synth.hyperpod.dependencies)
    assert manifest_id in synth.template["Resources"][synth.logical_id(synth.hyperpod.cfn_cluster)]["DependsOn"]
    applied = json.loads(synth.template["Resources"][manifest_id]["Properties"]["Manifest"])
    for manifest in applied:  # (the kubectl provider's prune label is its own)
        labels = manifest["metadata"].get("labels", {})
        for label in [k for k in labels if k.startswith("aws.cdk.eks/prune-")]:
            del labels[label]
        if not labels:
            manifest["metadata"].pop("labels", None)
    assert applied == dependency_manifests(agent_image=health_monitoring_agent_image(REGION))


def test_the_agent_image_and_instance_types_are_the_charts() -> None:
    image = yaml.safe_load((parity.CHART / "charts/health-monitoring-agent/image.excerpt.yaml").read_text())
    assert image["imageTag"] == HEALTH_MONITORING_AGENT_TAG
    assert image["regionAccountMap"] == dict(HEALTH_MONITORING_AGENT_ACCOUNTS)
    daemon_set = next(o for o in parity.subchart_objects("health-monitoring-agent", REGION) if o["kind"] == "DaemonSet")
    terms = daemon_set["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == list(HEALTH_MONITORING_AGENT_INSTANCE_TYPES)
    assert yaml.safe_load(
        (parity.CHART / "charts/health-monitoring-agent/values.yaml").read_text())["namespace"] == HYPERPOD_NAMESPACE


def test_the_pinned_revision_is_the_one_awss_stack_installs() -> None:
    template = yaml.safe_load((parity.SETUP / "helm-chart-template.yaml").read_text())
    variables = template["Resources"]["HelmCustomResourceFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["GITHUB_REPO_REVISION"]["Fn::If"][2] == HYPERPOD_CHART_REVISION  # (without RIG)
    assert variables["CHART_PATH"] == {"Ref": "HelmRepoPath"}
    assert template["Parameters"]["HelmRepoPath"]["Default"] == "helm_chart/HyperPodHelmChart"


def test_the_nvidia_device_plugin_runs_on_hyperpod_gpu_nodes_as_awss_values_say() -> None:
    reference = yaml.safe_load((parity.CHART / "values.yaml").read_text())["nvidia-device-plugin"]
    ours = NVIDIA_DEVICE_PLUGIN.values
    assert NVIDIA_DEVICE_PLUGIN.namespace == reference["namespaceOverride"]
    assert parity.missing_fields(reference["tolerations"], ours["tolerations"]) == []
    assert dict(NODE_HEALTH_TOLERATION) in reference["tolerations"]
    reference_terms = reference["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    our_terms = ours["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert parity.missing_fields(reference_terms, our_terms) == []
    assert reference_terms[0]["matchExpressions"][0]["values"] == list(HYPERPOD_NVIDIA_INSTANCE_TYPES)


# -- The exclusion list --------------------------------------------------------------------------------------------

def test_every_exclusion_is_still_needed(synth: Synth) -> None:
    """Each excluded item is one the reference has and ours lacks (no entry outlives the gap it explains)."""
    table = parity.exclusions()
    chart = set(parity.default_components()) - set(INSTALLED_COMPONENTS) - {"nvidia-device-plugin"}
    assert set(table.pop("HyperPodHelmChart/Chart.yaml")) == chart
    ours = dependency_manifests(agent_image=health_monitoring_agent_image(REGION))
    for component in INSTALLED_COMPONENTS:
        items = set(table.pop(component, {}))
        if items:
            reference_gaps = set(_gaps(component, ours))
            assert items <= reference_gaps, items - reference_gaps
    addon_items = set(table.pop(parity.ADDON_ROLES.name, {}))
    gaps = {item for name, reference in parity.addon_roles_reference().items()
            for item in _role_gaps(name, reference, _addon_role(synth, name))}
    assert addon_items <= gaps, addon_items - gaps
    assert table == {}, f"exclusions for references no test compares: {sorted(table)}"


def _role_gaps(name: str, reference: dict[str, Any], ours: parity.RoleView | None) -> list[str]:
    """What ``missing_role_items`` would report without the exclusions."""
    table = parity._exclusions()
    saved = table.pop(parity.ADDON_ROLES.name, None)
    try:
        return parity.missing_role_items(name, reference, ours)
    finally:
        if saved is not None:
            table[parity.ADDON_ROLES.name] = saved


def _gaps(component: str, ours: list[dict[str, Any]]) -> list[str]:
    """What ``missing_objects`` would report without the exclusions."""
    by_key = {f"{o['kind']}/{o['metadata']['name']}": o for o in ours}
    return [f"{key} {field}" for reference in parity.subchart_objects(component, REGION)
            for key in [f"{reference['kind']}/{reference['metadata']['name']}"] if key in by_key
            for field in parity.missing_fields(reference, by_key[key])]


# -- Control tests: each comparison fails when a reference item is missing on our side ---------------------------

def test_control_an_execution_role_without_a_cni_action_fails(synth: Synth) -> None:
    removed = "ec2:AssignPrivateIpAddresses"
    statements = [{**s, "Action": [a for a in s["Action"] if a != removed]} if isinstance(s["Action"], list) else s
                  for s in synth.execution_statements()]
    reference, _ = parity.execution_role_reference()
    assert parity.missing_grants(reference, statements, synth.ours(), parity.EXECUTION_ROLE_TEMPLATE.name) == [removed]
    assert parity.missing_grants(parity.cni_policy_reference(), statements, synth.ours(),
                                 parity.CNI_POLICY.name) == [removed]


def test_control_a_reference_action_we_do_not_grant_fails(synth: Synth) -> None:
    reference, _ = parity.execution_role_reference()
    added = [*reference, {"Effect": "Allow", "Action": ["ec2:AssignIpv6Addresses"], "Resource": "*"}]
    assert parity.missing_grants(added, synth.execution_statements(), synth.ours(),
                                 parity.EXECUTION_ROLE_TEMPLATE.name) == ["ec2:AssignIpv6Addresses"]


def test_control_a_missing_addon_key_fails(synth: Synth) -> None:
    configuration = dict(synth.operator.configuration)
    del configuration["hyperpodClusterArn"]
    configuration["keda"] = {"enabled": False, "auth": configuration["keda"]["auth"]}
    assert parity.missing_addon_keys(configuration) == ["hyperpodClusterArn", "keda.enabled"]


def test_control_a_missing_component_object_or_field_fails() -> None:
    ours = dependency_manifests(agent_image=health_monitoring_agent_image(REGION))
    without_binding = [o for o in ours if o["metadata"]["name"] != "deep-health-check-service-account-role-binding"]
    assert parity.missing_objects("deep-health-check", without_binding, REGION) == [
        "ClusterRoleBinding/deep-health-check-service-account-role-binding"]
    role = next(o for o in ours if o["metadata"]["name"] == "hyperpod-patching")
    role["rules"] = role["rules"][:1]  # no pods/eviction: HyperPod could not drain a node
    assert parity.missing_objects("hyperpod-patching", ours, REGION) == ["ClusterRole/hyperpod-patching .rules[1]"]
    assert parity.missing_components(["health-monitoring-agent", "nvidia-device-plugin"]) == [
        "deep-health-check", "hyperpod-patching"]

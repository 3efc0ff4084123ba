"""The parts of HyperPod's dependency Helm chart that HyperPod's resiliency needs, as Kubernetes manifests.

AWS's reference stack (``aws/sagemaker-hyperpod-cluster-setup``, ``helm-chart-template.yaml``) installs the chart
``helm_chart/HyperPodHelmChart`` of ``aws/sagemaker-hyperpod-cli`` at :data:`HYPERPOD_CHART_REVISION` before it
creates the HyperPod cluster; the chart's README marks the health-monitoring agent, the deep-health-check
permissions, job auto-restart and HyperPod patching "Required For HyperPod Resiliency". The chart lives in a git
repository, not in a Helm repository, so ``aws_eks_v2.HelmChart`` cannot pin it by version; and its agent image is
chosen at install time by a Helm ``lookup`` of the nodes' region labels. The parts an inference cluster needs are
small (a namespace, RBAC, one DaemonSet), so they are written here as manifests, from the chart's templates at that
revision, with the region taken from the stack: nothing is downloaded at synth, two synths are identical, and
``tests/references`` compares every object, rule and container setting with the vendored chart templates.

What is left out (training-only subcharts, device plugins this library installs itself) is listed, with the
reason and what breaks without it, in ``tests/references/exclusions.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import CfnMapping, Stack, Token
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from hyperpod_inference_iac.foundation.cdk_types import ClusterLike, as_icluster
from hyperpod_inference_iac.foundation.validation import Problems, is_unresolved

# aws/sagemaker-hyperpod-cli, as helm-chart-template.yaml's GITHUB_REPO_REVISION pins it (without RIG).
HYPERPOD_CHART_REPOSITORY = "https://github.com/aws/sagemaker-hyperpod-cli.git"
HYPERPOD_CHART_PATH = "helm_chart/HyperPodHelmChart"
HYPERPOD_CHART_REVISION = "f57185916d4f7d2fa85caf6a03c04fd17172d330"
HYPERPOD_NAMESPACE = "aws-hyperpod"
# The subcharts of the dependency chart these manifests stand for.
INSTALLED_COMPONENTS = ("health-monitoring-agent", "deep-health-check", "hyperpod-patching")

HEALTH_MONITORING_AGENT = "health-monitoring-agent"
HEALTH_MONITORING_AGENT_TAG = "1.0.742.0_1.0.241.0"
HEALTH_MONITORING_AGENT_REPOSITORY = "hyperpod-health-monitoring-agent"
# The ECR account of the agent's image in each region (the chart's _helpers.tpl regionAccountMap).
HEALTH_MONITORING_AGENT_ACCOUNTS: Mapping[str, str] = {
    "us-east-1": "767398015722",
    "us-west-2": "905418368575",
    "us-east-2": "851725546812",
    "us-west-1": "011528288828",
    "eu-central-1": "211125453373",
    "eu-north-1": "654654141839",
    "eu-west-1": "533267293120",
    "eu-west-2": "011528288831",
    "ap-northeast-1": "533267052152",
    "ap-south-1": "011528288864",
    "ap-southeast-1": "905418428165",
    "ap-southeast-2": "851725636348",
    "sa-east-1": "025066253954",
}
# The instance types the agent runs on (the DaemonSet's node affinity in the chart).
HEALTH_MONITORING_AGENT_INSTANCE_TYPES = (
    "ml.p5en.48xlarge", "ml.p5e.48xlarge", "ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge",
    "ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge", "ml.g5.12xlarge", "ml.g5.16xlarge",
    "ml.g5.24xlarge", "ml.g5.48xlarge",
    "ml.inf2.xlarge", "ml.inf2.8xlarge", "ml.inf2.24xlarge", "ml.inf2.48xlarge", "ml.trn1.32xlarge",
    "ml.trn1n.32xlarge",
    "ml.g6.xlarge", "ml.g6.2xlarge", "ml.g6.4xlarge", "ml.g6.8xlarge", "ml.g6.16xlarge", "ml.g6.12xlarge",
    "ml.g6.24xlarge", "ml.g6.48xlarge", "ml.gr6.4xlarge", "ml.gr6.8xlarge",
    "ml.g6e.xlarge", "ml.g6e.2xlarge", "ml.g6e.4xlarge", "ml.g6e.8xlarge", "ml.g6e.16xlarge", "ml.g6e.12xlarge",
    "ml.g6e.24xlarge", "ml.g6e.48xlarge",
    "ml.trn2.48xlarge", "ml.p6-b200.48xlarge", "ml.p6e-gb200.36xlarge",
)
# The NVIDIA instance types the chart's nvidia-device-plugin values select on HyperPod nodes, and the taint HyperPod's
# health agent puts on a node it finds faulty (every plugin tolerates it, so a node under check keeps its GPUs).
HYPERPOD_NVIDIA_INSTANCE_TYPES = (
    "ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge", "ml.g5.12xlarge", "ml.g5.16xlarge",
    "ml.g5.24xlarge", "ml.g5.48xlarge",
    "ml.g6.xlarge", "ml.g6.2xlarge", "ml.g6.4xlarge", "ml.g6.8xlarge", "ml.g6.16xlarge", "ml.g6.12xlarge",
    "ml.g6.24xlarge", "ml.g6.48xlarge",
    "ml.g6e.xlarge", "ml.g6e.2xlarge", "ml.g6e.4xlarge", "ml.g6e.8xlarge", "ml.g6e.12xlarge", "ml.g6e.16xlarge",
    "ml.g6e.24xlarge", "ml.g6e.48xlarge",
    "ml.gr6.4xlarge", "ml.gr6.8xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge",
    "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.p6e-gb200.36xlarge",
)
NODE_HEALTH_TOLERATION: Mapping[str, str] = {"key": "sagemaker.amazonaws.com/node-health-status",
                                             "operator": "Equal", "value": "Unschedulable", "effect": "NoSchedule"}
_INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def health_monitoring_agent_image(region: str, tag: str = HEALTH_MONITORING_AGENT_TAG) -> str:
    """The agent's image in ``region`` (a literal region of :data:`HEALTH_MONITORING_AGENT_ACCOUNTS`)."""
    return f"{HEALTH_MONITORING_AGENT_ACCOUNTS[region]}.dkr.ecr.{region}.amazonaws.com/" \
           f"{HEALTH_MONITORING_AGENT_REPOSITORY}:{tag}"


def check_health_agent_region(problems: Problems, path: str, region: str) -> None:
    """``HyperPodCluster.NoHealthAgentImage`` at ``path`` for a literal region where the agent has no image (HyperPod
    nodes pull images of their own region only); a token (an environment-agnostic stack) is looked up at deploy."""
    if is_unresolved(region) or region in HEALTH_MONITORING_AGENT_ACCOUNTS:
        return
    problems.add("HyperPodCluster.NoHealthAgentImage", path,
                 f"HyperPod's health-monitoring agent has no image in {region} (it has one in "
                 f"{', '.join(sorted(HEALTH_MONITORING_AGENT_ACCOUNTS))}); deploy to one of those regions", region)


def _instance_type_affinity(instance_types: tuple[str, ...]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": _INSTANCE_TYPE_LABEL, "operator": "In", "values": list(instance_types)}]}]}}}


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": rules}


def _binding(name: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject]}


def _service_account(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": HYPERPOD_NAMESPACE}}


def _service_account_subject(name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": HYPERPOD_NAMESPACE}


def dependency_manifests(*, agent_image: str) -> list[dict[str, Any]]:
    """The objects of :data:`INSTALLED_COMPONENTS`, as the chart's templates at :data:`HYPERPOD_CHART_REVISION`
    render them with their default values (namespace ``aws-hyperpod``), the agent running ``agent_image``."""
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": HYPERPOD_NAMESPACE, "labels": {"name": HYPERPOD_NAMESPACE}}}
    deep_health_check = "deep-health-check-service-account"
    agent = HEALTH_MONITORING_AGENT
    agent_container = {
        "name": agent,
        "args": ["--enable-k8s-exporter=false", "--config.system-log-monitor=/config/system-message-monitor.json"],
        "image": agent_image,
        "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "500m", "memory": "512Mi"}},
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"runAsUser": 1000, "runAsGroup": 2000},
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
        "volumeMounts": [{"name": "log", "mountPath": "/var/log"},
                         {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True},
                         {"name": "localtime", "mountPath": "/etc/localtime", "readOnly": True}],
    }
    daemon_set = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": agent, "namespace": HYPERPOD_NAMESPACE, "labels": {"app": agent}},
        "spec": {"selector": {"matchLabels": {"app": agent}}, "template": {
            "metadata": {"labels": {"app": agent}},
            "spec": {
                "affinity": _instance_type_affinity(HEALTH_MONITORING_AGENT_INSTANCE_TYPES),
                "containers": [agent_container],
                "serviceAccountName": agent,
                "volumes": [{"name": "log", "hostPath": {"path": "/var/log/"}},
                            {"name": "kmsg", "hostPath": {"path": "/dev/kmsg"}},
                            {"name": "localtime", "hostPath": {"path": "/etc/localtime"}}],
                "tolerations": [{"effect": "NoSchedule", "operator": "Exists"},
                                {"effect": "NoExecute", "operator": "Exists"}],
            }}},
    }
    return [
        namespace,
        # deep-health-check: the service account HyperPod's deep health checks run their pods with.
        _service_account(deep_health_check),
        _cluster_role(f"{deep_health_check}-role", [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]}]),
        _binding(f"{deep_health_check}-role-binding", f"{deep_health_check}-role",
                 _service_account_subject(deep_health_check)),
        # health-monitoring-agent: watches each node's logs and marks a faulty node for HyperPod to replace.
        _cluster_role(agent, [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["patch"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]}]),
        _service_account(agent),
        _binding(agent, agent, _service_account_subject(agent)),
        daemon_set,
        # hyperpod-patching: lets HyperPod's service-linked role drain a node before it patches or replaces it.
        _cluster_role("hyperpod-patching", [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]),
        _binding("hyperpod-patching", "hyperpod-patching",
                 {"kind": "User", "name": "hyperpod-service-linked-role", "apiGroup": "rbac.authorization.k8s.io"}),
    ]


def agent_image_of(scope: Construct) -> str:
    """The agent's image for the stack's region: a literal when the region is known (it must be one of
    :data:`HEALTH_MONITORING_AGENT_ACCOUNTS`: the node role pulls images of its own region only), else an
    ``Fn::FindInMap`` on ``AWS::Region`` (a region without an image fails the deploy at the mapping)."""
    stack = Stack.of(scope)
    region = stack.region
    if not Token.is_unresolved(region):
        return health_monitoring_agent_image(region)
    mapping_id = "HyperPodHealthMonitoringAgentAccounts"
    mapping = stack.node.try_find_child(mapping_id)
    if not isinstance(mapping, CfnMapping):
        mapping = CfnMapping(stack, mapping_id, mapping={
            name: {"account": account} for name, account in HEALTH_MONITORING_AGENT_ACCOUNTS.items()})
    account = mapping.find_in_map(stack.region, "account")
    return f"{account}.dkr.ecr.{region}.{stack.url_suffix}/{HEALTH_MONITORING_AGENT_REPOSITORY}:" \
           f"{HEALTH_MONITORING_AGENT_TAG}"


def apply_dependencies(scope: Construct, id: str, *, cluster: ClusterLike) -> eks.KubernetesManifest:
    """Apply :func:`dependency_manifests` to ``cluster`` through its kubectl provider (a child of ``scope``)."""
    return eks.KubernetesManifest(scope, id, cluster=as_icluster(cluster),
                                  manifest=dependency_manifests(agent_image=agent_image_of(scope)), overwrite=True)

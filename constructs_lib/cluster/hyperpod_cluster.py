"""A SageMaker HyperPod cluster orchestrated by an existing EKS cluster, as one typed construct.

aws-cdk-lib only has the L1 ``aws_sagemaker.CfnCluster``; this construct adds what a working
cluster needs around it and checks the input against the CloudFormation schema at synth time:

* a hardened lifecycle bucket with ``hyperpod_lifecycle/on_create.sh`` deployed under
  ``lifecycle/`` (the script moves containerd onto instance-store NVMe, see the script);
* the instance groups' execution role: trusted by ``sagemaker.amazonaws.com`` for HyperPod clusters
  of this account and region only, with the AWS managed ``AmazonSageMakerClusterInstanceRolePolicy``
  (required by HyperPod; it is an instance-role policy, not a ``*FullAccess`` one), read access to
  the lifecycle scripts, and the network-interface (in the cluster's VPC only), ECR pull, Pod Identity
  and log permissions HyperPod nodes use;
* the EKS access entry of type ``HYPERPOD_LINUX`` that lets the nodes join the cluster (no access
  policies: that type cannot have any, and nodes never get cluster-admin);
* HyperPod's dependency components (:mod:`hyperpod_dependencies`: the health-monitoring agent, the deep health
  checks' and HyperPod patching's permissions), applied to the EKS cluster as AWS's reference stack installs its
  dependency Helm chart: before the HyperPod cluster;
* the ``AWS::SageMaker::Cluster`` itself, created after the scripts are uploaded, the role has its
  permissions, the access entry and the dependency components exist;
* a retention on the cluster's log group ``/aws/sagemaker/Clusters/<name>/<cluster id>``. The id is
  assigned at creation (the last part of the cluster ARN), so the group cannot be created beforehand
  with CloudFormation: two SDK calls after the cluster create it if it does not exist yet and put the
  retention policy, each allowed on that one group only.

The EKS cluster must use the ``API`` or ``API_AND_CONFIG_MAP`` authentication mode (``aws_eks_v2``
always does).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from aws_cdk import Duration, Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from constructs import Construct

from hyperpod_inference_iac.charts.plan import (
    NodeGroupPlacement,
)
from hyperpod_inference_iac.cluster.hyperpod_dependencies import (
    INSTALLED_COMPONENTS,
    apply_dependencies,
    check_health_agent_region,
)
from hyperpod_inference_iac.foundation._package_data import (
    package_dir,
)
from hyperpod_inference_iac.foundation.agreement import (
    HyperPodPart,
    agree,
)
from hyperpod_inference_iac.foundation.cdk_types import (
    ClusterLike,
    as_icluster,
)
from hyperpod_inference_iac.foundation.log_retention import (
    DEFAULT_RETENTION,
    days_of,
)
from hyperpod_inference_iac.foundation.nag import (
    acknowledge,
    managed_policy,
    resource_evidence,
    stack_singletons,
)
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_SUBDOMAIN,
    LABEL_NAME,
    LABEL_VALUE,
    S3_BUCKET_NAME,
    SAGEMAKER_INSTANCE_TYPE,
    SAGEMAKER_NAME,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.risks import (
    RiskWarnings,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)
from hyperpod_inference_iac.security.hardened_bucket import (
    hardened_bucket,
)
from hyperpod_inference_iac.security.s3_access import (
    KMS_WRITE_ACTIONS,
    grant_key_through_s3,
    kms_through_s3,
)

LIFECYCLE_SCRIPTS_DIR = package_dir("hyperpod_inference_iac.cluster", "hyperpod_lifecycle")
LIFECYCLE_PREFIX = "lifecycle/"
ON_CREATE_SCRIPT = "on_create.sh"
INSTANCE_ROLE_MANAGED_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
CLUSTER_LOG_GROUP_PREFIX = "/aws/sagemaker/Clusters/"
MAX_SUBNETS = 16  # VpcConfig.Subnets
SECURITY_GROUPS = (1, 5)  # VpcConfig.SecurityGroupIds
INSTANCE_COUNT_MAX = 1000
EBS_VOLUME_GIB = (1, 16384)
# ClusterKubernetesConfig (SageMaker API): at most 50 labels and 50 taints per instance group.
MAX_KUBERNETES_LABELS = 50
MAX_KUBERNETES_TAINTS = 50
# Label and taint key prefixes an instance group may not use. Kubernetes reserves kubernetes.io/ and k8s.io/ (and
# their subdomains) for its own components, and a kubelet refuses to start with a --node-labels key under them that
# is not on its short allowed list (NodeRestriction): a node given one would never join. HyperPod sets its own
# sagemaker.amazonaws.com/ labels and taints (node-health-status, instance-group-name, ...) and its health agent
# changes them: a group's own value there would fight the agent, or hide an unhealthy node from the scheduler.
RESERVED_KEY_DOMAINS = ("kubernetes.io", "k8s.io", "sagemaker.amazonaws.com")


class NodeRecovery(enum.StrEnum):
    AUTOMATIC = "Automatic"  # HyperPod replaces or reboots faulty nodes
    NONE = "None"


class DeepHealthCheck(enum.StrEnum):
    INSTANCE_STRESS = "InstanceStress"  # GPU/accelerator stress test
    INSTANCE_CONNECTIVITY = "InstanceConnectivity"  # EFA/NCCL


class CapacityType(enum.StrEnum):
    """How an instance group's nodes are bought (``CapacityRequirements``: ``OnDemand`` or ``Spot``)."""

    ON_DEMAND = "OnDemand"
    SPOT = "Spot"  # EC2 may reclaim a node with a two-minute notice: see warn_hyperpod_cluster


class TaintEffect(enum.StrEnum):
    """What a Kubernetes taint does to pods that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"  # not scheduled there; pods already running stay
    PREFER_NO_SCHEDULE = "PreferNoSchedule"  # the scheduler avoids the node, but may still use it
    NO_EXECUTE = "NoExecute"  # not scheduled there, and evicted when already running

# What HyperPod does with the execution role in the customer VPC (VpcConfig), as AWS documents it for the
# role: create the nodes' network interfaces, let the service attach them, detach and delete them.
# The Describe calls support no resource-level permissions.
# With them, the VPC CNI's actions that AWS's setup template (sagemaker-iam-role-template.yaml) grants the role in
# its "<prefix>_AmazonEKS_CNI_Policy": aws-node on a HyperPod node runs with the node's role when the vpc-cni add-on
# has no role of its own (InferenceCluster(enforce_network_policies=False), an imported cluster).
_NETWORK_DESCRIBE_ACTIONS = [
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeTags",
    "ec2:DescribeVpcs",
]
# These change network interfaces. EC2 authorizes each resource of a request on its own, and ec2:Vpc is a
# condition key of the network interface (Delete, Detach, the permissions), the subnet and the security group
# (Create), but not of the interface being created nor of the instance resource type (Detach authorizes the
# node too): with ...IfExists, every interface, subnet and security group they touch must be in the cluster's
# VPC, and the role can no longer detach or delete the other network interfaces of the Region.
_NETWORK_INTERFACE_ACTIONS = [
    "ec2:AssignPrivateIpAddresses",
    "ec2:AttachNetworkInterface",
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
]
_ECR_PULL_ACTIONS = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
_LOG_ACTIONS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]


_NAME_RULE = "must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit"
_KEY_RULE = ("must be a Kubernetes label key: an optional DNS-subdomain prefix (at most 253 characters) and '/', then "
             "1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
_VALUE_RULE = "must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"


def is_label_key(key: str) -> bool:
    """A Kubernetes label (and taint) key: ``[<DNS subdomain, <= 253>/]<name, <= 63>``."""
    prefix, slash, name = key.rpartition("/")
    if not LABEL_NAME.match(name):
        return False
    return not slash or (0 < len(prefix) <= 253 and DNS1123_SUBDOMAIN.match(prefix) is not None)


def reserved_key_domain(key: str) -> str | None:
    """The reserved domain (:data:`RESERVED_KEY_DOMAINS`) a key's prefix is, or is a subdomain of; else None."""
    prefix, slash, _ = key.rpartition("/")
    if not slash:
        return None
    return next((domain for domain in RESERVED_KEY_DOMAINS if prefix == domain or prefix.endswith(f".{domain}")),
                None)


def _check_key(problems: Problems, path: str, key: str, code: str) -> None:
    """A label or taint key's syntax (``code``), then its prefix (``HyperPodCluster.ReservedKey``): one problem."""
    if is_unresolved(key):
        return
    if not is_label_key(key):
        problems.add(code, path, _KEY_RULE, key)
    elif (domain := reserved_key_domain(key)) is not None:
        owner = "HyperPod" if domain == "sagemaker.amazonaws.com" else "Kubernetes"
        problems.add("HyperPodCluster.ReservedKey", path,
                     f"uses the prefix {domain}/, which {owner} reserves for its own labels and taints; "
                     "choose a prefix of your own (e.g. example.com/)", key)


@dataclass(frozen=True, kw_only=True)
class KubernetesTaint(Props):
    """One Kubernetes taint HyperPod puts on every node of an instance group (``ClusterKubernetesTaint``;
    ``hyperpod.instanceGroups[i].kubernetesTaints[j]`` in the app's config)."""

    CONSTRUCT: ClassVar[str] = "HyperPodCluster"

    key: str = prop(doc="Taint key, a Kubernetes label key (`[<DNS subdomain>/]<name>`), e.g. "
                        "`example.com/dedicated`. Not under `kubernetes.io/`, `k8s.io/` or `sagemaker.amazonaws.com/`.")
    effect: TaintEffect = prop(doc="`NoSchedule` (pods without a toleration are not scheduled on the nodes), "
                                   "`PreferNoSchedule` (avoided when possible) or `NoExecute` (also evicts them).")
    value: str | None = prop(None, default_doc="no value",
                             doc="Taint value, 1-63 letters, digits, `-`, `_` or `.`. A toleration with operator "
                                 "`Equal` must name it; `Exists` matches any.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        _check_key(problems, at.at("key"), self.key, "HyperPodCluster.InvalidTaintKey")
        value = self.value
        # An empty value is refused rather than left out: the API's taint value has 1-63 characters, and a
        # value given as "" is more likely a mistake than a wish for none (leave it out for none).
        if value is not None and not is_unresolved(value) and (value == "" or not LABEL_VALUE.match(value)):
            problems.add("HyperPodCluster.InvalidTaintValue", at.at("value"),
                         f"{_VALUE_RULE}; leave it out for a taint without a value", value)
        if self.effect not in TaintEffect._value2member_map_:
            problems.add("HyperPodCluster.TaintEffect", at.at("effect"), f"must be one of {', '.join(TaintEffect)}",
                         self.effect)

    def tolerated_by(self, toleration: Mapping[str, Any]) -> bool:
        """Whether a pod's toleration (core/v1 ``Toleration``: ``key``, ``operator``, ``value``, ``effect``)
        tolerates this taint, as the Kubernetes scheduler decides: the effect matches or is not given, the key
        matches or is not given (with ``Exists``), and ``Exists`` matches any value while ``Equal`` (the default
        operator) matches the value exactly (an absent value is ``""``). An operator Kubernetes does not know
        tolerates nothing."""
        effect, key = toleration.get("effect") or "", toleration.get("key") or ""
        if effect and effect != self.effect:
            return False
        if key and key != self.key:
            return False
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            return True
        return operator == "Equal" and (toleration.get("value") or "") == (self.value or "")


@dataclass(frozen=True, kw_only=True)
class InstanceGroup(Props):
    """One HyperPod instance group (``hyperpod.instanceGroups[i]`` in the app's config)."""

    CONSTRUCT: ClassVar[str] = "HyperPodCluster"

    name: str = prop(doc="Instance group name, `^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$`, unique in the cluster.")
    instance_type: str = prop(doc="A SageMaker ML instance type, e.g. `ml.g6e.12xlarge`.")
    instance_count: int = prop(1, doc=f"Number of nodes (0..{INSTANCE_COUNT_MAX}; 0 keeps the group defined but "
                                      "empty).")
    threads_per_core: int = prop(1, doc="1 disables simultaneous multithreading (HyperPod's default for GPU "
                                        "training and inference), 2 enables it.")
    ebs_volume_gib: int = prop(500, key="ebsVolumeGiB",
                               doc=f"Secondary EBS volume per node in GiB, mounted at `/opt/sagemaker` "
                                   f"({EBS_VOLUME_GIB[0]}..{EBS_VOLUME_GIB[1]}).")
    deep_health_checks: Sequence[DeepHealthCheck | str] = prop(
        (), doc="Checks run when nodes start: `InstanceStress` (GPU/accelerator stress test) and/or "
                "`InstanceConnectivity` (EFA/NCCL). They add start-up time.")
    kubernetes_labels: Mapping[str, str] | None = prop(
        None, default_doc="none",
        doc=f"Kubernetes labels HyperPod puts on every node of the group and keeps through replacement, scaling and "
            f"patching (at most {MAX_KUBERNETES_LABELS}): keys `[<DNS subdomain>/]<name>`, not under "
            "`kubernetes.io/`, `k8s.io/` or `sagemaker.amazonaws.com/`; values 1-63 letters, digits, `-`, `_` or "
            "`.`. Models select the group's nodes by them (`nodeSelector`, node affinity).")
    kubernetes_taints: Sequence[KubernetesTaint] = prop(
        (), doc=f"Kubernetes taints HyperPod puts on every node of the group (at most {MAX_KUBERNETES_TAINTS}, each "
                "key and effect once), each a `KubernetesTaint` (`key`, `value`, `effect`): only pods that tolerate "
                "them run there, e.g. inference nodes of their own on a cluster shared with training.")
    capacity_type: CapacityType = prop(
        CapacityType.ON_DEMAND,
        doc="`OnDemand` or `Spot` (`CapacityRequirements`). Spot nodes cost less but EC2 may reclaim them with a "
            "two-minute notice: see Warnings.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if not is_unresolved(self.name) and not SAGEMAKER_NAME.match(self.name):
            problems.add("HyperPodCluster.BadName", at.at("name"), _NAME_RULE, self.name)
        instance_type = self.instance_type
        if not is_unresolved(instance_type) and not SAGEMAKER_INSTANCE_TYPE.match(instance_type):
            hint = f" (did you mean 'ml.{instance_type}'?)" if not instance_type.startswith("ml.") else ""
            problems.add("HyperPodCluster.BadInstanceType", at.at("instance_type"),
                         f"must be a SageMaker instance type 'ml.<family>.<size>', e.g. 'ml.g6e.12xlarge'{hint}",
                         instance_type)
        if not is_unresolved(self.instance_count) and not 0 <= self.instance_count <= INSTANCE_COUNT_MAX:
            problems.add("HyperPodCluster.InstanceCount", at.at("instance_count"),
                         f"must be an integer from 0 to {INSTANCE_COUNT_MAX}", self.instance_count)
        if not is_unresolved(self.threads_per_core) and self.threads_per_core not in (1, 2):
            problems.add("HyperPodCluster.ThreadsPerCore", at.at("threads_per_core"),
                         "must be 1 (multithreading off) or 2 (on)", self.threads_per_core)
        low, high = EBS_VOLUME_GIB
        if not is_unresolved(self.ebs_volume_gib) and not low <= self.ebs_volume_gib <= high:
            problems.add("HyperPodCluster.VolumeSize", at.at("ebs_volume_gib"),
                         f"must be an integer from {low} to {high} (GiB; EbsVolumeConfig.VolumeSizeInGB)",
                         self.ebs_volume_gib)
        checks = list(self.deep_health_checks)
        for check_index, check in enumerate(checks):
            if check not in DeepHealthCheck._value2member_map_:
                problems.add("HyperPodCluster.DeepHealthCheck", at.at("deep_health_checks", check_index),
                             f"must be one of {', '.join(DeepHealthCheck)}", check)
        if len(set(checks)) != len(checks):
            problems.add("HyperPodCluster.DeepHealthCheck", at.at("deep_health_checks"), "must not repeat a check",
                         checks)
        self._check_scheduling(problems, at)
        if self.capacity_type not in CapacityType._value2member_map_:
            problems.add("HyperPodCluster.CapacityType", at.at("capacity_type"),
                         f"must be one of {', '.join(CapacityType)}", self.capacity_type)

    def _check_scheduling(self, problems: Problems, at: KeyPaths) -> None:
        """The labels' and taints' rules: the SageMaker API's (``ClusterKubernetesConfig``: Kubernetes key and value
        syntax, 50 of each) and the reserved prefixes, so a mistake is refused at synth rather than by a failed
        ``UpdateCluster`` on a running cluster."""
        labels = self.kubernetes_labels or {}
        if len(labels) > MAX_KUBERNETES_LABELS:
            problems.add("HyperPodCluster.TooManyLabels", at.at("kubernetes_labels"),
                         f"must have at most {MAX_KUBERNETES_LABELS} labels (ClusterKubernetesConfig.Labels)",
                         len(labels))
        for key, value in labels.items():
            path = at.at("kubernetes_labels", key)
            _check_key(problems, path, key, "HyperPodCluster.InvalidLabelKey")
            # Kubernetes allows an empty label value; HyperPod's API does not (1-63 characters).
            if is_unresolved(value):
                continue
            if value == "":
                problems.add("HyperPodCluster.InvalidLabelValue", path,
                             "must not be empty: HyperPod's API takes 1-63 characters (Kubernetes itself would allow "
                             "an empty value)", value)
            elif not isinstance(value, str) or not LABEL_VALUE.match(value):
                problems.add("HyperPodCluster.InvalidLabelValue", path, _VALUE_RULE, value)
        taints = list(self.kubernetes_taints)
        if len(taints) > MAX_KUBERNETES_TAINTS:
            problems.add("HyperPodCluster.TooManyTaints", at.at("kubernetes_taints"),
                         f"must have at most {MAX_KUBERNETES_TAINTS} taints (ClusterKubernetesConfig.Taints)",
                         len(taints))
        seen: set[tuple[str, str]] = set()
        for index, taint in enumerate(taints):
            taint_at = at.child("kubernetes_taints", index)
            taint.check(problems, taint_at)
            # Kubernetes keeps one taint per key and effect on a node (a second would replace the first).
            if (taint.key, str(taint.effect)) in seen:
                problems.add("HyperPodCluster.DuplicateTaint", taint_at.at("key"),
                             f"is tainted twice with effect {taint.effect}: a node holds one taint per key and effect",
                             taint.key)
            seen.add((taint.key, str(taint.effect)))

    def taints_without_toleration(self, tolerations: Sequence[Mapping[str, Any]], *,
                                  preferred: bool = False) -> tuple[KubernetesTaint, ...]:
        """The group's taints that none of ``tolerations`` (a pod spec's, core/v1 ``Toleration`` mappings)
        tolerates (:meth:`KubernetesTaint.tolerated_by`): empty when a pod with them may be scheduled on the group's
        nodes. ``PreferNoSchedule`` taints are left out unless ``preferred`` (the scheduler may still place the pod
        there). For a workload plan that places a model on this group (by its labels) to refuse it when the pod
        would stay pending."""
        effects = set(TaintEffect) if preferred else {TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE}
        return tuple(taint for taint in self.kubernetes_taints if taint.effect in effects
                     and not any(taint.tolerated_by(toleration) for toleration in tolerations))

    def placement(self) -> NodeGroupPlacement:
        """This group as a workload plan sees it (``PlatformContext.node_groups``): its instance type and the taints
        that keep a pod without tolerations off its nodes (the operator's models carry none yet)."""
        return NodeGroupPlacement(name=self.name, instance_type=self.instance_type, blocking_taints=tuple(
            f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for t in self.taints_without_toleration(())))


@dataclass(frozen=True, kw_only=True)
class HyperPodClusterOptions(Props):
    """A HyperPod cluster's properties a config file can set (``hyperpod`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "HyperPodCluster"

    cluster_name: str = prop(doc="HyperPod cluster name, `^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$`. A change replaces "
                                 "the cluster.")
    node_recovery: NodeRecovery = prop(NodeRecovery.AUTOMATIC,
                                       doc="`Automatic` (HyperPod replaces or reboots faulty nodes) or `None`.")
    instance_groups: Sequence[InstanceGroup] = prop(doc="At least one `InstanceGroup`, names unique.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if not is_unresolved(self.cluster_name) and not SAGEMAKER_NAME.match(self.cluster_name):
            problems.add("HyperPodCluster.BadName", at.at("cluster_name"), _NAME_RULE, self.cluster_name)
        self._check_placement(problems, at)
        if self.node_recovery not in NodeRecovery._value2member_map_:
            problems.add("HyperPodCluster.NodeRecovery", at.at("node_recovery"),
                         f"must be one of {', '.join(NodeRecovery)}", self.node_recovery)
        if not self.instance_groups:
            problems.add("HyperPodCluster.NoInstanceGroups", at.at("instance_groups"),
                         "must define at least one instance group")
        seen: set[str] = set()
        for index, group in enumerate(self.instance_groups):
            group_at = at.child("instance_groups", index)
            if group.name in seen:
                problems.add("HyperPodCluster.DuplicateInstanceGroup", group_at.at("name"),
                             "instance group names must be unique in a cluster", group.name)
            seen.add(group.name)
            group.check(problems, group_at)

    def _check_placement(self, problems: Problems, at: KeyPaths) -> None:
        """The rules of what only Python code passes (:class:`HyperPodClusterProps`: the nodes' network, the
        bucket), in the order of the construct's arguments."""


@dataclass(frozen=True, kw_only=True)
class HyperPodClusterProps(HyperPodClusterOptions):
    """:class:`HyperPodCluster`'s properties: its options, and what only Python code passes."""

    eks_cluster: ClusterLike = prop(doc="The orchestrating EKS cluster.", config=False)
    subnets: Sequence[ec2.ISubnet] = prop(doc=f"Subnets of the nodes' network interfaces (1..{MAX_SUBNETS}, private, "
                                              "in the EKS cluster's VPC).", config=False)
    security_groups: Sequence[ec2.ISecurityGroup] = prop(
        doc=f"Security groups of those interfaces ({SECURITY_GROUPS[0]}..{SECURITY_GROUPS[1]}). They must allow "
            "traffic to and from the EKS cluster security group.", config=False)
    lifecycle_bucket_name: str | None = prop(
        None, config=False, default_doc="CloudFormation generates a name",
        doc="Name of the lifecycle bucket this construct creates. The role reads it through an explicit grant, so "
            "it need not start with `sagemaker-` (the managed policy's own S3 scope).")
    lifecycle_scripts: str | Path | None = prop(
        None, config=False, default_doc="the package's `hyperpod_lifecycle/` folder",
        doc="Folder whose files (`.sh`, `.py`, `.json`, `.yaml`, `.txt`; not starting with `.` or `_`) are put "
            f"under `lifecycle/`. It must hold `{ON_CREATE_SCRIPT}`.")
    access_logs_bucket: s3.IBucket | None = prop(
        None, config=False, default_doc="no server access logs",
        doc="Where the lifecycle bucket's server access logs go, under `<bucket name>/` (or its lowercased unique "
            "construct id when unnamed). When it is an `s3.Bucket` in the same stack, or the lifecycle bucket has a "
            "literal name, the construct adds the statement that admits `logging.s3.amazonaws.com` to its policy "
            "(e.g. [CaptureStorage](capture-storage.md)'s `access_log_bucket`); otherwise see Warnings.")
    encryption_key: kms.IKey | None = prop(None, doc="KMS key of the lifecycle bucket.", config=False,
                                           default_doc="SSE-S3")
    log_retention: logs.RetentionDays = prop(
        DEFAULT_RETENTION, config=False,
        doc="How long the cluster's log group keeps its events. A new value is put again on the next deploy; a new "
            "cluster id (the cluster was replaced) is a new group, which both calls create and retain. The group is "
            "not KMS-encrypted (CloudWatch Logs encrypts it at rest with its own keys): the group is created by "
            "HyperPod or by the SDK call, and this construct has no key whose policy admits CloudWatch Logs.")
    vpc: ec2.IVpc | None = prop(
        None, config=False, default_doc="the EKS cluster's VPC",
        doc="The VPC of `subnets`: the execution role may create, detach and delete network interfaces of this VPC "
            "only. Required when `eks_cluster` was imported without its VPC (`HyperPodCluster.NoVpc`).")
    install_dependencies: bool = prop(
        True, config=False,
        doc=f"Apply HyperPod's dependency components ({', '.join(INSTALLED_COMPONENTS)}, from the dependency Helm "
            "chart AWS's reference stack installs) to the EKS cluster before the HyperPod cluster. Off only when "
            "`node_recovery` is `None` and no group has `deep_health_checks` (`HyperPodCluster.DependenciesRequired`).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        super().check(problems, at)
        if not self.install_dependencies:
            resilient = [what for what, on in (
                ("node_recovery is Automatic", self.node_recovery == NodeRecovery.AUTOMATIC),
                ("a group has deep_health_checks", any(group.deep_health_checks for group in self.instance_groups)))
                if on]
            if resilient:
                problems.add("HyperPodCluster.DependenciesRequired", at.at("install_dependencies"),
                             f"must be True while {' and '.join(resilient)}: HyperPod's resiliency needs the "
                             "health-monitoring agent and the deep health checks' permissions of its dependency "
                             "chart; set node_recovery to None and drop deep_health_checks to run without them",
                             False)
        elif getattr(self.eks_cluster, "kubectl_provider", None) is None:
            problems.add("HyperPodCluster.NoKubectlProvider", at.at("install_dependencies"),
                         "needs eks_cluster's kubectl provider to apply HyperPod's dependency components (an "
                         "InferenceCluster has one; give an eks.Cluster kubectl_provider_options, or import it with "
                         "its kubectl_provider)")
        scripts = self.scripts_folder
        if not (scripts / ON_CREATE_SCRIPT).is_file():
            problems.add("HyperPodCluster.NoOnCreateScript", at.at("lifecycle_scripts"),
                         f"must be a folder holding {ON_CREATE_SCRIPT}", str(scripts))

    def _check_placement(self, problems: Problems, at: KeyPaths) -> None:
        _check_placement(problems, at, vpc_known=self.vpc is not None or _vpc_of(self.eks_cluster) is not None,
                         subnet_count=len(self.subnets), security_group_count=len(self.security_groups),
                         lifecycle_bucket_name=self.lifecycle_bucket_name)

    @property
    def scripts_folder(self) -> Path:
        """The folder of the lifecycle scripts: ``lifecycle_scripts``, or the package's."""
        return Path(self.lifecycle_scripts) if self.lifecycle_scripts is not None else LIFECYCLE_SCRIPTS_DIR


@real_signature
class HyperPodCluster(Construct):
    """HyperPod cluster on an existing ``aws_eks_v2`` cluster, with its lifecycle scripts, execution
    role and EKS access entry.

    Properties: :class:`HyperPodClusterProps` (each with its type, default and meaning; the instance groups are
    :class:`InstanceGroup`); ``props`` keeps them.

    Attributes: ``cfn_cluster``, ``cluster_arn``, ``execution_role``, ``lifecycle_bucket``,
    ``lifecycle_scripts`` (the uploads), ``access_entry``, ``dependencies`` (the dependency components' manifest,
    None when not installed), ``log_group_name`` and ``log_retention_calls``
    (the two SDK calls). Its cdk-nag findings (the instance-role managed policy, node permissions without
    resource scoping, CDK's SDK-call provider, the log group's ARN form) are acknowledged here.
    """

    PROPS: ClassVar[type[Props]] = HyperPodClusterProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster_name: str,
        eks_cluster: ClusterLike,
        subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        instance_groups: Sequence[InstanceGroup],
        lifecycle_bucket_name: str | None = HyperPodClusterProps.lifecycle_bucket_name,
        lifecycle_scripts: str | Path | None = HyperPodClusterProps.lifecycle_scripts,
        node_recovery: NodeRecovery = HyperPodClusterProps.node_recovery,
        access_logs_bucket: s3.IBucket | None = HyperPodClusterProps.access_logs_bucket,
        encryption_key: kms.IKey | None = HyperPodClusterProps.encryption_key,
        log_retention: logs.RetentionDays = HyperPodClusterProps.log_retention,
        vpc: ec2.IVpc | None = HyperPodClusterProps.vpc,
        install_dependencies: bool = HyperPodClusterProps.install_dependencies,
    ) -> None:
        """Create the construct. Its properties (:class:`HyperPodClusterProps`, kept as ``self.props``):

        :param cluster_name: HyperPod cluster name, `^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$`. A change replaces the
            cluster. Default: required.
        :param node_recovery: `Automatic` (HyperPod replaces or reboots faulty nodes) or `None`. Default:
            ``NodeRecovery.AUTOMATIC``.
        :param instance_groups: At least one `InstanceGroup`, names unique. Default: required.
        :param eks_cluster: The orchestrating EKS cluster. Default: required.
        :param subnets: Subnets of the nodes' network interfaces (1..16, private, in the EKS cluster's VPC).
            Default: required.
        :param security_groups: Security groups of those interfaces (1..5). They must allow traffic to and from
            the EKS cluster security group. Default: required.
        :param lifecycle_bucket_name: Name of the lifecycle bucket this construct creates. The role reads it
            through an explicit grant, so it need not start with `sagemaker-` (the managed policy's own S3
            scope). Default: ``None`` (CloudFormation generates a name).
        :param lifecycle_scripts: Folder whose files (`.sh`, `.py`, `.json`, `.yaml`, `.txt`; not starting with
            `.` or `_`) are put under `lifecycle/`. It must hold `on_create.sh`. Default: ``None`` (the
            package's ``hyperpod_lifecycle/`` folder).
        :param access_logs_bucket: Where the lifecycle bucket's server access logs go, under `<bucket name>/`
            (or its lowercased unique construct id when unnamed). When it is an `s3.Bucket` in the same stack,
            or the lifecycle bucket has a literal name, the construct adds the statement that admits
            `logging.s3.amazonaws.com` to its policy (e.g. [CaptureStorage](capture-storage.md)'s
            `access_log_bucket`); otherwise see Warnings. Default: ``None`` (no server access logs).
        :param encryption_key: KMS key of the lifecycle bucket. Default: ``None`` (SSE-S3).
        :param log_retention: How long the cluster's log group keeps its events. A new value is put again on the
            next deploy; a new cluster id (the cluster was replaced) is a new group, which both calls create and
            retain. The group is not KMS-encrypted (CloudWatch Logs encrypts it at rest with its own keys): the
            group is created by HyperPod or by the SDK call, and this construct has no key whose policy admits
            CloudWatch Logs. Default: ``RetentionDays.THREE_MONTHS``.
        :param vpc: The VPC of `subnets`: the execution role may create, detach and delete network interfaces of
            this VPC only. Required when `eks_cluster` was imported without its VPC (`HyperPodCluster.NoVpc`).
            Default: ``None`` (the EKS cluster's VPC).
        :param install_dependencies: Apply HyperPod's dependency components (health-monitoring-agent,
            deep-health-check, hyperpod-patching, from the dependency Helm chart AWS's reference stack installs)
            to the EKS cluster before the HyperPod cluster. Off only when `node_recovery` is `None` and no group
            has `deep_health_checks` (`HyperPodCluster.DependenciesRequired`). Default: ``True``.
        """
        super().__init__(scope, id)
        self.props = props = HyperPodClusterProps(
            cluster_name=cluster_name, eks_cluster=eks_cluster, subnets=listed(subnets),
            security_groups=listed(security_groups), instance_groups=listed(instance_groups),
            lifecycle_bucket_name=lifecycle_bucket_name, lifecycle_scripts=lifecycle_scripts,
            node_recovery=node_recovery, access_logs_bucket=access_logs_bucket, encryption_key=encryption_key,
            log_retention=log_retention, vpc=vpc, install_dependencies=install_dependencies)
        props.raise_if_invalid(f"HyperPodCluster {self.node.path}")
        agree(self, HyperPodPart(construct=f"HyperPodCluster {self.node.path}", cluster=eks_cluster,
                                 instance_groups=tuple((g.name, g.instance_type) for g in props.instance_groups)))
        _check_agent_region(Stack.of(self).region, props.install_dependencies, f"HyperPodCluster {self.node.path}")
        warnings = RiskWarnings()
        warn_hyperpod_cluster(warnings, instance_groups=props.instance_groups)
        warnings.annotate(self)
        vpc = props.vpc or _vpc_of(props.eks_cluster)
        encryption_key = props.encryption_key
        stack = Stack.of(self)

        self.lifecycle_bucket = hardened_bucket(
            self,
            "LifecycleBucket",
            bucket_name=props.lifecycle_bucket_name,
            encryption_key=encryption_key,
            access_logs_bucket=props.access_logs_bucket,
            name_property="lifecycle_bucket_name",
            # Without a log bucket, a prefix alone would make S3 log the bucket into itself.
            lifecycle_rules=[
                s3.LifecycleRule(id="purge-replaced-scripts", noncurrent_version_expiration=Duration.days(30)),
            ],
        )
        self.lifecycle_scripts = self._upload_scripts(props.scripts_folder, encryption_key)

        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            description=f"HyperPod instance groups of {props.cluster_name}",
            # Confused-deputy guard: only HyperPod clusters of this account and region may assume it.
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}:cluster/*",
                    },
                },
            ),
            # Required by HyperPod for every instance group role (node agent, health monitoring).
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(INSTANCE_ROLE_MANAGED_POLICY)],
        )
        self._grant_read_lifecycle_scripts(stack, encryption_key)
        assert vpc is not None  # (HyperPodClusterProps.check refuses a cluster whose VPC is not known: NoVpc)
        self._grant_node_permissions(stack, props.eks_cluster, vpc)

        self.access_entry = eks.AccessEntry(
            self,
            "AccessEntry",
            cluster=as_icluster(props.eks_cluster),
            principal=self.execution_role.role_arn,
            access_entry_type=eks.AccessEntryType.HYPERPOD_LINUX,
            access_policies=[],
        )

        self.dependencies = apply_dependencies(self, "Dependencies", cluster=props.eks_cluster) \
            if props.install_dependencies else None
        source_s3_uri = f"s3://{self.lifecycle_bucket.bucket_name}/{LIFECYCLE_PREFIX}"
        self.cfn_cluster = sagemaker.CfnCluster(
            self,
            "Resource",
            cluster_name=props.cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=props.eks_cluster.cluster_arn),
            ),
            instance_groups=[self._instance_group(group, source_s3_uri) for group in props.instance_groups],
            node_recovery=str(props.node_recovery),
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[sg.security_group_id for sg in props.security_groups],
                subnets=[subnet.subnet_id for subnet in props.subnets],
            ),
        )
        # Nodes run on_create.sh and join EKS as soon as they boot: the scripts, the role's policies
        # and the access entry must exist first.
        # (The role itself is already a dependency through ExecutionRole's GetAtt; its policy is not.)
        role_policy = self.execution_role.node.find_child("DefaultPolicy")
        self.cfn_cluster.node.add_dependency(*self.lifecycle_scripts, role_policy, self.access_entry)
        if self.dependencies is not None:  # (AWS's reference stack installs the dependency chart first)
            self.cfn_cluster.node.add_dependency(self.dependencies)
        self.cluster_arn: str = self.cfn_cluster.attr_cluster_arn
        # arn:<partition>:sagemaker:<region>:<account>:cluster/<id>: the id is the part after the only "/".
        cluster_id = Fn.select(1, Fn.split("/", self.cluster_arn))
        self.log_group_name: str = f"{CLUSTER_LOG_GROUP_PREFIX}{props.cluster_name}/{cluster_id}"
        self.log_retention_calls = self._retain_cluster_logs(stack, props.log_retention)
        self._acknowledge_reviewed_findings(stack)

    def _acknowledge_reviewed_findings(self, stack: Stack) -> None:
        role = self.execution_role
        acknowledge(role, "hyperpod-managed-policy", managed_policy(INSTANCE_ROLE_MANAGED_POLICY))
        bucket = self.lifecycle_bucket
        acknowledge(role, "s3-object-wildcard-under-fixed-prefix",
                    *resource_evidence(self, bucket.arn_for_objects(f"{LIFECYCLE_PREFIX}*")))
        partition, region, account = stack.partition, stack.region, stack.account
        log_group = f"arn:{partition}:logs:{region}:{account}:log-group:{CLUSTER_LOG_GROUP_PREFIX}*"
        acknowledge(role, "hyperpod-node-permissions", *resource_evidence(self,
            "*", f"arn:{partition}:ec2:{region}:{account}:network-interface/*",
            f"arn:{partition}:ecr:{region}:*:repository/*", log_group, f"{log_group}:log-stream:*"))
        for call in self.log_retention_calls:
            acknowledge(call, "cloudwatch-log-group-arn", *resource_evidence(self, self._log_group_arn(stack)))
        for provider in stack_singletons(stack, "AWS679f53fac002430cb0da5b7982bd2287"):
            acknowledge(provider, "cdk-aws-custom-resource-managed-policy",
                        managed_policy("service-role/AWSLambdaBasicExecutionRole"))
            acknowledge(provider, "cdk-aws-custom-resource-runtime")

    def _log_group_arn(self, stack: Stack) -> str:
        """The form CloudWatch Logs authorizes log-group actions against (with the trailing ``:*``)."""
        return f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{self.log_group_name}:*"

    def _retain_cluster_logs(self, stack: Stack, retention: logs.RetentionDays) -> list[cr.AwsCustomResource]:
        """Create the cluster's log group unless HyperPod already did (a cluster without instances may have
        none yet, and nodes added later would create it without a retention), then put the retention on it.
        A new cluster id is a new group name, so both calls run again; removing them leaves the group (its
        retention still expires the events)."""
        group = self.log_group_name
        policy = cr.AwsCustomResourcePolicy.from_statements([iam.PolicyStatement(
            actions=["logs:CreateLogGroup", "logs:PutRetentionPolicy"], resources=[self._log_group_arn(stack)])])
        create = cr.AwsSdkCall(service="CloudWatchLogs", action="createLogGroup", parameters={"logGroupName": group},
                               physical_resource_id=cr.PhysicalResourceId.of(group),
                               ignore_error_codes_matching="ResourceAlreadyExistsException")
        retain = cr.AwsSdkCall(service="CloudWatchLogs", action="putRetentionPolicy",
                               parameters={"logGroupName": group, "retentionInDays": days_of(retention)},
                               physical_resource_id=cr.PhysicalResourceId.of(group))
        created = cr.AwsCustomResource(self, "CreateLogGroup", on_create=create, on_update=create, policy=policy,
                                       install_latest_aws_sdk=False)
        retained = cr.AwsCustomResource(self, "LogRetention", on_create=retain, on_update=retain, policy=policy,
                                        install_latest_aws_sdk=False)
        retained.node.add_dependency(created)
        return [created, retained]

    def _upload_scripts(self, folder: Path, key: kms.IKey | None) -> list[cr.AwsCustomResource]:
        """Each script as one object under ``lifecycle/``, put by an SDK call whose content is the script
        itself (a few KB): no asset bucket copy, no AWS CLI layer. A changed script is a new physical id, so
        CloudFormation puts it again; the bucket's versioning keeps the previous one for 30 days."""
        uploads = []
        scripts = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith((".", "_"))
                         and p.suffix in (".sh", ".py", ".json", ".yaml", ".txt"))
        for script in scripts:
            body = script.read_text(encoding="utf-8")
            object_key = f"{LIFECYCLE_PREFIX}{script.name}"
            digest = hashlib.sha256(body.encode()).hexdigest()[:16]
            call = cr.AwsSdkCall(
                service="S3", action="putObject",
                parameters={"Bucket": self.lifecycle_bucket.bucket_name, "Key": object_key, "Body": body},
                physical_resource_id=cr.PhysicalResourceId.of(f"{object_key}@{digest}"))
            upload = cr.AwsCustomResource(
                self, f"Upload-{script.name}", on_create=call, on_update=call,
                policy=cr.AwsCustomResourcePolicy.from_statements([iam.PolicyStatement(
                    actions=["s3:PutObject"], resources=[self.lifecycle_bucket.arn_for_objects(object_key)])]),
                # Explicit, whatever the app's @aws-cdk/customresources:installLatestAwsSdkDefault says.
                install_latest_aws_sdk=False)
            if key is not None:
                grant_key_through_s3(upload, key, KMS_WRITE_ACTIONS, self.lifecycle_bucket.bucket_arn)
            uploads.append(upload)
        return uploads

    def _instance_group(
        self, group: InstanceGroup, source_s3_uri: str
    ) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.instance_count,
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.ebs_volume_gib,
                    ),
                ),
            ],
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=source_s3_uri, on_create=ON_CREATE_SCRIPT,
            ),
            on_start_deep_health_checks=[str(check) for check in group.deep_health_checks] or None,
            kubernetes_config=_kubernetes_config(group),
            capacity_requirements=_capacity_requirements(group.capacity_type),
        )

    def _grant_read_lifecycle_scripts(self, stack: Stack, encryption_key: kms.IKey | None) -> None:
        """Exact actions on the ``lifecycle/`` prefix only (``bucket.grant_read`` would add wildcard
        actions such as ``s3:GetBucket*`` and ``s3:List*``)."""
        bucket = self.lifecycle_bucket
        role = self.execution_role
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="ReadLifecycleScripts", actions=["s3:GetObject"],
            resources=[bucket.arn_for_objects(f"{LIFECYCLE_PREFIX}*")],
        ))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="ListLifecycleScripts", actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [LIFECYCLE_PREFIX.rstrip("/"), f"{LIFECYCLE_PREFIX}*"]}},
        ))
        if encryption_key is not None:
            role.add_to_principal_policy(iam.PolicyStatement(
                sid="DecryptLifecycleScripts", actions=["kms:Decrypt"], resources=[encryption_key.key_arn],
                conditions=kms_through_s3(stack.region, bucket.bucket_arn),
            ))

    def _grant_node_permissions(self, stack: Stack, eks_cluster: ClusterLike, vpc: ec2.IVpc) -> None:
        role = self.execution_role
        in_this_region = {"StringEquals": {"aws:RequestedRegion": stack.region}}
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="DescribeTheNetwork", actions=_NETWORK_DESCRIBE_ACTIONS, resources=["*"], conditions=in_this_region,
        ))
        vpc_arn = stack.format_arn(service="ec2", resource="vpc", resource_name=vpc.vpc_id)
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="NodeNetworkInterfacesInClusterVpc", actions=_NETWORK_INTERFACE_ACTIONS, resources=["*"],
            conditions={**in_this_region, "StringEqualsIfExists": {"ec2:Vpc": vpc_arn}},
        ))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="TagNodeNetworkInterfaces", actions=["ec2:CreateTags"],
            resources=[f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}:network-interface/*"],
            conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}},
        ))
        # Authorization tokens have no resource; images come from AWS-owned accounts (EKS and HyperPod
        # system images) as well as the customer's, so the repository account stays open.
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="EcrAuthorizationToken", actions=["ecr:GetAuthorizationToken"], resources=["*"],
        ))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="EcrPullImages", actions=_ECR_PULL_ACTIONS,
            resources=[f"arn:{stack.partition}:ecr:{stack.region}:*:repository/*"],
        ))
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="PodIdentityOnThisCluster", actions=["eks-auth:AssumeRoleForPodIdentity"],
            resources=[eks_cluster.cluster_arn],
        ))
        # AWS's setup template grants it next to the ECR pull: read-only, and the likely reader is SageMaker watching
        # the alarms a rolling AMI update names (DeploymentConfiguration.AutoRollbackConfiguration). Kept to the region.
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="DescribeAlarms", actions=["cloudwatch:DescribeAlarms"], resources=["*"], conditions=in_this_region,
        ))
        log_group = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{CLUSTER_LOG_GROUP_PREFIX}*"
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="ClusterLogs", actions=_LOG_ACTIONS, resources=[log_group, f"{log_group}:log-stream:*"],
        ))


def _kubernetes_config(group: InstanceGroup) -> sagemaker.CfnCluster.ClusterKubernetesConfigProperty | None:
    """``KubernetesConfig`` when the group has labels or taints; left out otherwise, so a group without them
    synthesizes as before (no cluster update on upgrade). A taint without a value has no ``Value`` (the API's value
    has at least one character)."""
    labels = dict(group.kubernetes_labels or {})
    taints = [sagemaker.CfnCluster.ClusterKubernetesTaintProperty(key=taint.key, effect=str(taint.effect),
                                                                 value=taint.value)
              for taint in group.kubernetes_taints]
    if not labels and not taints:
        return None
    return sagemaker.CfnCluster.ClusterKubernetesConfigProperty(labels=labels or None, taints=taints or None)


def _capacity_requirements(
    capacity_type: CapacityType,
) -> sagemaker.CfnCluster.ClusterCapacityRequirementsProperty | None:
    """``CapacityRequirements: {Spot: {}}`` for Spot. On-Demand, HyperPod's default, is left out rather than written
    as ``{OnDemand: {}}``: a template of 0.3.0 stays the same, so upgrading the library does not update every
    existing cluster's instance groups."""
    if capacity_type == CapacityType.SPOT:
        return sagemaker.CfnCluster.ClusterCapacityRequirementsProperty(spot={})
    return None


def warn_hyperpod_cluster(warnings: RiskWarnings, at: KeyPaths = PROPS, *,
                          instance_groups: Sequence[InstanceGroup]) -> None:
    """The risky but legal choices of :class:`HyperPodCluster`'s properties (a config loader calls it with its key
    paths; the construct turns them into CDK warnings): an instance group on Spot capacity."""
    for index, group in enumerate(instance_groups):
        if group.capacity_type != CapacityType.SPOT:
            continue
        count = group.instance_count
        few = (f"; this group has {count} instance(s), so one reclaim can take all of its capacity: give it more "
               "than one" if isinstance(count, int) and count < 2 else "")
        warnings.add("HyperPodCluster:spotCapacity", at.child("instance_groups", index).at("capacity_type"),
                     "Spot nodes can be reclaimed by EC2 with a two-minute notice; the models on a reclaimed node "
                     "stop serving until their pods run elsewhere, and HyperPod provisions the replacement only when "
                     f"Spot capacity is available again{few}. Run inference on Spot only with more than one instance "
                     "and more than one replica per model, or use OnDemand")


def _check_agent_region(region: str, install: bool, source: str) -> None:
    """:func:`check_health_agent_region` of the stack's region, when the dependency components are installed."""
    if not install:
        return
    problems = Problems()
    check_health_agent_region(problems, PROPS.at("install_dependencies"), region)
    problems.raise_if_any(source)


def _vpc_of(eks_cluster: ClusterLike) -> ec2.IVpc | None:
    """The cluster's VPC, or None for a cluster imported without one (whose ``vpc`` raises)."""
    try:
        return eks_cluster.vpc
    except RuntimeError:
        return None


def check_hyperpod_cluster(
    problems: Problems,
    at: KeyPaths = PROPS,
    *,
    cluster_name: str,
    instance_groups: Sequence[InstanceGroup],
    node_recovery: str = NodeRecovery.AUTOMATIC,
    lifecycle_bucket_name: str | None = None,
    subnet_count: int | None = None,
    security_group_count: int | None = None,
    instance_group_names: dict[str, str] | None = None,
    vpc_known: bool | None = None,
) -> None:
    """:meth:`HyperPodClusterOptions.check` of these options, and the rules of the Python-only properties given as
    counts (kept for callers of 0.2.0; ``instance_group_names`` maps :class:`InstanceGroup` fields to a loader's
    keys; ``vpc_known``: whether the VPC of the nodes' network interfaces is known, given or the EKS cluster's)."""
    if instance_group_names:
        at = KeyPaths(at.base, {**at.names, **{f"instance_groups[].{name}": key
                                               for name, key in instance_group_names.items()}})
    options = HyperPodClusterOptions(cluster_name=cluster_name, instance_groups=listed(instance_groups),
                                     node_recovery=node_recovery)  # type: ignore[arg-type]
    options.check(problems, at)
    _check_placement(problems, at, vpc_known=vpc_known, subnet_count=subnet_count,
                     security_group_count=security_group_count, lifecycle_bucket_name=lifecycle_bucket_name)


def _check_placement(problems: Problems, at: KeyPaths, *, vpc_known: bool | None, subnet_count: int | None,
                     security_group_count: int | None, lifecycle_bucket_name: str | None) -> None:
    if vpc_known is False:
        problems.add("HyperPodCluster.NoVpc", at.at("vpc"),
                     "must be given: the EKS cluster was imported without its VPC, and the execution role may change "
                     "the network interfaces of that VPC only")
    if subnet_count is not None:
        if subnet_count < 1:
            problems.add("HyperPodCluster.NoSubnets", at.at("subnets"),
                         "must name at least one subnet for the nodes' network interfaces (VpcConfig.Subnets)")
        elif subnet_count > MAX_SUBNETS:
            problems.add("HyperPodCluster.TooManySubnets", at.at("subnets"),
                         f"VpcConfig allows at most {MAX_SUBNETS} subnets", subnet_count)
    if security_group_count is not None and not SECURITY_GROUPS[0] <= security_group_count <= SECURITY_GROUPS[1]:
        problems.add("HyperPodCluster.SecurityGroups", at.at("security_groups"),
                     "must name 1 to 5 security groups (VpcConfig.SecurityGroupIds)", security_group_count)
    if lifecycle_bucket_name is not None and not is_unresolved(lifecycle_bucket_name) and (
            not S3_BUCKET_NAME.match(lifecycle_bucket_name) or ".." in lifecycle_bucket_name):
        problems.add("HyperPodCluster.BadBucketName", at.at("lifecycle_bucket_name"),
                     "must be an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-'", lifecycle_bucket_name)

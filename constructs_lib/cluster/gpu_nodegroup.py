"""An EKS managed node group of NVIDIA GPU instances whose instance-store NVMe disks become one fast
local volume for kubelet and containerd.

Why a construct: CDK's GPU default AMI is still AL2 (end of life since November 2025), CDK has no
helper for instance-store setup, and an instance type without instance store silently leaves model
images and weights on the EBS root volume. This construct sets the AL2023 NVIDIA AMI explicitly,
writes the nodeadm ``NodeConfig`` that assembles the NVMe disks, and rejects instance types that
have no NVIDIA GPU or no instance store before anything is deployed.

On the node, nodeadm (AL2023's node initialiser) reads the ``application/node.eks.aws`` part of the
launch template's user data; with ``spec.instance.localStorage.strategy: RAID0`` it builds one
RAID0 array of all instance-store NVMe disks, mounts it at ``/mnt/k8s-disks/0`` and bind-mounts
kubelet's and containerd's state directories (``/var/lib/kubelet``, ``/var/lib/containerd``) and
pod logs onto it, so container images, ``emptyDir`` volumes and ``hostPath`` model caches under
``/mnt/k8s-disks/0`` all live on NVMe. EKS merges this part with the ``NodeConfig`` it generates
for the cluster connection (API endpoint, CA), so no cluster details are written here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from hyperpod_inference_iac.cluster.node_launch_template import (
    launch_template_spec,
    node_launch_template,
)
from hyperpod_inference_iac.foundation.agreement import (
    NodeGroupPart,
    agree,
)
from hyperpod_inference_iac.foundation.cdk_types import (
    ClusterLike,
    as_icluster,
    cfn_child,
)
from hyperpod_inference_iac.foundation.instance_store import (
    GPU_FAMILIES_WITHOUT_INSTANCE_STORE,
    NEURON_FAMILIES,
    NVME_GPU_FAMILIES,
    families_with_nvme,
    family_and_size,
    size_order,
)
from hyperpod_inference_iac.foundation.nag import (
    acknowledge,
    managed_policy,
)
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_NAME,
    LABEL_VALUE,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    mapped,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
INSTANCE_STORE_LABEL = "node.kubernetes.io/instance-store"
NODEGROUP_LABEL = "hyperpod-inference-iac/nodegroup"
GPU_TAINT_KEY = "nvidia.com/gpu"
NODEADM_CONTENT_TYPE = "application/node.eks.aws"
ROOT_VOLUME_GIB = (20, 16384)  # gp3 limits; the AL2023 NVIDIA AMI needs at least 20
MAX_NODES = 1000  # EKS managed node group quota (nodes per group)
NODE_ROLE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy")


class LocalStorageStrategy(enum.StrEnum):
    """nodeadm's ``spec.instance.localStorage.strategy`` for the instance-store disks."""

    RAID0 = "RAID0"  # one striped array: all capacity and bandwidth
    RAID10 = "RAID10"  # mirrored stripes; nodeadm needs at least 4 instance-store disks
    MOUNT = "Mount"  # each disk mounted on its own under /mnt/k8s-disks/


@dataclass(frozen=True, kw_only=True)
class GpuNodeGroupOptions(Props):
    """A GPU node group's properties a config file can set (``cluster.gpuNodeGroups[i]`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "GpuNodeGroup"

    name: str = prop(doc="Node group name, a DNS-1123 label. Also the value of the "
                         "`hyperpod-inference-iac/nodegroup` label.")
    instance_types: Sequence[str] = prop(
        doc="EC2 instance types, e.g. `[\"g6e.12xlarge\"]`. Each must be an x86_64 NVIDIA GPU type with "
            "instance-store NVMe (`NVME_GPU_FAMILIES`).")
    min_size: int = prop(0, doc="Minimum number of nodes; 0 lets the group scale to zero.")
    desired_size: int = prop(1, doc="Initial number of nodes, from the minimum to the maximum.")
    max_size: int = prop(2, doc=f"Maximum number of nodes (1..{MAX_NODES}).")
    root_volume_gib: int = prop(200, key="rootVolumeGiB",
                                doc=f"Size of the encrypted gp3 root volume in GiB ({ROOT_VOLUME_GIB[0]}.."
                                    f"{ROOT_VOLUME_GIB[1]}): the OS, and what instance store does not take.")
    labels: Mapping[str, str] | None = prop(None, doc="Extra Kubernetes node labels. They may not redefine the "
                                                      "three labels the construct sets.", default_doc="none")
    local_storage_strategy: LocalStorageStrategy = prop(
        LocalStorageStrategy.RAID0,
        doc="nodeadm's `localStorage.strategy`: `RAID0` (one striped array), `RAID10` (mirrored stripes; nodeadm "
            "needs at least 4 disks, e.g. the 8-disk p4d.24xlarge or p5.48xlarge, while most g sizes have 1 or 2), "
            "`Mount` (each disk on its own under `/mnt/k8s-disks/`).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        name = self.name
        if not is_unresolved(name) and (not DNS1123_LABEL.match(name) or len(name) > 63):
            problems.add("GpuNodeGroup.BadName", at.at("name"),
                         "must be a DNS-1123 label: 1-63 lowercase letters, digits or '-', starting and ending "
                         "with a letter or digit", name)
        if not self.instance_types:
            problems.add("GpuNodeGroup.NoInstanceTypes", at.at("instance_types"),
                         "must name at least one instance type, e.g. ['g6e.12xlarge']")
        for index, instance_type in enumerate(self.instance_types):
            _check_instance_type(instance_type, at.at("instance_types", index), problems)
        _check_sizes(self.min_size, self.desired_size, self.max_size, at, problems)
        low, high = ROOT_VOLUME_GIB
        if not is_unresolved(self.root_volume_gib) and not low <= self.root_volume_gib <= high:
            problems.add("GpuNodeGroup.RootVolume", at.at("root_volume_gib"),
                         f"must be an integer from {low} to {high} (GiB; gp3 limits, the AL2023 NVIDIA AMI needs at "
                         f"least {low})", self.root_volume_gib)
        for key, value in (self.labels or {}).items():
            _check_label(key, value, at, problems)
        if self.local_storage_strategy not in LocalStorageStrategy._value2member_map_:
            problems.add("GpuNodeGroup.LocalStorageStrategy", at.at("local_storage_strategy"),
                         f"must be one of {', '.join(LocalStorageStrategy)} (nodeadm localStorage.strategy)",
                         self.local_storage_strategy)


@dataclass(frozen=True, kw_only=True)
class GpuNodeGroupProps(GpuNodeGroupOptions):
    """:class:`GpuNodeGroup`'s properties: its options, and the objects only Python code passes."""

    cluster: ClusterLike = prop(doc="The `aws_eks_v2` cluster the nodes join (an `eks.Cluster` or `eks.ICluster`).",
                                config=False)
    subnets: ec2.SubnetSelection | None = prop(None, doc="Where the nodes are placed.", config=False,
                                               default_doc="the cluster's private subnets")


@real_signature
class GpuNodeGroup(Construct):
    """Managed node group of NVIDIA GPU instances with instance-store NVMe as kubelet/containerd storage.

    Nodes run the AL2023 NVIDIA AMI (driver included; install the NVIDIA device plugin in the cluster,
    the AMI does not ship it), require IMDSv2 with a hop limit of 1 (pods cannot borrow the node role;
    they use Pod Identity or IRSA), boot from an encrypted gp3 root volume, carry the labels
    ``nvidia.com/gpu.present=true``, ``node.kubernetes.io/instance-store=nvme`` and
    ``hyperpod-inference-iac/nodegroup=<name>``, and the taint ``nvidia.com/gpu=true:NoSchedule`` so only
    pods that tolerate it (GPU workloads) are scheduled there. The instance-store disks are assembled by
    nodeadm and mounted at ``/mnt/k8s-disks/0`` (see the module docstring); their content is lost when an
    instance stops or is replaced, so keep only caches there (S3 stays the source of truth).

    Properties: :class:`GpuNodeGroupProps` (each with its type, default and meaning); ``props`` keeps them.
    The node role's AWS managed policies (required by EKS) are acknowledged for cdk-nag here.
    """

    PROPS: ClassVar[type[Props]] = GpuNodeGroupProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        name: str,
        instance_types: Sequence[str],
        min_size: int = GpuNodeGroupProps.min_size,
        desired_size: int = GpuNodeGroupProps.desired_size,
        max_size: int = GpuNodeGroupProps.max_size,
        root_volume_gib: int = GpuNodeGroupProps.root_volume_gib,
        labels: Mapping[str, str] | None = GpuNodeGroupProps.labels,
        subnets: ec2.SubnetSelection | None = GpuNodeGroupProps.subnets,
        local_storage_strategy: LocalStorageStrategy = GpuNodeGroupProps.local_storage_strategy,
    ) -> None:
        """Create the construct. Its properties (:class:`GpuNodeGroupProps`, kept as ``self.props``):

        :param name: Node group name, a DNS-1123 label. Also the value of the `hyperpod-inference-iac/nodegroup`
            label. Default: required.
        :param instance_types: EC2 instance types, e.g. `["g6e.12xlarge"]`. Each must be an x86_64 NVIDIA GPU
            type with instance-store NVMe (`NVME_GPU_FAMILIES`). Default: required.
        :param min_size: Minimum number of nodes; 0 lets the group scale to zero. Default: ``0``.
        :param desired_size: Initial number of nodes, from the minimum to the maximum. Default: ``1``.
        :param max_size: Maximum number of nodes (1..1000). Default: ``2``.
        :param root_volume_gib: Size of the encrypted gp3 root volume in GiB (20..16384): the OS, and what
            instance store does not take. Default: ``200``.
        :param labels: Extra Kubernetes node labels. They may not redefine the three labels the construct sets.
            Default: ``None`` (none).
        :param local_storage_strategy: nodeadm's `localStorage.strategy`: `RAID0` (one striped array), `RAID10`
            (mirrored stripes; nodeadm needs at least 4 disks, e.g. the 8-disk p4d.24xlarge or p5.48xlarge,
            while most g sizes have 1 or 2), `Mount` (each disk on its own under `/mnt/k8s-disks/`). Default:
            ``LocalStorageStrategy.RAID0``.
        :param cluster: The `aws_eks_v2` cluster the nodes join (an `eks.Cluster` or `eks.ICluster`). Default:
            required.
        :param subnets: Where the nodes are placed. Default: ``None`` (the cluster's private subnets).
        """
        super().__init__(scope, id)
        self.props = props = GpuNodeGroupProps(
            cluster=cluster, name=name, instance_types=listed(instance_types), min_size=min_size,
            desired_size=desired_size, max_size=max_size, root_volume_gib=root_volume_gib,
            labels=mapped(labels), subnets=subnets,
            local_storage_strategy=local_storage_strategy)
        props.raise_if_invalid(f"GpuNodeGroup {self.node.path}")
        agree(self, NodeGroupPart(construct=f"GpuNodeGroup {self.node.path}", cluster=cluster, name=name))
        user_labels = dict(props.labels or {})
        local_storage_strategy = LocalStorageStrategy(props.local_storage_strategy)

        self.node_config: dict[str, Any] = {
            "apiVersion": "node.eks.aws/v1alpha1",
            "kind": "NodeConfig",
            "spec": {"instance": {"localStorage": {"strategy": str(local_storage_strategy)}}},
        }
        # MultipartUserData uses a fixed boundary, so two synths render byte-identical user data.
        user_data = ec2.MultipartUserData()
        user_data.add_part(ec2.MultipartBody.from_raw_body(
            content_type=NODEADM_CONTENT_TYPE,
            body=yaml.safe_dump(self.node_config, sort_keys=False),
        ))
        self.launch_template = node_launch_template(self, "LaunchTemplate", root_volume_gib=props.root_volume_gib,
                                                    user_data=user_data)
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=as_icluster(cluster),
            nodegroup_name=name,
            # Explicit: CDK's GPU default is AL2_X86_64_GPU, whose AMIs are end of life.
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            min_size=props.min_size,
            desired_size=props.desired_size,
            max_size=props.max_size,
            # No disk_size: with a launch template the root volume is defined there.
            launch_template_spec=launch_template_spec(self.launch_template),
            labels={
                GPU_PRESENT_LABEL: "true",
                INSTANCE_STORE_LABEL: "nvme",
                NODEGROUP_LABEL: name,
                **user_labels,
            },
            taints=[eks.TaintSpec(key=GPU_TAINT_KEY, value="true", effect=eks.TaintEffect.NO_SCHEDULE)],
            subnets=subnets,
        )
        # Instance types go to the L1: CDK's own GPU list (used to check the AMI type against the
        # instance types) lacks gr6, p5, p5e, p5en and p6-b200 and would reject the NVIDIA AMI for them;
        # the table above is the check that applies here.
        cfn_nodegroup = cfn_child(self.nodegroup, eks.CfnNodegroup)
        cfn_nodegroup.instance_types = list(props.instance_types)
        acknowledge(self.nodegroup.role, "eks-service-managed-policies",
                    *(managed_policy(name) for name in NODE_ROLE_MANAGED_POLICIES))


def check_gpu_node_group(problems: Problems, at: KeyPaths = PROPS, **options: Any) -> None:
    """:meth:`GpuNodeGroupOptions.check` of these options (kept for callers of 0.2.0)."""
    GpuNodeGroupOptions(**options).check(problems, at)


def _check_instance_type(instance_type: str, path: str, problems: Problems) -> None:
    if is_unresolved(instance_type):
        return
    parts = family_and_size(instance_type) if not instance_type.startswith("ml.") else None
    if parts is None:
        problems.add("GpuNodeGroup.BadInstanceType", path,
                     "must be an EC2 instance type '<family>.<size>', e.g. 'g6e.12xlarge' "
                     "(without the 'ml.' prefix SageMaker uses)", instance_type)
        return
    family, size = parts
    suggestion = f"families with instance-store NVMe: {', '.join(NVME_GPU_FAMILIES)}"
    if family in NVME_GPU_FAMILIES:
        known = NVME_GPU_FAMILIES[family].sizes
        if size not in known:
            problems.add("GpuNodeGroup.BadInstanceType", path,
                         f"{family} has no size '{size}'; sizes with instance-store NVMe: "
                         f"{', '.join(sorted(known, key=size_order))}", instance_type)
    elif family in GPU_FAMILIES_WITHOUT_INSTANCE_STORE:
        problems.add("GpuNodeGroup.NoInstanceStore", path,
                     f"{instance_type} has no instance-store NVMe ({GPU_FAMILIES_WITHOUT_INSTANCE_STORE[family]}), "
                     f"so there is nothing to build the local volume from; use a GPU type with NVMe, "
                     f"{suggestion}", instance_type)
    elif family in NEURON_FAMILIES:
        problems.add("GpuNodeGroup.NeuronInstance", path,
                     f"{instance_type} is an AWS Trainium/Inferentia (Neuron) instance, not an NVIDIA GPU; use a "
                     "node group with the AL2023_X86_64_NEURON AMI and the Neuron device plugin instead", instance_type)
    else:
        problems.add("GpuNodeGroup.UnsupportedFamily", path,
                     f"{family} is not a known x86_64 NVIDIA GPU family with instance-store NVMe (arm64 and AMD GPU "
                     f"families do not fit the AL2023_X86_64_NVIDIA AMI); {suggestion} (all: {families_with_nvme()})",
                     instance_type)


def _check_sizes(min_size: int, desired_size: int, max_size: int, at: KeyPaths, problems: Problems) -> None:
    if any(is_unresolved(v) for v in (min_size, desired_size, max_size)):
        return
    if min_size < 0:
        problems.add("GpuNodeGroup.Sizes", at.at("min_size"), "must be 0 or more", min_size)
    if not 1 <= max_size <= MAX_NODES:
        problems.add("GpuNodeGroup.Sizes", at.at("max_size"), f"must be an integer from 1 to {MAX_NODES}", max_size)
    elif min_size >= 0 and not min_size <= desired_size <= max_size:
        problems.add("GpuNodeGroup.Sizes", at.at("desired_size"),
                     f"must satisfy min_size <= desired_size <= max_size (min {min_size}, max {max_size})",
                     desired_size)


def _check_label(key: str, value: str, at: KeyPaths, problems: Problems) -> None:
    path = at.at("labels", key)
    if key in (GPU_PRESENT_LABEL, INSTANCE_STORE_LABEL, NODEGROUP_LABEL):
        problems.add("GpuNodeGroup.BadLabel", path,
                     "is set by GpuNodeGroup (workloads select GPU/NVMe nodes by it) and may not be redefined", value)
        return
    prefix, _, label_name = key.rpartition("/")
    if not LABEL_NAME.match(label_name) or (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix))):
        problems.add("GpuNodeGroup.BadLabel", path,
                     "must be a Kubernetes label key: optional DNS-subdomain prefix and '/', then 1-63 "
                     "alphanumerics, '-', '_' or '.'", key)
    if not is_unresolved(value) and not LABEL_VALUE.match(value):
        problems.add("GpuNodeGroup.BadLabel", path,
                     "value must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
                     value)

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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from aws_cdk import Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from hyperpod_inference_iac.validation import DNS1123_LABEL, Problems, is_token, join_path

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
INSTANCE_STORE_LABEL = "node.kubernetes.io/instance-store"
NODEGROUP_LABEL = "hyperpod-inference-iac/nodegroup"
GPU_TAINT_KEY = "nvidia.com/gpu"
# Where nodeadm mounts the RAID0 (or RAID10) array; the first disk for the Mount strategy.
LOCAL_STORAGE_MOUNT = "/mnt/k8s-disks/0"
LOCAL_STORAGE_STRATEGIES = ("RAID0", "RAID10", "Mount")
NODEADM_CONTENT_TYPE = "application/node.eks.aws"


@dataclass(frozen=True)
class _Family:
    """Sizes of an x86_64 NVIDIA GPU family that have instance-store NVMe, and a note for reviewers."""

    sizes: frozenset[str]
    note: str


def _sizes(*names: str) -> frozenset[str]:
    return frozenset(names)


_G_SIZES = _sizes("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")

# x86_64 NVIDIA GPU families with instance-store NVMe SSDs on every listed size (EC2 instance type
# pages, "Instance storage" column). An unlisted family is rejected rather than guessed at: a new
# family is added here once its instance-store column has been checked.
NVME_GPU_FAMILIES: Mapping[str, _Family] = {
    "g4dn": _Family(_sizes("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal"),
                    "NVIDIA T4; 1 NVMe SSD (125 GB to 900 GB), 2 on metal"),
    "g5": _Family(_G_SIZES, "NVIDIA A10G; 1 or 2 NVMe SSDs (250 GB on g5.xlarge up to 2 x 3.8 TB)"),
    "g6": _Family(_G_SIZES, "NVIDIA L4; NVMe SSDs on every size (250 GB on g6.xlarge and up)"),
    "gr6": _Family(_sizes("4xlarge", "8xlarge"), "NVIDIA L4, more memory per vCPU; NVMe SSD"),
    "g6e": _Family(_G_SIZES, "NVIDIA L40S; NVMe SSDs on every size (250 GB on g6e.xlarge and up)"),
    "p3dn": _Family(_sizes("24xlarge"), "NVIDIA V100 32 GB; 2 x 900 GB NVMe"),
    "p4d": _Family(_sizes("24xlarge"), "NVIDIA A100 40 GB; 8 x 1 TB NVMe"),
    "p4de": _Family(_sizes("24xlarge"), "NVIDIA A100 80 GB; 8 x 1 TB NVMe"),
    "p5": _Family(_sizes("4xlarge", "48xlarge"), "NVIDIA H100; 1 x 3.84 TB (4xlarge) or 8 x 3.84 TB NVMe"),
    "p5e": _Family(_sizes("48xlarge"), "NVIDIA H200; 8 x 3.84 TB NVMe"),
    "p5en": _Family(_sizes("48xlarge"), "NVIDIA H200; 8 x 3.84 TB NVMe"),
    "p6-b200": _Family(_sizes("48xlarge"), "NVIDIA B200; 8 x 3.84 TB NVMe"),
}
# NVIDIA GPU families without any instance store (EBS only): the reason for NoInstanceStore.
GPU_FAMILIES_WITHOUT_INSTANCE_STORE: Mapping[str, str] = {
    "p2": "NVIDIA K80, EBS only",
    "p3": "NVIDIA V100, EBS only (p3dn.24xlarge is the V100 size with NVMe)",
    "g3": "NVIDIA M60, EBS only",
    "g3s": "NVIDIA M60, EBS only",
    "g5g": "NVIDIA T4G on Graviton (arm64), EBS only",
}
# AWS Trainium / Inferentia accelerators: no NVIDIA GPU, so the NVIDIA AMI and device plugin do not
# apply (trn1, trn1n and trn2 do have instance-store NVMe; inf1 and inf2 are EBS only).
NEURON_FAMILIES = frozenset({"inf1", "inf2", "trn1", "trn1n", "trn2"})

_INSTANCE_TYPE = re.compile(r"^(?P<family>[a-z][a-z0-9]*(-[a-z0-9]+)?)\.(?P<size>[a-z0-9]+)$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


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

    :param cluster: the ``aws_eks_v2`` cluster the nodes join.
    :param name: node group name, a DNS-1123 label (also the value of the ``.../nodegroup`` label).
    :param instance_types: EC2 instance types, e.g. ``["g6e.12xlarge"]``; each must be an x86_64 NVIDIA
        GPU type with instance-store NVMe (see ``NVME_GPU_FAMILIES``).
    :param min_size: minimum number of nodes (0 lets the group scale to zero).
    :param desired_size: initial number of nodes; ``min_size <= desired_size <= max_size``.
    :param max_size: maximum number of nodes (at least 1).
    :param root_volume_gib: size of the encrypted gp3 root volume (OS, and what instance store does not
        take); 20..16384, default 200.
    :param labels: extra Kubernetes node labels; they may not redefine the labels above.
    :param subnets: where nodes are placed; default: the cluster's private subnets.
    :param local_storage_strategy: nodeadm's ``localStorage.strategy``: ``RAID0`` (default, one striped
        array, all capacity and bandwidth), ``RAID10`` (mirrored stripes; nodeadm needs at least 4
        instance-store disks, e.g. the 8-disk p4d.24xlarge or p5.48xlarge, while most g sizes have 1 or 2)
        or ``Mount`` (each disk mounted on its own under ``/mnt/k8s-disks/``).
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.Cluster,
        name: str,
        instance_types: Sequence[str],
        min_size: int,
        desired_size: int,
        max_size: int,
        root_volume_gib: int = 200,
        labels: Mapping[str, str] | None = None,
        subnets: ec2.SubnetSelection | None = None,
        local_storage_strategy: str = "RAID0",
    ) -> None:
        super().__init__(scope, id_)
        user_labels = dict(labels or {})
        _validate(name, instance_types, min_size, desired_size, max_size, root_volume_gib, user_labels,
                  local_storage_strategy)

        self.node_config: dict[str, Any] = {
            "apiVersion": "node.eks.aws/v1alpha1",
            "kind": "NodeConfig",
            "spec": {"instance": {"localStorage": {"strategy": local_storage_strategy}}},
        }
        # MultipartUserData uses a fixed boundary, so two synths render byte-identical user data.
        user_data = ec2.MultipartUserData()
        user_data.add_part(ec2.MultipartBody.from_raw_body(
            content_type=NODEADM_CONTENT_TYPE,
            body=yaml.safe_dump(self.node_config, sort_keys=False),
        ))
        self.launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            user_data=user_data,
            require_imdsv2=True,
            http_put_response_hop_limit=1,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        root_volume_gib,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        encrypted=True,
                        delete_on_termination=True,
                    ),
                ),
            ],
        )
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            nodegroup_name=name,
            # Explicit: CDK's GPU default is AL2_X86_64_GPU, whose AMIs are end of life.
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            min_size=min_size,
            desired_size=desired_size,
            max_size=max_size,
            # No disk_size: with a launch template the root volume is defined there.
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.launch_template_id or "",
                version=self.launch_template.latest_version_number,
            ),
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
        cfn_nodegroup: eks.CfnNodegroup = self.nodegroup.node.default_child  # type: ignore[assignment]
        cfn_nodegroup.instance_types = list(instance_types)


def _validate(
    name: str,
    instance_types: Sequence[str],
    min_size: int,
    desired_size: int,
    max_size: int,
    root_volume_gib: int,
    labels: Mapping[str, str],
    strategy: str,
) -> None:
    problems = Problems()
    if not is_token(name) and (not DNS1123_LABEL.match(name) or len(name) > 63):
        problems.add("GpuNodeGroup.BadName", "name",
                     "must be a DNS-1123 label: 1-63 lowercase letters, digits or '-', starting and ending "
                     "with a letter or digit", name)
    if not instance_types:
        problems.add("GpuNodeGroup.NoInstanceTypes", "instance_types",
                     "must name at least one instance type, e.g. ['g6e.12xlarge']")
    for index, instance_type in enumerate(instance_types):
        _check_instance_type(instance_type, join_path("instance_types", index), problems)
    _check_sizes(min_size, desired_size, max_size, problems)
    if not _unresolved(root_volume_gib) and not 20 <= root_volume_gib <= 16384:
        problems.add("GpuNodeGroup.RootVolume", "root_volume_gib",
                     "must be 20..16384 GiB (gp3 limits; the AL2023 NVIDIA AMI needs at least 20)",
                     root_volume_gib)
    for key, value in labels.items():
        _check_label(key, value, problems)
    if strategy not in LOCAL_STORAGE_STRATEGIES:
        problems.add("GpuNodeGroup.LocalStorageStrategy", "local_storage_strategy",
                     f"must be one of {', '.join(LOCAL_STORAGE_STRATEGIES)} (nodeadm localStorage.strategy)",
                     strategy)
    problems.raise_if_any("GpuNodeGroup")


def _check_instance_type(instance_type: str, path: str, problems: Problems) -> None:
    if is_token(instance_type):
        return
    match = _INSTANCE_TYPE.match(instance_type)
    if match is None:
        problems.add("GpuNodeGroup.BadInstanceType", path,
                     "must be an EC2 instance type '<family>.<size>', e.g. 'g6e.12xlarge' "
                     "(without the 'ml.' prefix SageMaker uses)", instance_type)
        return
    family, size = match["family"], match["size"]
    suggestion = f"families with instance-store NVMe: {', '.join(NVME_GPU_FAMILIES)}"
    if family in NVME_GPU_FAMILIES:
        known = NVME_GPU_FAMILIES[family].sizes
        if size not in known:
            problems.add("GpuNodeGroup.BadInstanceType", path,
                         f"{family} has no size '{size}'; sizes with instance-store NVMe: "
                         f"{', '.join(sorted(known, key=_size_order))}", instance_type)
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
                     f"families do not fit the AL2023_X86_64_NVIDIA AMI); {suggestion}", instance_type)


def _unresolved(value: Any) -> bool:
    """An unresolved token (string, or a number encoded by ``Token.as_number``) is checked at deploy time."""
    return is_token(value) or (isinstance(value, int | float) and Token.is_unresolved(value))


def _size_order(size: str) -> tuple[int, str]:
    digits = re.match(r"^(\d*)", size)
    return (int(digits[1]) if digits and digits[1] else 1 if size == "xlarge" else 10**6, size)


def _check_sizes(min_size: int, desired_size: int, max_size: int, problems: Problems) -> None:
    values = {"min_size": min_size, "desired_size": desired_size, "max_size": max_size}
    if any(_unresolved(v) for v in values.values()):
        return
    if min_size < 0:
        problems.add("GpuNodeGroup.Sizes", "min_size", "must be 0 or more", min_size)
    if max_size < 1:
        problems.add("GpuNodeGroup.Sizes", "max_size", "must be at least 1", max_size)
    if not min_size <= desired_size <= max_size:
        problems.add("GpuNodeGroup.Sizes", "desired_size",
                     f"must satisfy min_size <= desired_size <= max_size (min {min_size}, max {max_size})",
                     desired_size)


def _check_label(key: str, value: str, problems: Problems) -> None:
    path = join_path("labels", key)
    if key in (GPU_PRESENT_LABEL, INSTANCE_STORE_LABEL, NODEGROUP_LABEL):
        problems.add("GpuNodeGroup.BadLabel", path,
                     "is set by GpuNodeGroup (workloads select GPU/NVMe nodes by it) and may not be redefined", value)
        return
    prefix, _, label_name = key.rpartition("/")
    if not _LABEL_NAME.match(label_name) or (prefix and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix))):
        problems.add("GpuNodeGroup.BadLabel", path,
                     "must be a Kubernetes label key: optional DNS-subdomain prefix and '/', then 1-63 "
                     "alphanumerics, '-', '_' or '.'", key)
    if not is_token(value) and not _LABEL_VALUE.match(value):
        problems.add("GpuNodeGroup.BadLabel", path,
                     "value must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
                     value)

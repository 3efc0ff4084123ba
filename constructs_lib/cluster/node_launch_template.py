"""The launch template every managed node group of this library uses: IMDSv2 only, one hop, and an
encrypted gp3 root volume.

Why each: with IMDSv1 or a hop limit above 1, any pod on the node can read the node role's
credentials from the instance metadata service (pods then bypass IRSA and Pod Identity, whose roles
are scoped to one workload); an explicit ``Encrypted`` keeps the root volume encrypted whatever the
account's EBS encryption-by-default setting says.

EKS accepts a launch template only when a node group is created with one: a deployed group that had
none is replaced (see :class:`~hyperpod_inference_iac.InferenceCluster`).
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

ROOT_DEVICE = "/dev/xvda"  # the root device of the AL2023 EKS AMIs


def node_launch_template(scope: Construct, id: str, *, root_volume_gib: int,
                         user_data: ec2.UserData | None = None) -> ec2.LaunchTemplate:
    """A launch template for a managed node group (no AMI: EKS picks it from the group's AMI type and
    merges its own bootstrap into ``user_data``, which must be MIME multi-part when given)."""
    return ec2.LaunchTemplate(
        scope,
        id,
        user_data=user_data,
        require_imdsv2=True,
        http_put_response_hop_limit=1,
        block_devices=[
            ec2.BlockDevice(
                device_name=ROOT_DEVICE,
                volume=ec2.BlockDeviceVolume.ebs(
                    root_volume_gib,
                    volume_type=ec2.EbsDeviceVolumeType.GP3,
                    encrypted=True,
                    delete_on_termination=True,
                ),
            ),
        ],
    )


def launch_template_spec(template: ec2.LaunchTemplate) -> eks.LaunchTemplateSpec:
    """How a node group names ``template``: by id, at its latest version (a change rolls the nodes)."""
    return eks.LaunchTemplateSpec(id=template.launch_template_id or "", version=template.latest_version_number)

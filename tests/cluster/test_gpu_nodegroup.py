"""GpuNodeGroup: AMI, launch template (IMDSv2, root volume, nodeadm user data), labels, taint, and
one test per validation code."""

from __future__ import annotations

import email
import email.policy
import hashlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from aws_cdk import Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from hyperpod_inference_iac.cluster.gpu_nodegroup import NVME_GPU_FAMILIES, GpuNodeGroup
from hyperpod_inference_iac.foundation.validation import ConfigError
from tests.cluster.conftest import Base, make_base, only

INSTANCE_TYPES = ["g6e.12xlarge", "p5.48xlarge"]


@pytest.fixture(scope="module")
def built() -> tuple[GpuNodeGroup, dict[str, Any]]:
    base = make_base()
    group = GpuNodeGroup(
        base.stack,
        "Gpu",
        cluster=base.cluster,
        name="gpu-nvme",
        instance_types=INSTANCE_TYPES,
        min_size=0,
        desired_size=1,
        max_size=4,
        labels={"workload": "inference"},
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
    )
    return group, Template.from_stack(base.stack).to_json()


@pytest.fixture(scope="module")
def template(built: tuple[GpuNodeGroup, dict[str, Any]]) -> dict[str, Any]:
    return built[1]


@pytest.fixture(scope="module")
def nodegroup(template: dict[str, Any]) -> dict[str, Any]:
    return only(template, "AWS::EKS::Nodegroup", "Gpu")[1]["Properties"]


@pytest.fixture(scope="module")
def launch_template(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    logical_id, resource = only(template, "AWS::EC2::LaunchTemplate", "Gpu")
    return logical_id, resource["Properties"]["LaunchTemplateData"]


def _user_data_text(user_data: Any) -> str:
    """Decode ``Fn::Base64`` of a string or an ``Fn::Join`` (tokens become ``<token>``)."""
    body = user_data["Fn::Base64"]
    if isinstance(body, str):
        return body
    separator, parts = body["Fn::Join"]
    return separator.join(p if isinstance(p, str) else "<token>" for p in parts)


def test_ami_type_is_al2023_nvidia(nodegroup: dict[str, Any]) -> None:
    assert nodegroup["AmiType"] == "AL2023_x86_64_NVIDIA"


def test_instance_types_and_scaling(nodegroup: dict[str, Any]) -> None:
    assert nodegroup["InstanceTypes"] == INSTANCE_TYPES
    assert nodegroup["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 1, "MaxSize": 4}
    assert nodegroup["NodegroupName"] == "gpu-nvme"


def test_uses_launch_template_without_disk_size(
    nodegroup: dict[str, Any], launch_template: tuple[str, dict[str, Any]]
) -> None:
    logical_id, _ = launch_template
    assert "DiskSize" not in nodegroup
    assert nodegroup["LaunchTemplate"] == {
        "Id": {"Ref": logical_id},
        "Version": {"Fn::GetAtt": [logical_id, "LatestVersionNumber"]},
    }


def test_launch_template_requires_imdsv2_and_encrypts_gp3_root(launch_template: tuple[str, dict[str, Any]]) -> None:
    _, data = launch_template
    assert data["MetadataOptions"] == {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}
    assert data["BlockDeviceMappings"] == [{
        "DeviceName": "/dev/xvda",
        "Ebs": {"DeleteOnTermination": True, "Encrypted": True, "VolumeSize": 200, "VolumeType": "gp3"},
    }]
    # The AMI comes from the node group's AmiType; a launch template image or profile would conflict.
    assert "ImageId" not in data and "IamInstanceProfile" not in data


def test_user_data_is_mime_multipart_with_raid0_node_config(launch_template: tuple[str, dict[str, Any]]) -> None:
    text = _user_data_text(launch_template[1]["UserData"])
    message = email.message_from_string(text, policy=email.policy.compat32)
    assert message.get_content_type() == "multipart/mixed"
    assert message["MIME-Version"] == "1.0"
    parts = message.get_payload()
    assert [part.get_content_type() for part in parts] == ["application/node.eks.aws"]
    assert yaml.safe_load(parts[0].get_payload()) == {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"instance": {"localStorage": {"strategy": "RAID0"}}},
    }


def test_node_config_attribute_matches_user_data(built: tuple[GpuNodeGroup, dict[str, Any]]) -> None:
    group, _ = built
    assert group.node_config["spec"]["instance"]["localStorage"]["strategy"] == "RAID0"
    assert isinstance(group.launch_template, ec2.LaunchTemplate)
    assert group.nodegroup.nodegroup_name  # escape hatch to the L2 node group


def test_labels_and_gpu_taint(nodegroup: dict[str, Any]) -> None:
    assert nodegroup["Labels"] == {
        "nvidia.com/gpu.present": "true",
        "node.kubernetes.io/instance-store": "nvme",
        "hyperpod-inference-iac/nodegroup": "gpu-nvme",
        "workload": "inference",
    }
    assert nodegroup["Taints"] == [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}]


def test_nodes_go_to_the_selected_private_subnets(nodegroup: dict[str, Any]) -> None:
    assert len(nodegroup["Subnets"]) == 2
    assert all("PrivateSubnet" in subnet["Ref"] for subnet in nodegroup["Subnets"])


# -- validation -------------------------------------------------------------------------------------


def _build(scratch: Base, new_id: Callable[[], str], **overrides: Any) -> GpuNodeGroup:
    id = new_id()
    props: dict[str, Any] = {
        # (a name of its own: the scratch cluster holds every test's groups, and names are unique per cluster)
        "cluster": scratch.cluster, "name": f"gpu-{hashlib.sha256(id.encode()).hexdigest()[:10]}",
        "instance_types": ["g6e.12xlarge"], "min_size": 0, "desired_size": 1, "max_size": 2,
    }
    props.update(overrides)
    return GpuNodeGroup(scratch.stack, id, **props)


def _errors(scratch: Base, new_id: Callable[[], str], **overrides: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        _build(scratch, new_id, **overrides)
    return caught.value


@pytest.mark.parametrize(
    "instance_type",
    ["g4dn.xlarge", "g5.xlarge", "g6.xlarge", "gr6.4xlarge", "g6e.xlarge", "p3dn.24xlarge", "p4d.24xlarge",
     "p4de.24xlarge", "p5.4xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"],
)
def test_every_listed_family_is_accepted(scratch: Base, unique_id: Callable[[], str], instance_type: str) -> None:
    assert instance_type.split(".")[0] in NVME_GPU_FAMILIES
    _build(scratch, unique_id, instance_types=[instance_type])


def test_bad_instance_type_format(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, instance_types=["ml.g6e.12xlarge", "G6E"])
    assert error.codes == ["GpuNodeGroup.BadInstanceType", "GpuNodeGroup.BadInstanceType"]
    assert "instance_types[0]" in str(error) and "'ml.g6e.12xlarge'" in str(error)


def test_unknown_size_of_a_listed_family(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, instance_types=["p5.2xlarge"])
    assert error.codes == ["GpuNodeGroup.BadInstanceType"]
    assert "p5 has no size '2xlarge'" in str(error) and "4xlarge, 48xlarge" in str(error)


@pytest.mark.parametrize("instance_type", ["p3.2xlarge", "p3.16xlarge", "g5g.xlarge"])
def test_no_instance_store(scratch: Base, unique_id: Callable[[], str], instance_type: str) -> None:
    error = _errors(scratch, unique_id, instance_types=[instance_type])
    assert error.codes == ["GpuNodeGroup.NoInstanceStore"]
    message = str(error)
    assert f"{instance_type} has no instance-store NVMe" in message
    assert "g6e" in message and "p5" in message  # suggests families that have it


@pytest.mark.parametrize("instance_type", ["trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "inf2.xlarge"])
def test_neuron_instances_point_to_the_neuron_ami(
    scratch: Base, unique_id: Callable[[], str], instance_type: str
) -> None:
    error = _errors(scratch, unique_id, instance_types=[instance_type])
    assert error.codes == ["GpuNodeGroup.NeuronInstance"]
    assert "AL2023_X86_64_NEURON" in str(error)


@pytest.mark.parametrize("instance_type", ["m5.large", "c5d.4xlarge", "g4ad.xlarge"])
def test_unsupported_family(scratch: Base, unique_id: Callable[[], str], instance_type: str) -> None:
    error = _errors(scratch, unique_id, instance_types=[instance_type])
    assert error.codes == ["GpuNodeGroup.UnsupportedFamily"]


def test_no_instance_types(scratch: Base, unique_id: Callable[[], str]) -> None:
    assert _errors(scratch, unique_id, instance_types=[]).codes == ["GpuNodeGroup.NoInstanceTypes"]


@pytest.mark.parametrize(
    ("min_size", "desired_size", "max_size"), [(2, 1, 3), (0, 4, 3), (-1, 0, 1), (0, 0, 0)]
)
def test_sizes(
    scratch: Base, unique_id: Callable[[], str], min_size: int, desired_size: int, max_size: int
) -> None:
    error = _errors(scratch, unique_id, min_size=min_size, desired_size=desired_size, max_size=max_size)
    assert set(error.codes) == {"GpuNodeGroup.Sizes"}


def test_bad_name(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, name="GPU_Nodes")
    assert error.codes == ["GpuNodeGroup.BadName"]
    assert "(got 'GPU_Nodes')" in str(error)


def test_root_volume(scratch: Base, unique_id: Callable[[], str]) -> None:
    assert _errors(scratch, unique_id, root_volume_gib=8).codes == ["GpuNodeGroup.RootVolume"]


def test_local_storage_strategy(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, local_storage_strategy="raid0")
    assert error.codes == ["GpuNodeGroup.LocalStorageStrategy"]
    assert "RAID0, RAID10, Mount" in str(error)


def test_other_strategies_render_into_node_config(scratch: Base, unique_id: Callable[[], str]) -> None:
    group = _build(scratch, unique_id, instance_types=["p5.48xlarge"], local_storage_strategy="RAID10")
    assert group.node_config["spec"]["instance"]["localStorage"] == {"strategy": "RAID10"}


@pytest.mark.parametrize(
    "labels",
    [{"nvidia.com/gpu.present": "false"}, {"bad key!": "x"}, {"team": "not a valid value"}, {"-x.io/a": "b"}],
)
def test_bad_label(scratch: Base, unique_id: Callable[[], str], labels: dict[str, str]) -> None:
    assert _errors(scratch, unique_id, labels=labels).codes == ["GpuNodeGroup.BadLabel"]


def test_all_problems_reported_at_once(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(
        scratch, unique_id, name="Bad_Name", instance_types=["p3.2xlarge", "m5.large"],
        min_size=3, desired_size=1, max_size=2, local_storage_strategy="LVM",
    )
    assert error.codes == [
        "GpuNodeGroup.BadName", "GpuNodeGroup.NoInstanceStore", "GpuNodeGroup.UnsupportedFamily",
        "GpuNodeGroup.Sizes", "GpuNodeGroup.LocalStorageStrategy",
    ]
    assert str(error).startswith("5 problem(s) in GpuNodeGroup ")


def test_unresolved_tokens_are_left_to_deploy_time(scratch: Base, unique_id: Callable[[], str]) -> None:
    _build(scratch, unique_id, max_size=Token.as_number({"Ref": "MaxNodes"}),
           root_volume_gib=Token.as_number({"Ref": "RootGiB"}))

"""HyperPodCluster: the CfnCluster properties, lifecycle scripts, execution role (trust and least
privilege), access entry, ordering, and one test per validation code."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk import CfnElement, RemovalPolicy, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from aws_cdk.aws_logs import RetentionDays

from hyperpod_inference_iac.hyperpod_cluster import LIFECYCLE_SCRIPTS_DIR, HyperPodCluster, InstanceGroup
from hyperpod_inference_iac.validation import ConfigError
from tests.cluster.conftest import Base, make_base, resources_of

GPU_GROUP = InstanceGroup(
    name="gpu-workers", instance_type="ml.g6e.12xlarge", instance_count=2, threads_per_core=2,
    ebs_volume_gib=1000, deep_health_checks=("InstanceStress", "InstanceConnectivity"),
)
SYSTEM_GROUP = InstanceGroup(name="system", instance_type="ml.m5.2xlarge", instance_count=1)


@dataclass
class Built:
    base: Base
    main: HyperPodCluster  # two groups, KMS key, access logs
    minimal: HyperPodCluster  # defaults, NodeRecovery None
    template: dict[str, Any]

    def logical_id(self, element: Any) -> str:
        cfn: CfnElement = element if isinstance(element, CfnElement) else element.node.default_child
        return self.base.stack.get_logical_id(cfn)

    def resolve(self, value: Any) -> Any:
        return self.base.stack.resolve(value)

    def resource(self, element: Any) -> dict[str, Any]:
        return self.template["Resources"][self.logical_id(element)]


@pytest.fixture(scope="module")
def built() -> Built:
    base = make_base()
    security_group = ec2.SecurityGroup(base.stack, "NodeSg", vpc=base.vpc)
    key = kms.Key(base.stack, "Key", enable_key_rotation=True, removal_policy=RemovalPolicy.DESTROY)
    logs = s3.Bucket(base.stack, "AccessLogs", enforce_ssl=True)
    main = HyperPodCluster(
        base.stack, "Main", cluster_name="inference-hp", eks_cluster=base.cluster,
        subnets=base.vpc.private_subnets, security_groups=[security_group],
        instance_groups=[GPU_GROUP, SYSTEM_GROUP], lifecycle_bucket_name="inference-hp-lifecycle-123456789012",
        access_logs_bucket=logs, encryption_key=key, log_retention=RetentionDays.ONE_MONTH,
    )
    minimal = HyperPodCluster(
        base.stack, "Minimal", cluster_name="small", eks_cluster=base.cluster,
        subnets=base.vpc.private_subnets[:1], security_groups=[security_group],
        instance_groups=[SYSTEM_GROUP], lifecycle_bucket_name="small-lifecycle-123456789012",
        node_recovery="None",
    )
    return Built(base, main, minimal, Template.from_stack(base.stack).to_json())


@pytest.fixture(scope="module")
def main_props(built: Built) -> dict[str, Any]:
    return built.resource(built.main.cfn_cluster)["Properties"]


def test_orchestrator_is_the_eks_cluster(built: Built, main_props: dict[str, Any]) -> None:
    eks_id = built.logical_id(built.base.cluster)
    assert main_props["Orchestrator"] == {"Eks": {"ClusterArn": {"Fn::GetAtt": [eks_id, "Arn"]}}}
    assert main_props["ClusterName"] == "inference-hp"


def test_instance_groups(built: Built, main_props: dict[str, Any]) -> None:
    role_arn = {"Fn::GetAtt": [built.logical_id(built.main.execution_role), "Arn"]}
    lifecycle = {
        "OnCreate": "on_create.sh",
        "SourceS3Uri": {"Fn::Join": ["", ["s3://", {"Ref": built.logical_id(built.main.lifecycle_bucket)},
                                          "/lifecycle/"]]},
    }
    assert main_props["InstanceGroups"] == [
        {
            "InstanceGroupName": "gpu-workers", "InstanceType": "ml.g6e.12xlarge", "InstanceCount": 2,
            "ExecutionRole": role_arn, "ThreadsPerCore": 2,
            "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 1000}}],
            "LifeCycleConfig": lifecycle,
            "OnStartDeepHealthChecks": ["InstanceStress", "InstanceConnectivity"],
        },
        {
            "InstanceGroupName": "system", "InstanceType": "ml.m5.2xlarge", "InstanceCount": 1,
            "ExecutionRole": role_arn, "ThreadsPerCore": 1,
            "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
            "LifeCycleConfig": lifecycle,
        },
    ]


def test_node_recovery_and_vpc_config(built: Built, main_props: dict[str, Any]) -> None:
    assert main_props["NodeRecovery"] == "Automatic"
    assert built.resource(built.minimal.cfn_cluster)["Properties"]["NodeRecovery"] == "None"
    sg_id = built.logical_id(built.base.stack.node.find_child("NodeSg"))
    assert main_props["VpcConfig"] == {
        "SecurityGroupIds": [{"Fn::GetAtt": [sg_id, "GroupId"]}],
        "Subnets": [built.resolve(s.subnet_id) for s in built.base.vpc.private_subnets],
    }


def test_cluster_waits_for_access_entry_role_policy_and_scripts(built: Built) -> None:
    depends_on = set(built.resource(built.main.cfn_cluster)["DependsOn"])
    role_policy = built.main.execution_role.node.find_child("DefaultPolicy").node.default_child
    (upload,) = built.main.lifecycle_scripts
    scripts = upload.node.find_child("Resource").node.default_child
    assert {built.logical_id(built.main.access_entry),
            built.logical_id(role_policy), built.logical_id(scripts)} <= depends_on


def test_cluster_arn_is_the_getatt(built: Built) -> None:
    assert built.resolve(built.main.cluster_arn) == {
        "Fn::GetAtt": [built.logical_id(built.main.cfn_cluster), "ClusterArn"]
    }


def test_execution_role_trusts_only_sagemaker_for_this_accounts_clusters(built: Built) -> None:
    trust = built.resource(built.main.execution_role)["Properties"]["AssumeRolePolicyDocument"]
    assert trust == {
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Action": "sts:AssumeRole",
            "Principal": {"Service": "sagemaker.amazonaws.com"},
            "Condition": {
                "StringEquals": {"aws:SourceAccount": "123456789012"},
                "ArnLike": {"aws:SourceArn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/*"},
            },
        }],
    }


def test_only_the_hyperpod_instance_managed_policy_and_no_full_access(built: Built) -> None:
    role = built.resource(built.main.execution_role)["Properties"]
    assert role["ManagedPolicyArns"] == [{"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy"]]}]
    assert "FullAccess" not in str(resources_of(built.template, "AWS::IAM::Role"))


def _execution_statements(built: Built) -> list[dict[str, Any]]:
    policy = built.main.execution_role.node.find_child("DefaultPolicy").node.default_child
    return built.template["Resources"][built.logical_id(policy)]["Properties"]["PolicyDocument"]["Statement"]


def test_execution_role_statements_are_scoped(built: Built) -> None:
    by_sid = {s.get("Sid"): s for s in _execution_statements(built)}
    eks_arn = {"Fn::GetAtt": [built.logical_id(built.base.cluster), "Arn"]}
    assert by_sid["PodIdentityOnThisCluster"]["Action"] == "eks-auth:AssumeRoleForPodIdentity"
    assert by_sid["PodIdentityOnThisCluster"]["Resource"] == eks_arn
    assert by_sid["ClusterLogs"]["Resource"] == [
        "arn:aws:logs:us-west-2:123456789012:log-group:/aws/sagemaker/Clusters/*",
        "arn:aws:logs:us-west-2:123456789012:log-group:/aws/sagemaker/Clusters/*:log-stream:*",
    ]
    assert by_sid["TagNodeNetworkInterfaces"] == {
        "Sid": "TagNodeNetworkInterfaces", "Effect": "Allow", "Action": "ec2:CreateTags",
        "Resource": "arn:aws:ec2:us-west-2:123456789012:network-interface/*",
        "Condition": {"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}},
    }
    assert sorted(by_sid["NodeNetworkInterfaces"]["Action"]) == sorted([
        "ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission", "ec2:DescribeNetworkInterfaces", "ec2:DescribeVpcs",
        "ec2:DescribeDhcpOptions", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups",
        "ec2:DetachNetworkInterface",
    ])
    assert by_sid["EcrAuthorizationToken"]["Action"] == "ecr:GetAuthorizationToken"
    assert sorted(by_sid["EcrPullImages"]["Action"]) == [
        "ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


def test_execution_role_only_reads_the_lifecycle_prefix(built: Built) -> None:
    by_sid = {s.get("Sid"): s for s in _execution_statements(built)}
    bucket_arn = {"Fn::GetAtt": [built.logical_id(built.main.lifecycle_bucket), "Arn"]}
    objects_arn = {"Fn::Join": ["", [bucket_arn, "/*"]]}
    assert by_sid["ReadLifecycleScripts"] == {
        "Sid": "ReadLifecycleScripts", "Effect": "Allow", "Action": "s3:GetObject",
        "Resource": {"Fn::Join": ["", [bucket_arn, "/lifecycle/*"]]},
    }
    assert by_sid["ListLifecycleScripts"] == {
        "Sid": "ListLifecycleScripts", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn,
        "Condition": {"StringLike": {"s3:prefix": ["lifecycle", "lifecycle/*"]}},
    }
    key_arn = {"Fn::GetAtt": [built.logical_id(built.base.stack.node.find_child("Key")), "Arn"]}
    assert by_sid["DecryptLifecycleScripts"] == {
        "Sid": "DecryptLifecycleScripts", "Effect": "Allow", "Action": "kms:Decrypt", "Resource": key_arn,
        # The library's one KMS-through-S3 rule: this region's S3, this bucket's objects, the caller's account.
        "Condition": {"StringEquals": {"kms:ViaService": "s3.us-west-2.amazonaws.com",
                                       "aws:ResourceAccount": "${aws:PrincipalAccount}"},
                      "StringLike": {"kms:EncryptionContext:aws:s3:arn": [bucket_arn, objects_arn]}},
    }
    s3_actions = {a for s in _execution_statements(built) for a in _actions(s) if a.startswith("s3:")}
    assert s3_actions == {"s3:GetObject", "s3:ListBucket"}


def _actions(statement: dict[str, Any]) -> list[str]:
    return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]


def test_no_statement_allows_everything(built: Built) -> None:
    for statement in _execution_statements(built):
        assert not any("*" in action for action in _actions(statement)), statement


def test_access_entry_is_hyperpod_linux_without_policies(built: Built) -> None:
    entry = built.resource(built.main.access_entry)["Properties"]
    assert entry["Type"] == "HYPERPOD_LINUX"
    assert entry["AccessPolicies"] == []
    assert entry["PrincipalArn"] == {"Fn::GetAtt": [built.logical_id(built.main.execution_role), "Arn"]}
    assert entry["ClusterName"] == {"Ref": built.logical_id(built.base.cluster)}


def test_lifecycle_scripts_are_put_under_lifecycle_prefix_with_their_content(built: Built) -> None:
    (upload,) = built.main.lifecycle_scripts
    resource = built.template["Resources"][built.logical_id(upload.node.find_child("Resource").node.default_child)]
    assert resource["Type"] == "Custom::AWS"
    call = json.dumps(resource["Properties"]["Create"])
    assert '\\"action\\":\\"putObject\\"' in call and '\\"Key\\":\\"lifecycle/on_create.sh\\"' in call
    script = (LIFECYCLE_SCRIPTS_DIR / "on_create.sh").read_text()
    assert json.dumps(script)[1:40] in call.replace("\\\\", "\\")
    # A changed script is a new physical id, so CloudFormation puts it again.
    assert "lifecycle/on_create.sh@" in call


def test_lifecycle_bucket_is_hardened(built: Built) -> None:
    main = built.resource(built.main.lifecycle_bucket)
    assert main["DeletionPolicy"] == "Retain"
    properties = main["Properties"]
    assert properties["BucketName"] == "inference-hp-lifecycle-123456789012"
    assert properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0] == {
        "BucketKeyEnabled": True,
        "ServerSideEncryptionByDefault": {
            "SSEAlgorithm": "aws:kms",
            "KMSMasterKeyID": {"Fn::GetAtt": [built.logical_id(built.base.stack.node.find_child("Key")), "Arn"]},
        },
    }
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    assert all(properties["PublicAccessBlockConfiguration"].values())
    assert properties["LoggingConfiguration"]["LogFilePrefix"] == "inference-hp-lifecycle-123456789012/"
    # Without a log bucket there is no logging configuration at all (never into itself).
    assert "LoggingConfiguration" not in built.resource(built.minimal.lifecycle_bucket)["Properties"]


@pytest.mark.parametrize(("cluster", "days"), [("main", 30), ("minimal", 90)])
def test_cluster_log_group_gets_the_retention_once_the_cluster_id_is_known(built: Built, cluster: str,
                                                                          days: int) -> None:
    hyperpod: HyperPodCluster = getattr(built, cluster)
    create, retain = (built.template["Resources"][built.logical_id(call.node.find_child("Resource").node.default_child)]
                      for call in hyperpod.log_retention_calls)
    text = json.dumps(retain["Properties"]["Create"])
    assert '\\"action\\":\\"putRetentionPolicy\\"' in text and f'\\"retentionInDays\\":{days}' in text
    assert '\\"action\\":\\"createLogGroup\\"' in json.dumps(create["Properties"]["Create"])
    cluster_arn = {"Fn::GetAtt": [built.logical_id(hyperpod.cfn_cluster), "ClusterArn"]}
    assert built.resolve(hyperpod.log_group_name) == {"Fn::Join": ["", [
        f"/aws/sagemaker/Clusters/{built.resolve(hyperpod.cfn_cluster.cluster_name)}/",
        {"Fn::Select": [1, {"Fn::Split": ["/", cluster_arn]}]}]]}


def test_minimal_group_has_no_deep_health_checks(built: Built) -> None:
    group = built.resource(built.minimal.cfn_cluster)["Properties"]["InstanceGroups"][0]
    assert "OnStartDeepHealthChecks" not in group


def test_on_create_script_is_strict_bash() -> None:
    script = LIFECYCLE_SCRIPTS_DIR / "on_create.sh"
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "\nset -euo pipefail\n" in text
    assert "/opt/dlami/nvme" in text and "/var/lib/containerd" in text
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert sorted(p.name for p in LIFECYCLE_SCRIPTS_DIR.iterdir() if not p.name.startswith(".")) == ["on_create.sh"]


# -- validation -------------------------------------------------------------------------------------


def _errors(scratch: Base, new_id: Callable[[], str], **overrides: Any) -> ConfigError:
    security_group = ec2.SecurityGroup.from_security_group_id(scratch.stack, new_id(), "sg-0123456789abcdef0")
    props: dict[str, Any] = {
        "cluster_name": "hp", "eks_cluster": scratch.cluster, "subnets": scratch.vpc.private_subnets,
        "security_groups": [security_group], "instance_groups": [SYSTEM_GROUP],
        "lifecycle_bucket_name": "hp-lifecycle-bucket",
    }
    props.update(overrides)
    with pytest.raises(ConfigError) as caught:
        HyperPodCluster(scratch.stack, new_id(), **props)
    return caught.value


def _group(**overrides: Any) -> InstanceGroup:
    return InstanceGroup(**{"name": "g", "instance_type": "ml.g5.8xlarge", "instance_count": 1, **overrides})


def test_bad_cluster_name(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, cluster_name="my_cluster")
    assert error.codes == ["HyperPodCluster.BadName"]
    assert "cluster_name" in str(error) and "(got 'my_cluster')" in str(error)


def test_bad_instance_group_name(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, instance_groups=[_group(name="-gpu")])
    assert error.codes == ["HyperPodCluster.BadName"]
    assert "instance_groups[0].name" in str(error)


def test_no_instance_groups(scratch: Base, unique_id: Callable[[], str]) -> None:
    assert _errors(scratch, unique_id, instance_groups=[]).codes == ["HyperPodCluster.NoInstanceGroups"]


def test_duplicate_instance_group(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, instance_groups=[_group(), _group(instance_count=2)])
    assert error.codes == ["HyperPodCluster.DuplicateInstanceGroup"]
    assert "instance_groups[1].name" in str(error)


def test_bad_instance_type_suggests_ml_prefix(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, instance_groups=[_group(instance_type="g6e.12xlarge")])
    assert error.codes == ["HyperPodCluster.BadInstanceType"]
    assert "did you mean 'ml.g6e.12xlarge'?" in str(error)


def test_threads_per_core(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, instance_groups=[_group(threads_per_core=4)])
    assert error.codes == ["HyperPodCluster.ThreadsPerCore"]


@pytest.mark.parametrize("size", [0, 16385])
def test_volume_size(scratch: Base, unique_id: Callable[[], str], size: int) -> None:
    error = _errors(scratch, unique_id, instance_groups=[_group(ebs_volume_gib=size)])
    assert error.codes == ["HyperPodCluster.VolumeSize"]


@pytest.mark.parametrize("checks", [("InstanceStres",), ("InstanceStress", "InstanceStress")])
def test_deep_health_check(scratch: Base, unique_id: Callable[[], str], checks: tuple[str, ...]) -> None:
    error = _errors(scratch, unique_id, instance_groups=[_group(deep_health_checks=checks)])
    assert error.codes == ["HyperPodCluster.DeepHealthCheck"]


def test_instance_count(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, instance_groups=[_group(instance_count=-1)])
    assert error.codes == ["HyperPodCluster.InstanceCount"]


def test_node_recovery(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, node_recovery="Manual")
    assert error.codes == ["HyperPodCluster.NodeRecovery"]
    assert "Automatic, None" in str(error)


def test_no_subnets(scratch: Base, unique_id: Callable[[], str]) -> None:
    assert _errors(scratch, unique_id, subnets=[]).codes == ["HyperPodCluster.NoSubnets"]


def test_security_groups(scratch: Base, unique_id: Callable[[], str]) -> None:
    assert _errors(scratch, unique_id, security_groups=[]).codes == ["HyperPodCluster.SecurityGroups"]


def test_bad_bucket_name(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(scratch, unique_id, lifecycle_bucket_name="My_Bucket")
    assert error.codes == ["HyperPodCluster.BadBucketName"]


def test_all_problems_reported_at_once(scratch: Base, unique_id: Callable[[], str]) -> None:
    error = _errors(
        scratch, unique_id, cluster_name="bad name", subnets=[], node_recovery="Off",
        instance_groups=[_group(instance_type="g5.8xlarge", threads_per_core=3, ebs_volume_gib=0,
                                deep_health_checks=("Stress",))],
    )
    assert error.codes == [
        "HyperPodCluster.BadName", "HyperPodCluster.NoSubnets", "HyperPodCluster.NodeRecovery",
        "HyperPodCluster.BadInstanceType", "HyperPodCluster.ThreadsPerCore", "HyperPodCluster.VolumeSize",
        "HyperPodCluster.DeepHealthCheck",
    ]


def test_unresolved_tokens_are_left_to_deploy_time(scratch: Base, unique_id: Callable[[], str]) -> None:
    # Only the token-valued fields are wrong-looking; the construct builds without a ConfigError.
    security_group = ec2.SecurityGroup.from_security_group_id(scratch.stack, unique_id(), "sg-0123456789abcdef0")
    HyperPodCluster(
        scratch.stack, unique_id(), cluster_name=Token.as_string({"Ref": "ClusterName"}), eks_cluster=scratch.cluster,
        subnets=scratch.vpc.private_subnets, security_groups=[security_group],
        instance_groups=[_group(instance_count=Token.as_number({"Ref": "Count"}))],
        lifecycle_bucket_name="token-test-lifecycle",
    )


def test_no_kms_statement_without_a_key(built: Built) -> None:
    policy = built.minimal.execution_role.node.find_child("DefaultPolicy").node.default_child
    statements = built.template["Resources"][built.logical_id(policy)]["Properties"]["PolicyDocument"]["Statement"]
    assert not [s for s in statements if "kms:" in str(s["Action"])]

"""HyperPodCluster: the CfnCluster properties, lifecycle scripts, execution role (trust and least
privilege), access entry, ordering, and one test per validation code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Annotations as CdkAnnotations
from aws_cdk import CfnElement, RemovalPolicy, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template
from aws_cdk.aws_logs import RetentionDays
from constructs import Construct

from hyperpod_inference_iac.cluster.hyperpod_cluster import (
    LIFECYCLE_SCRIPTS_DIR,
    CapacityType,
    HyperPodCluster,
    InstanceGroup,
    KubernetesTaint,
    TaintEffect,
)
from hyperpod_inference_iac.foundation.validation import ConfigError
from tests.cluster.conftest import Base, make_base, resources_of
from tests.support.policy_eval import Request, decision

GPU_GROUP = InstanceGroup(
    name="gpu-workers", instance_type="ml.g6e.12xlarge", instance_count=2, threads_per_core=2,
    ebs_volume_gib=1000, deep_health_checks=("InstanceStress", "InstanceConnectivity"),
)
SYSTEM_GROUP = InstanceGroup(name="system", instance_type="ml.m5.2xlarge", instance_count=1)
# Inference nodes of their own on a cluster shared with training: labelled, tainted, some on Spot.
DEDICATED = KubernetesTaint(key="example.com/dedicated", value="inference", effect=TaintEffect.NO_SCHEDULE)
INFERENCE_GROUP = InstanceGroup(
    name="inference", instance_type="ml.g6e.12xlarge", instance_count=2,
    kubernetes_labels={"example.com/pool": "inference", "team": "llm"},
    kubernetes_taints=[DEDICATED, KubernetesTaint(key="example.com/gpu-only", effect=TaintEffect.NO_EXECUTE)],
)
SPOT_GROUP = InstanceGroup(name="inference-spot", instance_type="ml.g6e.12xlarge", instance_count=3,
                           kubernetes_labels={"example.com/pool": "inference-spot"}, kubernetes_taints=[DEDICATED],
                           capacity_type=CapacityType.SPOT)


@dataclass
class Built:
    base: Base
    main: HyperPodCluster  # two groups, KMS key, access logs
    minimal: HyperPodCluster  # defaults, NodeRecovery None
    shared: HyperPodCluster  # labels, taints, Spot: inference beside training
    template: dict[str, Any]
    assertions: Template

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
        node_recovery="None", install_dependencies=False,
    )
    shared = HyperPodCluster(
        base.stack, "Shared", cluster_name="shared", eks_cluster=base.cluster,
        subnets=base.vpc.private_subnets[:1], security_groups=[security_group],
        instance_groups=[INFERENCE_GROUP, SPOT_GROUP], lifecycle_bucket_name="shared-lifecycle-123456789012",
    )
    template = Template.from_stack(base.stack)
    return Built(base, main, minimal, shared, template.to_json(), template)


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
    # (with the VPC CNI's actions of AWS's setup template: tests/references/test_parity.py compares them)
    assert sorted(by_sid["DescribeTheNetwork"]["Action"]) == sorted([
        "ec2:DescribeNetworkInterfaces", "ec2:DescribeVpcs", "ec2:DescribeDhcpOptions", "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups", "ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeTags"])
    assert sorted(by_sid["NodeNetworkInterfacesInClusterVpc"]["Action"]) == sorted([
        "ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission", "ec2:DetachNetworkInterface", "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses", "ec2:AttachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute"])
    assert by_sid["EcrAuthorizationToken"]["Action"] == "ecr:GetAuthorizationToken"
    assert sorted(by_sid["EcrPullImages"]["Action"]) == [
        "ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


def test_execution_role_changes_network_interfaces_of_the_cluster_vpc_only(built: Built) -> None:
    """Evaluated per resource, as EC2 authorizes (tests/support/policy_eval.py): ec2:Vpc is a key of network
    interfaces, subnets and security groups, not of the interface being created nor of the node's instance."""
    vpc_ref = built.resolve(built.base.vpc.vpc_id)
    statements = [{**s, "Principal": "*"} for s in _execution_statements(built)]
    statement = next(s for s in statements if s["Sid"] == "NodeNetworkInterfacesInClusterVpc")
    assert statement["Condition"]["StringEqualsIfExists"] == {"ec2:Vpc": {"Fn::Join": ["", [
        "arn:aws:ec2:us-west-2:123456789012:vpc/", vpc_ref]]}}
    ours = f"arn:aws:ec2:us-west-2:123456789012:vpc/{vpc_ref['Ref']}"
    statements = [{**s, "Condition": {**s["Condition"], "StringEqualsIfExists": {"ec2:Vpc": ours}}}
                  if s["Sid"] == "NodeNetworkInterfacesInClusterVpc" else s for s in statements]
    eni = "arn:aws:ec2:us-west-2:123456789012:network-interface/eni-0123"
    region = {"aws:RequestedRegion": "us-west-2"}

    def ec2(action: str, resource: str, vpc: str | None = None) -> str:
        context = {**region, **({"ec2:Vpc": vpc} if vpc else {})}
        return decision(statements, Request(action, resource, "arn:aws:iam::123456789012:role/x", None, context))

    other = "arn:aws:ec2:us-west-2:123456789012:vpc/vpc-other"
    for action in ("ec2:DeleteNetworkInterface", "ec2:DetachNetworkInterface", "ec2:CreateNetworkInterfacePermission",
                   "ec2:DeleteNetworkInterfacePermission", "ec2:AssignPrivateIpAddresses",
                   "ec2:UnassignPrivateIpAddresses", "ec2:AttachNetworkInterface",
                   "ec2:ModifyNetworkInterfaceAttribute"):
        assert ec2(action, eni, ours) == "allow", action
        assert ec2(action, eni, other) == "neutral", action  # another VPC's interface: no longer
    # Create: the new interface has no ec2:Vpc yet; its subnet and security group must be in the VPC.
    assert ec2("ec2:CreateNetworkInterface", eni) == "allow"
    subnet = "arn:aws:ec2:us-west-2:123456789012:subnet/subnet-0123"
    assert ec2("ec2:CreateNetworkInterface", subnet, ours) == "allow"
    assert ec2("ec2:CreateNetworkInterface", subnet, other) == "neutral"
    # Detach authorizes the node too: the instance resource type has no ec2:Vpc key.
    assert ec2("ec2:DetachNetworkInterface", "arn:aws:ec2:us-west-2:999999999999:instance/i-0123") == "allow"
    assert ec2("ec2:DeleteNetworkInterface", eni, ours) == "allow"
    assert decision(statements, Request("ec2:DeleteNetworkInterface", eni, "arn:aws:iam::1:role/x", None, {
        "aws:RequestedRegion": "eu-west-1", "ec2:Vpc": ours})) == "neutral"


def test_an_imported_cluster_without_its_vpc_needs_the_vpc(scratch: Base, unique_id: Callable[[], str]) -> None:
    imported = eks.Cluster.from_cluster_attributes(scratch.stack, unique_id(), cluster_name="imported")
    assert _errors(scratch, unique_id, eks_cluster=imported).codes == [
        "HyperPodCluster.NoVpc", "HyperPodCluster.NoKubectlProvider"]


def test_dependency_components_are_applied_before_the_cluster(built: Built) -> None:
    manifest = built.main.dependencies
    assert manifest is not None
    resource = next(c for c in manifest.node.find_all() if isinstance(c, CfnElement))
    assert built.logical_id(resource) in built.resource(built.main.cfn_cluster)["DependsOn"]
    body = built.resource(resource)["Properties"]["Manifest"]
    objects = json.loads(body if isinstance(body, str) else "".join(str(part) for part in body["Fn::Join"][1]))
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("DaemonSet", "health-monitoring-agent") in kinds
    assert ("ServiceAccount", "deep-health-check-service-account") in kinds
    daemon_set = next(o for o in objects if o["kind"] == "DaemonSet")
    # us-west-2's image, which the execution role's ECR pull (this region) admits
    assert daemon_set["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "905418368575.dkr.ecr.us-west-2.amazonaws.com/hyperpod-health-monitoring-agent:1.0.742.0_1.0.241.0"


def test_a_cluster_without_resiliency_may_skip_the_dependency_components(built: Built) -> None:
    assert built.minimal.dependencies is None
    assert "HyperPodDependencies" not in json.dumps(built.resource(built.minimal.cfn_cluster).get("DependsOn", []))


@pytest.mark.parametrize("overrides", [
    {"install_dependencies": False},
    {"install_dependencies": False, "node_recovery": "None",
     "instance_groups": [InstanceGroup(name="g", instance_type="ml.g5.8xlarge", instance_count=1,
                                       deep_health_checks=["InstanceStress"])]},
])
def test_resiliency_without_the_dependency_components_is_refused(scratch: Base, unique_id: Callable[[], str],
                                                                  overrides: dict[str, Any]) -> None:
    error = _errors(scratch, unique_id, **overrides)
    assert error.codes == ["HyperPodCluster.DependenciesRequired"]
    assert "install_dependencies" in str(error)


def test_a_region_without_the_health_agent_image_is_refused(unique_id: Callable[[], str]) -> None:
    from aws_cdk import App, Environment, Stack
    from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

    stack = Stack(App(), "Elsewhere", env=Environment(account="123456789012", region="me-south-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    cluster = eks.Cluster(stack, "Eks", version=eks.KubernetesVersion.V1_34, vpc=vpc, default_capacity=0,
                          default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
                          kubectl_provider_options=eks.KubectlProviderOptions(
                              kubectl_layer=KubectlV34Layer(stack, "L")))
    with pytest.raises(ConfigError) as caught:
        HyperPodCluster(stack, "HyperPod", cluster_name="hp", eks_cluster=cluster, subnets=vpc.private_subnets,
                        security_groups=[cluster.cluster_security_group], instance_groups=[SYSTEM_GROUP])
    assert caught.value.codes == ["HyperPodCluster.NoHealthAgentImage"]


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


def test_labels_taints_and_spot_are_the_instance_groups_kubernetes_config_and_capacity(built: Built) -> None:
    """As CloudFormation expects them: ``KubernetesConfig`` (``Labels`` a map, ``Taints`` a list of ``Key``, ``Value``,
    ``Effect``; a taint without a value has no ``Value``) and ``CapacityRequirements: {Spot: {}}``."""
    built.assertions.has_resource_properties("AWS::SageMaker::Cluster", {
        "ClusterName": "shared",
        "InstanceGroups": [
            Match.object_like({
                "InstanceGroupName": "inference",
                "KubernetesConfig": {
                    "Labels": {"example.com/pool": "inference", "team": "llm"},
                    "Taints": [{"Key": "example.com/dedicated", "Value": "inference", "Effect": "NoSchedule"},
                               {"Key": "example.com/gpu-only", "Effect": "NoExecute"}],
                },
                "CapacityRequirements": Match.absent(),
            }),
            Match.object_like({
                "InstanceGroupName": "inference-spot",
                "KubernetesConfig": {
                    "Labels": {"example.com/pool": "inference-spot"},
                    "Taints": [{"Key": "example.com/dedicated", "Value": "inference", "Effect": "NoSchedule"}],
                },
                "CapacityRequirements": {"Spot": {}},
            }),
        ],
    })


def test_groups_without_labels_taints_or_spot_synthesize_as_before(built: Built) -> None:
    """On-Demand (the default) and no labels or taints leave both properties out: a 0.3.0 template is unchanged."""
    for cluster in (built.main, built.minimal):
        for group in built.resource(cluster.cfn_cluster)["Properties"]["InstanceGroups"]:
            assert "KubernetesConfig" not in group and "CapacityRequirements" not in group, group


@pytest.mark.slow  # (starts cfn-lint)
def test_cfn_lint_passes_on_labels_taints_and_spot(built: Built, tmp_path: Path) -> None:
    """The venv's ``cfn-lint`` script (cfn-lint 1.x has no ``python -m cfnlint``), its exit code read: 0, or only
    warnings (4) and notes (8); 2 is an error, 1 or 32 a failed run, and an empty output is never a pass."""
    template = tmp_path / "hyperpod.template.json"
    template.write_text(json.dumps(built.template))
    result = subprocess.run([str(Path(sys.executable).with_name("cfn-lint")), "--format", "json", "--", str(template)],
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode in (0, 4, 8, 12), result.stdout[-3000:] + result.stderr[-2000:]
    findings = json.loads(result.stdout)
    assert [f for f in findings if f["Level"] == "Error"] == []


def _spot_warnings(construct: Construct) -> list[str]:
    return [str(entry.data) for entry in construct.node.metadata if entry.type == "aws:cdk:warning"
            and "HyperPodCluster:spotCapacity" in str(entry.data)]


def test_a_spot_group_is_warned_at_its_capacity_type(built: Built) -> None:
    (warning,) = _spot_warnings(built.shared)
    assert warning.startswith("instance_groups[1].capacity_type: Spot nodes can be reclaimed by EC2 with a "
                              "two-minute notice")
    assert "give it more than one" not in warning  # three instances
    assert _spot_warnings(built.main) == [] and _spot_warnings(built.minimal) == []


def test_a_single_spot_instance_is_warned_louder_and_acknowledged_with_a_reason(
        scratch: Base, unique_id: Callable[[], str]) -> None:
    security_group = ec2.SecurityGroup.from_security_group_id(scratch.stack, unique_id(), "sg-0123456789abcdef0")
    props: dict[str, Any] = {
        "cluster_name": "hp", "eks_cluster": scratch.cluster, "subnets": scratch.vpc.private_subnets,
        "security_groups": [security_group], "lifecycle_bucket_name": "hp-lifecycle-bucket",
        "instance_groups": [_group(capacity_type="Spot")]}
    (warning,) = _spot_warnings(HyperPodCluster(scratch.stack, unique_id(), **props))
    assert "this group has 1 instance(s), so one reclaim can take all of its capacity: give it more than one" in warning
    reviewed = Construct(scratch.stack, unique_id())
    CdkAnnotations.of(reviewed).acknowledge_warning("@hyperpod-inference-iac/HyperPodCluster:spotCapacity",
                                                    "batch inference only, retried by the client")
    assert _spot_warnings(HyperPodCluster(reviewed, unique_id(), **props)) == []


# -- the placement helper (for a workload plan: a model on a tainted group needs a matching toleration) ----------


@pytest.mark.parametrize(("tolerations", "left"), [
    ([], ["example.com/dedicated", "example.com/gpu-only"]),
    ([{"key": "example.com/dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}],
     ["example.com/gpu-only"]),
    ([{"key": "example.com/dedicated", "value": "inference"}, {"key": "example.com/gpu-only", "operator": "Exists"}],
     []),  # Equal is the default operator; no effect tolerates every effect
    ([{"key": "example.com/dedicated", "value": "training", "effect": "NoSchedule"},
      {"key": "example.com/gpu-only", "operator": "Exists", "effect": "NoSchedule"}],
     ["example.com/dedicated", "example.com/gpu-only"]),  # another value; another effect
    ([{"key": "example.com/gpu-only", "operator": "Equal"}], ["example.com/dedicated"]),  # no value is ""
    ([{"operator": "Exists"}], []),  # an empty key with Exists tolerates everything
    ([{"key": "example.com/dedicated", "operator": "Gt", "value": "inference"}],
     ["example.com/dedicated", "example.com/gpu-only"]),  # an operator it does not know tolerates nothing
])
def test_taints_without_toleration(tolerations: list[dict[str, str]], left: list[str]) -> None:
    assert [taint.key for taint in INFERENCE_GROUP.taints_without_toleration(tolerations)] == left


def test_prefer_no_schedule_taints_are_left_out_unless_asked_for() -> None:
    group = _group(kubernetes_taints=[KubernetesTaint(key="example.com/avoid", effect=TaintEffect.PREFER_NO_SCHEDULE)])
    assert group.taints_without_toleration([]) == ()
    assert [t.key for t in group.taints_without_toleration([], preferred=True)] == ["example.com/avoid"]
    assert _group().taints_without_toleration([]) == ()  # an untainted group takes any pod


def test_on_create_script_is_strict_bash() -> None:
    script = LIFECYCLE_SCRIPTS_DIR / "on_create.sh"
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "\nset -euo pipefail\n" in text
    assert "/opt/dlami/nvme" in text and "/var/lib/containerd" in text
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert sorted(p.name for p in LIFECYCLE_SCRIPTS_DIR.iterdir() if not p.name.startswith(".")) == ["on_create.sh"]


# Stand-ins for the node's commands: iptables keeps its rules in a file (-C checks, -I inserts), systemctl and
# mountpoint log their calls (nothing is mounted).
_IPTABLES = r"""#!/bin/bash
echo "$(basename "$0") $*" >>"$NODE/calls"
rules="$NODE/$(basename "$0").rules"; touch "$rules"
args="$*"
case "$2" in
  -C) grep -qxF -- "${args#-w -C }" "$rules" ;;
  -I) shift 4; echo "FORWARD $*" >>"$rules" ;;
  *) exit 2 ;;
esac
"""
_LOGGING = '#!/bin/bash\necho "$(basename "$0") $*" >>"$NODE/calls"\n'


def _node(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("iptables", _IPTABLES), ("ip6tables", _IPTABLES), ("systemctl", _LOGGING),
                       ("mountpoint", _LOGGING + "exit 1\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "NODE": str(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_on_create_keeps_pods_away_from_the_metadata_service(tmp_path: Path) -> None:
    """The lifecycle script run (its main, sourced with the paths pointed at a scratch folder and no instance
    store) with stand-ins: it installs a helper and a boot unit that drop what pod interfaces send to the instance
    metadata service, enables the unit, and still moves on to containerd's disk."""
    env = _node(tmp_path)
    script = LIFECYCLE_SCRIPTS_DIR / "on_create.sh"
    run = subprocess.run(["bash", "-c", f'source "{script}"; LOG_FILE="$NODE/log/on_create.log"; '
                          'SYSTEMD_UNIT_DIR="$NODE/units"; HELPER_DIR="$NODE/sbin"; '
                          'has_instance_store() { return 1; }; main'],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    log = (tmp_path / "log" / "on_create.log").read_text()
    assert "pods can no longer reach the instance metadata service" in log
    assert "containerd stays on the root volume" in log
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[:2] == ["systemctl daemon-reload", "systemctl enable --now block-pod-imds.service"]
    helper = tmp_path / "sbin" / "block-pod-imds"
    unit = (tmp_path / "units" / "block-pod-imds.service").read_text()
    assert f"ExecStart={helper}\n" in unit and "Before=kubelet.service" in unit
    assert "WantedBy=multi-user.target" in unit and "Type=oneshot" in unit
    assert os.access(helper, os.X_OK)
    # The helper (what the unit runs at every boot) inserts each DROP first in FORWARD, once however often it runs.
    for _ in range(2):
        subprocess.run([str(helper)], env=env, check=True, timeout=30)
    assert (tmp_path / "iptables.rules").read_text() == "FORWARD -i eni+ -d 169.254.169.254/32 -j DROP\n"
    inserts = [c for c in (tmp_path / "calls").read_text().splitlines() if " -I " in c]
    assert "iptables -w -I FORWARD 1 -i eni+ -d 169.254.169.254/32 -j DROP" in inserts
    if Path("/proc/net/if_inet6").exists():
        assert (tmp_path / "ip6tables.rules").read_text() == "FORWARD -i eni+ -d fd00:ec2::254/128 -j DROP\n"
    assert len(inserts) == (2 if Path("/proc/net/if_inet6").exists() else 1)


def test_on_create_sourced_runs_nothing(tmp_path: Path) -> None:
    env = _node(tmp_path)
    script = LIFECYCLE_SCRIPTS_DIR / "on_create.sh"
    subprocess.run(["bash", "-c", f'source "{script}"; declare -F block_pod_metadata_access main'], env=env,
                   check=True, timeout=30, capture_output=True)
    assert not (tmp_path / "calls").exists()


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


# -- labels, taints and capacity type: one test per code, named by the Python property ------------------------------


def _taint(**overrides: Any) -> KubernetesTaint:
    return KubernetesTaint(**{"key": "example.com/dedicated", "effect": "NoSchedule", **overrides})


@pytest.mark.parametrize(("group", "code", "path"), [
    (_group(kubernetes_labels={"Team_/pool": "a"}), "HyperPodCluster.InvalidLabelKey",
     "instance_groups[0].kubernetes_labels.Team_/pool"),
    (_group(kubernetes_labels={"example.com/" + "n" * 64: "a"}), "HyperPodCluster.InvalidLabelKey",
     "instance_groups[0].kubernetes_labels.example.com/" + "n" * 64),
    (_group(kubernetes_labels={"pool": "inference pool"}), "HyperPodCluster.InvalidLabelValue",
     "instance_groups[0].kubernetes_labels.pool"),
    (_group(kubernetes_labels={"pool": ""}), "HyperPodCluster.InvalidLabelValue",
     "instance_groups[0].kubernetes_labels.pool"),
    (_group(kubernetes_labels={"node-role.kubernetes.io/inference": "true"}), "HyperPodCluster.ReservedKey",
     "instance_groups[0].kubernetes_labels.node-role.kubernetes.io/inference"),
    (_group(kubernetes_labels={"sagemaker.amazonaws.com/node-health-status": "Schedulable"}),
     "HyperPodCluster.ReservedKey", "instance_groups[0].kubernetes_labels.sagemaker.amazonaws.com/node-health-status"),
    (_group(kubernetes_labels={f"label-{i}": "a" for i in range(51)}), "HyperPodCluster.TooManyLabels",
     "instance_groups[0].kubernetes_labels"),
    (_group(kubernetes_taints=[_taint(key=f"example.com/t{i}") for i in range(51)]), "HyperPodCluster.TooManyTaints",
     "instance_groups[0].kubernetes_taints"),
    (_group(kubernetes_taints=[_taint(key="example.com/")]), "HyperPodCluster.InvalidTaintKey",
     "instance_groups[0].kubernetes_taints[0].key"),
    (_group(kubernetes_taints=[_taint(key="k8s.io/dedicated")]), "HyperPodCluster.ReservedKey",
     "instance_groups[0].kubernetes_taints[0].key"),
    (_group(kubernetes_taints=[_taint(value="-inference")]), "HyperPodCluster.InvalidTaintValue",
     "instance_groups[0].kubernetes_taints[0].value"),
    (_group(kubernetes_taints=[_taint(value="")]), "HyperPodCluster.InvalidTaintValue",
     "instance_groups[0].kubernetes_taints[0].value"),
    (_group(kubernetes_taints=[_taint(effect="NoScheduling")]), "HyperPodCluster.TaintEffect",
     "instance_groups[0].kubernetes_taints[0].effect"),
    (_group(kubernetes_taints=[_taint(), _taint(value="other")]), "HyperPodCluster.DuplicateTaint",
     "instance_groups[0].kubernetes_taints[1].key"),
    (_group(capacity_type="spot"), "HyperPodCluster.CapacityType", "instance_groups[0].capacity_type"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_scheduling_mistakes(scratch: Base, unique_id: Callable[[], str], group: InstanceGroup, code: str,
                             path: str) -> None:
    error = _errors(scratch, unique_id, instance_groups=[group])
    assert [(p.code, p.path) for p in error.problems] == [(code, path)], str(error)


def test_the_same_key_with_another_effect_is_not_a_duplicate(scratch: Base, unique_id: Callable[[], str]) -> None:
    security_group = ec2.SecurityGroup.from_security_group_id(scratch.stack, unique_id(), "sg-0123456789abcdef0")
    HyperPodCluster(scratch.stack, unique_id(), cluster_name="hp", eks_cluster=scratch.cluster,
                    subnets=scratch.vpc.private_subnets, security_groups=[security_group],
                    lifecycle_bucket_name="hp-lifecycle-bucket",
                    instance_groups=[_group(kubernetes_taints=[_taint(), _taint(effect="NoExecute")],
                                            kubernetes_labels={"example.com/kubernetes.io": "a",
                                                               "mykubernetes.io/x": "b"})])


def test_an_environment_agnostic_stack_finds_the_agent_image_at_deploy_time() -> None:
    from aws_cdk import App, Stack
    from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

    stack = Stack(App(), "Agnostic")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    cluster = eks.Cluster(stack, "Eks", version=eks.KubernetesVersion.V1_34, vpc=vpc, default_capacity=0,
                          default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
                          kubectl_provider_options=eks.KubectlProviderOptions(
                              kubectl_layer=KubectlV34Layer(stack, "L")))
    hyperpod = HyperPodCluster(stack, "HyperPod", cluster_name="hp", eks_cluster=cluster, subnets=vpc.private_subnets,
                               security_groups=[cluster.cluster_security_group], instance_groups=[SYSTEM_GROUP])
    template = Template.from_stack(stack).to_json()
    assert template["Mappings"]["HyperPodHealthMonitoringAgentAccounts"]["us-west-2"] == {"account": "905418368575"}
    assert hyperpod.dependencies is not None
    resource = next(c for c in hyperpod.dependencies.node.find_all() if isinstance(c, CfnElement))
    manifest = json.dumps(template["Resources"][stack.get_logical_id(resource)]["Properties"]["Manifest"])
    assert '"Fn::FindInMap": ["HyperPodHealthMonitoringAgentAccounts", {"Ref": "AWS::Region"}, "account"]' in manifest

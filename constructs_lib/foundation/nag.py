"""The cdk-nag findings this library's constructs produce by design, each reviewed once, with its reason.

Each construct acknowledges its own findings on the exact child they concern, with the exact
evidence (the wildcard resource, the managed policy), through the CDK's own
``Validations.of(...).acknowledge`` (no dependency on cdk-nag). So a consumer's cdk-nag run over
these constructs starts clean, while a new wildcard or managed policy that nobody reviewed still
fails it. ``REASONS`` is the whole list: a reviewer reads every accepted finding here.

An app adds acknowledgments of its own through :func:`acknowledge` with reasons of its own
(:func:`register_reason`); it never needs to repeat one of these.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from aws_cdk import Acknowledgment, CfnCondition, CfnElement, Stack, Validations
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

from hyperpod_inference_iac.foundation.cdk_types import cfn_child

REASONS: dict[str, tuple[str, str]] = {
    "eks-service-managed-policies": (
        "AwsSolutions-IAM4",
        "EKS requires these AWS managed policies on the cluster role and on node roles "
        "(AmazonEKSClusterPolicy, AmazonEKSWorkerNodePolicy, AmazonEC2ContainerRegistryReadOnly, "
        "AmazonEKS_CNI_Policy, which the VPC CNI add-on's own IRSA role holds too); AWS keeps them in step with the "
        "service.",
    ),
    "cdk-kubectl-provider-managed-policies": (
        "AwsSolutions-IAM4",
        "The kubectl provider Lambda is CDK's own construct: it runs in the VPC (VPC access policy), logs "
        "(basic execution policy) and pulls its image layer from ECR (read-only policies).",
    ),
    "cdk-kubectl-provider-runtime": (
        "AwsSolutions-L1",
        "The kubectl provider's runtime is chosen by aws-cdk-lib and follows its releases; upgrading "
        "aws-cdk-lib (its own reviewed pull request) upgrades the runtime.",
    ),
    "cdk-provider-framework-invoke": (
        "AwsSolutions-IAM5",
        "CDK's custom-resource framework may invoke every version of its one handler function "
        "(<handler ARN>:*); it can invoke nothing else.",
    ),
    "operator-managed-policy": (
        "AwsSolutions-IAM4",
        "AmazonSageMakerHyperPodInferenceAccess is AWS's documented policy for the inference operator "
        "(SageMaker endpoints, load balancers, ECR); AWS updates it with the operator. Access to our "
        "buckets, key, certificate and zone is granted separately and scoped.",
    ),
    "s3-object-wildcard-under-fixed-prefix": (
        "AwsSolutions-IAM5",
        "S3 object permissions name objects by key; the wildcard only covers keys under one fixed "
        "prefix of one named bucket (objects are created at run time with unknown names).",
    ),
    "s3-object-wildcard-dedicated-bucket": (
        "AwsSolutions-IAM5",
        "The bucket serves one purpose (the operator's TLS certificates, a model's weights) and is granted "
        "whole to the one role that does that job; objects are created at run time with unknown names. A "
        "guarded bucket's own policy still limits it to the principals on its allowlist.",
    ),
    "alb-controller-policy": (
        "AwsSolutions-IAM5",
        "The AWS Load Balancer Controller's published policy, unchanged: Describe calls support no "
        "resource-level permissions; creating and deleting load balancers, target groups and security group "
        "rules is limited to resources tagged elbv2.k8s.aws/cluster by the controller itself. As upstream, "
        "CreateSecurityGroup, listener and rule management, listener tagging, target registration and the "
        "WAF/Shield associations carry no tag condition.",
    ),
    "keda-metric-reads": (
        "AwsSolutions-IAM5",
        "KEDA's CloudWatch scaler reads the metrics a workload's autoscaling triggers name with "
        "cloudwatch:GetMetricData, which has no resource-level permissions: the resource can only be *. It is "
        "granted only while some workload scales on a CloudWatch trigger, and it reads metrics, nothing else.",
    ),
    "jumpstart-public-hub-content": (
        "AwsSolutions-IAM5",
        "Gated JumpStart models are downloaded through presigned URLs of SageMaker's public hub: the statement of "
        "AWS's AmazonSageMakerHyperPodGatedModelAccess policy, narrowed to this region. The hub belongs to AWS "
        "(the account is *) and the model ids and versions are the workloads' (*/*); the one action creates "
        "presigned URLs, nothing else.",
    ),
    "hyperpod-managed-policy": (
        "AwsSolutions-IAM4",
        "HyperPod requires AmazonSageMakerClusterInstanceRolePolicy on every instance group's role (it is "
        "what lets the node agents report health and register with the cluster); it grants no broad service access.",
    ),
    "hyperpod-node-permissions": (
        "AwsSolutions-IAM5",
        "HyperPod nodes create network interfaces whose ids exist only at run time (this account and region), "
        "describe calls and ecr:GetAuthorizationToken support no resource-level permissions, system images "
        "come from AWS-owned ECR accounts, and log groups are named after the cluster id assigned at creation.",
    ),
    "cdk-aws-custom-resource-managed-policy": (
        "AwsSolutions-IAM4",
        "CDK's SDK-call provider (AwsCustomResource), which puts the HyperPod lifecycle scripts into their "
        "bucket, logs through AWSLambdaBasicExecutionRole; each call's own permission names one object.",
    ),
    "cdk-aws-custom-resource-runtime": (
        "AwsSolutions-L1",
        "The runtime of CDK's SDK-call provider is chosen by aws-cdk-lib and moves with its upgrades.",
    ),
    "cloudwatch-log-group-arn": (
        "AwsSolutions-IAM5",
        "CloudWatch Logs authorizes log-group actions (CreateLogGroup, PutRetentionPolicy) against the group's ARN "
        "with its documented trailing ':*'; the group name itself is exact.",
    ),
    "external-dns-zone-discovery": (
        "AwsSolutions-IAM5",
        "ExternalDNS must call route53:ListHostedZones (no resource-level permissions) to find its zone; "
        "record changes are allowed in the named hosted zones only, and --zone-id-filter pins them.",
    ),
    "lake-formation-get-data-access": (
        "AwsSolutions-IAM5",
        "lakeformation:GetDataAccess has no resource-level permissions (it must name *); what it returns is "
        "decided by Lake Formation's own grants on the tables, and the vended credentials are scoped to them.",
    ),
    "glue-optimizer-log-streams": (
        "AwsSolutions-IAM5",
        "The Data Catalog's table optimizers write to the fixed log groups AWS names for them "
        "(/aws-glue/iceberg-compaction|retention|orphan-file-deletion/logs); their stream names are made at run time.",
    ),
    "capture-processor-runtime": (
        "AwsSolutions-L1",
        "Python 3.13 is pinned to match the compiled pyarrow of the AWS SDK for pandas layer; the runtime "
        "and the layer move together (a newer runtime without its layer would fail to import pyarrow).",
    ),
    "cdk-bucket-notifications-handler": (
        "AwsSolutions-IAM4",
        "CDK's singleton that configures S3 event notifications logs through AWSLambdaBasicExecutionRole.",
    ),
    "hugging-face-token-rotation": (
        "AwsSolutions-SMG4",
        "A Hugging Face access token can only be rotated in the Hugging Face account, not by a Lambda; "
        "the runbook (docs/secrets.md) rotates it there and puts the new value into this secret.",
    ),
    "portable-api-key-rotation": (
        "AwsSolutions-SMG4",
        "Rotation is off for this API key (ApiKeySync without rotation_days, warned as notRotated): the server "
        "reads it once, e.g. from an environment variable without the capture sidecar, so a new key takes a "
        "restart of its Deployment; the runbook (docs/secrets.md) generates the new value, refreshes, restarts.",
    ),
    "api-key-rotation-random-password": (
        "AwsSolutions-IAM5",
        "secretsmanager:GetRandomPassword has no resource type (it reads and writes no secret, it returns random "
        "characters); every other action of the rotation role names the one secret it rotates.",
    ),
    "api-key-rotation-metric-data": (
        "AwsSolutions-IAM5",
        "cloudwatch:GetMetricData has no resource type (IAM cannot narrow it to a namespace or a metric); it reads "
        "metrics only: the rotation function reads which keys the capture sidecars accept before it makes a new key "
        "current (docs/secrets.md). secretsmanager:GetRandomPassword has none either (it reads and writes no "
        "secret); every other action of the rotation role names the one secret it rotates.",
    ),
    "capture-tables-layer-runtime": (
        "AwsSolutions-L1",
        "Python 3.13 on arm64 is pinned to match the compiled wheels of the capture tables layer (pyiceberg, pyarrow: "
        "make capture-layer); the runtime and the layer move together (a newer runtime without its layer would fail "
        "to import them).",
    ),
    "eks-node-group-id": (
        "AwsSolutions-IAM5",
        "An EKS node group's ARN ends in an id EKS makes when it creates the group (nodegroup/<cluster>/<name>/<id>): "
        "the wildcard covers that id only, of one named group of one named cluster.",
    ),
    "preflight-account-reads": (
        "AwsSolutions-IAM5",
        "The preflight's reads that IAM gives no resource type (lakeformation:GetDataLakeSettings, the service "
        "quotas, ec2:DescribeInstanceTypes, eks:DescribeAddonVersions/DescribeAddonConfiguration) on '*', held to "
        "the platform's region (aws:RequestedRegion), and pricing:GetProducts (public list prices) held to the Price "
        "List's endpoint region; every read with a resource type names its one resource.",
    ),
}


def register_reason(key: str, rule: str, reason: str) -> None:
    """Add an app's own reviewed reason (``rule`` such as ``AwsSolutions-IAM5``); keys are unique."""
    if key in REASONS and REASONS[key] != (rule, reason):
        raise ValueError(f"acknowledgment reason {key!r} is already registered with another text")
    REASONS[key] = (rule, reason)


def acknowledge(construct: IConstruct, reason_key: str, *evidence: str) -> None:
    """Acknowledge ``REASONS[reason_key]`` on ``construct`` (and its children), once per piece of
    evidence (``Policy::...``, ``Resource::...``, ``Action::...``) or for the whole rule when the
    rule reports no evidence."""
    rule, reason = REASONS[reason_key]
    ids = [f"{rule}[{item}]" for item in evidence] if evidence else [rule]
    Validations.of(construct).acknowledge(*(Acknowledgment(id=i, reason=reason) for i in ids))


def managed_policy(name: str) -> str:
    """Evidence of an IAM4 finding for the AWS managed policy ``name`` (e.g. ``service-role/X``)."""
    return f"Policy::arn:<AWS::Partition>:iam::aws:policy/{name}"


def logical_arn(construct: IConstruct) -> str:
    """How cdk-nag shows the ARN of a resource of this stack in a finding: ``<LogicalId.Arn>``."""
    stack = Stack.of(construct)
    return f"<{stack.get_logical_id(cfn_child(construct, CfnElement))}.Arn>"


def resource_evidence(scope: IConstruct, *arns: str) -> list[str]:
    """``Resource::...`` evidence for ARNs exactly as cdk-nag prints them in a finding of ``scope``'s
    stack: tokens are resolved and flattened the way cdk-nag's ``flattenCfnReference`` does."""
    return [f"Resource::{nag_text(scope, arn)}" for arn in arns]


def nag_text(scope: IConstruct, value: Any) -> str:
    """``value`` as cdk-nag renders it in finding ids (``Ref`` -> ``<Id>``, ``GetAtt`` -> ``<Id.Attr>``)."""
    return _flatten(Stack.of(scope).resolve(value))


def _flatten(node: Any) -> str:
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return str(delimiter).join(_flatten(item) for item in items)
        if "Fn::Sub" in node:
            return _flatten(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{_flatten(resource)}.{_flatten(attribute)}>"
        if "Fn::ImportValue" in node:
            return _flatten(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{_flatten(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))


def acknowledge_kubectl_provider(provider: IConstruct) -> None:
    """The findings of CDK's kubectl provider, with evidence taken from its logical IDs."""
    stack = Stack.of(provider)
    handler = next(c for c in provider.node.find_all()
                   if isinstance(c, lambda_.CfnFunction) and c.node.path.endswith("/Handler/Resource"))
    ecr_public = next(c for c in provider.node.find_all() if isinstance(c, CfnCondition))
    optional_policy = json.dumps(
        {"Fn::If": [stack.get_logical_id(ecr_public),
                    {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                       ":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},
                    {"Ref": "AWS::NoValue"}]}, separators=(",", ":"))
    acknowledge(provider, "cdk-kubectl-provider-managed-policies",
                managed_policy("service-role/AWSLambdaBasicExecutionRole"),
                managed_policy("service-role/AWSLambdaVPCAccessExecutionRole"),
                managed_policy("AmazonEC2ContainerRegistryReadOnly"), f"Policy::{optional_policy}")
    acknowledge(provider, "cdk-kubectl-provider-runtime")
    acknowledge(provider, "cdk-provider-framework-invoke", f"Resource::<{stack.get_logical_id(handler)}.Arn>:*")


def stack_singletons(stack: Stack, id_prefix: str) -> Iterable[IConstruct]:
    """CDK's stack-level singletons (bucket-notification and bucket-deployment handlers) whose id starts
    with ``id_prefix``; the construct that caused them acknowledges their findings."""
    return [child for child in stack.node.children if child.node.id.startswith(id_prefix)]

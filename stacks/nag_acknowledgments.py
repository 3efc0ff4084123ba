"""Every cdk-nag acknowledgment of this project, each with its reason, in one place.

Stacks never call ``Validations.of(...).acknowledge`` directly: they call :func:`acknowledge`
with a key of :data:`REASONS` and the exact evidence of each finding (the wildcard resource or
the managed policy), so a reviewer reads the whole list of accepted findings here, and a new
wildcard or managed policy that nobody reviewed still fails the synth. Acknowledgments are
attached to the one construct they concern (never a stack, never a path).
"""

from __future__ import annotations

import json

from aws_cdk import Acknowledgment, CfnCondition, Stack, Validations
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

REASONS: dict[str, tuple[str, str]] = {
    "eks-service-managed-policies": (
        "AwsSolutions-IAM4",
        "EKS requires these AWS managed policies on the cluster role and on node roles "
        "(AmazonEKSClusterPolicy, AmazonEKSWorkerNodePolicy, AmazonEC2ContainerRegistryReadOnly, "
        "AmazonEKS_CNI_Policy); AWS keeps them in step with the service.",
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
    "alb-controller-policy": (
        "AwsSolutions-IAM5",
        "The AWS Load Balancer Controller's published policy: Describe calls support no resource-level "
        "permissions; every mutating call on security groups, load balancers, target groups, listeners "
        "and rules is limited to resources tagged elbv2.k8s.aws/cluster by the controller itself.",
    ),
    "keda-metric-reads": (
        "AwsSolutions-IAM5",
        "KEDA reads scaling metrics: CloudWatch GetMetricData/ListMetrics support no resource-level "
        "permissions; Prometheus queries are limited to this account's workspaces in this region.",
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
    "cdk-bucket-deployment": (
        "AwsSolutions-IAM5",
        "CDK's BucketDeployment copies the staged lifecycle scripts from the CDK asset bucket into the "
        "lifecycle bucket; its generated role is limited to those two buckets and the capture key.",
    ),
    "cdk-bucket-deployment-managed-policy": (
        "AwsSolutions-IAM4",
        "CDK's BucketDeployment handler logs through AWSLambdaBasicExecutionRole; it is CDK's construct.",
    ),
    "cdk-bucket-deployment-runtime": (
        "AwsSolutions-L1",
        "The BucketDeployment handler's runtime is chosen by aws-cdk-lib and moves with its upgrades.",
    ),
    "external-dns-zone-discovery": (
        "AwsSolutions-IAM5",
        "ExternalDNS must call route53:ListHostedZones (no resource-level permissions) to find its zone; "
        "record changes are allowed in the one hosted zone only, and --zone-id-filter pins it.",
    ),
    "log-bucket-in-another-stack": (
        "Annotation::@aws-cdk/aws-s3:accessLogsPolicyNotAdded",
        "The shared access-log bucket lives in the storage stack; its policy already admits S3 log delivery "
        "from every bucket of this account (statement S3ServerAccessLogsFromThisAccount in CaptureStorage).",
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
}


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


def acknowledge_bucket_deployment(deployment: IConstruct, handler_role: IConstruct, *evidence: str) -> None:
    """The findings of CDK's BucketDeployment: its role (given) and its singleton handler function."""
    stack = Stack.of(deployment)
    handler = next(c for c in stack.node.children if c.node.id.startswith("Custom::CDKBucketDeployment"))
    acknowledge(handler_role, "cdk-bucket-deployment-managed-policy",
                managed_policy("service-role/AWSLambdaBasicExecutionRole"))
    acknowledge(handler_role, "cdk-bucket-deployment", "Action::s3:GetBucket*", "Action::s3:GetObject*",
                "Action::s3:List*", "Action::s3:Abort*", "Action::s3:DeleteObject*", "Action::kms:GenerateDataKey*",
                "Action::kms:ReEncrypt*", *evidence)
    acknowledge(handler, "cdk-bucket-deployment-runtime")


def logical_arn(construct: IConstruct) -> str:
    """How cdk-nag shows the ARN of a resource of this stack in a finding: ``<LogicalId.Arn>``."""
    stack = Stack.of(construct)
    return f"<{stack.get_logical_id(construct.node.default_child)}.Arn>"


def acknowledge_bucket_notifications_handler(stack: Stack) -> None:
    """CDK's singleton Lambda that writes a bucket's notification configuration."""
    handler = next(c for c in stack.node.children if c.node.id.startswith("BucketNotificationsHandler"))
    acknowledge(handler, "cdk-bucket-notifications-handler",
                managed_policy("service-role/AWSLambdaBasicExecutionRole"))

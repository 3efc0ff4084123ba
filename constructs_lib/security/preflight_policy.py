"""The read-only IAM policy the preflight (:mod:`hyperpod_inference_iac.preflight`) needs, and nothing more.

Every action reads; each is scoped to the one resource the preflight asks about where IAM has a resource type for it
(the bootstrap version parameter, the layer, the hosted zone, the certificate, the cluster, the sidecar's
repository), and held to the platform's region where it has none (``aws:RequestedRegion``). ``sts:GetCallerIdentity``
needs no permission. The server-side dry run is Kubernetes RBAC, not IAM: ``docs/deploying.md`` ("The preflight")
gives the ClusterRole an access entry binds the role to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from hyperpod_inference_iac.foundation.nag import acknowledge
from hyperpod_inference_iac.foundation.props import Props, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved

DEFAULT_QUALIFIER = "hnb659fds"
PRICE_LIST_REGION = "us-east-1"  # (hyperpod_inference_iac.preflight's, where the prices check calls the Price List)
# Actions without a resource type: held to the platform's region instead.
UNSCOPED_READS = ("lakeformation:GetDataLakeSettings", "servicequotas:GetServiceQuota",
                  "servicequotas:ListServiceQuotas", "ec2:DescribeInstanceTypes", "eks:DescribeAddonVersions",
                  "eks:DescribeAddonConfiguration")


@dataclass(frozen=True, kw_only=True)
class PreflightPolicyProps(Props):
    """:class:`PreflightPolicy`'s properties: the resources the preflight reads, each optional (a check whose
    resource is not given is granted nothing)."""

    CONSTRUCT: ClassVar[str] = "PreflightPolicy"

    bootstrap_qualifier: str = prop(DEFAULT_QUALIFIER, config=False,
                                    doc="The CDK bootstrap qualifier (`/cdk-bootstrap/<qualifier>/version`).")
    tables_layer_arn: str | None = prop(None, config=False, default_doc="none",
                                        doc="The capture tables' layer version ARN (`lambda:GetLayerVersion`).")
    hosted_zone_id: str | None = prop(None, config=False, default_doc="none",
                                      doc="An existing hosted zone (`route53:GetHostedZone`).")
    certificate_arn: str | None = prop(None, config=False, default_doc="none",
                                       doc="An existing certificate (`acm:DescribeCertificate`).")
    cluster_name: str | None = prop(None, config=False, default_doc="none",
                                    doc="The EKS cluster (`eks:DescribeCluster`, for its endpoint and CA).")
    sidecar_repositories: Sequence[str] = prop((), config=False, default_doc="none",
                                               doc="ECR repository names of a prebuilt sidecar image "
                                                   "(`ecr:DescribeImages`).")
    policy_name: str | None = prop(None, config=False, default_doc="generated", doc="The managed policy's name.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        qualifier = self.bootstrap_qualifier
        if not is_unresolved(qualifier) and not (qualifier.isalnum() and 1 <= len(qualifier) <= 10):
            problems.add("PreflightPolicy.BadQualifier", at.at("bootstrap_qualifier"),
                         "must be 1-10 letters or digits (cdk bootstrap --qualifier)", qualifier)


@real_signature
class PreflightPolicy(Construct):
    """A customer managed policy with the preflight's read-only permissions; attach it to the role that runs
    ``python -m hyperpod_inference_iac.preflight`` (``policy.attach_to_role(role)``).

    Properties: :class:`PreflightPolicyProps`. Attributes: ``policy`` (the ``iam.ManagedPolicy``).
    """

    PROPS: ClassVar[type[Props]] = PreflightPolicyProps

    def __init__(self, scope: Construct, id: str, *,
                 bootstrap_qualifier: str = PreflightPolicyProps.bootstrap_qualifier,
                 tables_layer_arn: str | None = PreflightPolicyProps.tables_layer_arn,
                 hosted_zone_id: str | None = PreflightPolicyProps.hosted_zone_id,
                 certificate_arn: str | None = PreflightPolicyProps.certificate_arn,
                 cluster_name: str | None = PreflightPolicyProps.cluster_name,
                 sidecar_repositories: Sequence[str] = PreflightPolicyProps.sidecar_repositories,
                 policy_name: str | None = PreflightPolicyProps.policy_name) -> None:
        """Create the construct. Its properties (:class:`PreflightPolicyProps`, kept as ``self.props``):

        :param bootstrap_qualifier: The CDK bootstrap qualifier (`/cdk-bootstrap/<qualifier>/version`). Default:
            ``'hnb659fds'``.
        :param tables_layer_arn: The capture tables' layer version ARN (`lambda:GetLayerVersion`). Default:
            ``None`` (none).
        :param hosted_zone_id: An existing hosted zone (`route53:GetHostedZone`). Default: ``None`` (none).
        :param certificate_arn: An existing certificate (`acm:DescribeCertificate`). Default: ``None`` (none).
        :param cluster_name: The EKS cluster (`eks:DescribeCluster`, for its endpoint and CA). Default: ``None``
            (none).
        :param sidecar_repositories: ECR repository names of a prebuilt sidecar image (`ecr:DescribeImages`).
            Default: ``()`` (none).
        :param policy_name: The managed policy's name. Default: ``None`` (generated).
        """
        super().__init__(scope, id)
        self.props = props = PreflightPolicyProps(
            bootstrap_qualifier=bootstrap_qualifier, tables_layer_arn=tables_layer_arn, hosted_zone_id=hosted_zone_id,
            certificate_arn=certificate_arn, cluster_name=cluster_name,
            sidecar_repositories=tuple(sidecar_repositories), policy_name=policy_name)
        props.raise_if_invalid(f"PreflightPolicy {self.node.path}")
        stack = Stack.of(self)
        here = f"{stack.region}:{stack.account}"
        region = {"StringEquals": {"aws:RequestedRegion": stack.region}}
        statements = [
            iam.PolicyStatement(sid="BootstrapVersion", actions=["ssm:GetParameter"], resources=[
                f"arn:{stack.partition}:ssm:{here}:parameter/cdk-bootstrap/{props.bootstrap_qualifier}/version"]),
            iam.PolicyStatement(sid="AccountReads", actions=list(UNSCOPED_READS), resources=["*"], conditions=region),
            # The public Price List (the `prices` check): its Query API answers in us-east-1 only among the regions
            # the preflight uses, and has no resource type; it reads list prices, nothing of the account.
            iam.PolicyStatement(sid="PriceList", actions=["pricing:GetProducts"], resources=["*"],
                                conditions={"StringEquals": {"aws:RequestedRegion": PRICE_LIST_REGION}}),
        ]
        scoped = [
            ("TablesLayer", "lambda:GetLayerVersion", props.tables_layer_arn),
            ("HostedZone", "route53:GetHostedZone",
             props.hosted_zone_id and f"arn:{stack.partition}:route53:::hostedzone/{props.hosted_zone_id}"),
            ("Certificate", "acm:DescribeCertificate", props.certificate_arn),
            ("Cluster", "eks:DescribeCluster",
             props.cluster_name and f"arn:{stack.partition}:eks:{here}:cluster/{props.cluster_name}"),
        ]
        statements += [iam.PolicyStatement(sid=sid, actions=[action], resources=[arn])
                       for sid, action, arn in scoped if arn]
        if props.sidecar_repositories:
            statements.append(iam.PolicyStatement(
                sid="SidecarImage", actions=["ecr:DescribeImages"],
                resources=[f"arn:{stack.partition}:ecr:{here}:repository/{name}"
                           for name in props.sidecar_repositories]))
        self.policy = iam.ManagedPolicy(self, "Policy", managed_policy_name=props.policy_name,
                                        description="Read-only checks of hyperpod-inference-iac's preflight",
                                        statements=statements)
        acknowledge(self.policy, "preflight-account-reads", "Resource::*")


__all__ = ["PreflightPolicy", "PreflightPolicyProps"]

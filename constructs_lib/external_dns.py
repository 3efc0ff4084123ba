"""ExternalDNS for the portable model servers' hostnames, allowed to change records in named zones only.

Like cdk-eks-blueprints' add-on, the construct owns its service account's role and scopes its own
statements to the zones it is given; the composing stack only passes zones in. The Helm release comes
from :func:`external_dns_release`, which the GitOps hand-off renders too.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_route53 as route53
from constructs import Construct

from hyperpod_inference_iac.helm import HelmRelease
from hyperpod_inference_iac.nag import acknowledge
from hyperpod_inference_iac.platform_values import Interpolated, PlatformValue
from hyperpod_inference_iac.workload_identity import service_account_principal

CHART_VERSION = "1.16.1"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "external-dns"


def external_dns_release(*, zone_ids: Sequence[str | PlatformValue], domain_filters: Sequence[str], owner_id: str,
                         role_arn: str) -> HelmRelease:
    """The ExternalDNS release: Route 53, ``upsert-only`` (it never deletes a record it did not create),
    Services only, pinned to the given zones."""
    return HelmRelease(
        release="external-dns", chart="external-dns", repository="https://kubernetes-sigs.github.io/external-dns/",
        version=CHART_VERSION, namespace=NAMESPACE,
        values={
            "provider": {"name": "aws"},
            "policy": "upsert-only",
            "sources": ["service"],
            "domainFilters": list(domain_filters),
            "extraArgs": [_zone_filter(zone_id) for zone_id in zone_ids],
            "txtOwnerId": owner_id,
            "serviceAccount": {"name": SERVICE_ACCOUNT, "annotations": {"eks.amazonaws.com/role-arn": role_arn}},
        },
        purpose="publishes the portable model servers' hostnames in Route 53",
    )


def _zone_filter(zone_id: str | PlatformValue) -> str | Interpolated:
    return f"--zone-id-filter={zone_id}" if isinstance(zone_id, str) else Interpolated("--zone-id-filter={}", zone_id)


class ExternalDns(Construct):
    """ExternalDNS with its own IRSA role, scoped to ``hosted_zones``.

    :param cluster: the cluster to install it in.
    :param hosted_zones: the zones whose records it may change (only these).
    :param owner_id: the TXT owner id (the cluster name): it changes only records it owns.
    :param role_name: fixed name of its role, so GitOps manifests can name it. @default generated

    Attributes: ``role``, ``release`` (the :class:`~hyperpod_inference_iac.helm.HelmRelease`), ``chart``.
    ``route53:ListHostedZones`` (no resource-level permissions) is acknowledged for cdk-nag here.
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster, hosted_zones: Sequence[route53.IHostedZone],
                 owner_id: str, role_name: str | None = None) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self, "Role", role_name=role_name,
            assumed_by=service_account_principal(self, "Trust", cluster=cluster, namespace=NAMESPACE,
                                                 service_account=SERVICE_ACCOUNT),
            description="ExternalDNS: records of portable model servers in named hosted zones",
        )
        self.role.add_to_principal_policy(iam.PolicyStatement(
            sid="ChangeRecordsInNamedZones",
            actions=["route53:ChangeResourceRecordSets", "route53:ListResourceRecordSets",
                     "route53:ListTagsForResource"],
            resources=[zone.hosted_zone_arn for zone in hosted_zones]))
        self.role.add_to_principal_policy(iam.PolicyStatement(
            # Route 53 list calls support no resource-level permissions; --zone-id-filter pins the zones.
            sid="FindTheZones", actions=["route53:ListHostedZones"], resources=["*"]))
        role_arn = f"arn:{stack.partition}:iam::{stack.account}:role/{role_name}" if role_name else self.role.role_arn
        self.release = external_dns_release(
            zone_ids=[zone.hosted_zone_id for zone in hosted_zones],
            domain_filters=[zone.zone_name for zone in hosted_zones], owner_id=owner_id, role_arn=role_arn)
        self.chart = self.release.install(cluster, "ExternalDns")
        self.chart.node.add_dependency(self.role)
        acknowledge(self.role, "external-dns-zone-discovery", "Resource::*")

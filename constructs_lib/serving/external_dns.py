"""ExternalDNS for the portable model servers' hostnames: it watches the namespaces it is given only, and may change
only the records of the names it is given, in named zones only.

Like cdk-eks-blueprints' add-on, the construct owns its service account's role and scopes its own statements;
the composing stack passes zones, namespaces and hostnames in. The Helm releases come from
:func:`external_dns_releases`, which the GitOps hand-off renders too.

ExternalDNS watches one namespace (``--namespace``) or all of them, so the construct installs one release per
namespace, each in ``kube-system`` (its credentials stay out of the workloads' namespaces) with its own service
account; the one IRSA role trusts exactly those service accounts. Every release keeps the same TXT owner id and
``upsert-only``: with ``sync`` one instance would delete the records the others own, and with distinct owner ids
the records already published under the cluster's name would be orphaned.

What ExternalDNS 0.16 writes for a Service behind a load balancer with hostname ``h`` (``registry/txt.go``,
``provider/aws/aws.go``): alias ``A`` and ``AAAA`` records at ``h``; TXT ownership records at ``h`` (the old
format) and at ``cname-h``, ``aaaa-h`` (the new format: the record type before the first label, ``cname`` for an
alias ``A``; ``a-h`` for a plain ``A``; ``cname-h`` for a ``CNAME``). The role's ``ChangeResourceRecordSets`` is
narrowed with Route 53's condition keys to exactly those names (:func:`published_record_names`), those record
types and the ``CREATE`` and ``UPSERT`` actions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import Annotations, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_route53 as route53
from constructs import Construct

from hyperpod_inference_iac.foundation.cdk_types import (
    ClusterLike,
    check_cluster_attributes,
)
from hyperpod_inference_iac.foundation.helm import (
    HelmRelease,
)
from hyperpod_inference_iac.foundation.nag import (
    acknowledge,
)
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
    DOMAIN_NAME,
    iam_role_arn,
)
from hyperpod_inference_iac.foundation.platform_values import (
    Interpolated,
    PlatformValue,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)
from hyperpod_inference_iac.security.workload_identity import (
    service_account_principal,
)

CHART_VERSION = "1.16.1"
NAMESPACE = "kube-system"  # where the releases run (not what they watch)
SERVICE_ACCOUNT = "external-dns"
POLICY = "upsert-only"
#: the change actions ExternalDNS needs under ``upsert-only``: no DELETE
CHANGE_ACTIONS = ("CREATE", "UPSERT")
#: the record types ExternalDNS manages by default (``--managed-record-types``) and its TXT registry
RECORD_TYPES = ("A", "AAAA", "CNAME", "TXT")
#: the record-type prefixes of the TXT registry's new format (``<type>-<first label>``)
TXT_TYPE_PREFIXES = ("a", "aaaa", "cname")
_RELEASE_NAME_MAX = 53  # Helm's limit on release names


def published_record_names(hostname: str) -> list[str]:
    """The normalized names ExternalDNS writes for ``hostname`` (lower case, no trailing dot): the record itself
    (and the old-format TXT beside it) and the new-format TXT ownership records."""
    name = hostname.rstrip(".").lower()
    first, _, rest = name.partition(".")
    return [name, *(f"{prefix}-{first}.{rest}" if rest else f"{prefix}-{first}" for prefix in TXT_TYPE_PREFIXES)]


def release_name(namespace: str) -> str:
    """``external-dns-<namespace>``, shortened with a digest when Helm's 53 characters would not hold it."""
    name = f"{SERVICE_ACCOUNT}-{namespace}"
    if len(name) <= _RELEASE_NAME_MAX:
        return name
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:8]
    return f"{name[:_RELEASE_NAME_MAX - 9]}-{digest}"


@dataclass(frozen=True, kw_only=True)
class ExternalDnsProps(Props):
    """:class:`ExternalDns`'s properties: all of them objects or plan results only Python code passes (the app
    derives them from its plan and its domain)."""

    CONSTRUCT: ClassVar[str] = "ExternalDns"

    cluster: ClusterLike = prop(
        config=False, doc="The `aws_eks_v2` cluster to install it in: an `eks.Cluster` (with a kubectl provider) or "
                          "an imported `eks.ICluster` given its `open_id_connect_provider` (for the IRSA role, "
                          "`ExternalDns.NoOidcProvider`) and `kubectl_provider` (for the Helm releases, "
                          "`ExternalDns.NoKubectlProvider`).")
    hosted_zones: Sequence[route53.IHostedZone] = prop(
        config=False, doc="The zones whose records it may change, and only these (at least one). Each zone must know "
                          "its name (`HostedZone.from_hosted_zone_attributes`, not `from_hosted_zone_id`): the name "
                          "becomes a `domainFilters` entry.")
    owner_id: str = prop(config=False, doc="The TXT owner id (the cluster name), the same for every release. "
                                           "ExternalDNS changes only records it owns.")
    namespaces: Sequence[str] = prop(
        config=False, doc="The namespaces whose Services it publishes: one release each, watching that namespace "
                          "only (`--namespace`). At least one; DNS-1123 labels, none twice.")
    hostnames: Sequence[str] | None = prop(
        None, config=False, default_doc="any name of `hosted_zones`, warned: `ExternalDns:anyRecordName`",
        doc="The names it may publish: `ChangeResourceRecordSets` is allowed for these names and their TXT ownership "
            "records only. Literal lower-case DNS names in the zones, no wildcard.")
    role_name: str | None = prop(None, doc="Fixed name of the role, so GitOps manifests can name it.", config=False,
                                 default_doc="generated")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        check_cluster_attributes(problems, at, self.cluster, {"open_id_connect_provider": "ExternalDns.NoOidcProvider",
                                                              "kubectl_provider": "ExternalDns.NoKubectlProvider"})
        _check_external_dns(problems, at, namespaces=self.namespaces, hostnames=self.hostnames,
                            zone_names=[zone.zone_name for zone in self.hosted_zones],
                            zone_count=len(self.hosted_zones))


def check_external_dns(problems: Problems, at: KeyPaths = PROPS, *, namespaces: Sequence[str],
                       hostnames: Sequence[str] | None = None, zone_names: Sequence[str] = (),
                       zone_count: int | None = None) -> None:
    """:meth:`ExternalDnsProps.check` with the zones given by their names and count (``zone_names``: the zones'
    names where known; kept for callers of 0.2.0)."""
    _check_external_dns(problems, at, namespaces=namespaces, hostnames=hostnames, zone_names=zone_names,
                        zone_count=zone_count)


def _check_external_dns(problems: Problems, at: KeyPaths, *, namespaces: Sequence[str],
                        hostnames: Sequence[str] | None, zone_names: Sequence[str], zone_count: int | None) -> None:
    if zone_count is not None and zone_count < 1:
        problems.add("ExternalDns.NoHostedZones", at.at("hosted_zones"), "must name at least one hosted zone")
    if not namespaces:
        problems.add("ExternalDns.NoNamespaces", at.at("namespaces"),
                     "must name at least one namespace to watch (ExternalDNS would otherwise watch every namespace)")
    seen: set[str] = set()
    for index, namespace in enumerate(namespaces):
        if is_unresolved(namespace):
            problems.add("ExternalDns.BadNamespace", at.at("namespaces", index),
                         "must be a literal DNS-1123 label (it names a Helm release at synthesis)", namespace)
        elif len(namespace) > 63 or not DNS1123_LABEL.match(namespace):
            problems.add("ExternalDns.BadNamespace", at.at("namespaces", index), "must be a DNS-1123 label",
                         namespace)
        elif namespace in seen:
            problems.add("ExternalDns.DuplicateNamespace", at.at("namespaces", index), "is listed twice", namespace)
        seen.add(namespace)
    known_zones = [zone.rstrip(".").lower() for zone in zone_names if not is_unresolved(zone)]
    for index, hostname in enumerate(hostnames or ()):
        if is_unresolved(hostname):
            problems.add("ExternalDns.BadHostname", at.at("hostnames", index),
                         "must be a literal DNS name (its TXT ownership record names are derived at synthesis)",
                         hostname)
        elif not DOMAIN_NAME.match(hostname):
            problems.add("ExternalDns.BadHostname", at.at("hostnames", index),
                         "must be a lower-case DNS name such as api.inference.example.com (no wildcard)", hostname)
        elif known_zones and len(known_zones) == len(zone_names) and not any(
                hostname.endswith(f".{zone}") for zone in known_zones):
            problems.add("ExternalDns.HostnameOutsideZones", at.at("hostnames", index),
                         f"must be a name in one of the hosted zones ({', '.join(known_zones)})", hostname)


def external_dns_release(*, namespace: str, zone_ids: Sequence[str | PlatformValue], domain_filters: Sequence[str],
                         owner_id: str, role_arn: str) -> HelmRelease:
    """The ExternalDNS release that watches ``namespace`` only: Route 53, ``upsert-only`` (it never deletes a
    record), Services only, pinned to the given zones; installed in ``kube-system`` as :func:`release_name`, with
    the service account of that name."""
    name = release_name(namespace)
    return HelmRelease(
        release=name, chart="external-dns", repository="https://kubernetes-sigs.github.io/external-dns/",
        version=CHART_VERSION, namespace=NAMESPACE,
        values={
            "provider": {"name": "aws"},
            "policy": POLICY,
            "sources": ["service"],
            "domainFilters": list(domain_filters),
            "extraArgs": [*(_zone_filter(zone_id) for zone_id in zone_ids), f"--namespace={namespace}"],
            "txtOwnerId": owner_id,
            "serviceAccount": {"name": name, "annotations": {"eks.amazonaws.com/role-arn": role_arn}},
        },
        purpose=f"publishes the hostnames of the portable model servers in namespace {namespace} in Route 53",
    )


def external_dns_releases(*, namespaces: Sequence[str], zone_ids: Sequence[str | PlatformValue],
                          domain_filters: Sequence[str], owner_id: str, role_arn: str) -> list[HelmRelease]:
    """One :func:`external_dns_release` per namespace."""
    return [external_dns_release(namespace=namespace, zone_ids=zone_ids, domain_filters=domain_filters,
                                 owner_id=owner_id, role_arn=role_arn) for namespace in namespaces]


def _zone_filter(zone_id: str | PlatformValue) -> str | Interpolated:
    return f"--zone-id-filter={zone_id}" if isinstance(zone_id, str) else Interpolated("--zone-id-filter={}", zone_id)


@real_signature
class ExternalDns(Construct):
    """ExternalDNS with its own IRSA role, watching ``namespaces`` only and changing only the records of
    ``hostnames`` in ``hosted_zones`` (see the module docstring).

    Properties: :class:`ExternalDnsProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``role``, ``releases`` and ``charts`` (by namespace: the
    :class:`~hyperpod_inference_iac.foundation.helm.HelmRelease` and the installed ``eks.HelmChart``, children of this
    construct, so depending on the construct waits for all of them). ``route53:ListHostedZones`` (no resource-level
    permissions) is acknowledged for cdk-nag here.
    """

    PROPS: ClassVar[type[Props]] = ExternalDnsProps

    def __init__(self, scope: Construct, id: str, *, cluster: ClusterLike, hosted_zones: Sequence[route53.IHostedZone],
                 owner_id: str, namespaces: Sequence[str], hostnames: Sequence[str] | None = ExternalDnsProps.hostnames,
                 role_name: str | None = ExternalDnsProps.role_name) -> None:
        """Create the construct. Its properties (:class:`ExternalDnsProps`, kept as ``self.props``):

        :param cluster: The `aws_eks_v2` cluster to install it in: an `eks.Cluster` (with a kubectl provider) or
            an imported `eks.ICluster` given its `open_id_connect_provider` (for the IRSA role,
            `ExternalDns.NoOidcProvider`) and `kubectl_provider` (for the Helm releases,
            `ExternalDns.NoKubectlProvider`). Default: required.
        :param hosted_zones: The zones whose records it may change, and only these (at least one). Each zone
            must know its name (`HostedZone.from_hosted_zone_attributes`, not `from_hosted_zone_id`): the name
            becomes a `domainFilters` entry. Default: required.
        :param owner_id: The TXT owner id (the cluster name), the same for every release. ExternalDNS changes
            only records it owns. Default: required.
        :param namespaces: The namespaces whose Services it publishes: one release each, watching that namespace
            only (`--namespace`). At least one; DNS-1123 labels, none twice. Default: required.
        :param hostnames: The names it may publish: `ChangeResourceRecordSets` is allowed for these names and
            their TXT ownership records only. Literal lower-case DNS names in the zones, no wildcard. Default:
            ``None`` (any name of ``hosted_zones``, warned: ``ExternalDns:anyRecordName``).
        :param role_name: Fixed name of the role, so GitOps manifests can name it. Default: ``None``
            (generated).
        """
        super().__init__(scope, id)
        self.props = props = ExternalDnsProps(
            cluster=cluster, hosted_zones=listed(hosted_zones), owner_id=owner_id, namespaces=listed(namespaces),
            hostnames=listed(hostnames), role_name=role_name)
        props.raise_if_invalid(f"ExternalDns {self.node.path}")
        stack = Stack.of(self)
        self.role = iam.Role(
            self, "Role", role_name=props.role_name,
            assumed_by=service_account_principal(self, "Trust", cluster=props.cluster, namespace=NAMESPACE,
                                                 service_account=[release_name(ns) for ns in props.namespaces]),
            description="ExternalDNS: records of portable model servers in named hosted zones",
        )
        zones = [zone.hosted_zone_arn for zone in props.hosted_zones]
        changes: dict[str, dict[str, list[str]]] = {"ForAllValues:StringEquals": {
            "route53:ChangeResourceRecordSetsActions": list(CHANGE_ACTIONS),
            "route53:ChangeResourceRecordSetsRecordTypes": list(RECORD_TYPES)}}
        if props.hostnames is not None:
            changes["ForAllValues:StringEquals"]["route53:ChangeResourceRecordSetsNormalizedRecordNames"] = \
                sorted({name for hostname in props.hostnames for name in published_record_names(hostname)})
        else:
            Annotations.of(self).add_warning_v2(
                "@hyperpod-inference-iac/ExternalDns:anyRecordName",
                "no hostnames given: ExternalDNS may create and update any record of its hosted zones; pass the "
                "names it publishes (hostnames=...) to limit it to those and their TXT ownership records")
        self.role.add_to_principal_policy(iam.PolicyStatement(
            sid="ChangeRecordsInNamedZones", actions=["route53:ChangeResourceRecordSets"], resources=zones,
            conditions=changes))
        self.role.add_to_principal_policy(iam.PolicyStatement(
            sid="ReadRecordsInNamedZones", actions=["route53:ListResourceRecordSets", "route53:ListTagsForResource"],
            resources=zones))
        self.role.add_to_principal_policy(iam.PolicyStatement(
            # Route 53 list calls support no resource-level permissions; --zone-id-filter pins the zones.
            sid="FindTheZones", actions=["route53:ListHostedZones"], resources=["*"]))
        role_arn = iam_role_arn(stack.partition, stack.account, props.role_name) if props.role_name \
            else self.role.role_arn
        releases = external_dns_releases(
            namespaces=props.namespaces, zone_ids=[zone.hosted_zone_id for zone in props.hosted_zones],
            domain_filters=[zone.zone_name for zone in props.hosted_zones], owner_id=props.owner_id, role_arn=role_arn)
        self.releases: dict[str, HelmRelease] = dict(zip(props.namespaces, releases, strict=True))
        self.charts: dict[str, eks.HelmChart] = {}
        for namespace, release in self.releases.items():
            chart = release.install(props.cluster, f"Release-{namespace}", scope=self)
            chart.node.add_dependency(self.role)
            self.charts[namespace] = chart
        acknowledge(self.role, "external-dns-zone-discovery", "Resource::*")

"""Custom domains for inference endpoints: a Route 53 hosted zone and an ACM certificate that
covers every endpoint name, each either brought by the caller or created here.

A created certificate is validated by DNS in the zone; for a new zone, delegate it (NS records at the
parent) before the deploy, or the certificate waits for validation until CloudFormation times out.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_route53 as route53
from constructs import Construct

from hyperpod_inference_iac.patterns import DOMAIN_NAME
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved


def check_endpoint_domain(problems: Problems, at: KeyPaths = PROPS, *, zone_name: str,
                          endpoint_domains: Sequence[str]) -> None:
    """Every rule of :class:`EndpointDomain`'s properties (a config loader calls it with its key paths)."""
    zone_ok = is_unresolved(zone_name) or bool(DOMAIN_NAME.match(zone_name))
    if not zone_ok:
        problems.add("EndpointDomain.BadZoneName", at.at("zone_name"),
                     "must be a lowercase DNS name such as inference.example.com", zone_name)
    if not endpoint_domains:
        problems.add("EndpointDomain.NoDomains", at.at("endpoint_domains"), "needs at least one endpoint name")
    for index, name in enumerate(endpoint_domains):
        path = at.at("endpoint_domains", index)
        if is_unresolved(name):
            continue
        if "*" in name:
            problems.add("EndpointDomain.Wildcard", path,
                         "must be a concrete name; the operator needs the exact name it serves (for a wildcard "
                         "certificate, list the subdomains)", name)
        elif not DOMAIN_NAME.match(name):
            problems.add("EndpointDomain.BadDomainName", path, "must be a lowercase DNS name", name)
        elif zone_ok and not is_unresolved(zone_name) and not name.endswith("." + zone_name):
            problems.add("EndpointDomain.OutsideZone", path, f"must be a subdomain of the zone {zone_name}", name)
    seen = [name for name in endpoint_domains if endpoint_domains.count(name) > 1]
    for name in sorted(set(seen)):
        problems.add("EndpointDomain.Duplicate", at.at("endpoint_domains"), "lists a name twice", name)


class EndpointDomain(Construct):
    """The hosted zone and the certificate of the endpoint names.

    :param zone_name: the Route 53 zone, e.g. ``inference.example.com``.
    :param endpoint_domains: the concrete names the operator will serve (no wildcards: the operator's
        ``domainName`` must be a specific name that the certificate covers), all inside the zone.
    :param hosted_zone: an existing zone for ``zone_name``. @default a new public hosted zone
    :param certificate: an existing certificate covering ``endpoint_domains``. @default a new
        DNS-validated certificate for exactly those names

    Attributes: ``hosted_zone``, ``certificate``, ``endpoint_domains``, ``zone_name``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        zone_name: str,
        endpoint_domains: Sequence[str],
        hosted_zone: route53.IHostedZone | None = None,
        certificate: acm.ICertificate | None = None,
    ) -> None:
        super().__init__(scope, id)
        problems = Problems()
        check_endpoint_domain(problems, zone_name=zone_name, endpoint_domains=endpoint_domains)
        problems.raise_if_any(f"EndpointDomain {self.node.path}")
        self.zone_name = zone_name
        self.endpoint_domains = tuple(endpoint_domains)
        self.hosted_zone: route53.IHostedZone = hosted_zone or route53.PublicHostedZone(
            self, "Zone", zone_name=zone_name, comment="Inference endpoint names (managed by the platform)")
        if certificate is None:
            first, *rest = endpoint_domains
            certificate = acm.Certificate(
                self, "Certificate", domain_name=first, subject_alternative_names=rest or None,
                validation=acm.CertificateValidation.from_dns(self.hosted_zone),
                certificate_name=f"{Stack.of(self).stack_name}-endpoints",
            )
        self.certificate: acm.ICertificate = certificate

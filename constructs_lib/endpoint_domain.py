"""Custom domains for inference endpoints: a Route 53 hosted zone and an ACM certificate that
covers every endpoint name, each either brought by the caller or created here.

A created certificate is validated by DNS in the zone; for a new zone, delegate it (NS records at the
parent) before the deploy, or the certificate waits for validation until CloudFormation times out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_route53 as route53
from constructs import Construct

from hyperpod_inference_iac.patterns import DOMAIN_NAME
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved

_ACM_ARN = re.compile(r"^arn:aws[a-z-]*:acm:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):certificate/\S+$")


def check_endpoint_domain(problems: Problems, at: KeyPaths = PROPS, *, zone_name: str,
                          endpoint_domains: Sequence[str], certificate_arn: str | None = None,
                          account: str | None = None, region: str | None = None) -> None:
    """Every rule of :class:`EndpointDomain`'s properties (a config loader calls it with its key paths).

    ``certificate_arn`` (an existing certificate's) must be in ``account`` and ``region``, the stack's: ACM
    certificates cannot be shared between accounts, and a load balancer uses only its own region's."""
    _check_certificate(problems, at, certificate_arn, account, region)
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


def _check_certificate(problems: Problems, at: KeyPaths, arn: str | None, account: str | None,
                       region: str | None) -> None:
    if arn is None or is_unresolved(arn):
        return
    match = _ACM_ARN.match(arn)
    if match is None:
        problems.add("EndpointDomain.BadCertificateArn", at.at("certificate"), "must be an ACM certificate ARN", arn)
        return
    if account is not None and not is_unresolved(account) and match["account"] != account:
        problems.add("EndpointDomain.CertificateOtherAccount", at.at("certificate"),
                     f"is a certificate of account {match['account']}, not of {account} (the stack's): ACM "
                     f"certificates cannot be shared between accounts; request or import it in {account}", arn)
    if region is not None and not is_unresolved(region) and match["region"] != region:
        problems.add("EndpointDomain.CertificateOtherRegion", at.at("certificate"),
                     f"is a certificate of {match['region']}, not of {region} (the stack's): the endpoints' load "
                     f"balancers use only certificates of their own region; request or import it in {region}", arn)


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
        stack = Stack.of(self)
        check_endpoint_domain(problems, zone_name=zone_name, endpoint_domains=endpoint_domains,
                              certificate_arn=certificate.certificate_arn if certificate is not None else None,
                              account=stack.account, region=stack.region)
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

"""Stable names for inference endpoints: a Route 53 hosted zone and an ACM certificate.

Bring your own or let us create it: an existing zone is passed by id and name, an existing
certificate by ARN (no lookups, so synth needs no account). A new certificate is validated by
DNS in the zone; for a new zone, delegate it (NS records at the parent) before the deploy, or
the certificate waits for validation until CloudFormation times out.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_route53 as route53
from constructs import Construct

from hyperpod_inference_iac.validation import Problems


class EndpointDomain(Construct):
    """:param endpoint_domains: the concrete names the operator will serve (no wildcards: the
    operator's ``domainName`` must be a specific name that the certificate covers)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        zone_name: str,
        endpoint_domains: Sequence[str],
        existing_hosted_zone_id: str | None = None,
        existing_certificate_arn: str | None = None,
    ) -> None:
        super().__init__(scope, id_)
        _validate(zone_name, endpoint_domains)
        if existing_hosted_zone_id:
            self.hosted_zone: route53.IHostedZone = route53.HostedZone.from_hosted_zone_attributes(
                self, "Zone", hosted_zone_id=existing_hosted_zone_id, zone_name=zone_name)
        else:
            self.hosted_zone = route53.PublicHostedZone(
                self, "Zone", zone_name=zone_name, comment="Inference endpoint names (managed by the platform)")
        if existing_certificate_arn:
            self.certificate: acm.ICertificate = acm.Certificate.from_certificate_arn(
                self, "Certificate", existing_certificate_arn)
        else:
            first, *rest = endpoint_domains
            self.certificate = acm.Certificate(
                self, "Certificate", domain_name=first, subject_alternative_names=rest or None,
                validation=acm.CertificateValidation.from_dns(self.hosted_zone),
                certificate_name=f"{Stack.of(self).stack_name}-endpoints",
            )
        self.endpoint_domains = tuple(endpoint_domains)


def _validate(zone_name: str, endpoint_domains: Sequence[str]) -> None:
    problems = Problems()
    if not endpoint_domains:
        problems.add("EndpointDomain.NoDomains", "endpoint_domains", "needs at least one endpoint name")
    for index, name in enumerate(endpoint_domains):
        if "*" in name:
            problems.add("EndpointDomain.Wildcard", f"endpoint_domains[{index}]",
                         "must be a concrete name; the operator cannot serve a wildcard", name)
        elif not name.endswith("." + zone_name):
            problems.add("EndpointDomain.OutsideZone", f"endpoint_domains[{index}]",
                         f"must be inside the zone {zone_name}", name)
    problems.raise_if_any("EndpointDomain")

"""Custom domains for inference endpoints: a Route 53 hosted zone and an ACM certificate that
covers every endpoint name, each either brought by the caller or created here.

A created certificate is validated by DNS in the zone; for a new zone, delegate it (NS records at the
parent) before the deploy, or the certificate waits for validation until CloudFormation times out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_route53 as route53
from constructs import Construct

from hyperpod_inference_iac.foundation.patterns import (
    DOMAIN_NAME,
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

_ACM_ARN = re.compile(r"^arn:aws[a-z-]*:acm:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):certificate/\S+$")


@dataclass(frozen=True, kw_only=True)
class EndpointDomainOptions(Props):
    """The endpoint domain's properties a config file can set (``domain`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "EndpointDomain"

    zone_name: str = prop(doc="The Route 53 zone, e.g. `inference.example.com`: a lowercase DNS name with at least "
                              "two labels.")
    endpoint_domains: Sequence[str] = prop(
        doc="The concrete names the operator will serve, all inside the zone, none twice. No wildcards: the "
            "operator's `domainName` must be one specific name that the certificate covers.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        zone_name = self.zone_name
        zone_ok = is_unresolved(zone_name) or bool(DOMAIN_NAME.match(zone_name))
        if not zone_ok:
            problems.add("EndpointDomain.BadZoneName", at.at("zone_name"),
                         "must be a lowercase DNS name such as inference.example.com", zone_name)
        endpoint_domains = list(self.endpoint_domains)
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
            # Against a zone that is missing or wrong, no name is compared: that is one problem, the zone's.
            elif zone_ok and not is_unresolved(zone_name) and not name.endswith("." + zone_name):
                problems.add("EndpointDomain.OutsideZone", path, f"must be a subdomain of the zone {zone_name}",
                             name)
        seen = [name for name in endpoint_domains if endpoint_domains.count(name) > 1]
        for name in sorted(set(seen)):
            problems.add("EndpointDomain.Duplicate", at.at("endpoint_domains"), "lists a name twice", name)


@dataclass(frozen=True, kw_only=True)
class EndpointDomainProps(EndpointDomainOptions):
    """:class:`EndpointDomain`'s properties: its options, and the zone and certificate only Python code passes."""

    hosted_zone: route53.IHostedZone | None = prop(None, doc="An existing zone for `zone_name`.", config=False,
                                                   default_doc="a new public hosted zone")
    certificate: acm.ICertificate | None = prop(
        None, config=False, default_doc="a new DNS-validated certificate for exactly `endpoint_domains`",
        doc="An existing certificate covering `endpoint_domains`, in the stack's account and region (ACM "
            "certificates cannot be shared between accounts; load balancers use their own region's). It is not "
            "checked against the names.")


def check_endpoint_domain(problems: Problems, at: KeyPaths = PROPS, *, zone_name: str,
                          endpoint_domains: Sequence[str], certificate_arn: str | None = None,
                          account: str | None = None, region: str | None = None) -> None:
    """:func:`check_endpoint_certificate` and :meth:`EndpointDomainOptions.check` (kept for callers of 0.2.0)."""
    check_endpoint_certificate(problems, at, certificate_arn, account=account, region=region)
    EndpointDomainOptions(zone_name=zone_name, endpoint_domains=listed(endpoint_domains)).check(problems, at)


def check_endpoint_certificate(problems: Problems, at: KeyPaths, arn: str | None, *, account: str | None,
                               region: str | None) -> None:
    """The rules of an existing certificate (``certificate``, by its ARN): an ACM certificate of ``account`` and
    ``region``, the stack's. ACM certificates cannot be shared between accounts, and a load balancer uses only its
    own region's."""
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


@real_signature
class EndpointDomain(Construct):
    """The hosted zone and the certificate of the endpoint names.

    Properties: :class:`EndpointDomainProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``hosted_zone``, ``certificate``, ``endpoint_domains``, ``zone_name``.
    """

    PROPS: ClassVar[type[Props]] = EndpointDomainProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        zone_name: str,
        endpoint_domains: Sequence[str],
        hosted_zone: route53.IHostedZone | None = EndpointDomainProps.hosted_zone,
        certificate: acm.ICertificate | None = EndpointDomainProps.certificate,
    ) -> None:
        """Create the construct. Its properties (:class:`EndpointDomainProps`, kept as ``self.props``):

        :param zone_name: The Route 53 zone, e.g. `inference.example.com`: a lowercase DNS name with at least
            two labels. Default: required.
        :param endpoint_domains: The concrete names the operator will serve, all inside the zone, none twice. No
            wildcards: the operator's `domainName` must be one specific name that the certificate covers.
            Default: required.
        :param hosted_zone: An existing zone for `zone_name`. Default: ``None`` (a new public hosted zone).
        :param certificate: An existing certificate covering `endpoint_domains`, in the stack's account and
            region (ACM certificates cannot be shared between accounts; load balancers use their own region's).
            It is not checked against the names. Default: ``None`` (a new DNS-validated certificate for exactly
            ``endpoint_domains``).
        """
        super().__init__(scope, id)
        self.props = props = EndpointDomainProps(zone_name=zone_name, endpoint_domains=listed(endpoint_domains),
                                                 hosted_zone=hosted_zone, certificate=certificate)
        stack = Stack.of(self)
        problems = Problems()
        # (The certificate's account and region are the stack's: known here, not a property.)
        check_endpoint_certificate(problems, PROPS, certificate.certificate_arn if certificate is not None else None,
                                   account=stack.account, region=stack.region)
        props.check(problems)
        problems.raise_if_any(f"EndpointDomain {self.node.path}")
        self.zone_name = props.zone_name
        self.endpoint_domains = tuple(props.endpoint_domains)
        self.hosted_zone: route53.IHostedZone = props.hosted_zone or route53.PublicHostedZone(
            self, "Zone", zone_name=props.zone_name, comment="Inference endpoint names (managed by the platform)")
        certificate = props.certificate
        if certificate is None:
            first, *rest = props.endpoint_domains
            certificate = acm.Certificate(
                self, "Certificate", domain_name=first, subject_alternative_names=rest or None,
                validation=acm.CertificateValidation.from_dns(self.hosted_zone),
                certificate_name=f"{Stack.of(self).stack_name}-endpoints",
            )
        self.certificate: acm.ICertificate = certificate

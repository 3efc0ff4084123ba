"""Endpoint names: the Route 53 zone and the ACM certificate the operator attaches to its load balancers."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from constructs_lib.endpoint_domain import EndpointDomain
from platform_config import PlatformConfig


class DomainStack(Stack):
    def __init__(self, scope: Construct, id_: str, *, config: PlatformConfig, **kwargs: Any) -> None:
        super().__init__(scope, id_, **kwargs)
        domain = config.domain
        self.domain = EndpointDomain(
            self, "EndpointDomain", zone_name=domain.zone_name, endpoint_domains=domain.endpoint_domains,
            existing_hosted_zone_id=domain.existing_hosted_zone_id,
            existing_certificate_arn=domain.existing_certificate_arn,
        )
        CfnOutput(self, "HostedZoneId", value=self.domain.hosted_zone.hosted_zone_id)
        CfnOutput(self, "CertificateArn", value=self.domain.certificate.certificate_arn)

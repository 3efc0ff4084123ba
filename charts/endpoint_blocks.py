"""Blocks shared by InferenceEndpointConfig and JumpStartModel: TLS, DNS, load balancer, metrics,
tags, and the ``replicas``/``autoScalingSpec``/``dataCapture`` rules both kinds obey."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.foundation.patterns import ACM_CERTIFICATE_ARN, DOMAIN_NAME, HOSTED_ZONE_ID
from hyperpod_inference_iac.foundation.platform_values import PlatformValue, S3Uri
from hyperpod_inference_iac.foundation.validation import Problems, is_unresolved, join_path

# The CRDs' int32 (maxDeployTimeInSeconds has no other bound; default 3600).
INT32_MAX = 2_147_483_647
# The CRDs' own patterns for these two fields.
INSTANCE_TYPE_PATTERN = r"^ml\..*"
TLS_OUTPUT_S3_URI_PATTERN = r"^s3://([^/]+)/?(.*)$"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CustomCertificateConfig(SpecBlock):
    """An ACM certificate the operator attaches to the ALB; both fields go together."""

    acm_arn: str | PlatformValue | None = crd_field(
        default=None, code="Tls.AcmArnInvalid", pattern=ACM_CERTIFICATE_ARN.pattern
    )
    domain_name: str | None = crd_field(
        default=None,
        code="Tls.DomainNameInvalid",
        pattern=DOMAIN_NAME.pattern,
        max_length=253,
        hint="a concrete lowercase name on the certificate; for a wildcard certificate give the subdomain",
    )

    def check_rules(self, path: str, problems: Problems) -> None:
        if (self.acm_arn is None) != (self.domain_name is None):
            problems.add(
                "Tls.CertificateIncomplete",
                path,
                "acmArn and domainName must be given together (the domain must be a name on the certificate)",
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TlsConfig(SpecBlock):
    custom_certificate_config: CustomCertificateConfig | None = None
    tls_certificate_output_s3_uri: str | S3Uri | None = crd_field(
        default=None, code="Tls.OutputS3UriInvalid", pattern=TLS_OUTPUT_S3_URI_PATTERN, hint="s3://bucket/prefix"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DnsConfig(SpecBlock):
    """Route 53 record managed by the operator, named after the certificate's domain."""

    hosted_zone_id: str | PlatformValue = crd_field(code="Dns.HostedZoneIdInvalid", pattern=HOSTED_ZONE_ID.pattern)


class RoutingAlgorithm(enum.StrEnum):
    LEAST_OUTSTANDING_REQUESTS = "least_outstanding_requests"
    ROUND_ROBIN = "round_robin"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadBalancerConfig(SpecBlock):
    health_check_path: str | None = crd_field(default=None, code="LoadBalancer.HealthCheckPathInvalid", pattern=r"^/.*")
    routing_algorithm: RoutingAlgorithm | None = crd_field(
        default=None, code="LoadBalancer.RoutingAlgorithmInvalid", allowed=RoutingAlgorithm
    )
    idle_timeout_seconds: int | None = crd_field(
        default=None, code="LoadBalancer.IdleTimeoutOutOfRange", minimum=1, maximum=4000
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelMetrics(SpecBlock):
    path: str | None = crd_field(default=None, code="Metrics.PathInvalid", pattern=r"^/[a-zA-Z0-9\-_.\/]*$")
    port: int | None = crd_field(default=None, code="Metrics.PortOutOfRange", minimum=1024, maximum=65535)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MetricsConfig(SpecBlock):
    enabled: bool | None = None
    metrics_scrape_interval_seconds: int | None = crd_field(
        default=None, code="Metrics.ScrapeIntervalOutOfRange", minimum=5, maximum=300
    )
    model_metrics: ModelMetrics | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class NameValue(SpecBlock):
    """A ``{name, value}`` pair: IEC ``tags`` and JumpStartModel ``environmentVariables``."""

    name: str
    value: str


def check_dns_needs_certificate(
    dns_config: DnsConfig | None, tls_config: TlsConfig | None, path: str, problems: Problems
) -> None:
    """The CRD's prose rule: "dnsConfig ... Requires tlsConfig.customCertificateConfig to be set"."""
    has_certificate = tls_config is not None and tls_config.custom_certificate_config is not None
    if dns_config is not None and not has_certificate:
        problems.add(
            "Dns.NeedsCustomCertificate",
            join_path(path, "dnsConfig"),
            "Route 53 records are named after the custom certificate's domain: set "
            "tlsConfig.customCertificateConfig (acmArn and domainName) or remove dnsConfig",
        )


def tls_output_uri(tls_config: TlsConfig | None) -> str | S3Uri | None:
    return tls_config.tls_certificate_output_s3_uri if tls_config is not None else None


def max_deploy_time_field(code: str) -> Any:
    """``maxDeployTimeInSeconds``: how long the operator waits for a deployment before it fails it (CRD default
    3600 s). Downloading and loading a large model can take longer: raise it rather than see the deployment fail."""
    return crd_field(default=None, code=code, minimum=1, maximum=INT32_MAX)



# core/v1 resource.Quantity, as the CRDs write it (spec.worker.resources.limits).
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
_QUANTITY = re.compile(QUANTITY_PATTERN)
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerResources(SpecBlock):
    """A core/v1 ResourceRequirements for one of the operator's own containers (operator 3.4, add-on
    ``v1.5.0-eksbuild.1``: ``metricsSidecarResources``, ``metricsCollectorResources``, ``s3UploaderResources``).
    "Each field fully replaces that container's resource block, so specify complete requests and limits" (release
    notes v3.4): both are required here, each quantity a Kubernetes quantity (``500m``, ``256Mi``, ``1``)."""

    requests: Mapping[str, str | int] | None = None
    limits: Mapping[str, str | int] | None = None

    def check_rules(self, path: str, problems: Problems) -> None:
        for name in ("requests", "limits"):
            amounts = getattr(self, name)
            if amounts is None or not amounts:
                problems.add("Model.SidecarResourcesIncomplete", join_path(path, name),
                             "give both requests and limits (for cpu and memory at least): the block replaces the "
                             "operator's defaults for that container whole, and a missing half runs unbounded or "
                             "unreserved (release notes v3.4)")
                continue
            for resource, amount in amounts.items():
                amount_path = join_path(join_path(path, name), str(resource))
                if not isinstance(resource, str) or not _RESOURCE_NAME.match(resource):
                    problems.add("Model.ResourceQuantityInvalid", amount_path,
                                 "must be a resource name such as cpu, memory or ephemeral-storage", resource)
                elif isinstance(amount, bool) or not isinstance(amount, str | int) or (
                        isinstance(amount, str) and not is_unresolved(amount) and not _QUANTITY.match(amount)):
                    problems.add("Model.ResourceQuantityInvalid", amount_path,
                                 "must be a Kubernetes quantity such as 500m, 2, 256Mi or 1Gi", amount)
                elif isinstance(amount, int | str) and str(amount).startswith("-"):
                    problems.add("Model.ResourceQuantityInvalid", amount_path, "must not be negative", amount)

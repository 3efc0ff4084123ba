"""The platform's capture entry in front of an Inference Gateway (``gateways[i].entry``): who called which model, and
per-caller limits, for the gateway's traffic.

The gateway checks each request's JWT and forwards it to a model pod, whose capture (tier 3) records bodies, not
headers, and the kind is closed (no ``claimToHeaders``): the gateway by itself gives captures no caller. The entry is
the capture sidecar in JWT mode, run as a Deployment of its own in the gateway's namespace: it verifies the token
with the gateway's own issuer, keys, audiences and required claims (:meth:`JwtAuthentication.capture_environment`),
records the caller claim as ``callerId``, enforces the gateway's ``usageLimits`` per caller, and forwards the request
unchanged, ``Authorization`` included, to ``https://<the gateway's endpointDomain>`` (TLS verified against the
system's trust store: the gateway serves the platform's ACM certificate), where the gateway verifies it again.

Names. The gateway's in-cluster Service is named by its controller and not known at synth, and its load balancer has
no DNS record the platform owns (docs/gateway.md, "DNS"); the one stable name of the gateway is its
``endpointDomain``. So the entry takes a name of its own among the certificate's (``entry.endpointDomain``), on an
internal NLB with a TLS listener on the platform certificate (a portable server's way in), published by ExternalDNS,
and clients move to it. Its upstream is the gateway's ``endpointDomain``.

Opt-in, with the default platform opting in: the entry needs a DNS name of its own, which must be one of the
certificate's names and in the platform zone, and the platform cannot invent one. A gateway with a JWT provider and
no entry is warned at every synth (its traffic records no caller).

This module is what the entry *is* (its options); the plan (:mod:`~hyperpod_inference_iac.charts.plan`) makes a
``PlannedGatewayEntry`` of them and :mod:`~hyperpod_inference_iac.charts.gateway_entry_chart` renders it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from hyperpod_inference_iac.charts.portable_server import MAX_REQUEST_BODY_KB, check_source_ranges
from hyperpod_inference_iac.charts.usage_limits import UsageLimits
from hyperpod_inference_iac.foundation.patterns import DOMAIN_NAME
from hyperpod_inference_iac.foundation.props import Props, prop
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved

ENTRY_SUFFIX = "-entry"
# "<gateway>-entry-metrics" is a Service name: at most 63 characters.
MAX_GATEWAY_NAME_WITH_ENTRY = 63 - len(ENTRY_SUFFIX) - len("-metrics")
MAX_REPLICAS = 100


def entry_name(gateway: str) -> str:
    """The entry's Deployment, Service and service account: ``<gateway>-entry``."""
    return f"{gateway}{ENTRY_SUFFIX}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatewayEntryOptions(Props):
    """The platform's capture entry in front of one Inference Gateway (``gateways[i].entry``): the capture sidecar in
    JWT mode, which records the token's caller claim as ``caller_id``, enforces ``usageLimits`` per caller and
    forwards every request unchanged to the gateway (docs/gateway.md, "The capture entry")."""

    CONSTRUCT: ClassVar[str] = "GatewayEntry"

    endpoint_domain: str = prop(
        doc="The name clients call instead of the gateway's: one of the platform certificate's names, in the platform "
            "zone, not the gateway's own `endpointDomain` (that one stays the entry's upstream). An internal NLB "
            "serves it with TLS on the platform certificate, and ExternalDNS publishes it.")
    replicas: int = prop(2, doc="Entry pods (each holds at most its in-flight bodies; limits are shared through the "
                                "`usageLimits` store). From 1 to 100.")
    sampling_percentage: int = prop(
        100, doc="The share of exchanges whose bodies are captured, 0 to 100 (every exchange is still metered and "
                 "checked against the limits; `usageLimits.usageRecords: all` records the usage of the others).")
    max_request_body_kb: int = prop(
        8192, key="maxRequestBodyKB",
        doc=f"The largest request body the entry accepts (413 above it), in KiB: from 1 to {MAX_REQUEST_BODY_KB} (the "
            "sidecar's in-flight bound).")
    allowed_source_ranges: tuple[str, ...] | None = prop(
        None, doc="Who may connect to the entry's load balancer (CIDR blocks).",
        default_doc="the platform's VPC CIDR")
    # (a config file's `usageLimits` block is read by its own class: docs/configuration.md describes it)
    usage_limits: UsageLimits | None = prop(
        None, doc="Budgets and rate limits per caller (the caller claim's value), as a portable server's "
                  "`usageLimits` (docs/usage-and-budgets.md).", default_doc="none", config=False)

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        domain = self.endpoint_domain
        if not is_unresolved(domain) and not DOMAIN_NAME.match(domain):
            problems.add("GatewayEntry.EndpointDomainInvalid", at.at("endpoint_domain"),
                         "must be a lowercase DNS name such as llm.inference.example.com", domain)
        if not 1 <= self.replicas <= MAX_REPLICAS:
            problems.add("GatewayEntry.ReplicasOutOfRange", at.at("replicas"), f"must be from 1 to {MAX_REPLICAS}",
                         self.replicas)
        if not 0 <= self.sampling_percentage <= 100:
            problems.add("GatewayEntry.SamplingOutOfRange", at.at("sampling_percentage"), "must be from 0 to 100",
                         self.sampling_percentage)
        if not 1 <= self.max_request_body_kb <= MAX_REQUEST_BODY_KB:
            problems.add("GatewayEntry.RequestBodyCapOutOfRange", at.at("max_request_body_kb"),
                         f"must be from 1 to {MAX_REQUEST_BODY_KB} (the sidecar's in-flight bound)",
                         self.max_request_body_kb)
        if self.allowed_source_ranges is not None:
            if not self.allowed_source_ranges:
                problems.add("GatewayEntry.SourceRangeInvalid", at.at("allowed_source_ranges"),
                             "must list at least one CIDR block (leave it out for the VPC's)")
            check_source_ranges(self.allowed_source_ranges, "GatewayEntry.SourceRangeInvalid",
                                lambda index: at.at("allowed_source_ranges", index), problems)


__all__ = ["ENTRY_SUFFIX", "GatewayEntryOptions", "entry_name"]

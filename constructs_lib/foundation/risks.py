"""Risky but legal choices, said out loud: the warnings of this library, each decided in one place.

A choice that is allowed but weakens what the platform promises (redaction off, a server without an API key,
a reader role in another account) is not refused: it is warned about, and a reviewer acknowledges it with a
reason. Each construct's warnings are decided by one ``warn_*`` function, the twin of its ``check_*``
function: it takes a :class:`RiskWarnings` collector and a :class:`~hyperpod_inference_iac.KeyPaths`, so

* the construct calls it with its own property names and turns what it found into CDK warnings
  (``Annotations.add_warning_v2``, acknowledged with ``Annotations.acknowledge_warning(id, reason)``);
* a config loader calls it with its file's key paths, before anything is built, and prints the same warnings
  (same id, same rule) under the keys the reader wrote.

A warning's id is stable (``@hyperpod-inference-iac/<Construct>:<name>``), so an acknowledgment keeps working
when the message's wording changes. :data:`WARNINGS` lists every id this library raises, with what raises it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from aws_cdk import Annotations
from constructs import IConstruct

WARNING_ID_PREFIX = "@hyperpod-inference-iac/"
TOP_LEVEL = "(top level)"  # KeyPaths' name for the construct itself


def warning_id(name: str) -> str:
    """``warning_id("InferenceCluster:publicEndpoint")`` is the full id an acknowledgment names."""
    return f"{WARNING_ID_PREFIX}{name}"


# Every warning id this library raises, with what raises it (docs/configuration.md lists them for the app).
WARNINGS: Mapping[str, str] = {
    warning_id("InferenceCluster:publicEndpoint"): "InferenceCluster: endpoint_access=PUBLIC_AND_PRIVATE",
    warning_id("CapturePipeline:redactionOff"): "CapturePipeline: redact=[] (curated/ holds prompts as captured)",
    warning_id("CaptureStorage:readerInOtherAccount"):
        "CaptureStorage: a reader_role_arns role of another account than the stack's",
    warning_id("CaptureStorage:rawReaderInOtherAccount"):
        "CaptureStorage: a raw_reader_role_arns role of another account than the stack's",
    warning_id("CaptureStorage:readersNeedKeyPolicy"):
        "CaptureStorage: reader or break-glass roles with an imported encryption_key",
    warning_id("CaptureTables:notWritten"):
        "CaptureTables: no tables_layer_arn (the tables are made; the processor writes Parquet only)",
    warning_id("AlarmTopic:noSubscribers"): "AlarmTopic: no subscriber and no forwarded topic",
    warning_id("AlarmTopic:importedKey"): "AlarmTopic: an imported encryption_key",
    warning_id("CertificateAlarms:beforeManagedRenewal"):
        "CertificateAlarms: days_to_expiry.threshold above ACM's 60-day managed renewal",
    warning_id("InferenceWorkloads:captureWithoutKmsKey"): "InferenceWorkloads: a capture tier without kmsKeyId",
    warning_id("InferenceWorkloads:fullSampling"): "InferenceWorkloads: a capture tier sampling 100 %",
    warning_id("InferenceWorkloads:imageNotPinnedByDigest"): "InferenceWorkloads: an image named by tag only",
    warning_id("InferenceWorkloads:noApiKey"): "InferenceWorkloads: a portable server without an API key",
    warning_id("InferenceWorkloads:sourceRangeOpenToAll"):
        "InferenceWorkloads: allowedSourceRanges with 0.0.0.0/0 or ::/0",
    warning_id("InferenceWorkloads:sourceRangeNotPrivate"):
        "InferenceWorkloads: an allowedSourceRanges range outside private address space and the VPC",
    warning_id("InferenceWorkloads:captureNotMonitored"):
        "InferenceWorkloads: a capturing portable server or gateway capture entry outside the namespaces a metrics "
        "agent watches",
    warning_id("InferenceWorkloads:registerTokenAudiences"):
        "InferenceWorkloads: container-scoped identities on an imported cluster, whose OIDC provider must list their "
        "token audiences",
    warning_id("InferenceWorkloads:needsReplacement"):
        "InferenceWorkloads.warn_about_replacements: a custom resource change the operator applies only to a new "
        "resource (decided against the previous dist/, at synth)",
    warning_id("InferenceWorkloads:gatewayUnauthenticated"):
        "InferenceWorkloads: an Inference Gateway without JWT authentication (unauthenticatedReason given)",
    warning_id("SecretsKey:noDeployer"): "SecretsKey: a stack synthesizer whose deploy role is unknown",
    warning_id("ApiKeySync:notRotated"): "ApiKeySync: a key not rotated (rotation off, or a server without capture)",
    warning_id("ApiKeySync:writesNotLimited"): "ApiKeySync: any principal IAM allows may write the key (no deployer "
                                               "role known)",
    warning_id("InferenceCluster:noDeployer"):
        "InferenceCluster: no deployer_role_arns and a stack synthesizer whose deploy role is unknown",
    warning_id("ExternalDns:anyRecordName"): "ExternalDns: no hostnames (it may change any record of its zones)",
    warning_id("SecretsKey:unmanagedKeyPolicy"): "a secret's encryption_key that is not a SecretsKey",
    warning_id("PlatformVpc:availabilityZoneLookup"): "PlatformVpc: zones looked up in the account at synth",
    warning_id("HyperPodCluster:spotCapacity"): "HyperPodCluster: an instance group with capacity_type=Spot",
    warning_id("hardened_bucket:logBucketPolicy"):
        "server access logs into a bucket whose policy the construct cannot change: an imported one, or one of "
        "another stack when the logged bucket has no literal name",
    warning_id("data_perimeter:elbAccountUnknown"): "ALB access logs in a stack without a Region",
}


@dataclass(frozen=True)
class RiskWarning:
    """One risky choice: its warning ``id``, the ``path`` of the value that makes it, and what it risks."""

    id: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"[{self.id}] {self.path}: {self.message}"

    @property
    def text(self) -> str:
        """The CDK warning's message: the path (a construct's property) and the message; CDK appends the id."""
        return self.message if self.path == TOP_LEVEL else f"{self.path}: {self.message}"


@dataclass
class RiskWarnings:
    """Collects warnings, each (id, path) once, in the order found."""

    items: list[RiskWarning] = field(default_factory=list)

    def add(self, name_or_id: str, path: str, message: str) -> None:
        """``name_or_id``: ``Construct:name`` or the full id."""
        full = name_or_id if name_or_id.startswith(WARNING_ID_PREFIX) else warning_id(name_or_id)
        if full not in WARNINGS:
            raise ValueError(f"{full} is not in risks.WARNINGS: list it there, with what raises it")
        if not any(w.id == full and w.path == path for w in self.items):
            self.items.append(RiskWarning(full, path, message))

    def annotate(self, scope: IConstruct) -> None:
        """Each warning as a CDK warning on ``scope`` (an acknowledgment of its id on ``scope`` or above, made
        before or after, silences it)."""
        for warning in self.items:
            Annotations.of(scope).add_warning_v2(warning.id, warning.text)

    def __iter__(self) -> Iterator[RiskWarning]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


# Address space that no client reaches from the internet: RFC 1918, RFC 6598 (shared address space, which VPCs
# use as secondary CIDRs) and IPv6 unique local addresses (RFC 4193).
PRIVATE_NETWORKS: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = tuple(
    ipaddress.ip_network(cidr) for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                                            "fc00::/7"))


def is_private_range(cidr: str, *also: str | None) -> bool:
    """True when every address of ``cidr`` is private address space (:data:`PRIVATE_NETWORKS`) or inside one of
    ``also`` (a VPC's own CIDR, which may be public space the VPC owns). A range that is not a network is not
    judged here (its check refuses it)."""
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return True
    inside = [*PRIVATE_NETWORKS]
    for extra in also:
        if extra is None:
            continue
        try:
            inside.append(ipaddress.ip_network(extra, strict=False))
        except ValueError:
            continue
    return any(_subnet_of(network, block) for block in inside)


def _subnet_of(network: ipaddress.IPv4Network | ipaddress.IPv6Network,
               block: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """``network`` lies inside ``block`` (False across IP versions)."""
    if isinstance(network, ipaddress.IPv4Network):
        return isinstance(block, ipaddress.IPv4Network) and network.subnet_of(block)
    return isinstance(block, ipaddress.IPv6Network) and network.subnet_of(block)


def role_account(arn: str) -> str | None:
    """The account of an IAM role ARN (``arn:aws:iam::111122223333:role/x`` -> ``111122223333``), else None."""
    parts = arn.split(":")
    return parts[4] if len(parts) > 5 and parts[0] == "arn" and parts[2] == "iam" and parts[4] else None


__all__ = [
    "PRIVATE_NETWORKS",
    "WARNINGS",
    "WARNING_ID_PREFIX",
    "RiskWarning",
    "RiskWarnings",
    "is_private_range",
    "role_account",
    "warning_id",
]

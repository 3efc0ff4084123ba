"""Values the platform supplies to workloads, as a type of their own.

A workload plan is made once, from configuration, before any construct exists. Where a workload
needs something the platform provides (the capture bucket, the certificate ARN, the hosted zone),
the plan holds a :class:`PlatformValue`, never a string that looks like a CDK token. Rendering the
plan resolves each one with a :class:`PlatformValues` mapping:

* for the CDK app, values known before deploy (deterministic names) and, for the rest, the tokens of
  the constructs that create them (a new certificate's ARN);
* for GitOps manifests (``dist/``), values known before deploy and stack outputs; a value known
  neither way leaves the manifests that need it waiting, and says which stack output fills it.

The stack output that carries each value is named after it (:attr:`PlatformValue.output_name`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class PlatformValue(enum.Enum):
    """A value of the platform that a workload manifest refers to."""

    CAPTURE_BUCKET = "CaptureBucketName"
    CAPTURE_KEY_ID = "CaptureKeyId"  # what manifests name the key by (its alias ARN when it has one)
    TLS_BUCKET = "TlsCertificateBucketName"
    CERTIFICATE_ARN = "CertificateArn"
    HOSTED_ZONE_ID = "HostedZoneId"
    SIDECAR_IMAGE = "CaptureSidecarImageUri"
    USAGE_STORE_ENDPOINT = "UsageStoreEndpoint"  # the budget store's address (UsageStore), known after deploy

    @property
    def output_name(self) -> str:
        """The stack output (``cdk deploy --outputs-file``) that carries this value."""
        return self.value


@dataclass(frozen=True)
class S3Location:
    """``s3://bucket/prefix``; the bucket may be the platform's (a :class:`PlatformValue`)."""

    bucket: str | PlatformValue
    prefix: str = ""  # a key prefix; "" is the whole bucket, otherwise it ends in "/" for object grants

    def uri(self, values: PlatformValues) -> str:
        bucket = values.get(self.bucket) if isinstance(self.bucket, PlatformValue) else self.bucket
        return f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"

    def within(self, other: S3Location) -> bool:
        return self.bucket == other.bucket and self.prefix.startswith(other.prefix)

    def child(self, *segments: str) -> S3Location:
        prefix = self.prefix + "".join(f"{segment.strip('/')}/" for segment in segments)
        return S3Location(self.bucket, prefix)

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        """``s3://bucket/a/b`` -> ``S3Location("bucket", "a/b/")`` (a prefix always ends in '/')."""
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        prefix = prefix.strip("/")
        return cls(bucket, f"{prefix}/" if prefix else "")


@dataclass(frozen=True)
class S3Uri:
    """An S3 URI in a manifest, written as its location (``trailing_slash`` as the user wrote it)."""

    location: S3Location
    trailing_slash: bool = False

    def render(self, values: PlatformValues) -> str:
        uri = self.location.uri(values)
        return uri if self.trailing_slash else uri.rstrip("/")


@dataclass(frozen=True)
class Interpolated:
    """A string around one platform value, e.g. ``Interpolated("--zone-id-filter={}", HOSTED_ZONE_ID)``."""

    template: str
    value: PlatformValue

    def render(self, values: PlatformValues) -> str:
        return self.template.format(values.get(self.value))


class AwaitingDeploy(Exception):
    """A manifest needs values that exist only after ``cdk deploy`` (see :attr:`missing`)."""

    def __init__(self, missing: Iterable[PlatformValue]) -> None:
        self.missing = tuple(sorted(set(missing), key=lambda value: value.value))
        super().__init__(", ".join(value.output_name for value in self.missing))


@dataclass(frozen=True)
class PlatformValues:
    """The values a rendering knows; :meth:`get` raises :class:`AwaitingDeploy` for the others."""

    known: Mapping[PlatformValue, str]

    def get(self, value: PlatformValue) -> str:
        if value not in self.known:
            raise AwaitingDeploy([value])
        return self.known[value]

    def merged(self, other: Mapping[PlatformValue, str]) -> PlatformValues:
        """These values, with ``other`` filling the ones not known here (known values always win)."""
        return PlatformValues({**other, **self.known})

    def resolve(self, document: Any) -> Any:
        """A copy of ``document`` (manifests: dicts, lists, strings) with every platform value resolved.
        Raises :class:`AwaitingDeploy` naming every value that is not known, not only the first."""
        missing: list[PlatformValue] = []
        resolved = self._resolve(document, missing)
        if missing:
            raise AwaitingDeploy(missing)
        return resolved

    def _resolve(self, node: Any, missing: list[PlatformValue]) -> Any:
        if isinstance(node, PlatformValue):
            if node not in self.known:
                missing.append(node)
                return ""
            return self.known[node]
        if isinstance(node, Interpolated):
            if node.value not in self.known:
                missing.append(node.value)
                return ""
            return node.render(self)
        if isinstance(node, S3Uri | S3Location):
            needed = node.location.bucket if isinstance(node, S3Uri) else node.bucket
            if isinstance(needed, PlatformValue) and needed not in self.known:
                missing.append(needed)
                return ""
            return node.render(self) if isinstance(node, S3Uri) else node.uri(self)
        if isinstance(node, Mapping):
            return {key: self._resolve(value, missing) for key, value in node.items()}
        if isinstance(node, list | tuple):
            return [self._resolve(item, missing) for item in node]
        return node

    def holds_tokens(self) -> bool:
        # a token's text has "Token[" in it: aws-cdk-lib decides, imported only when one may be there
        candidates = [value for value in self.known.values() if "Token[" in value]
        if not candidates:
            return False
        from aws_cdk import Token

        return any(Token.is_unresolved(value) for value in candidates)


def is_platform_value(value: Any) -> bool:
    return isinstance(value, PlatformValue | S3Uri | S3Location | Interpolated)

"""``spec.dataCapture``: the operator's three capture tiers (same block on IEC and JumpStartModel).

Tier 1 ``sagemakerEndpoint`` -> ``{s3Uri}/{hash}/sme/``, Tier 2 ``loadBalancer`` ->
``{s3Uri}/{hash}/alb/``, Tier 3 ``modelPod`` -> ``{s3Uri}/{hash}/pod/``. Ranges and patterns
are the CRD's (chart 2.3.0, v1).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.foundation.patterns import KMS_KEY_ID
from hyperpod_inference_iac.foundation.platform_values import PlatformValue, S3Uri
from hyperpod_inference_iac.foundation.validation import Problems, join_path

# The CRD's own pattern for dataCapture.s3Uri.
S3_URI_PATTERN = r"^s3://([^/]+)(/[^,=]*)?$"


class CaptureMode(enum.StrEnum):
    INPUT = "Input"
    OUTPUT = "Output"


def _capture_options() -> Any:
    return crd_field(
        default=None,
        wrap_items="captureMode",
        code="DataCapture.CaptureOptionsInvalid",
        allowed=CaptureMode,
        min_items=1,
        max_items=32,
    )


def _sampling() -> Any:
    return crd_field(default=None, code="DataCapture.SamplingOutOfRange", minimum=0, maximum=100)


def _kms_key_id() -> Any:
    return crd_field(
        default=None,
        code="DataCapture.KmsKeyIdInvalid",
        pattern=KMS_KEY_ID.pattern,
        max_length=2048,
        hint="give a KMS key id, key ARN or alias ARN",
    )


def _content_types() -> Any:
    return crd_field(default=None, code="DataCapture.ContentTypesCount", min_items=1, max_items=10)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaptureContentTypeHeader(SpecBlock):
    """Which Content-Type values are captured as CSV or JSON (each list 1..10 items)."""

    csv_content_types: tuple[str, ...] | None = _content_types()
    json_content_types: tuple[str, ...] | None = _content_types()


@dataclasses.dataclass(frozen=True, kw_only=True)
class SageMakerEndpointCapture(SpecBlock):
    """Tier 1: full payloads at the SageMaker runtime API; needs a registered SageMaker endpoint."""

    enabled: bool = True
    capture_options: tuple[CaptureMode, ...] | None = _capture_options()
    initial_sampling_percentage: int | None = _sampling()
    kms_key_id: str | PlatformValue | None = _kms_key_id()
    capture_content_type_header: CaptureContentTypeHeader | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadBalancerCapture(SpecBlock):
    """Tier 2: ALB access logs (client IP, path, latency; query strings included)."""

    enabled: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class BufferConfig(SpecBlock):
    batch_size: int | None = crd_field(default=None, code="DataCapture.BatchSizeOutOfRange", minimum=1, maximum=1000)
    flush_interval_seconds: int | None = crd_field(
        default=None, code="DataCapture.FlushIntervalOutOfRange", minimum=10, maximum=300
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PayloadConfig(SpecBlock):
    max_payload_size_kb: int | None = crd_field(
        default=None,
        key="maxPayloadSizeKB",
        code="DataCapture.PayloadSizeOutOfRange",
        minimum=0,
        maximum=10240,
        hint="0 means no limit",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelPodCapture(SpecBlock):
    """Tier 3: full payloads inside the inference pod; works without endpoint registration."""

    enabled: bool = True
    capture_options: tuple[CaptureMode, ...] | None = _capture_options()
    initial_sampling_percentage: int | None = _sampling()
    kms_key_id: str | PlatformValue | None = _kms_key_id()
    capture_content_type_header: CaptureContentTypeHeader | None = None
    buffer_config: BufferConfig | None = None
    payload_config: PayloadConfig | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataCapture(SpecBlock):
    """``spec.dataCapture``. Without ``s3_uri`` the operator writes to its TLS certificate bucket."""

    s3_uri: str | S3Uri | None = crd_field(
        default=None,
        code="DataCapture.S3UriInvalid",
        pattern=S3_URI_PATTERN,
        max_length=512,
        hint="s3://bucket or s3://bucket/prefix, without ',' or '='",
    )
    sagemaker_endpoint: SageMakerEndpointCapture | None = None
    load_balancer: LoadBalancerCapture | None = None
    model_pod: ModelPodCapture | None = None

    def with_destination(self, *, bucket_name: str, prefix: str = "", kms_key_arn: str | None = None) -> DataCapture:
        """The same policy writing to ``s3://bucket_name/prefix``, encrypted with ``kms_key_arn``.

        The key goes to Tier 1 and Tier 3 (Tier 2 is ALB access logs, which S3 encrypts with the
        bucket's own settings); a tier that already names a key keeps it.
        """
        prefix = prefix.strip("/")
        s3_uri = f"s3://{bucket_name}/{prefix}" if prefix else f"s3://{bucket_name}"
        endpoint_tier, pod_tier = self.sagemaker_endpoint, self.model_pod
        if kms_key_arn is not None:
            if endpoint_tier is not None and endpoint_tier.kms_key_id is None:
                endpoint_tier = dataclasses.replace(endpoint_tier, kms_key_id=kms_key_arn)
            if pod_tier is not None and pod_tier.kms_key_id is None:
                pod_tier = dataclasses.replace(pod_tier, kms_key_id=kms_key_arn)
        return dataclasses.replace(self, s3_uri=s3_uri, sagemaker_endpoint=endpoint_tier, model_pod=pod_tier)

    def check_destinations(
        self, path: str, problems: Problems, *, has_endpoint_name: bool, tls_output_s3_uri: str | S3Uri | None
    ) -> None:
        """Rules that need the surrounding spec: an enabled tier must have what it writes through."""
        endpoint_on = self.sagemaker_endpoint is not None and self.sagemaker_endpoint.enabled
        pod_on = self.model_pod is not None and self.model_pod.enabled
        if endpoint_on and not has_endpoint_name:
            problems.add(
                "DataCapture.EndpointTierNeedsEndpoint",
                join_path(path, "sagemakerEndpoint"),
                "Tier 1 captures at the SageMaker runtime API and needs endpoint registration: set the "
                "SageMaker endpoint name (endpointName, or sageMakerEndpoint.name for a JumpStartModel), "
                "or use the modelPod tier",
            )
        has_bucket = self.s3_uri is not None or tls_output_s3_uri is not None
        if (endpoint_on or pod_on) and not has_bucket:
            problems.add(
                "DataCapture.NoDestination",
                join_path(path, "s3Uri"),
                "an enabled sagemakerEndpoint or modelPod tier needs a destination: set dataCapture.s3Uri "
                "or tlsConfig.tlsCertificateOutputS3Uri",
            )

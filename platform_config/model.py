"""Typed, already-validated deployment configuration (see docs/configuration.md for every key)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Environment:
    account: str
    region: str

    @property
    def partition(self) -> str:
        if self.region.startswith("cn-"):
            return "aws-cn"
        if self.region.startswith("us-gov-"):
            return "aws-us-gov"
        return "aws"


@dataclass(frozen=True, kw_only=True)
class CapturePolicy:
    """Who may read captured prompts, for how long they are kept, and how they are redacted."""

    prefix: str
    retention_days: int
    noncurrent_version_retention_days: int
    access_log_retention_days: int
    redact: tuple[str, ...]
    reader_role_arns: tuple[str, ...]
    pandas_layer_arn: str | None = None


@dataclass(frozen=True, kw_only=True)
class NewVpc:
    cidr: str
    max_azs: int
    nat_gateways: int


@dataclass(frozen=True, kw_only=True)
class ExistingVpc:
    vpc_id: str
    availability_zones: tuple[str, ...]
    private_subnet_ids: tuple[str, ...]
    vpc_cidr: str


@dataclass(frozen=True, kw_only=True)
class GpuNodeGroupConfig:
    name: str
    instance_types: tuple[str, ...]
    min_size: int
    desired_size: int
    max_size: int
    root_volume_gib: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    name: str
    kubernetes_version: str
    endpoint_access: str
    admin_role_arns: tuple[str, ...]
    system_instance_type: str
    gpu_node_groups: tuple[GpuNodeGroupConfig, ...]


@dataclass(frozen=True, kw_only=True)
class HyperPodInstanceGroupConfig:
    name: str
    instance_type: str
    instance_count: int
    threads_per_core: int
    ebs_volume_gib: int
    deep_health_checks: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class HyperPodConfig:
    cluster_name: str
    node_recovery: str
    instance_groups: tuple[HyperPodInstanceGroupConfig, ...]


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    addon_version: str
    enable_custom_service_accounts: bool
    namespace: str


@dataclass(frozen=True, kw_only=True)
class DomainConfig:
    zone_name: str
    existing_hosted_zone_id: str | None
    endpoint_domains: tuple[str, ...]
    existing_certificate_arn: str | None


@dataclass(frozen=True, kw_only=True)
class PlatformConfig:
    source: str
    project: str
    environment: Environment
    tags: dict[str, str]
    capture: CapturePolicy
    vpc: NewVpc | ExistingVpc
    cluster: ClusterConfig
    hyperpod: HyperPodConfig
    operator: OperatorConfig
    domain: DomainConfig
    # Model deployments, parsed and validated by the charts package (same rules for YAML and Python
    # users) and wired to this platform (platform_config/workloads.py).
    models_source: tuple[Any, ...] = ()
    portable_source: tuple[Any, ...] = ()
    workloads: Any = None

    # Deterministic names: known before deploy, so manifests in dist/ never hold CDK tokens.
    @property
    def capture_bucket_name(self) -> str:
        return f"{self.project}-capture-{self.environment.account}-{self.environment.region}"

    @property
    def access_log_bucket_name(self) -> str:
        return f"{self.project}-s3-logs-{self.environment.account}-{self.environment.region}"

    @property
    def tls_bucket_name(self) -> str:
        # The AWS-managed AmazonSageMakerHyperPodInferenceAccess policy covers `hyperpod-tls*` buckets.
        return f"hyperpod-tls-{self.project}-{self.environment.account}-{self.environment.region}"

    @property
    def hyperpod_lifecycle_bucket_name(self) -> str:
        return f"{self.project}-hp-lifecycle-{self.environment.account}-{self.environment.region}"

    @property
    def operator_execution_role_name(self) -> str:
        # The operator add-on accepts only execution roles named SageMakerHyperPodInference*.
        return f"SageMakerHyperPodInference-{self.project}"

    @property
    def hugging_face_secret_name(self) -> str:
        return f"{self.project}/huggingface-token"

    @property
    def capture_key_alias(self) -> str:
        return f"alias/{self.project}/capture"

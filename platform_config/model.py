"""The app's configuration, typed and already checked (see docs/configuration.md for every key).

Parsed once by :func:`platform_config.load_config`; the workloads are planned once, with the rest of the
file, into :attr:`PlatformConfig.workloads`. Names AWS lets us choose are derived here, so they are
known before deploy and manifests outside CDK never hold tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperpod_inference_iac import (
    AlarmSettings,
    CapturePipelineOptions,
    CaptureStorageOptions,
    ClusterEndpointAccess,
    DeepHealthCheck,
    FlowLogTraffic,
    GpuNodeGroupOptions,
    InstanceGroup,
    LogRetentionOptions,
    NodeRecovery,
    PlatformValue,
    RiskWarning,
    S3Location,
    SecretsOptions,
    SecretSync,
    api_key_sync,
)
from hyperpod_inference_iac.charts import ModelDeployment, PlatformContext, PortableDeployment, WorkloadPlan
from hyperpod_inference_iac.patterns import iam_role_name

# The names the operator's execution role and the Hugging Face token sync get in this app.
OPERATOR_ROLE_PREFIX = "SageMakerHyperPodInference"
TOKEN_SECRET = "hf-token"
TLS_OUTPUT_PREFIX = "certificates/"


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
    """The ``capture:`` section: who may read captured prompts, for how long they are kept, and how they are redacted.
    Its keys are the constructs' own options, read from the one section by their declared keys: ``storage`` the
    :class:`~hyperpod_inference_iac.CaptureStorage`'s, ``pipeline`` the
    :class:`~hyperpod_inference_iac.CapturePipeline`'s (``capture.prefix`` is the storage's ``capture_prefix`` and
    the pipeline's only capture prefix)."""

    storage: CaptureStorageOptions = field(default_factory=CaptureStorageOptions)
    pipeline: CapturePipelineOptions = field(default_factory=CapturePipelineOptions)

    @property
    def prefix(self) -> str:
        """``capture.prefix``: where raw captures are written."""
        return self.storage.capture_prefix


@dataclass(frozen=True, kw_only=True)
class NewVpc:
    cidr: str = "10.42.0.0/16"
    max_azs: int = 2
    nat_gateways: int = 1
    flow_log_traffic: FlowLogTraffic | None = FlowLogTraffic.ALL  # None: no flow log


@dataclass(frozen=True, kw_only=True)
class ExistingVpc:
    vpc_id: str
    availability_zones: tuple[str, ...]
    private_subnet_ids: tuple[str, ...]
    vpc_cidr: str
    flow_log_traffic: FlowLogTraffic | None = None  # off: the VPC's owners usually log it already


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    name: str
    kubernetes_version: str
    endpoint_access: ClusterEndpointAccess
    admin_role_arns: tuple[str, ...]
    system_instance_type: str
    gpu_node_groups: tuple[GpuNodeGroupOptions, ...]  # the construct's own options: its keys, defaults and rules
    enforce_network_policies: bool = True


@dataclass(frozen=True, kw_only=True)
class HyperPodConfig:
    cluster_name: str
    node_recovery: NodeRecovery
    instance_groups: tuple[InstanceGroup, ...]


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    addon_version: str
    enable_custom_service_accounts: bool
    namespace: str
    gated_model_download_role_arn: str | None = None  # else created when a gated JumpStart model needs it


@dataclass(frozen=True, kw_only=True)
class DomainConfig:
    zone_name: str
    existing_hosted_zone_id: str | None
    endpoint_domains: tuple[str, ...]
    existing_certificate_arn: str | None


@dataclass(frozen=True, kw_only=True)
class AlarmsConfig:
    """The ``alarms:`` section: who is told, and when (each alarm's settings by its construct property; None:
    that alarm is off). Empty mappings keep every construct default."""

    enabled: bool = True
    notify_on_ok: bool = True
    runbook_url: str | None = None
    emails: tuple[str, ...] = ()
    https_endpoints: tuple[str, ...] = ()
    lambda_function_arns: tuple[str, ...] = ()
    topic_arns: tuple[str, ...] = ()
    capture: dict[str, AlarmSettings | None] = field(default_factory=dict)
    certificate: dict[str, AlarmSettings] = field(default_factory=dict)
    sidecar_metrics: bool = True
    sidecar: dict[str, AlarmSettings | None] = field(default_factory=dict)
    dashboard: bool = True


@dataclass(frozen=True, kw_only=True)
class AcknowledgedWarning:
    """A construct warning this platform has reviewed and accepts, with the reason a reviewer reads."""

    id: str
    reason: str
    path: str = ""  # where the file acknowledges it: acknowledgedWarnings[i]


@dataclass(frozen=True, kw_only=True)
class PlatformConfig:
    source: str
    project: str
    environment: Environment
    tags: dict[str, str]
    capture: CapturePolicy
    # The logging: and secrets: sections are the library's options classes (their keys, defaults and rules).
    logging: LogRetentionOptions = field(default_factory=LogRetentionOptions)
    secrets: SecretsOptions = field(default_factory=SecretsOptions)
    vpc: NewVpc | ExistingVpc
    cluster: ClusterConfig
    hyperpod: HyperPodConfig
    operator: OperatorConfig
    domain: DomainConfig
    models: tuple[ModelDeployment, ...] = ()
    portable: tuple[PortableDeployment, ...] = ()
    alarms: AlarmsConfig = field(default_factory=AlarmsConfig)
    acknowledged_warnings: tuple[AcknowledgedWarning, ...] = ()
    # The warnings the platform's constructs give at synth, decided by their own warn_* functions from this file
    # (under its key paths); acknowledged or not (platform_config.acknowledgments tells which).
    warnings: tuple[RiskWarning, ...] = ()
    # Planned once, from everything above (charts.plan_workloads): identities and runtime settings.
    workloads: WorkloadPlan | None = None

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
    def s3_csi_role_name(self) -> str:
        # Fixed: the TLS bucket's allowlist (storage stack) names the Mountpoint driver's role by ARN.
        return f"{self.project}-s3-csi-driver"

    @property
    def operator_execution_role_name(self) -> str:
        # The operator add-on accepts only execution roles named SageMakerHyperPodInference*.
        return f"{OPERATOR_ROLE_PREFIX}-{self.project}"

    @property
    def capture_key_alias(self) -> str:
        return f"alias/{self.project}/capture"

    @property
    def capture_key_alias_arn(self) -> str:
        env = self.environment
        return f"arn:{env.partition}:kms:{env.region}:{env.account}:{self.capture_key_alias}"

    @property
    def secrets_key_alias(self) -> str:
        return f"alias/{self.project}/secrets"

    @property
    def external_dns_role_name(self) -> str:
        return f"{self.project}-external-dns"

    @property
    def hugging_face_sync(self) -> SecretSync:
        return SecretSync(namespace=self.operator.namespace, secrets_manager_name=f"{self.project}/huggingface-token",
                          kubernetes_secret_name=TOKEN_SECRET, reader_role_name=f"{self.project}-hf-token-reader")

    @property
    def monitored_namespaces(self) -> tuple[str, ...] | None:
        """Where the app's capture sidecar metrics agent watches (its own namespace), or None without one."""
        return (self.operator.namespace,) if self.alarms.enabled and self.alarms.sidecar_metrics else None

    @property
    def api_key_syncs(self) -> dict[str, SecretSync]:
        """One sync per portable server with an API key, by server name (Secrets Manager
        ``{project}/portable/<server>/api-key``, reader role ``{project}-<server>-api-key``)."""
        plan = self.workloads
        if plan is None:
            return {}
        return {portable.name: api_key_sync(portable, namespace=portable.namespace or self.operator.namespace,
                                            secrets_manager_prefix=f"{self.project}/portable",
                                            role_name_prefix=self.project)
                for portable in plan.portable if portable.api_key is not None}

    def api_key_rotation_role_name(self, server: str) -> str:
        """The role of the function that rotates ``server``'s API key: ``{project}-<server>-api-key-rotation``."""
        return iam_role_name(f"{self.project}-{server}-api-key-rotation")

    @property
    def known_values(self) -> dict[PlatformValue, str]:
        """Platform values this file determines (the others exist only after a deploy)."""
        known = {
            PlatformValue.CAPTURE_BUCKET: self.capture_bucket_name,
            PlatformValue.CAPTURE_KEY_ID: self.capture_key_alias_arn,
            PlatformValue.TLS_BUCKET: self.tls_bucket_name,
        }
        if self.domain.existing_certificate_arn:
            known[PlatformValue.CERTIFICATE_ARN] = self.domain.existing_certificate_arn
        if self.domain.existing_hosted_zone_id:
            known[PlatformValue.HOSTED_ZONE_ID] = self.domain.existing_hosted_zone_id
        return known

    @property
    def alarm_topic_name(self) -> str:
        return f"{self.project}-alarms"

    @property
    def sidecar_metrics_role_name(self) -> str:
        return f"{self.project}-capture-metrics-agent"

    @property
    def capture_tiers(self) -> tuple[str, ...]:
        """The capture tiers some workload turns on (``sme``, ``alb``, ``pod``): capture is on for them."""
        tiers: set[str] = set()
        for deployment in self.models:
            capture = deployment.workload.spec.data_capture
            if capture is None:
                continue
            for tier, block in (("sme", capture.sagemaker_endpoint), ("alb", capture.load_balancer),
                                ("pod", capture.model_pod)):
                if block is not None and block.enabled:
                    tiers.add(tier)
        if any(deployment.server.pod_capture is not None for deployment in self.portable):
            tiers.add("pod")
        return tuple(tier for tier in ("sme", "pod", "alb") if tier in tiers)

    @property
    def platform_context(self) -> PlatformContext:
        """What the workloads need to know about this platform."""
        sync = self.hugging_face_sync
        return PlatformContext(
            cluster_name=self.cluster.name, namespace=self.operator.namespace, account=self.environment.account,
            partition=self.environment.partition, role_name_prefix=self.project,
            capture=S3Location(PlatformValue.CAPTURE_BUCKET, self.capture.prefix),
            capture_key=PlatformValue.CAPTURE_KEY_ID,
            tls_output=S3Location(PlatformValue.TLS_BUCKET, TLS_OUTPUT_PREFIX),
            endpoint_domains=self.domain.endpoint_domains, zone_name=self.domain.zone_name,
            custom_service_accounts_enabled=self.operator.enable_custom_service_accounts,
            synced_secrets={sync.kubernetes_secret_name: (sync.key,)}, known_values=self.known_values,
            operator_addon_version=self.operator.addon_version,
            vpc_cidr=self.vpc.cidr if isinstance(self.vpc, NewVpc) else self.vpc.vpc_cidr,
            region=self.environment.region,
        )


__all__ = [
    "AcknowledgedWarning",
    "AlarmsConfig",
    "CapturePolicy",
    "ClusterConfig",
    "DeepHealthCheck",
    "DomainConfig",
    "Environment",
    "ExistingVpc",
    "HyperPodConfig",
    "NewVpc",
    "OperatorConfig",
    "PlatformConfig",
]

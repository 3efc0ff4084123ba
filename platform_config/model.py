"""The app's configuration, typed and already checked (see docs/configuration.md for every key).

Parsed once by :func:`platform_config.load_config`; the workloads are planned once, with the rest of the
file, into :attr:`PlatformConfig.workloads`. Names AWS lets us choose are derived here, so they are
known before deploy and manifests outside CDK never hold tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hyperpod_inference_iac import (
    EXTERNAL_SECRETS,
    NVIDIA_DEVICE_PLUGIN,
    AlarmNotifyOptions,
    AlarmTopicOptions,
    CaptureAlarmsOptions,
    CaptureEraserOptions,
    CapturePipelineOptions,
    CaptureSidecarMetricsOptions,
    CaptureStorageOptions,
    CaptureTablesOptions,
    CertificateAlarmsOptions,
    DeepHealthCheck,
    EndpointDomainOptions,
    ExistingVpcOptions,
    GpuCostOptions,
    GpuNodeGroupOptions,
    HelmRelease,
    HyperPodClusterOptions,
    InferenceClusterOptions,
    InferenceOperatorOptions,
    LogRetentionOptions,
    ModelServingMetricsOptions,
    PlatformValue,
    PlatformVpcOptions,
    RiskWarning,
    S3Location,
    SecretsOptions,
    SecretSync,
    UsageStoreOptions,
    WatchedModel,
    WorkloadOwner,
    api_key_sync,
    engine_of_image,
    external_dns_releases,
    sidecar_metrics_log_group_name,
)
from hyperpod_inference_iac.charts import (
    InferenceEndpointConfig,
    ModelDeployment,
    ModelWeightsCacheConfig,
    PlatformContext,
    PortableDeployment,
    UsageStoreRef,
    WorkloadPlan,
)
from hyperpod_inference_iac.charts.gateway import InferenceGateway
from hyperpod_inference_iac.foundation.patterns import (
    ACM_CERTIFICATE_ARN,
    HOSTED_ZONE_ID,
    IAM_ROLE_ARN,
    iam_role_arn,
    iam_role_name,
)
from hyperpod_inference_iac.foundation.props import prop
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems
from hyperpod_inference_iac.observability.alarms import check_runbook_url
from hyperpod_inference_iac.observability.model_metrics import LATENCY, TIME_TO_FIRST_TOKEN


@dataclass(frozen=True)
class ExternalDnsPlan:
    """ExternalDNS as the platform runs it: the namespaces it watches, the names it may publish, its zone, owner id
    and role."""

    namespaces: tuple[str, ...]
    hostnames: tuple[str, ...]
    zone_name: str
    owner_id: str
    role_name: str


@dataclass(frozen=True)
class MetricsAgentPlan:
    """One capture sidecars' metrics agent: where it runs (one namespace that holds capturing sidecars), for which
    cluster, its role, and the models it alarms on. The platform namespace's agent keeps the names it always had;
    an agent of another namespace gets them suffixed with its namespace (``construct_id``, ``role_name``,
    ``log_group_name``, ``alarm_name_prefix``, ``dist_name``), so none collides."""

    namespace: str
    cluster_name: str
    role_name: str
    models: tuple[str, ...]
    # The budget alert levels of the portable servers and gateway entries with a day or month token budget (their
    # usageLimits.alertPercents).
    budget_alert_percents: tuple[int, ...] = ()
    log_group_name: str = ""  # (empty: the construct's default, the cluster's)
    construct_id: str = "CaptureSidecarMetrics"
    alarm_name_prefix: str = ""  # (empty: the project, as every other alarm of the platform)
    dist_name: str = "capture-sidecar-metrics"  # its manifests' name in dist/


@dataclass(frozen=True)
class ModelMetricsPlan:
    """The operator models' metrics agent: where it runs, for which cluster, its role, and the custom resources it
    watches (each with its model server's engine and port when known)."""

    namespace: str
    cluster_name: str
    role_name: str
    models: tuple[WatchedModel, ...]
    pod_cidrs: tuple[str, ...] = ()  # where the pods get their IPs (the VPC's CIDR): all the metrics relay fetches
    latency_bound: float = 60  # the bucket bounds the latency and TTFT alarms read (alarms.models)
    first_token_bound: float = 10


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
    :class:`~hyperpod_inference_iac.CapturePipeline`'s, ``tables`` the :class:`~hyperpod_inference_iac.CaptureTables`'
    (``capture.prefix`` is the storage's ``capture_prefix`` and
    the pipeline's only capture prefix)."""

    storage: CaptureStorageOptions = field(default_factory=CaptureStorageOptions)
    pipeline: CapturePipelineOptions = field(default_factory=CapturePipelineOptions)
    tables: CaptureTablesOptions = field(default_factory=CaptureTablesOptions)
    # ``capture.eraserPrincipals``: the erasure role (CaptureEraser) and who may assume it; none: no role.
    eraser: CaptureEraserOptions = field(default_factory=CaptureEraserOptions)
    # ``capture.sidecarImage``: a prebuilt capture sidecar image by digest, used instead of the image asset (no Docker
    # at deploy time); None builds the asset.
    sidecar_image: str | None = None

    @property
    def prefix(self) -> str:
        """``capture.prefix``: where raw captures are written."""
        return self.storage.capture_prefix


# The sections that are a construct's options, as the construct declares them (keys, types, defaults, rules):
# ``network.newVpc`` / ``network.existingVpc`` (each with ``network.flowLogs`` beside it) and ``hyperpod``.
NewVpc = PlatformVpcOptions
ExistingVpc = ExistingVpcOptions
HyperPodConfig = HyperPodClusterOptions


@dataclass(frozen=True, kw_only=True)
class ClusterConfig(InferenceClusterOptions):
    """The ``cluster`` section: the inference cluster's options and its GPU node groups."""

    gpu_node_groups: tuple[GpuNodeGroupOptions, ...] = prop(
        doc="At least one, names unique; each entry is the options of a GpuNodeGroup (`GpuNodeGroupOptions`, below).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        super().check(problems, at)
        groups = self.gpu_node_groups
        if not groups:
            problems.add("Config.TooFewItems", at.at("gpu_node_groups"), "needs at least 1 item(s)", [])
        for index, group in enumerate(groups):
            group.check(problems, at.child("gpu_node_groups", index))
        names = [group.name for group in groups]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.add("Cluster.DuplicateNodeGroup", at.at("gpu_node_groups"), "node group names must be unique",
                         name)


@dataclass(frozen=True, kw_only=True)
class OperatorConfig(InferenceOperatorOptions):
    """The ``operator`` section: the operator's options, the namespace the plan puts workloads in, and the gated-model
    role the stack passes to the operator as a role."""

    namespace: str = prop("inference", key="inferenceNamespace",
                          doc="Namespace of the model deployments (the workload plan's; a workload may name its own).")
    gated_model_download_role_arn: str | None = prop(
        None, key="jumpstartGatedModelDownloadRoleArn", default_doc="created when a gated model needs it",
        doc="An existing role for the add-on's `jumpstartGatedModelDownloadRoleArn`; without it the platform creates "
            "one when a `gated: true` JumpStart model needs it.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        super().check(problems, at)
        arn = self.gated_model_download_role_arn
        if arn is not None and not re.fullmatch(IAM_ROLE_ARN.pattern, arn):
            problems.add("Config.BadFormat", at.at("gated_model_download_role_arn"),
                         "must be an IAM role ARN (the add-on's jumpstartGatedModelDownloadRoleArn)", arn)


@dataclass(frozen=True, kw_only=True)
class DomainConfig(EndpointDomainOptions):
    """The ``domain`` section: the endpoint domain's options, and the zone and certificate to use instead of new ones
    (the stack imports them by id and ARN)."""

    existing_hosted_zone_id: str | None = prop(None, key="existingHostedZoneId", default_doc="a new public zone",
                                               doc="Use this Route 53 zone instead of creating one (no lookup).")
    existing_certificate_arn: str | None = prop(
        None, key="existingCertificateArn", default_doc="a new DNS-validated certificate",
        doc="Use this ACM certificate instead of creating one; it must be in `environment.account` and "
            "`environment.region` (ACM certificates cannot be shared between accounts; load balancers use their own "
            "region's).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        super().check(problems, at)
        zone_id, arn = self.existing_hosted_zone_id, self.existing_certificate_arn
        if zone_id is not None and not re.fullmatch(HOSTED_ZONE_ID.pattern, zone_id):
            problems.add("Config.BadFormat", at.at("existing_hosted_zone_id"),
                         "must be a Route 53 hosted zone id such as Z0123456789ABC", zone_id)
        if arn is not None and not re.fullmatch(ACM_CERTIFICATE_ARN.pattern, arn):
            problems.add("Config.BadFormat", at.at("existing_certificate_arn"), "must be an ACM certificate ARN", arn)


@dataclass(frozen=True, kw_only=True)
class SidecarAlarmsConfig(CaptureSidecarMetricsOptions):
    """The ``alarms.sidecar`` section: whether the app runs the capture sidecars' metrics agent, and its alarms (the
    construct's own options)."""

    cloud_watch_agent: bool = prop(True, doc="Scrape the capture sidecars' `/metrics` into CloudWatch (only when a "
                                             "portable server captures or a gateway has an entry); `false`: neither "
                                             "the agent nor the sidecar alarms.")


@dataclass(frozen=True, kw_only=True)
class ModelAlarmsConfig(ModelServingMetricsOptions):
    """The ``alarms.models`` section: whether the app runs the operator models' metrics agent, and its alarms (the
    construct's own options)."""

    cloud_watch_agent: bool = prop(True, doc="Scrape the operator models' servers and custom resource state into "
                                             "CloudWatch (only when the config has `models`); `false`: neither the "
                                             "agent nor the model alarms.")


@dataclass(frozen=True, kw_only=True)
class AlarmsConfig(AlarmNotifyOptions):
    """The ``alarms:`` section: who is told, and when. Each part is the options of the construct it configures (their
    keys, defaults and rules); the runbook link and ``notifyOnOk`` are every alarm construct's."""

    enabled: bool = prop(True, doc="`false`: no topic, no alarm actions, no new alarms, no sidecar agent, no dashboard "
                                   "(the pipeline keeps its two alarms, without actions).")
    subscribers: AlarmTopicOptions = prop(AlarmTopicOptions(), doc="The alarm topic's subscribers.")
    capture: CaptureAlarmsOptions = prop(CaptureAlarmsOptions(), doc="The alarms on the capture pipeline.")
    certificate: CertificateAlarmsOptions = prop(CertificateAlarmsOptions(),
                                                 doc="The endpoint certificate's expiry alarm.")
    sidecar: SidecarAlarmsConfig = prop(SidecarAlarmsConfig(), doc="The capture sidecars' metrics agent and alarms.")
    models: ModelAlarmsConfig = prop(ModelAlarmsConfig(), doc="The operator models' metrics agent and alarms.")
    dashboard: bool = prop(True, doc="The CloudWatch dashboard `{project}`.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """Each part's rules under its keys; the shared runbook link once, under the capture alarms' code."""
        self.subscribers.check(problems, at.block("subscribers"))
        check_runbook_url(problems, at, CaptureAlarmsOptions.CONSTRUCT, self.runbook_url)
        self.capture.check(problems, at.block("capture"))
        self.certificate.check(problems, at.block("certificate"))
        self.sidecar.check(problems, at.block("sidecar"))
        self.models.check(problems, at.block("models"))


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
    gateways: tuple[InferenceGateway, ...] = ()
    alarms: AlarmsConfig = field(default_factory=AlarmsConfig)
    # ``usageStore:``: the settings of the budget store the cluster stack creates (None: the section is not given,
    # the defaults apply when a store is created).
    usage_store: UsageStoreOptions | None = None
    acknowledged_warnings: tuple[AcknowledgedWarning, ...] = ()
    # ``costs``: the cost per team (GpuCost: the node-hour sampler and the prices); None: no sampler.
    costs: GpuCostOptions | None = None
    # ``workloads.owner``: who applies the workloads (docs/deploying.md): the cluster stack, or GitOps from dist/.
    workload_owner: WorkloadOwner = WorkloadOwner.CDK
    # The warnings the platform's constructs give at synth, decided by their own warn_* functions from this file
    # (under its key paths); acknowledged or not (platform_config.acknowledgments tells which).
    warnings: tuple[RiskWarning, ...] = ()
    # Planned once, from everything above (charts.plan_workloads): identities and runtime settings. Always set by
    # load_config/parse_config (which alone make a PlatformConfig): the loader plans with platform_context first.
    workloads: WorkloadPlan

    # Deterministic names: known before deploy, so manifests in dist/ never hold CDK tokens.
    @property
    def capture_bucket_name(self) -> str:
        return f"{self.project}-capture-{self.environment.account}-{self.environment.region}"

    @property
    def audit_bucket_name(self) -> str:
        """The audit trail's bucket (S3 Object Lock: CaptureStorage.audit_bucket)."""
        return f"{self.project}-audit-trail-{self.environment.account}-{self.environment.region}"

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
    def gpu_cost_role_name(self) -> str:
        # Fixed: the capture bucket's and key's allowlists (storage stack) name the sampler's role (cluster stack).
        return f"{self.project}-gpu-node-hours"

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
        """Where the app's capture sidecar metrics agents watch (one in every namespace with a capturing sidecar), or
        None without them (alarms or the agent off)."""
        if not (self.alarms.enabled and self.alarms.sidecar.cloud_watch_agent):
            return None
        return tuple(agent.namespace for agent in self.metrics_agents)

    @property
    def api_key_syncs(self) -> dict[str, SecretSync]:
        """One sync per portable server with an API key, by server name (Secrets Manager
        ``{project}/portable/<server>/api-key``, reader role ``{project}-<server>-api-key``)."""
        plan = self.workloads
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

    # -- the platform, decided once: what exists besides the workloads. The cluster stack builds it into CloudFormation
    # and stacks/gitops.py renders the same into dist/; neither decides anything of this on its own.
    def role_arn(self, role_name: str) -> str:
        """The ARN of one of the platform's fixed-name roles (``patterns.iam_role_arn``)."""
        return iam_role_arn(self.environment.partition, self.environment.account, role_name)

    @property
    def external_dns(self) -> ExternalDnsPlan | None:
        """ExternalDNS, when some portable server publishes a hostname: the namespaces it watches and the names it may
        change."""
        plan = self.workloads
        if not plan.needs_external_dns:
            return None
        return ExternalDnsPlan(namespaces=plan.external_dns_namespaces, hostnames=plan.published_hostnames,
                               zone_name=self.domain.zone_name, owner_id=self.cluster.cluster_name,
                               role_name=self.external_dns_role_name)

    @property
    def metrics_agents(self) -> tuple[MetricsAgentPlan, ...]:
        """The capture sidecars' metrics agents, when alarms are on with them: one per namespace that holds a capturing
        sidecar (a portable server with capture, a gateway's capture entry), the platform's namespace first (with the
        names it always had), then the others sorted, each watching its namespace only, alarming on the models and
        budget levels of that namespace's servers and entries."""
        plan = self.workloads
        if not (self.alarms.enabled and self.alarms.sidecar.cloud_watch_agent) or not plan.needs_sidecar_image:
            return ()
        home = self.operator.namespace
        capturing = [p for p in plan.portable if p.capture is not None]
        namespaces = {p.namespace or home for p in capturing} | {e.namespace or home for e in plan.entries}
        agents = []
        for namespace in sorted(namespaces, key=lambda ns: (ns != home, ns)):
            portable = [p for p in plan.portable if (p.namespace or home) == namespace]
            entries = [e for e in plan.entries if (e.namespace or home) == namespace]
            percents = tuple(sorted({
                percent for limits in (*(p.server.usage_limits for p in portable),
                                       *(e.options.usage_limits for e in entries))
                if limits is not None and any(caller.tokens_per_day or caller.tokens_per_month
                                              for caller in limits.callers)
                for percent in limits.alert_percents}))
            models = tuple(p.name for p in portable if p.capture is not None)
            cluster_name = self.cluster.cluster_name
            if namespace == home:
                agents.append(MetricsAgentPlan(namespace=namespace, cluster_name=cluster_name,
                                               role_name=self.sidecar_metrics_role_name, models=models,
                                               budget_alert_percents=percents,
                                               log_group_name=sidecar_metrics_log_group_name(cluster_name),
                                               alarm_name_prefix=self.project))
                continue
            agents.append(MetricsAgentPlan(
                namespace=namespace, cluster_name=cluster_name, role_name=self.sidecar_metrics_role_name_in(namespace),
                models=models, budget_alert_percents=percents,
                log_group_name=sidecar_metrics_log_group_name(cluster_name, namespace),
                construct_id=f"CaptureSidecarMetrics-{namespace}", alarm_name_prefix=f"{self.project}-{namespace}",
                dist_name=f"capture-sidecar-metrics-{namespace}"))
        return tuple(agents)

    @property
    def metrics_agent(self) -> MetricsAgentPlan | None:
        """The first of :attr:`metrics_agents`: the platform namespace's when a sidecar captures there (None: no
        agent)."""
        agents = self.metrics_agents
        return agents[0] if agents else None

    def metrics_agent_in(self, namespace: str) -> MetricsAgentPlan | None:
        """The agent that watches ``namespace`` (None: none does)."""
        return next((agent for agent in self.metrics_agents if agent.namespace == namespace), None)

    @property
    def model_metrics_agent(self) -> ModelMetricsPlan | None:
        """The operator models' metrics agent, when alarms are on with it and the config has models: every
        ``InferenceEndpointConfig`` and ``JumpStartModel`` is watched; an ``InferenceEndpointConfig`` whose worker
        image is vLLM's or SGLang's also gets its server scraped on its invocation port."""
        if not (self.alarms.enabled and self.alarms.models.cloud_watch_agent):
            return None
        watched = []
        for deployment in self.models:
            workload = deployment.workload
            if isinstance(workload, ModelWeightsCacheConfig):
                continue
            # (a JumpStartModel's server is the hub's: no worker image to read an engine from)
            worker = workload.spec.worker if isinstance(workload, InferenceEndpointConfig) else None
            engine = engine_of_image(worker.image) if worker is not None else None
            scaling = workload.spec.auto_scaling_spec
            watched.append(WatchedModel(
                name=workload.name, namespace=deployment.namespace or self.operator.namespace, kind=workload.KIND,
                engine=engine,
                port=worker.model_invocation_port.container_port if worker is not None and engine is not None
                else None,
                scales_to_zero=scaling is not None and scaling.effective_min == 0))
        if not watched:
            return None
        options = self.alarms.models
        return ModelMetricsPlan(namespace=self.operator.namespace, cluster_name=self.cluster.cluster_name,
                                role_name=self.model_metrics_role_name, models=tuple(watched),
                                pod_cidrs=(self.vpc.cidr if isinstance(self.vpc, NewVpc) else self.vpc.vpc_cidr,),
                                latency_bound=(options.latency or LATENCY).threshold,
                                first_token_bound=(options.time_to_first_token or TIME_TO_FIRST_TOKEN).threshold)

    @property
    def model_metrics_role_name(self) -> str:
        return f"{self.project}-model-metrics-agent"

    @property
    def helm_releases(self) -> tuple[HelmRelease, ...]:
        """The Helm releases the platform installs: the NVIDIA device plugin, External Secrets (the token and API key
        syncs), and one ExternalDNS release per watched namespace."""
        releases = [NVIDIA_DEVICE_PLUGIN, EXTERNAL_SECRETS]
        dns = self.external_dns
        if dns is not None:
            releases += external_dns_releases(
                namespaces=dns.namespaces, zone_ids=[PlatformValue.HOSTED_ZONE_ID], domain_filters=[dns.zone_name],
                owner_id=dns.owner_id, role_arn=self.role_arn(dns.role_name))
        return tuple(releases)

    @property
    def secret_syncs(self) -> dict[str, SecretSync]:
        """Every Secrets Manager secret synced into the cluster, by the name of its manifests: the Hugging Face token
        and each portable server's API key."""
        return {"hugging-face-token": self.hugging_face_sync,
                **{f"api-key-{name}": sync for name, sync in self.api_key_syncs.items()}}

    @property
    def sidecar_metrics_role_name(self) -> str:
        """The platform namespace's capture sidecar metrics agent's role."""
        return f"{self.project}-capture-metrics-agent"

    def sidecar_metrics_role_name_in(self, namespace: str) -> str:
        """The role of the capture sidecar metrics agent of another namespace: ``{project}-capture-metrics-agent-<ns>``,
        shortened with a hash past IAM's 64 characters (``iam_role_name``)."""
        return iam_role_name(f"{self.project}-capture-metrics-agent-{namespace}")

    @property
    def capture_tiers(self) -> tuple[str, ...]:
        """The capture tiers some workload turns on (``sme``, ``alb``, ``pod``): capture is on for them."""
        tiers: set[str] = set()
        for deployment in self.models:
            workload = deployment.workload
            capture = None if isinstance(workload, ModelWeightsCacheConfig) else workload.spec.data_capture
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
    def usage_store_name(self) -> str:
        """The budget store's serverless cache (``UsageStore``), created when a server uses it."""
        return f"{self.project}-usage"

    @property
    def platform_context(self) -> PlatformContext:
        """What the workloads need to know about this platform."""
        sync = self.hugging_face_sync
        return PlatformContext(
            cluster_name=self.cluster.cluster_name, namespace=self.operator.namespace, account=self.environment.account,
            partition=self.environment.partition, role_name_prefix=self.project,
            capture=S3Location(PlatformValue.CAPTURE_BUCKET, self.capture.prefix),
            capture_key=PlatformValue.CAPTURE_KEY_ID,
            tls_output=S3Location(PlatformValue.TLS_BUCKET, TLS_OUTPUT_PREFIX),
            # (no zone: none was given, a problem of its own; names are not compared with it)
            endpoint_domains=tuple(self.domain.endpoint_domains), zone_name=self.domain.zone_name or None,
            custom_service_accounts_enabled=self.operator.enable_custom_service_accounts,
            synced_secrets={sync.kubernetes_secret_name: (sync.key,)}, known_values=self.known_values,
            operator_addon_version=self.operator.addon_version,
            vpc_cidr=self.vpc.cidr if isinstance(self.vpc, NewVpc) else self.vpc.vpc_cidr,
            region=self.environment.region,
            node_groups=tuple(group.placement() for group in self.hyperpod.instance_groups),
            # The budget store the cluster stack creates when a portable server's token budgets name no storeUrl.
            usage_store=UsageStoreRef.of_cache(self.usage_store_name),
            # Problems the plan finds in these name this file's keys (a Python caller sees PlatformContext's fields).
            key_paths=KeyPaths("", {"operator_addon_version": "operator.addonVersion", "vpc_cidr": (
                "network.newVpc.cidr" if isinstance(self.vpc, NewVpc) else "network.existingVpc.vpcCidr")}),
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
    "ModelAlarmsConfig",
    "NewVpc",
    "OperatorConfig",
    "PlatformConfig",
    "SidecarAlarmsConfig",
]

"""The cluster platform: VPC, EKS with GPU node groups on local NVMe, the HyperPod cluster attached
to it, the inference operator, the endpoint domain, the Hugging Face token sync and the workloads.
One `cdk deploy` creates everything the operator needs. This stack only composes library constructs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_route53 as route53
from constructs import Construct

from hyperpod_inference_iac import (
    AlarmTopic,
    ApiKeySync,
    CaptureAlarms,
    CapturePipeline,
    CaptureSidecarMetrics,
    CaptureSidecarMetricsOptions,
    CaptureStorage,
    CaptureTables,
    CertificateAlarms,
    EndpointDomain,
    EndpointDomainOptions,
    ExternalDns,
    GpuCost,
    GpuNodeGroup,
    HuggingFaceTokenSync,
    HyperPodCluster,
    InferenceCluster,
    InferenceClusterOptions,
    InferenceOperator,
    InferenceOperatorOptions,
    InferenceWorkloads,
    ModelServingMetrics,
    ModelServingMetricsOptions,
    PlatformDashboard,
    PlatformValue,
    PlatformVpc,
    RotationAcceptance,
    SecretsKey,
    UsageStore,
    UsageStoreOptions,
    WorkloadOwner,
    add_api_key_alarms,
    deploy_time_availability_zones,
    existing_vpc,
    retention_from_days,
)
from platform_config import PlatformConfig
from platform_config.model import NewVpc


class AlarmWiringArgs(TypedDict):
    """The keyword arguments every alarm construct of the cluster stack shares (typed, so the app type-checks)."""

    topic: AlarmTopic | None
    alarm_name_prefix: str
    runbook_url: str | None
    notify_on_ok: bool

class ClusterStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: PlatformConfig, storage: CaptureStorage,
                 pipeline: CapturePipeline | None = None, alarm_topic: AlarmTopic | None = None,
                 capture_alarms: CaptureAlarms | None = None, tables: CaptureTables | None = None,
                 replacements: Mapping[str, Sequence[str]] | None = None, **kwargs: Any) -> None:
        self._zones = _zones(config)
        super().__init__(scope, id, **kwargs)
        self.vpc = self._vpc(config)
        cluster_config = config.cluster
        self.cluster = InferenceCluster(
            self, "Eks", **cluster_config.kwargs(InferenceClusterOptions), vpc=self.vpc,
            control_plane_log_retention=retention_from_days(config.logging.audit_retention_days))
        eks_cluster = self.cluster.cluster
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.gpu_node_groups = [
            GpuNodeGroup(self, f"Gpu-{group.name}", cluster=eks_cluster, subnets=private, **group.kwargs())
            for group in cluster_config.gpu_node_groups
        ]
        if self.cluster.device_plugin is not None:
            for node_group in self.gpu_node_groups:
                self.cluster.device_plugin.node.add_dependency(node_group)

        self.hyperpod = HyperPodCluster(
            self, "HyperPod", **config.hyperpod.kwargs(), eks_cluster=eks_cluster,
            subnets=self.vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets,
            security_groups=[eks_cluster.cluster_security_group],
            lifecycle_bucket_name=config.hyperpod_lifecycle_bucket_name,
            # Lifecycle scripts are code, not captured data: SSE-S3, so the capture key's policy lists only the
            # principals that handle captures and certificates.
            access_logs_bucket=storage.access_log_bucket,
            log_retention=retention_from_days(config.logging.retention_days),
        )
        if self.cluster.vpc_cni_addon is not None:  # aws-node has its own role before the first HyperPod node joins
            self.hyperpod.cfn_cluster.node.add_dependency(self.cluster.vpc_cni_addon)
        # The cost per team: the GPU groups counted hourly into the capture tables' gpu_node_hours, priced.
        self.gpu_cost = GpuCost(
            self, "GpuCost", tables=tables, **config.costs.kwargs(), eks_cluster_name=cluster_config.cluster_name,
            node_groups={g.name: list(g.instance_types) for g in cluster_config.gpu_node_groups},
            hyperpod_cluster_name=config.hyperpod.cluster_name, hyperpod_cluster_arn=self.hyperpod.cluster_arn,
            instance_groups={g.name: g.instance_type for g in config.hyperpod.instance_groups},
            role_name=config.gpu_cost_role_name, log_retention=retention_from_days(config.logging.retention_days),
        ) if config.costs is not None and tables is not None else None
        domain_config = config.domain
        self.domain = domain = EndpointDomain(
            self, "EndpointDomain", **domain_config.kwargs(EndpointDomainOptions),
            hosted_zone=route53.HostedZone.from_hosted_zone_attributes(
                self, "ExistingZone", hosted_zone_id=domain_config.existing_hosted_zone_id,
                zone_name=domain_config.zone_name) if domain_config.existing_hosted_zone_id else None,
            certificate=acm.Certificate.from_certificate_arn(
                self, "ExistingCertificate", domain_config.existing_certificate_arn)
            if domain_config.existing_certificate_arn else None,
        )
        plan = config.workloads
        operator_config = config.operator
        self.operator = InferenceOperator(
            self, "InferenceOperator", cluster=eks_cluster, hyperpod_cluster_arn=self.hyperpod.cluster_arn,
            tls_bucket=storage.tls_bucket, tls_bucket_key=storage.key,
            capture_bucket=storage.capture_bucket, capture_key=storage.key, capture_prefix=config.capture.prefix,
            certificate=domain.certificate, hosted_zone=domain.hosted_zone,
            execution_role_name=config.operator_execution_role_name,
            **operator_config.kwargs(InferenceOperatorOptions), s3_csi_role_name=config.s3_csi_role_name,
            scaling_metrics=plan.scaling_metrics,
            gated_model_namespaces=plan.gated_model_namespaces, inference_gateway=bool(plan.gateways),
            gated_model_download_role=iam.Role.from_role_arn(
                self, "GatedModelRole", operator_config.gated_model_download_role_arn)
            if operator_config.gated_model_download_role_arn else None,
        )
        # One key for the token and every API key: its policy lets each reader decrypt its own secret only.
        self.secrets_key = SecretsKey(self, "SecretsKey", alias=config.secrets_key_alias) \
            if config.secrets.customer_managed_key else None
        secrets_key = self.secrets_key.key if self.secrets_key else None
        self.hugging_face_token = HuggingFaceTokenSync(self, "HuggingFaceToken", cluster=eks_cluster,
                                                       sync=config.hugging_face_sync, encryption_key=secrets_key)
        # ExternalDNS watches the namespaces of the portable servers with a hostname, and may change their records only.
        dns = config.external_dns
        self.external_dns = ExternalDns(
            self, "ExternalDns", cluster=eks_cluster, hosted_zones=[domain.hosted_zone], owner_id=dns.owner_id,
            namespaces=dns.namespaces, hostnames=dns.hostnames, role_name=dns.role_name,
        ) if dns is not None else None
        # The budget store, when a portable server's token budgets name no storeUrl of their own: reachable from the
        # cluster's nodes only (the cluster security group; the NetworkPolicy narrows it to those sidecars).
        self.usage_store = UsageStore(
            self, "UsageStore", vpc=self.vpc, clients=[eks_cluster.cluster_security_group],
            cache_name=config.usage_store_name, **(config.usage_store or UsageStoreOptions()).kwargs(),
        ) if plan.usage_store_users else None
        self.workloads = InferenceWorkloads(
            self, "Workloads", cluster=eks_cluster, plan=plan, capture_bucket=storage.capture_bucket,
            capture_key=storage.key, tls_bucket=storage.tls_bucket, certificate=domain.certificate,
            hosted_zone=domain.hosted_zone, known_values=config.known_values,
            # A prebuilt image by digest (capture.sidecarImage) instead of the asset: no Docker at deploy time.
            sidecar_image=config.capture.sidecar_image,
            # One owner of the workloads (workloads.owner): with gitops, dist/ applies them and this stack does not.
            apply_workloads=config.workload_owner is WorkloadOwner.CDK,
            depends_on=[self.operator.addon, *([self.cluster.device_plugin] if self.cluster.device_plugin else []),
                        *self.gpu_node_groups],
            external_dns=self.external_dns,
            secret_sync=self.hugging_face_token.manifest,
            namespace_labels={"app.kubernetes.io/managed-by": config.project},
            monitored_namespaces=config.monitored_namespaces, usage_store=self.usage_store,
        )
        # The token sync's objects live in the workloads' namespace.
        self.hugging_face_token.manifest.node.add_dependency(self.workloads.namespace_manifest)
        self.api_keys = self._api_keys(config, eks_cluster)
        self.workloads.warn_about_replacements(replacements or {})

        self._monitoring(config, pipeline=pipeline, alarm_topic=alarm_topic, capture_alarms=capture_alarms)

        sync = config.hugging_face_sync
        outputs = {
            "ClusterName": eks_cluster.cluster_name,
            "ClusterArn": eks_cluster.cluster_arn,
            PlatformValue.HOSTED_ZONE_ID.output_name: domain.hosted_zone.hosted_zone_id,
            PlatformValue.CERTIFICATE_ARN.output_name: domain.certificate.certificate_arn,
            "HyperPodClusterArn": self.hyperpod.cluster_arn,
            "HyperPodExecutionRoleArn": self.hyperpod.execution_role.role_arn,
            "OperatorExecutionRoleArn": self.operator.execution_role.role_arn,
            "HuggingFaceTokenSecretArn": self.hugging_face_token.secret.secret_arn,
            "HuggingFaceTokenKubernetesSecret": f"{sync.namespace}/{sync.kubernetes_secret_name}",
        }
        if self.usage_store is not None:  # (GitOps manifests read it from the outputs file)
            outputs[PlatformValue.USAGE_STORE_ENDPOINT.output_name] = self.usage_store.endpoint
        for name, value in outputs.items():
            CfnOutput(self, name, value=value)

    def _api_keys(self, config: PlatformConfig, eks_cluster: Any) -> dict[str, ApiKeySync]:
        """The generated API key of each portable server that asks for one, synced into the namespace before the
        server's manifest is applied (the operator installed with the Hugging Face token sync runs the sync).
        Rotated every ``secrets.apiKeyRotationDays`` where the capture sidecar checks it (it re-reads the synced
        file); a server without capture reads its key at start, so its key is not rotated (warned)."""
        keys = {}
        portable = {p.name: p for p in config.workloads.portable}
        for name, sync in config.api_key_syncs.items():
            api_key = portable[name].server.api_key
            # (the capture sidecar reads the sync's keys file; a server without one reads its key at start)
            rotation_days = config.secrets.rotation_days_of(reads_keys_file=portable[name].capture is not None)
            # The rotation waits for every sidecar to report the new key where the metrics agent scrapes them.
            agent = config.metrics_agent_in(sync.namespace)
            acceptance = RotationAcceptance(cluster_name=agent.cluster_name, namespace=sync.namespace, workload=name) \
                if agent is not None and rotation_days is not None else None
            keys[name] = key = ApiKeySync(
                self, f"ApiKey-{name}", cluster=eks_cluster, sync=sync,
                client_role_arns=api_key.client_role_arns if api_key is not None else (),
                operator_chart=self.hugging_face_token.operator_chart,
                encryption_key=self.hugging_face_token.encryption_key, rotation_days=rotation_days,
                rotation_role_name=config.api_key_rotation_role_name(name), log_retention=config.logging.retention,
                # The platform's admins may rotate now and revoke the previous key (docs/secrets.md), never write one.
                acceptance=acceptance, operator_role_arns=self.cluster.props.admin_role_arns)
            key.manifest.node.add_dependency(self.workloads.namespace_manifest)
            if (server := self.workloads.manifests.get(f"portable-{name}")) is not None:  # (GitOps owns it: absent)
                server.node.add_dependency(key.manifest)
        return keys

    def _monitoring(self, config: PlatformConfig, *, pipeline: CapturePipeline | None, alarm_topic: AlarmTopic | None,
                    capture_alarms: CaptureAlarms | None) -> None:
        """The certificate's and the capture sidecars' alarms (notifying the storage stack's topic) and the
        dashboard, unless the config turns alarms off."""
        alarms = config.alarms
        self.certificate_alarms: CertificateAlarms | None = None
        self.sidecar_metrics: CaptureSidecarMetrics | None = None
        self.model_metrics: ModelServingMetrics | None = None
        self.dashboard: PlatformDashboard | None = None
        if not alarms.enabled:
            return
        wiring = AlarmWiringArgs(topic=alarm_topic, alarm_name_prefix=config.project, runbook_url=alarms.runbook_url,
                                 notify_on_ok=alarms.notify_on_ok)
        for key in self.api_keys.values():  # (a key without rotation has none)
            add_api_key_alarms(key, **wiring)
        certificates = {"endpoints": self.domain.certificate}
        if alarms.certificate.days_to_expiry is not None:
            self.certificate_alarms = CertificateAlarms(self, "CertificateAlarms", certificates=certificates,
                                                        **wiring, **alarms.certificate.kwargs())
        # One agent per namespace with capturing sidecars (config.metrics_agents): the platform namespace's first,
        # with the ids and names it always had; each watches its own namespace only.
        self.sidecar_metrics_agents: dict[str, CaptureSidecarMetrics] = {}
        for agent in config.metrics_agents:
            self.sidecar_metrics_agents[agent.namespace] = CaptureSidecarMetrics(
                self, agent.construct_id, cluster=self.cluster.cluster, namespace=agent.namespace,
                cluster_name=agent.cluster_name, role_name=agent.role_name, log_group_name=agent.log_group_name,
                log_retention=retention_from_days(config.logging.retention_days),
                # Each capturing server's sidecar labels its series with the server's name (MODEL_NAME).
                models=list(agent.models),
                # One alarm per budget alert level of the servers' usageLimits (none without a day or month budget).
                budget_alert_percents=list(agent.budget_alert_percents),
                depends_on=[self.workloads.namespace_manifest],
                **AlarmWiringArgs(topic=wiring["topic"], alarm_name_prefix=agent.alarm_name_prefix or config.project,
                                  runbook_url=wiring["runbook_url"], notify_on_ok=wiring["notify_on_ok"]),
                **alarms.sidecar.kwargs(CaptureSidecarMetricsOptions))
        # The dashboard's sidecar graphs: the first agent's (the platform namespace's); every agent's alarms are on it.
        self.sidecar_metrics = next(iter(self.sidecar_metrics_agents.values()), None)
        models = config.model_metrics_agent
        if models is not None:
            self.model_metrics = ModelServingMetrics(
                self, "ModelServingMetrics", cluster=self.cluster.cluster, namespace=models.namespace,
                models=list(models.models), cluster_name=models.cluster_name, role_name=models.role_name,
                # The relay runs the capture sidecar's image: the workloads' asset when they build one (else the
                # construct builds the same asset), and fetches only from the VPC's CIDR.
                relay_image=self.workloads.values.known.get(PlatformValue.SIDECAR_IMAGE),
                pod_cidrs=list(models.pod_cidrs),
                log_retention=retention_from_days(config.logging.retention_days),
                depends_on=[self.workloads.namespace_manifest, self.operator.addon], **wiring,
                **alarms.models.kwargs(ModelServingMetricsOptions))
        if alarms.dashboard:
            watched = [*(capture_alarms.alarms.values() if capture_alarms else ()),
                       *(self.certificate_alarms.alarms.values() if self.certificate_alarms else ()),
                       *(alarm for agent in self.sidecar_metrics_agents.values() for alarm in agent.alarms.values()),
                       *(self.model_metrics.alarms.values() if self.model_metrics else ()),
                       *(alarm for key in self.api_keys.values() for alarm in key.alarms.values())]
            self.dashboard = PlatformDashboard(
                self, "Dashboard", dashboard_name=config.project, pipeline=pipeline,
                tiers=config.capture_tiers or ("sme", "pod", "alb"), certificates=certificates,
                sidecar_metrics=self.sidecar_metrics, model_metrics=self.model_metrics, alarms=watched)

    @property
    def availability_zones(self) -> list[str]:
        """Known without asking the account (no lookups): explicit zones of an existing VPC, else the
        first zones CloudFormation resolves at deploy time (``Fn::GetAZs``), never hard-coded names."""
        return self._zones

    def _vpc(self, config: PlatformConfig) -> ec2.IVpc:
        flow_log_retention = retention_from_days(config.logging.audit_retention_days)
        if isinstance(config.vpc, NewVpc):
            return PlatformVpc(self, "Network", **config.vpc.kwargs(), availability_zones=self._zones,
                               flow_log_retention=flow_log_retention).vpc
        return existing_vpc(self, "Network", **config.vpc.kwargs(), flow_log_retention=flow_log_retention)


def _zones(config: PlatformConfig) -> list[str]:
    if isinstance(config.vpc, NewVpc):
        return deploy_time_availability_zones(config.vpc.max_azs)
    return list(config.vpc.availability_zones)

"""CDK constructs and cdk8s charts for LLM inference on Amazon SageMaker HyperPod (EKS-orchestrated).

Constructs (each has a page in docs/constructs/ and an example in examples/):

* :class:`CaptureStorage`, :class:`CapturePipeline`: where captured inference data lives, and its
  post-processing into redacted Parquet for Athena;
* :class:`PlatformVpc`, :class:`InferenceCluster`, :class:`GpuNodeGroup`: the network and the EKS cluster
  with NVIDIA GPU nodes on instance-store NVMe;
* :class:`HyperPodCluster`, :class:`InferenceOperator`: HyperPod attached to that cluster and its
  inference operator add-on, with scoped roles;
* :class:`EndpointDomain`, :class:`ExternalDns`: custom domains (Route 53 + ACM);
* :class:`GitHubDeployRole`: the role a GitHub Actions deploy job assumes (OIDC, one repository and environment);
* :class:`WorkloadIdentity`, :class:`HuggingFaceTokenSync`, :class:`ApiKeySync`, :class:`SecretsKey`,
  :class:`InferenceWorkloads`: per-workload roles, the Hugging Face token and portable API key syncs, the
  customer managed key their secrets are encrypted with, and the workloads of a
  :class:`~hyperpod_inference_iac.charts.WorkloadPlan`;
* :class:`AlarmTopic`, :class:`CaptureAlarms`, :class:`CertificateAlarms`, :class:`CaptureSidecarMetrics`,
  :class:`ModelServingMetrics`, :class:`PlatformDashboard`: the alarm topic, the alarms on capture, certificates,
  capture sidecars and the operator's models, and
  the on-call dashboard (:mod:`hyperpod_inference_iac.observability.alarms` holds what they share);
* :class:`LambdaLogRetention`: the Aspect that gives every Lambda function (CDK's own helpers included) a
  log group with a retention.

Charts and the workload plan are in :mod:`hyperpod_inference_iac.charts`; the GitOps hand-off in
:mod:`hyperpod_inference_iac.serving.gitops`. Every construct validates its properties (all problems at once, as
one :class:`ConfigError`), warns about risky but legal choices (acknowledgeable CDK warnings, decided by
``warn_*`` functions a config loader calls too: :mod:`hyperpod_inference_iac.foundation.risks`), needs no feature flag
of
the app it lives in, and acknowledges its own reviewed cdk-nag findings (:mod:`hyperpod_inference_iac.foundation.nag`).
"""

from typing import TYPE_CHECKING

from hyperpod_inference_iac.foundation.lazy import lazy_exports
from hyperpod_inference_iac.foundation.version import library_version

# The public names, imported on first use (foundation/lazy.py reads this block: it is the one list of where each
# name comes from); importing a command module (preflight, capture_table_ops) loads no CDK.
if TYPE_CHECKING:
    from hyperpod_inference_iac.capture.capture_eraser import (
        CaptureEraser,
        CaptureEraserOptions,
        CaptureEraserProps,
    )
    from hyperpod_inference_iac.capture.capture_pipeline import (
        DEFAULT_REDACTION_RULES,
        CapturePipeline,
        CapturePipelineOptions,
        CapturePipelineProps,
        RedactionRule,
        check_capture_pipeline,
        warn_capture_pipeline,
    )
    from hyperpod_inference_iac.capture.capture_storage import (
        CaptureStorage,
        CaptureStorageOptions,
        CaptureStorageProps,
        check_capture_storage,
        warn_capture_storage,
    )
    from hyperpod_inference_iac.capture.capture_tables import (
        CaptureTables,
        CaptureTablesOptions,
        CaptureTablesProps,
        ColumnAccess,
        TableReader,
        warn_capture_tables,
    )
    from hyperpod_inference_iac.capture.gpu_cost import (
        CostGroup,
        GpuCost,
        GpuCostOptions,
        GpuCostProps,
        InstancePrice,
    )
    from hyperpod_inference_iac.cluster.eks_cluster import (
        KUBECTL_LAYERS,
        NVIDIA_DEVICE_PLUGIN,
        ClusterEndpointAccess,
        InferenceCluster,
        InferenceClusterOptions,
        InferenceClusterProps,
        check_inference_cluster,
        warn_inference_cluster,
    )
    from hyperpod_inference_iac.cluster.gpu_nodegroup import (
        GpuNodeGroup,
        GpuNodeGroupOptions,
        GpuNodeGroupProps,
        LocalStorageStrategy,
        check_gpu_node_group,
    )
    from hyperpod_inference_iac.cluster.hyperpod_cluster import (
        CapacityType,
        DeepHealthCheck,
        HyperPodCluster,
        HyperPodClusterOptions,
        HyperPodClusterProps,
        InstanceGroup,
        KubernetesTaint,
        NodeRecovery,
        TaintEffect,
        check_hyperpod_cluster,
        warn_hyperpod_cluster,
    )
    from hyperpod_inference_iac.cluster.inference_operator import (
        InferenceOperator,
        InferenceOperatorOptions,
        InferenceOperatorProps,
        check_inference_operator,
    )
    from hyperpod_inference_iac.cluster.network import (
        ExistingVpcOptions,
        ExistingVpcProps,
        FlowLogTraffic,
        PlatformVpc,
        PlatformVpcOptions,
        PlatformVpcProps,
        VpcFlowLogs,
        add_flow_logs,
        check_existing_vpc,
        check_platform_vpc,
        deploy_time_availability_zones,
        existing_vpc,
    )
    from hyperpod_inference_iac.foundation.cdk_types import ClusterLike, as_icluster
    from hyperpod_inference_iac.foundation.helm import HelmRelease
    from hyperpod_inference_iac.foundation.log_retention import (
        LambdaLogRetention,
        LambdaLogRetentionProps,
        LogRetentionOptions,
        check_log_retention,
        retention_from_days,
    )
    from hyperpod_inference_iac.foundation.platform_values import (
        AwaitingDeploy,
        PlatformValue,
        PlatformValues,
        S3Location,
        S3Uri,
    )
    from hyperpod_inference_iac.foundation.regions import check_region
    from hyperpod_inference_iac.foundation.risks import WARNINGS, RiskWarning, RiskWarnings
    from hyperpod_inference_iac.foundation.scaling_metrics import PrometheusWorkspace, ScalingMetrics
    from hyperpod_inference_iac.foundation.tags import apply_tags, check_tags
    from hyperpod_inference_iac.foundation.validation import ConfigError, KeyPaths, Problem, Problems
    from hyperpod_inference_iac.observability.alarm_names import PlannedAlarm, check_alarm_names, planned_alarms
    from hyperpod_inference_iac.observability.alarm_topic import (
        AlarmTopic,
        AlarmTopicOptions,
        AlarmTopicProps,
        check_alarm_topic,
        warn_alarm_topic,
    )
    from hyperpod_inference_iac.observability.alarms import (
        AlarmNotifyOptions,
        AlarmSettings,
        AlarmWiringProps,
        alarm_table,
        describe_alarms,
    )
    from hyperpod_inference_iac.observability.api_key_alarms import add_api_key_alarms, api_key_alarm_suffixes
    from hyperpod_inference_iac.observability.capture_alarms import (
        CaptureAlarms,
        CaptureAlarmsOptions,
        CaptureAlarmsProps,
        capture_alarm_suffixes,
        check_capture_alarms,
    )
    from hyperpod_inference_iac.observability.certificate_alarms import (
        CertificateAlarms,
        CertificateAlarmsOptions,
        CertificateAlarmsProps,
        certificate_alarm_suffixes,
        check_certificate_alarms,
        warn_certificate_alarms,
    )
    from hyperpod_inference_iac.observability.model_metrics import (
        Engine,
        ModelServingMetrics,
        ModelServingMetricsOptions,
        ModelServingMetricsProps,
        WatchedModel,
        engine_of_image,
        model_alarm_suffixes,
        model_metrics_log_group_name,
        model_metrics_manifests,
        operator_metrics_spec,
    )
    from hyperpod_inference_iac.observability.platform_dashboard import (
        PlatformDashboard,
        PlatformDashboardProps,
        check_platform_dashboard,
    )
    from hyperpod_inference_iac.observability.sidecar_metrics import (
        CaptureSidecarMetrics,
        CaptureSidecarMetricsOptions,
        CaptureSidecarMetricsProps,
        check_capture_sidecar_metrics,
        sidecar_alarm_suffixes,
        sidecar_metrics_log_group_name,
        sidecar_metrics_manifests,
    )
    from hyperpod_inference_iac.security.github_deploy_role import (
        GitHubDeployRole,
        GitHubDeployRoleProps,
        check_github_deploy_role,
    )
    from hyperpod_inference_iac.security.preflight_policy import PreflightPolicy, PreflightPolicyProps
    from hyperpod_inference_iac.security.s3_access import (
        bucket_arn,
        grant_key_through_s3,
        grant_object_reads,
        grant_object_writes,
        kms_through_s3,
    )
    from hyperpod_inference_iac.security.secrets_key import (
        SecretsKey,
        SecretsKeyGuard,
        SecretsKeyProps,
        grant_secret_read,
        kms_through_secrets_manager,
        secrets_key_guard,
    )
    from hyperpod_inference_iac.security.workload_identity import (
        IdentityBinding,
        WorkloadIdentity,
        WorkloadIdentityProps,
        check_workload_identity,
    )
    from hyperpod_inference_iac.serving.api_keys import (
        ApiKeySync,
        ApiKeySyncProps,
        RotationAcceptance,
        SecretsOptions,
        api_key_sync,
        check_api_key_rotation,
    )
    from hyperpod_inference_iac.serving.endpoint_domain import (
        EndpointDomain,
        EndpointDomainOptions,
        EndpointDomainProps,
        check_endpoint_domain,
    )
    from hyperpod_inference_iac.serving.external_dns import (
        ExternalDns,
        ExternalDnsProps,
        check_external_dns,
        external_dns_release,
        external_dns_releases,
    )
    from hyperpod_inference_iac.serving.gitops import Prerequisite, StagedManifests, WorkloadOwner, stage_manifests
    from hyperpod_inference_iac.serving.hugging_face_token import (
        EXTERNAL_SECRETS,
        HuggingFaceTokenSync,
        HuggingFaceTokenSyncProps,
        SecretSync,
        SyncedCaller,
    )
    from hyperpod_inference_iac.serving.inference_workloads import (
        InferenceWorkloads,
        InferenceWorkloadsProps,
        sidecar_image_hash,
        sidecar_image_reference,
        sidecar_image_uri,
        warn_entry,
        warn_gateway,
        warn_workload,
    )
    from hyperpod_inference_iac.serving.usage_store import UsageStore, UsageStoreOptions, UsageStoreProps

    __version__: str

__all__ = [
    "DEFAULT_REDACTION_RULES",
    "EXTERNAL_SECRETS",
    "KUBECTL_LAYERS",
    "NVIDIA_DEVICE_PLUGIN",
    "WARNINGS",
    "AlarmNotifyOptions",
    "AlarmSettings",
    "AlarmTopic",
    "AlarmTopicOptions",
    "AlarmTopicProps",
    "AlarmWiringProps",
    "ApiKeySync",
    "ApiKeySyncProps",
    "AwaitingDeploy",
    "CapacityType",
    "CaptureAlarms",
    "CaptureAlarmsOptions",
    "CaptureAlarmsProps",
    "CaptureEraser",
    "CaptureEraserOptions",
    "CaptureEraserProps",
    "CapturePipeline",
    "CapturePipelineOptions",
    "CapturePipelineProps",
    "CaptureSidecarMetrics",
    "CaptureSidecarMetricsOptions",
    "CaptureSidecarMetricsProps",
    "CaptureStorage",
    "CaptureStorageOptions",
    "CaptureStorageProps",
    "CaptureTables",
    "CaptureTablesOptions",
    "CaptureTablesProps",
    "CertificateAlarms",
    "CertificateAlarmsOptions",
    "CertificateAlarmsProps",
    "ClusterEndpointAccess",
    "ClusterLike",
    "ColumnAccess",
    "ConfigError",
    "CostGroup",
    "DeepHealthCheck",
    "EndpointDomain",
    "EndpointDomainOptions",
    "EndpointDomainProps",
    "Engine",
    "ExistingVpcOptions",
    "ExistingVpcProps",
    "ExternalDns",
    "ExternalDnsProps",
    "FlowLogTraffic",
    "GitHubDeployRole",
    "GitHubDeployRoleProps",
    "GpuCost",
    "GpuCostOptions",
    "GpuCostProps",
    "GpuNodeGroup",
    "GpuNodeGroupOptions",
    "GpuNodeGroupProps",
    "HelmRelease",
    "HuggingFaceTokenSync",
    "HuggingFaceTokenSyncProps",
    "HyperPodCluster",
    "HyperPodClusterOptions",
    "HyperPodClusterProps",
    "IdentityBinding",
    "InferenceCluster",
    "InferenceClusterOptions",
    "InferenceClusterProps",
    "InferenceOperator",
    "InferenceOperatorOptions",
    "InferenceOperatorProps",
    "InferenceWorkloads",
    "InferenceWorkloadsProps",
    "InstanceGroup",
    "InstancePrice",
    "KeyPaths",
    "KubernetesTaint",
    "LambdaLogRetention",
    "LambdaLogRetentionProps",
    "LocalStorageStrategy",
    "LogRetentionOptions",
    "ModelServingMetrics",
    "ModelServingMetricsOptions",
    "ModelServingMetricsProps",
    "NodeRecovery",
    "PlannedAlarm",
    "PlatformDashboard",
    "PlatformDashboardProps",
    "PlatformValue",
    "PlatformValues",
    "PlatformVpc",
    "PlatformVpcOptions",
    "PlatformVpcProps",
    "PreflightPolicy",
    "PreflightPolicyProps",
    "Prerequisite",
    "Problem",
    "Problems",
    "PrometheusWorkspace",
    "RedactionRule",
    "RiskWarning",
    "RiskWarnings",
    "RotationAcceptance",
    "S3Location",
    "S3Uri",
    "ScalingMetrics",
    "SecretSync",
    "SecretsKey",
    "SecretsKeyGuard",
    "SecretsKeyProps",
    "SecretsOptions",
    "StagedManifests",
    "SyncedCaller",
    "TableReader",
    "TaintEffect",
    "UsageStore",
    "UsageStoreOptions",
    "UsageStoreProps",
    "VpcFlowLogs",
    "WatchedModel",
    "WorkloadIdentity",
    "WorkloadIdentityProps",
    "WorkloadOwner",
    "add_api_key_alarms",
    "add_flow_logs",
    "alarm_table",
    "api_key_alarm_suffixes",
    "api_key_sync",
    "apply_tags",
    "as_icluster",
    "bucket_arn",
    "capture_alarm_suffixes",
    "certificate_alarm_suffixes",
    "check_alarm_names",
    "check_alarm_topic",
    "check_api_key_rotation",
    "check_capture_alarms",
    "check_capture_pipeline",
    "check_capture_sidecar_metrics",
    "check_capture_storage",
    "check_certificate_alarms",
    "check_endpoint_domain",
    "check_existing_vpc",
    "check_external_dns",
    "check_github_deploy_role",
    "check_gpu_node_group",
    "check_hyperpod_cluster",
    "check_inference_cluster",
    "check_inference_operator",
    "check_log_retention",
    "check_platform_dashboard",
    "check_platform_vpc",
    "check_region",
    "check_tags",
    "check_workload_identity",
    "deploy_time_availability_zones",
    "describe_alarms",
    "engine_of_image",
    "existing_vpc",
    "external_dns_release",
    "external_dns_releases",
    "grant_key_through_s3",
    "grant_object_reads",
    "grant_object_writes",
    "grant_secret_read",
    "kms_through_s3",
    "kms_through_secrets_manager",
    "model_alarm_suffixes",
    "model_metrics_log_group_name",
    "model_metrics_manifests",
    "operator_metrics_spec",
    "planned_alarms",
    "retention_from_days",
    "secrets_key_guard",
    "sidecar_alarm_suffixes",
    "sidecar_image_hash",
    "sidecar_image_reference",
    "sidecar_image_uri",
    "sidecar_metrics_log_group_name",
    "sidecar_metrics_manifests",
    "stage_manifests",
    "warn_alarm_topic",
    "warn_capture_pipeline",
    "warn_capture_storage",
    "warn_capture_tables",
    "warn_certificate_alarms",
    "warn_entry",
    "warn_gateway",
    "warn_hyperpod_cluster",
    "warn_inference_cluster",
    "warn_workload",
]



if not TYPE_CHECKING:
    # ``__version__``: RELEASE or RELEASE.devN, computed on each access (foundation/version.py)
    __getattr__, __dir__ = lazy_exports(
        __name__, globals(), computed={"__version__": library_version})

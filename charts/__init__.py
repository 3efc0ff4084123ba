"""cdk8s charts: the HyperPod Inference Operator's custom resources and a portable model server,
and the workload plan both are rendered from (:func:`plan_workloads`).

See docs/charts.md. A config loader parses ``models:`` entries with :func:`parse_models`.
"""

from typing import TYPE_CHECKING

from hyperpod_inference_iac.foundation.lazy import lazy_exports

# The public names, imported on first use (foundation/lazy.py reads this block): importing one chart module
# (``crd_schema``, say) loads no other, and no cdk8s unless that module needs it.
if TYPE_CHECKING:
    from hyperpod_inference_iac.charts.autoscaling import (
        AutoScalingSpec,
        CloudWatchTrigger,
        MetricDimension,
        MetricType,
        PrometheusTrigger,
    )
    from hyperpod_inference_iac.charts.capture import (
        BufferConfig,
        CaptureContentTypeHeader,
        CaptureMode,
        DataCapture,
        LoadBalancerCapture,
        ModelPodCapture,
        PayloadConfig,
        SageMakerEndpointCapture,
    )
    from hyperpod_inference_iac.charts.endpoint_blocks import (
        CustomCertificateConfig,
        DnsConfig,
        LoadBalancerConfig,
        MetricsConfig,
        ModelMetrics,
        NameValue,
        RoutingAlgorithm,
        TlsConfig,
    )
    from hyperpod_inference_iac.charts.gateway import (
        ConfigMapRef,
        InferenceGateway,
        JwtAuthentication,
        PlannedGateway,
        RequiredClaim,
        SchedulerOptions,
    )
    from hyperpod_inference_iac.charts.gateway_entry import GatewayEntryOptions
    from hyperpod_inference_iac.charts.gateway_entry_chart import GatewayEntryChart, entry_environment
    from hyperpod_inference_iac.charts.inference_chart import (
        InferenceChart,
        WorkloadServiceAccount,
        parse_model,
        parse_models,
    )
    from hyperpod_inference_iac.charts.inference_endpoint import (
        EnvironmentVariable,
        InferenceEndpointConfig,
        InferenceEndpointSpec,
        KubernetesCustomization,
        ModelInvocationPort,
        ModelVolumeMount,
        PortName,
        RequestLimits,
        Worker,
        WorkerProbes,
    )
    from hyperpod_inference_iac.charts.jumpstart import (
        JumpStartModel,
        JumpStartModelRef,
        JumpStartModelSpec,
        JumpStartServer,
        SageMakerEndpoint,
    )
    from hyperpod_inference_iac.charts.model_cache import ImageCache, ModelCacheConfig, WeightsCache
    from hyperpod_inference_iac.charts.model_source import (
        FsxStorage,
        HuggingFaceModel,
        ModelSourceConfig,
        ModelSourceType,
        S3Storage,
        SecretKeyRef,
    )
    from hyperpod_inference_iac.charts.nvme_cache import (
        AWS_CLI_IMAGE,
        EKS_AL2023_NVME_ROOT,
        HYPERPOD_NVME_ROOT,
        NvmeModelCache,
    )
    from hyperpod_inference_iac.charts.placement import preferred_instance_types
    from hyperpod_inference_iac.charts.plan import (
        IdentityPlan,
        ModelDeployment,
        ModelWorkload,
        NodeGroupPlacement,
        ObjectAccess,
        PlannedGatewayEntry,
        PlatformContext,
        PortableDeployment,
        PortableWorkload,
        Workload,
        WorkloadPlan,
        api_key_secret_name,
        plan_workloads,
    )
    from hyperpod_inference_iac.charts.pod_security import POD_SECURITY_LABELS, PodSecurityLevel, namespace_security
    from hyperpod_inference_iac.charts.portable import (
        PRESETS,
        ApiKeyCaller,
        ModelServerRuntime,
        PortableApiKey,
        PortableModelServer,
        PortableModelServerChart,
        capture_environment,
        capture_prefix_hash,
    )
    from hyperpod_inference_iac.charts.routing import (
        IntelligentRoutingSpec,
        KvCacheSpec,
        L2CacheBackend,
        L2CacheSpec,
        RoutingStrategy,
    )
    from hyperpod_inference_iac.charts.usage_limits import CallerLimit, UsageLimits, UsageStoreRef
    from hyperpod_inference_iac.charts.weights_cache import ModelWeightsCacheConfig, ModelWeightsCacheSpec

__all__ = [
    "AWS_CLI_IMAGE",
    "EKS_AL2023_NVME_ROOT",
    "HYPERPOD_NVME_ROOT",
    "POD_SECURITY_LABELS",
    "PRESETS",
    "ApiKeyCaller",
    "AutoScalingSpec",
    "BufferConfig",
    "CallerLimit",
    "CaptureContentTypeHeader",
    "CaptureMode",
    "CloudWatchTrigger",
    "ConfigMapRef",
    "CustomCertificateConfig",
    "DataCapture",
    "DnsConfig",
    "EnvironmentVariable",
    "FsxStorage",
    "GatewayEntryChart",
    "GatewayEntryOptions",
    "HuggingFaceModel",
    "IdentityPlan",
    "ImageCache",
    "InferenceChart",
    "InferenceEndpointConfig",
    "InferenceEndpointSpec",
    "InferenceGateway",
    "IntelligentRoutingSpec",
    "JumpStartModel",
    "JumpStartModelRef",
    "JumpStartModelSpec",
    "JumpStartServer",
    "JwtAuthentication",
    "KubernetesCustomization",
    "KvCacheSpec",
    "L2CacheBackend",
    "L2CacheSpec",
    "LoadBalancerCapture",
    "LoadBalancerConfig",
    "MetricDimension",
    "MetricType",
    "MetricsConfig",
    "ModelCacheConfig",
    "ModelDeployment",
    "ModelInvocationPort",
    "ModelMetrics",
    "ModelPodCapture",
    "ModelServerRuntime",
    "ModelSourceConfig",
    "ModelSourceType",
    "ModelVolumeMount",
    "ModelWeightsCacheConfig",
    "ModelWeightsCacheSpec",
    "ModelWorkload",
    "NameValue",
    "NodeGroupPlacement",
    "NvmeModelCache",
    "ObjectAccess",
    "PayloadConfig",
    "PlannedGateway",
    "PlannedGatewayEntry",
    "PlatformContext",
    "PodSecurityLevel",
    "PortName",
    "PortableApiKey",
    "PortableDeployment",
    "PortableModelServer",
    "PortableModelServerChart",
    "PortableWorkload",
    "PrometheusTrigger",
    "RequestLimits",
    "RequiredClaim",
    "RoutingAlgorithm",
    "RoutingStrategy",
    "S3Storage",
    "SageMakerEndpoint",
    "SageMakerEndpointCapture",
    "SchedulerOptions",
    "SecretKeyRef",
    "TlsConfig",
    "UsageLimits",
    "UsageStoreRef",
    "WeightsCache",
    "Worker",
    "WorkerProbes",
    "Workload",
    "WorkloadPlan",
    "WorkloadServiceAccount",
    "api_key_secret_name",
    "capture_environment",
    "capture_prefix_hash",
    "entry_environment",
    "namespace_security",
    "parse_model",
    "parse_models",
    "plan_workloads",
    "preferred_instance_types",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals())

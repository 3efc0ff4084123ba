"""``InferenceEndpointConfig`` (``inference.sagemaker.aws.amazon.com/v1``): a model server the
HyperPod Inference Operator deploys from a container image and a model source."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field, deep_merge
from hyperpod_inference_iac.charts.autoscaling import AutoScalingSpec
from hyperpod_inference_iac.charts.capture import DataCapture
from hyperpod_inference_iac.charts.endpoint_blocks import (
    INSTANCE_TYPE_PATTERN,
    ContainerResources,
    DnsConfig,
    LoadBalancerConfig,
    MetricsConfig,
    NameValue,
    TlsConfig,
    check_dns_needs_certificate,
    max_deploy_time_field,
    tls_output_uri,
)
from hyperpod_inference_iac.charts.model_cache import ModelCacheConfig
from hyperpod_inference_iac.charts.model_source import ModelSourceConfig, ModelSourceType
from hyperpod_inference_iac.charts.nvme_cache import HYPERPOD_NVME_ROOT, NvmeModelCache
from hyperpod_inference_iac.charts.routing import IntelligentRoutingSpec, KvCacheSpec
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    PINNED_IMAGE,
    SAGEMAKER_ENDPOINT_NAME,
    SAGEMAKER_MODEL_NAME,
)
from hyperpod_inference_iac.foundation.validation import Problems, join_path

API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
# metadata.annotations' rules (apimachinery ValidateAnnotations): a qualified name, optionally under a DNS prefix.
_ANNOTATION_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_ANNOTATIONS_MAX_BYTES = 256 * 1024
DEFAULT_MODEL_MOUNT_PATH = "/opt/ml/model"


class PortName(enum.StrEnum):
    HTTP = "http"
    GRPC = "grpc"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvironmentVariable(SpecBlock):
    name: str
    value: str | None = None
    value_from: Mapping[str, Any] | None = None  # core/v1 EnvVarSource, e.g. a secretKeyRef


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelInvocationPort(SpecBlock):
    container_port: int = crd_field(code="Worker.ContainerPortOutOfRange", minimum=1, maximum=65535)
    name: PortName | None = crd_field(
        default=None, code="Worker.PortNameInvalid", allowed=PortName
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelVolumeMount(SpecBlock):
    name: str
    mount_path: str | None = None  # None: the CRD default, DEFAULT_MODEL_MOUNT_PATH


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerProbes(SpecBlock):
    """core/v1 Probe mappings, passed through as written (checked against the CRD in tests)."""

    liveness_probe: Mapping[str, Any] | None = None
    readiness_probe: Mapping[str, Any] | None = None
    startup_probe: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestLimits(SpecBlock):
    """Limits the operator's nginx sidecar applies in front of the model server (operator 3.1): at most
    ``max_concurrent_requests`` in flight, ``max_queue_size`` waiting, the rest answered ``overflow_status_code``
    (CRD default 429), so an overloaded replica sheds load instead of timing out every request."""

    max_concurrent_requests: int | None = crd_field(
        default=None, code="Worker.RequestLimitOutOfRange", minimum=1)
    max_queue_size: int | None = crd_field(default=None, code="Worker.RequestLimitOutOfRange", minimum=0)
    overflow_status_code: int | None = crd_field(
        default=None, code="Worker.OverflowStatusOutOfRange", minimum=400, maximum=599,
        hint="an HTTP error status; 429 (Too Many Requests) or 503 tell clients to retry")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Worker(SpecBlock):
    image: str = crd_field(
        code="Worker.ImageNotPinned", pattern=PINNED_IMAGE.pattern, hint="pin a version tag or a digest"
    )
    model_invocation_port: ModelInvocationPort
    model_volume_mount: ModelVolumeMount
    resources: Mapping[str, Any]  # core/v1 ResourceRequirements, e.g. {"limits": {"nvidia.com/gpu": "1"}}
    args: tuple[str, ...] | None = None
    command: tuple[str, ...] | None = None
    environment_variables: tuple[EnvironmentVariable, ...] | None = None
    probes: WorkerProbes | None = None
    request_limits: RequestLimits | None = None

    UNPLACED_AT = ("InferenceEndpointConfig", ("worker",))

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.image.endswith(":latest"):
            problems.add("Worker.ImageNotPinned", join_path(path, "image"), "must not use :latest", self.image)


def check_annotations(annotations: Mapping[str, Any] | None, path: str, problems: Problems) -> None:
    """Kubernetes' rules for annotations: each key a qualified name (prefix <= 253, name <= 63), each value a string,
    all of them together at most 256 KiB."""
    if annotations is None:
        return
    for key, value in annotations.items():
        key_path = join_path(path, str(key))
        prefix, _, name = str(key).rpartition("/")
        if not isinstance(key, str) or not _ANNOTATION_KEY.match(key) or len(prefix) > 253 or len(name) > 63:
            problems.add("Kubernetes.AnnotationInvalid", key_path,
                         "must be an annotation key: a name of at most 63 characters (letters, digits, '-', '_', "
                         "'.'), optionally prefixed by a DNS subdomain and '/' (example.com/team)", key)
        elif not isinstance(value, str):
            problems.add("Kubernetes.AnnotationInvalid", key_path, "must be a string (quote it in YAML)", value)
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > _ANNOTATIONS_MAX_BYTES:
        problems.add("Kubernetes.AnnotationInvalid", path, f"must total at most 256 KiB (got {size} bytes)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class KubernetesCustomization(SpecBlock):
    """``spec.kubernetes``: the pod's identity, extra init containers and volumes, its template's annotations."""

    service_account_name: str | None = crd_field(
        default=None,
        code="Kubernetes.ServiceAccountNameInvalid",
        pattern=DNS1123_SUBDOMAIN.pattern,
        max_length=253,
    )
    init_containers: tuple[Mapping[str, Any], ...] | None = None  # core/v1 Container
    volumes: tuple[Mapping[str, Any], ...] | None = None  # core/v1 Volume
    # Operator 3.6 (add-on v2.0.0-eksbuild.2 here): annotations on the model pods' template (charts/crd_overlays/).
    pod_template_annotations: Mapping[str, str] | None = None

    UNPLACED_AT = ("InferenceEndpointConfig", ("kubernetes",))

    def check_rules(self, path: str, problems: Problems) -> None:
        check_annotations(self.pod_template_annotations, join_path(path, "podTemplateAnnotations"), problems)


@dataclasses.dataclass(frozen=True, kw_only=True)
class InferenceEndpointSpec(SpecBlock):
    """The typed part of ``spec``; everything else goes through ``extra_spec`` or a JsonPatch."""

    model_name: str = crd_field(
        code="InferenceEndpoint.ModelNameInvalid", pattern=SAGEMAKER_MODEL_NAME.pattern, max_length=63
    )
    model_source_config: ModelSourceConfig
    worker: Worker
    endpoint_name: str | None = crd_field(
        default=None,
        code="InferenceEndpoint.EndpointNameInvalid",
        pattern=SAGEMAKER_ENDPOINT_NAME.pattern,
        max_length=63,
    )
    instance_type: str | None = crd_field(
        default=None, code="InferenceEndpoint.InstanceTypeInvalid", pattern=INSTANCE_TYPE_PATTERN
    )
    instance_types: tuple[str, ...] | None = crd_field(
        default=None,
        code="InferenceEndpoint.InstanceTypeInvalid",
        item_pattern=INSTANCE_TYPE_PATTERN,
        min_items=1,
    )
    node_affinity: Mapping[str, Any] | None = None  # core/v1 NodeAffinity
    replicas: int | None = crd_field(default=None, code="InferenceEndpoint.ReplicasOutOfRange", minimum=0)
    invocation_endpoint: str | None = None
    kubernetes: KubernetesCustomization | None = None
    data_capture: DataCapture | None = None
    tls_config: TlsConfig | None = None
    dns_config: DnsConfig | None = None
    load_balancer: LoadBalancerConfig | None = None
    metrics: MetricsConfig | None = None
    auto_scaling_spec: AutoScalingSpec | None = None
    tags: tuple[NameValue, ...] | None = None
    model_cache_config: ModelCacheConfig | None = None
    kv_cache_spec: KvCacheSpec | None = None
    intelligent_routing_spec: IntelligentRoutingSpec | None = None
    max_deploy_time_in_seconds: int | None = max_deploy_time_field("InferenceEndpoint.MaxDeployTimeOutOfRange")
    # Operator 3.4 (add-on v1.5.0-eksbuild.1): the operator's own containers' resources (charts/crd_overlays/).
    metrics_sidecar_resources: ContainerResources | None = None
    metrics_collector_resources: ContainerResources | None = None
    s3_uploader_resources: ContainerResources | None = None

    UNPLACED_AT = ("InferenceEndpointConfig", ())

    def check_rules(self, path: str, problems: Problems) -> None:
        placements = [self.instance_type, self.instance_types, self.node_affinity]
        if sum(placement is not None for placement in placements) != 1:
            problems.add(
                "InferenceEndpoint.PlacementNotExactlyOne",
                path,
                "give exactly one of instanceType, instanceTypes or nodeAffinity (mutually exclusive)",
            )
        check_dns_needs_certificate(self.dns_config, self.tls_config, path, problems)
        if self.data_capture is not None:
            self.data_capture.check_destinations(
                join_path(path, "dataCapture"),
                problems,
                has_endpoint_name=bool(self.endpoint_name),
                tls_output_s3_uri=tls_output_uri(self.tls_config),
            )
        if self.model_source_config.model_source_type == ModelSourceType.KUBERNETES_VOLUME:
            self._check_model_volume_declared(path, problems)
            if self.model_cache_config is not None and self.model_cache_config.caches_weights:
                problems.add("ModelCache.WeightsCacheNeedsRemoteSource",
                             join_path(path, "modelCacheConfig.weightsCache"),
                             "caches weights from a remote source (s3, fsx, JumpStart); with modelSourceType "
                             "kubernetesVolume they are already on the node: remove weightsCache (imageCache still "
                             "helps) or use an s3/fsx source")
        if self.auto_scaling_spec is not None:
            self.auto_scaling_spec.check_replicas(self.replicas, path, problems)

    def _check_model_volume_declared(self, path: str, problems: Problems) -> None:
        volumes = self.kubernetes.volumes if self.kubernetes is not None else None
        names = {volume.get("name") for volume in volumes or ()}
        wanted = self.worker.model_volume_mount.name
        if wanted not in names:
            problems.add(
                "ModelSource.VolumeNotDeclared",
                join_path(path, "worker.modelVolumeMount.name"),
                "with modelSourceType kubernetesVolume the mount must name a volume in kubernetes.volumes "
                f"(declared: {', '.join(sorted(str(n) for n in names)) or 'none'})",
                wanted,
            )

    @property
    def service_account_name(self) -> str | None:
        return self.kubernetes.service_account_name if self.kubernetes is not None else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class InferenceEndpointConfig(SpecBlock):
    """One ``InferenceEndpointConfig`` custom resource.

    ``nvme_cache`` adds a node-local NVMe hostPath volume and its S3 fallback init container to
    ``spec.kubernetes`` (see :mod:`charts.nvme_cache`); the spec must then use the
    ``kubernetesVolume`` source, mount the cache's volume and name a service account.
    ``extra_spec`` is deep-merged into the emitted spec (extra wins, lists are replaced) for CRD
    fields this class does not type (``kvCacheSpec``, ``pdSpec``, ``modelCacheConfig``, ...).
    """

    KIND: ClassVar[str] = "InferenceEndpointConfig"

    name: str = crd_field(
        code="InferenceEndpoint.NameInvalid",
        pattern=DNS1123_LABEL.pattern,
        max_length=63,
        hint="a DNS-1123 label (lowercase letters, digits, '-'); the operator names objects after it",
    )
    spec: InferenceEndpointSpec
    nvme_cache: NvmeModelCache | None = None
    extra_spec: Mapping[str, Any] | None = None

    def effective_spec(self) -> InferenceEndpointSpec:
        """The spec plus the NVMe cache's volumes and loader init container (when there is a cache)."""
        if self.nvme_cache is None:
            return self.spec
        kubernetes = self.spec.kubernetes or KubernetesCustomization()
        kubernetes = dataclasses.replace(
            kubernetes,
            volumes=(*(kubernetes.volumes or ()), *self.nvme_cache.volumes(HYPERPOD_NVME_ROOT)),
            init_containers=(*(kubernetes.init_containers or ()), self.nvme_cache.init_container()),
        )
        return dataclasses.replace(self.spec, kubernetes=kubernetes)

    def validate(self, path: str, problems: Problems) -> None:
        # Validate what will be emitted, so rules see the NVMe volume the cache adds.
        expanded = dataclasses.replace(self, spec=self.effective_spec())
        SpecBlock.validate(expanded, path, problems)
        if self.nvme_cache is not None:
            self._check_spec_agrees_with_nvme_cache(self.nvme_cache, path, problems)

    def _check_spec_agrees_with_nvme_cache(self, cache: NvmeModelCache, path: str, problems: Problems) -> None:
        """The cache rewrites the model source and the mount; say so rather than override silently."""
        source_type = self.spec.model_source_config.model_source_type
        if source_type != ModelSourceType.KUBERNETES_VOLUME:
            problems.add(
                "NvmeCache.SourceTypeMismatch",
                join_path(path, "spec.modelSourceConfig.modelSourceType"),
                "must be kubernetesVolume when nvmeCache is set (the weights come from the NVMe volume)",
                source_type,
            )
        mount_name = self.spec.worker.model_volume_mount.name
        if mount_name != cache.volume_name:
            problems.add(
                "NvmeCache.MountNameMismatch",
                join_path(path, "spec.worker.modelVolumeMount.name"),
                f"must name the nvmeCache volume {cache.volume_name!r} (or set nvmeCache.volumeName)",
                mount_name,
            )

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.nvme_cache is not None and self.spec.service_account_name is None:
            problems.add(
                "NvmeCache.ServiceAccountMissing",
                join_path(path, "spec.kubernetes.serviceAccountName"),
                "the S3 fallback runs under the workload's own IRSA role: name its service account",
            )

    @property
    def service_account_name(self) -> str | None:
        return self.spec.service_account_name

    def manifest(self, *, namespace: str) -> dict[str, Any]:
        spec = self.effective_spec().to_dict()
        if self.extra_spec:
            spec = deep_merge(spec, self.extra_spec)
        return {
            "apiVersion": API_VERSION,
            "kind": self.KIND,
            "metadata": {"name": self.name, "namespace": namespace},
            "spec": spec,
        }

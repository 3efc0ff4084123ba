"""A model server for EKS clusters without the HyperPod Inference Operator.

One Deployment (vLLM, TGI or SGLang), its own ServiceAccount (IRSA), a Service with a stable DNS
name (ExternalDNS), the node-local NVMe cache with the S3 fallback of :mod:`charts.nvme_cache`,
and a capture sidecar that writes the operator's Tier-3 layout ``{s3Uri}/{hash}/pod/``.

cdk8s-plus builds the Deployment, Service and ServiceAccount. The one thing it cannot express,
extended resources (``nvidia.com/gpu``), is added to the synthesized Deployment (``to_json``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import cdk8s
import cdk8s_plus_34 as kplus
from constructs import Construct

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.charts.capture import BufferConfig, CaptureMode, DataCapture, ModelPodCapture, PayloadConfig
from hyperpod_inference_iac.charts.inference_endpoint import DEFAULT_MODEL_MOUNT_PATH
from hyperpod_inference_iac.charts.nvme_cache import EKS_AL2023_NVME_ROOT, NvmeModelCache
from hyperpod_inference_iac.patterns import DNS1123_LABEL, DOMAIN_NAME, PINNED_IMAGE
from hyperpod_inference_iac.platform_values import PlatformValue, PlatformValues
from hyperpod_inference_iac.validation import Problems, join_path

if TYPE_CHECKING:
    from hyperpod_inference_iac.charts.plan import PortableWorkload

MODEL_PORT = 8000
SIDECAR_LISTEN_PORT = 8080
SIDECAR_METRICS_PORT = 9090
SERVICE_PORT = 80
_CPU_PATTERN = r"^([1-9][0-9]*m|[0-9]+(\.[0-9]+)?)$"
_MEMORY_PATTERN = r"^[1-9][0-9]*(Mi|Gi)$"
EXTERNAL_DNS_HOSTNAME = "external-dns.alpha.kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
MODEL_SERVER_CONTAINER = "model-server"


class ModelServerRuntime(enum.StrEnum):
    VLLM = "vllm"
    TGI = "tgi"
    SGLANG = "sglang"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelServerPreset:
    """How one runtime is started; every server listens on MODEL_PORT and answers /health."""

    image: str
    command: tuple[str, ...] | None
    model_flag: str
    served_name_flag: str
    host_flag: str
    tensor_parallel_flag: str
    health_path: str = "/health"

    def args(self, *, model_dir: str, served_name: str, gpu_count: int) -> list[str]:
        return [
            self.model_flag, model_dir,
            self.served_name_flag, served_name,
            self.host_flag, "0.0.0.0",
            "--port", str(MODEL_PORT),
            self.tensor_parallel_flag, str(gpu_count),
        ]  # fmt: skip


# Pinned tags: upgrading a runtime is a reviewed change with its own snapshot diff.
PRESETS: Mapping[ModelServerRuntime, ModelServerPreset] = {
    ModelServerRuntime.VLLM: ModelServerPreset(
        image="vllm/vllm-openai:v0.11.0",
        command=None,  # the image's entrypoint is the OpenAI-compatible server
        model_flag="--model",
        served_name_flag="--served-model-name",
        host_flag="--host",
        tensor_parallel_flag="--tensor-parallel-size",
    ),
    ModelServerRuntime.TGI: ModelServerPreset(
        image="ghcr.io/huggingface/text-generation-inference:3.3.6",
        command=None,  # the image's entrypoint is text-generation-launcher
        model_flag="--model-id",
        served_name_flag="--served-model-name",
        host_flag="--hostname",
        tensor_parallel_flag="--num-shard",
    ),
    ModelServerRuntime.SGLANG: ModelServerPreset(
        image="lmsysorg/sglang:v0.5.5",
        command=("python3", "-m", "sglang.launch_server"),
        model_flag="--model-path",
        served_name_flag="--served-model-name",
        host_flag="--host",
        tensor_parallel_flag="--tp-size",
    ),
}


def capture_prefix_hash(*, cluster_name: str, namespace: str, name: str, kind: str = "Deployment") -> str:
    """The ``{hash}`` of ``{s3Uri}/{hash}/pod/`` for a workload we deploy ourselves.

    ``sha256("<cluster>/<namespace>/<kind>/<name>")``, first 16 hex characters. The operator's own
    algorithm is not public, so this only copies its shape; readers find the tier from the ``pod``
    path segment, never by recomputing a hash. None of the parts can contain "/", so the joined
    string is unambiguous.
    """
    digest = hashlib.sha256(f"{cluster_name}/{namespace}/{kind}/{name}".encode()).hexdigest()
    return digest[:16]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PortableModelServer(SpecBlock):
    """One model server; the YAML form uses the same names in camelCase.

    ``data_capture`` is the operator's ``dataCapture`` block; only its ``modelPod`` tier applies
    here (there is no SageMaker endpoint and no operator-managed ALB).
    """

    name: str = crd_field(code="Portable.NameInvalid", pattern=DNS1123_LABEL.pattern, max_length=63)
    runtime: ModelServerRuntime = crd_field(
        code="Portable.RuntimeInvalid", allowed=ModelServerRuntime
    )
    model_cache: NvmeModelCache
    image: str | None = crd_field(
        default=None, code="Portable.ImageNotPinned", pattern=PINNED_IMAGE.pattern, hint="pin a tag or digest"
    )
    extra_args: tuple[str, ...] = ()
    gpu_count: int = crd_field(default=1, code="Portable.GpuCountOutOfRange", minimum=1, maximum=64)
    cpu: str = crd_field(default="8", code="Portable.QuantityInvalid", pattern=_CPU_PATTERN, hint="e.g. 8 or 500m")
    memory: str = crd_field(
        default="64Gi", code="Portable.QuantityInvalid", pattern=_MEMORY_PATTERN, hint="e.g. 64Gi or 512Mi"
    )
    # vLLM/SGLang tensor parallelism exchanges data through /dev/shm; the default 64 MiB is too small.
    shared_memory: str = crd_field(
        default="16Gi", code="Portable.QuantityInvalid", pattern=_MEMORY_PATTERN, hint="e.g. 16Gi"
    )
    replicas: int = crd_field(default=1, code="Portable.ReplicasOutOfRange", minimum=0)
    hostname: str | None = crd_field(
        default=None, code="Portable.HostnameInvalid", pattern=DOMAIN_NAME.pattern, max_length=253
    )
    node_labels: Mapping[str, str] | None = None
    data_capture: DataCapture | None = None
    # Long enough for in-flight generations to finish and the sidecar to flush its last batch.
    termination_grace_period_seconds: int = crd_field(
        default=120, code="Portable.GracePeriodOutOfRange", minimum=1, maximum=3600
    )
    # Keeps serving while the Service's endpoints drop this pod, so no request hits a closed port.
    pre_stop_sleep_seconds: int = crd_field(default=15, code="Portable.PreStopOutOfRange", minimum=0, maximum=600)

    @property
    def preset(self) -> ModelServerPreset:
        return PRESETS[ModelServerRuntime(self.runtime)]

    @property
    def pod_capture(self) -> ModelPodCapture | None:
        tier = self.data_capture.model_pod if self.data_capture is not None else None
        return tier if tier is not None and tier.enabled else None

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.image is not None and self.image.endswith(":latest"):
            problems.add("Portable.ImageNotPinned", join_path(path, "image"), "must not use :latest", self.image)
        if self.pre_stop_sleep_seconds >= self.termination_grace_period_seconds:
            problems.add(
                "Portable.GracePeriodOutOfRange",
                join_path(path, "terminationGracePeriodSeconds"),
                "must be longer than preStopSleepSeconds, or the server is killed before it drains",
                self.termination_grace_period_seconds,
            )
        if self.data_capture is None:
            return
        capture_path = join_path(path, "dataCapture")
        other_tiers = {
            "sagemakerEndpoint": self.data_capture.sagemaker_endpoint,
            "loadBalancer": self.data_capture.load_balancer,
        }
        for tier, block in other_tiers.items():
            if block is not None:
                problems.add(
                    "Portable.TierNotSupported",
                    join_path(capture_path, tier),
                    "only the modelPod tier exists without the operator; remove this tier",
                )
        if self.pod_capture is not None and self.data_capture.s3_uri is None:
            problems.add(
                "DataCapture.NoDestination",
                join_path(capture_path, "s3Uri"),
                "the capture sidecar needs a destination: set dataCapture.s3Uri (the platform has no capture bucket "
                "to default to)",
            )


class PortableModelServerChart(cdk8s.Chart):
    """ServiceAccount, Deployment and Service for one planned portable model server.

    :param workload: the server as planned (:class:`~hyperpod_inference_iac.charts.plan.PortableWorkload`):
        its settings, its identity, where its sidecar captures and where its loader reads weights.
    :param namespace: the namespace of the Deployment.
    :param values: resolves the platform values the plan refers to (the capture bucket, the sidecar image).
    :param create_namespace: also emit the Namespace. @default False

    Children: ``.service_account``, ``.deployment``, ``.service`` (cdk8s-plus objects).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        workload: PortableWorkload,
        namespace: str,
        values: PlatformValues,
        create_namespace: bool = False,
    ) -> None:
        server = workload.server
        super().__init__(scope, id, disable_resource_name_hashes=True)
        self.server = server
        self.workload = workload
        self._values = values
        self.namespace_object: cdk8s.ApiObject | None = None
        if create_namespace:
            self.namespace_object = cdk8s.ApiObject(
                self, "namespace", api_version="v1", kind="Namespace", metadata={"name": namespace}
            )
        labels = {"app.kubernetes.io/name": server.name, "app.kubernetes.io/component": "model-server"}
        self.service_account = kplus.ServiceAccount(
            self,
            "service-account",
            metadata=cdk8s.ApiObjectMetadata(
                name=workload.identity.service_account,
                namespace=namespace,
                annotations={"eks.amazonaws.com/role-arn": workload.identity.role_arn},
            ),
        )
        self.deployment = self._deployment(namespace, labels)
        self._add_model_server()
        capture = server.pod_capture
        if capture is not None and workload.capture is not None:
            key = workload.capture_key
            self._add_capture_sidecar(capture, values.resolve(workload.capture),
                                      values.resolve(key) if key is not None else None)
        self.service = self._service(namespace, labels, capture_enabled=workload.capture is not None)

    def _deployment(self, namespace: str, labels: dict[str, str]) -> kplus.Deployment:
        server = self.server
        deployment = kplus.Deployment(
            self,
            "deployment",
            metadata=cdk8s.ApiObjectMetadata(name=server.name, namespace=namespace, labels=labels),
            pod_metadata=cdk8s.ApiObjectMetadata(labels=labels),
            select=False,
            replicas=server.replicas,
            service_account=self.service_account,
            termination_grace_period=cdk8s.Duration.seconds(server.termination_grace_period_seconds),
            # Model servers in these images run as root; the sidecar sets its own non-root user.
            security_context=kplus.PodSecurityContextProps(ensure_non_root=False),
        )
        deployment.select(kplus.LabelSelector.of(labels=labels))
        deployment.scheduling.tolerate(
            kplus.Node.tainted(kplus.NodeTaintQuery.exists(GPU_RESOURCE, effect=kplus.TaintEffect.NO_SCHEDULE))
        )
        for key, value in sorted((server.node_labels or {}).items()):
            deployment.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.is_(key, value)))
        return deployment

    def _add_model_server(self) -> None:
        server, preset = self.server, self.server.preset
        cache = server.model_cache
        weights = kplus.Volume.from_host_path(
            self,
            "model-weights",
            cache.volume_name,
            path=cache.host_path(EKS_AL2023_NVME_ROOT),
            type=kplus.HostPathVolumeType.DIRECTORY_OR_CREATE,
        )
        loader = cache.init_container()
        weights_mount, scratch_mount = loader["volumeMounts"]
        scratch = kplus.Volume.from_empty_dir(self, "loader-scratch", scratch_mount["name"],
                                              size_limit=cdk8s.Size.mebibytes(256))
        self.deployment.add_init_container(
            name=loader["name"],
            image=loader["image"],
            command=loader["command"],
            env_variables={env["name"]: kplus.EnvValue.from_value(env["value"]) for env in loader["env"]},
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            # Root writes into the root-owned hostPath directory; no capability is needed for that.
            security_context=kplus.ContainerSecurityContextProps(
                ensure_non_root=False,
                read_only_root_filesystem=True,
                allow_privilege_escalation=False,
                capabilities=kplus.ContainerSecutiryContextCapabilities(drop=[kplus.Capability.ALL]),
            ),
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=kplus.Cpu.units(1)),
                memory=kplus.MemoryResources(request=cdk8s.Size.gibibytes(1), limit=cdk8s.Size.gibibytes(2)),
            ),
            volume_mounts=[kplus.VolumeMount(path=weights_mount["mountPath"], volume=weights),
                           kplus.VolumeMount(path=scratch_mount["mountPath"], volume=scratch)],
        )
        health = preset.health_path
        container = self.deployment.add_container(
            name=MODEL_SERVER_CONTAINER,
            image=server.image or preset.image,
            command=list(preset.command) if preset.command else None,
            args=preset.args(model_dir=DEFAULT_MODEL_MOUNT_PATH, served_name=server.name, gpu_count=server.gpu_count)
            + list(server.extra_args),
            ports=[kplus.ContainerPort(number=MODEL_PORT, name="http")],
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            # Loading tens of GB of weights takes minutes: the startup probe allows 30 min before
            # liveness takes over, so a slow cold start is not mistaken for a hung server.
            startup=kplus.Probe.from_http_get(
                health, port=MODEL_PORT, period_seconds=cdk8s.Duration.seconds(10), failure_threshold=180
            ),
            readiness=kplus.Probe.from_http_get(health, port=MODEL_PORT, period_seconds=cdk8s.Duration.seconds(5)),
            liveness=kplus.Probe.from_http_get(
                health, port=MODEL_PORT, period_seconds=cdk8s.Duration.seconds(10), failure_threshold=6
            ),
            lifecycle=kplus.ContainerLifecycle(
                pre_stop=kplus.Handler.from_command(["sleep", str(server.pre_stop_sleep_seconds)])
            ),
            security_context=kplus.ContainerSecurityContextProps(
                ensure_non_root=False,
                read_only_root_filesystem=False,  # runtimes write compile caches under $HOME and /tmp
                allow_privilege_escalation=False,
                capabilities=kplus.ContainerSecutiryContextCapabilities(drop=[kplus.Capability.ALL]),
            ),
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=_cpu(server.cpu)),
                memory=kplus.MemoryResources(request=_size(server.memory), limit=_size(server.memory)),
            ),
        )
        container.mount(DEFAULT_MODEL_MOUNT_PATH, weights, read_only=True)
        shm = kplus.Volume.from_empty_dir(
            self, "shm", "shm", medium=kplus.EmptyDirMedium.MEMORY, size_limit=_size(server.shared_memory)
        )
        container.mount("/dev/shm", shm)

    def to_json(self) -> list[Any]:
        """The synthesized manifests, with the GPU count on the model server container.

        cdk8s-plus has no extended resources, and a JsonPatch into ``containers/0`` is dropped
        without an error (cdk8s applies patches before it resolves cdk8s-plus's lazily built
        container list), so the count is added to the synthesized Deployment here.
        """
        manifests: list[Any] = super().to_json()
        for manifest in manifests:
            if manifest["kind"] != "Deployment":
                continue
            for container in manifest["spec"]["template"]["spec"]["containers"]:
                if container["name"] == MODEL_SERVER_CONTAINER:
                    for section in ("limits", "requests"):
                        container["resources"].setdefault(section, {})[GPU_RESOURCE] = str(self.server.gpu_count)
        return manifests

    def _add_capture_sidecar(self, capture: ModelPodCapture, capture_s3_uri: str, kms_key_id: str | None) -> None:
        env = capture_environment(capture, capture_s3_uri, kms_key_id)
        scratch = kplus.Volume.from_empty_dir(self, "capture-scratch", "capture-scratch")
        sidecar = self.deployment.add_init_container(
            name="capture-sidecar",
            image=self._values.get(PlatformValue.SIDECAR_IMAGE),
            # A native sidecar (init container that keeps running): it starts before the model
            # server and stops after it, so the last requests are captured and flushed.
            restart_policy=kplus.ContainerRestartPolicy.ALWAYS,
            ports=[
                kplus.ContainerPort(number=SIDECAR_LISTEN_PORT, name="capture"),
                kplus.ContainerPort(number=SIDECAR_METRICS_PORT, name="metrics"),
            ],
            env_variables={name: kplus.EnvValue.from_value(value) for name, value in env.items()},
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            # /healthz answers 503 while the sidecar drains, taking the pod out of rotation.
            readiness=kplus.Probe.from_http_get(
                "/healthz", port=SIDECAR_METRICS_PORT, period_seconds=cdk8s.Duration.seconds(5)
            ),
            security_context=kplus.ContainerSecurityContextProps(
                ensure_non_root=True,
                user=65532,
                group=65532,
                read_only_root_filesystem=True,
                allow_privilege_escalation=False,
                capabilities=kplus.ContainerSecutiryContextCapabilities(drop=[kplus.Capability.ALL]),
            ),
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=kplus.Cpu.millis(250), limit=kplus.Cpu.units(1)),
                memory=kplus.MemoryResources(request=cdk8s.Size.mebibytes(256), limit=cdk8s.Size.mebibytes(512)),
            ),
        )
        sidecar.mount("/tmp", scratch)  # buffered batches; the root filesystem stays read-only

    def _service(self, namespace: str, labels: dict[str, str], *, capture_enabled: bool) -> kplus.Service:
        server = self.server
        annotations: dict[str, str] = {}
        service_type = kplus.ServiceType.CLUSTER_IP
        if server.hostname is not None:
            # ExternalDNS publishes the name for the internal NLB the AWS Load Balancer Controller makes.
            annotations = {
                EXTERNAL_DNS_HOSTNAME: server.hostname,
                "service.beta.kubernetes.io/aws-load-balancer-type": "external",
                "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
                "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
            }
            service_type = kplus.ServiceType.LOAD_BALANCER
        # With capture on, clients reach the sidecar, which forwards to the model server.
        target = SIDECAR_LISTEN_PORT if capture_enabled else MODEL_PORT
        ports = [kplus.ServicePort(name="http", port=SERVICE_PORT, target_port=target)]
        if capture_enabled:
            ports.append(kplus.ServicePort(name="metrics", port=SIDECAR_METRICS_PORT, target_port=SIDECAR_METRICS_PORT))
        service = kplus.Service(
            self,
            "service",
            metadata=cdk8s.ApiObjectMetadata(name=server.name, namespace=namespace, annotations=annotations),
            type=service_type,
            ports=ports,
        )
        for key, value in labels.items():
            service.select_label(key, value)
        return service


def capture_environment(capture: ModelPodCapture, capture_s3_uri: str, kms_key_id: str | None = None) -> dict[str, str]:
    """The sidecar's settings: the operator's modelPod knobs, with the operator's defaults. ``capture_s3_uri``
    and ``kms_key_id`` are the planned ones (the same the sidecar's role is granted)."""
    modes = capture.capture_options or (CaptureMode.INPUT, CaptureMode.OUTPUT)
    buffer = capture.buffer_config or BufferConfig()
    payload = capture.payload_config or PayloadConfig()
    env = {
        "UPSTREAM_URL": f"http://127.0.0.1:{MODEL_PORT}",
        "LISTEN_PORT": str(SIDECAR_LISTEN_PORT),
        "METRICS_PORT": str(SIDECAR_METRICS_PORT),
        "CAPTURE_S3_URI": capture_s3_uri,
        "SAMPLING_PERCENTAGE": str(_or(capture.initial_sampling_percentage, 100)),
        "CAPTURE_MODES": ",".join(str(mode) for mode in modes),
        "BATCH_SIZE": str(_or(buffer.batch_size, 10)),
        "FLUSH_INTERVAL_SECONDS": str(_or(buffer.flush_interval_seconds, 60)),
        "MAX_PAYLOAD_SIZE_KB": str(_or(payload.max_payload_size_kb, 0)),
        # Batches that cannot reach S3 wait on the pod's scratch volume (bounded) instead of being dropped.
        "SPOOL_DIR": "/tmp/capture-spool",
        "SPOOL_MAX_BYTES": str(256 * 1024 * 1024),
    }
    if kms_key_id is not None:
        env["KMS_KEY_ID"] = kms_key_id
    # Unset lists keep the sidecar's own defaults, which also cover JSON Lines and event streams.
    header = capture.capture_content_type_header
    if header is not None and header.json_content_types:
        env["JSON_CONTENT_TYPES"] = ",".join(header.json_content_types)
    if header is not None and header.csv_content_types:
        env["CSV_CONTENT_TYPES"] = ",".join(header.csv_content_types)
    return env


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _cpu(quantity: str) -> kplus.Cpu:
    if quantity.endswith("m"):
        return kplus.Cpu.millis(int(quantity[:-1]))
    return kplus.Cpu.units(float(quantity))


def _size(quantity: str) -> cdk8s.Size:
    amount, unit = int(quantity[:-2]), quantity[-2:]
    return cdk8s.Size.gibibytes(amount) if unit == "Gi" else cdk8s.Size.mebibytes(amount)

"""A model server for EKS clusters without the HyperPod Inference Operator.

One Deployment (vLLM, TGI or SGLang), its own ServiceAccount (IRSA), a Service with a stable DNS
name (ExternalDNS), the node-local NVMe cache with the S3 fallback of :mod:`charts.nvme_cache`,
and a capture sidecar that writes the operator's Tier-3 layout ``{s3Uri}/{hash}/pod/``.

With capture on, nothing reaches the model server except through the sidecar: the model server
listens on 127.0.0.1 only, its probes ask the sidecar (``/upstream/health``), the Service targets
the sidecar and the server's NetworkPolicy admits the sidecar's port, never the model's. With a
hostname, the Service is an internal NLB with a TLS listener on the platform certificate, open to
the allowed source ranges only; an optional API key (Secrets Manager, synced by External Secrets)
is checked by the sidecar (from a mounted file it re-reads, so a rotated key needs no restart), or without
capture by the model server.

cdk8s-plus builds the Deployment, Service and ServiceAccount. What it cannot express (extended
resources ``nvidia.com/gpu``, the pod's seccomp profile, ``allocateLoadBalancerNodePorts``) is
added to the synthesized manifests (``to_json``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import cdk8s
import cdk8s_plus_34 as kplus
from constructs import Construct

from hyperpod_inference_iac.charts._spec_fields import (
    SpecBlock,
    crd_field,
)
from hyperpod_inference_iac.charts.capture import (
    BufferConfig,
    CaptureMode,
    DataCapture,
    ModelPodCapture,
    PayloadConfig,
)
from hyperpod_inference_iac.charts.inference_endpoint import (
    DEFAULT_MODEL_MOUNT_PATH,
)
from hyperpod_inference_iac.charts.network_policies import (
    WORKLOAD_LABEL,
    aws_api_egress,
    tcp,
)
from hyperpod_inference_iac.charts.nvme_cache import (
    EKS_AL2023_NVME_ROOT,
    LOADER_CONTAINER,
    NvmeModelCache,
)
from hyperpod_inference_iac.charts.pod_security import (
    namespace_metadata,
    namespace_security,
)
from hyperpod_inference_iac.charts.usage_limits import (
    UsageLimits,
    usage_limits_environment,
)
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
    DOMAIN_NAME,
    IAM_ROLE_ARN,
    PINNED_IMAGE,
)
from hyperpod_inference_iac.foundation.platform_values import (
    PlatformValue,
    PlatformValues,
)
from hyperpod_inference_iac.foundation.validation import (
    Problems,
    is_unresolved,
    join_path,
)

if TYPE_CHECKING:
    from hyperpod_inference_iac.charts.plan import PortableWorkload

MODEL_PORT = 8000
SIDECAR_LISTEN_PORT = 8080
SIDECAR_METRICS_PORT = 9090
SERVICE_PORT = 80  # in-cluster HTTP (ClusterIP Services, no hostname)
TLS_SERVICE_PORT = 443  # the NLB's TLS listener (hostname)
# TLS 1.3 and 1.2 only, forward-secret ciphers (Elastic Load Balancing's predefined policy).
TLS_NEGOTIATION_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
UPSTREAM_HEALTH_PATH = "/upstream/health"  # the sidecar's view of the model server's health
# The sidecar's check must answer before the kubelet's probe gives up on it.
UPSTREAM_HEALTH_TIMEOUT_SECONDS = 2
PROBE_TIMEOUT_SECONDS = 3
SIDECAR_MEMORY_LIMIT_MIB = 512
# The sidecar's worst case besides the body bytes it holds (docs/capture-sidecar.md, *Memory bounds*):
# interpreter and pools 70, encoded upload copies 87, the one large record's encoder 96, encoding
# slices 34, socket buffers 48 (MiB).
SIDECAR_FIXED_MEMORY_MIB = 335
API_KEY_SECRET_KEY = "api-key"
# The synced Secret's list of accepted keys (caller_id:key lines: current, pending, previous), read by the sidecar.
API_KEYS_FILE_SECRET_KEY = "api-keys"
API_KEYS_MOUNT_PATH = "/etc/capture-sidecar/api-keys"
MODEL_SERVER_HOME = "/home/model-server"  # caches of every runtime go under $HOME (emptyDir)
MODEL_SERVER_HOME_GIB = 20  # compile caches (torch.compile, Triton, FlashInfer JIT, CUDA) are a few GB
MODEL_SERVER_TMP_GIB = 10
_CPU_PATTERN = r"^([1-9][0-9]*m|[0-9]+(\.[0-9]+)?)$"
_MEMORY_PATTERN = r"^[1-9][0-9]*(Mi|Gi)$"
EXTERNAL_DNS_HOSTNAME = "external-dns.alpha.kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
MODEL_SERVER_CONTAINER = "model-server"
CAPTURE_SIDECAR_CONTAINER = "capture-sidecar"
PORTABLE_WORKLOAD = "portable-model-server"  # its pods' WORKLOAD_LABEL


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
    # The environment variable that holds the API key. With ``api_key_flag`` the runtime reads only that
    # flag, and the flag gets the variable through Kubernetes' $(VAR) expansion.
    api_key_env: str
    api_key_flag: str | None = None
    health_path: str = "/health"

    def args(self, *, model_dir: str, served_name: str, gpu_count: int, host: str) -> list[str]:
        return [
            self.model_flag, model_dir,
            self.served_name_flag, served_name,
            self.host_flag, host,
            "--port", str(MODEL_PORT),
            self.tensor_parallel_flag, str(gpu_count),
        ]  # fmt: skip

    def api_key_args(self) -> list[str]:
        return [self.api_key_flag, f"$({self.api_key_env})"] if self.api_key_flag else []


# Pinned tags: upgrading a runtime is a reviewed change with its own snapshot diff.
PRESETS: Mapping[ModelServerRuntime, ModelServerPreset] = {
    ModelServerRuntime.VLLM: ModelServerPreset(
        image="vllm/vllm-openai:v0.11.0",
        command=None,  # the image's entrypoint is the OpenAI-compatible server
        model_flag="--model",
        served_name_flag="--served-model-name",
        host_flag="--host",
        tensor_parallel_flag="--tensor-parallel-size",
        api_key_env="VLLM_API_KEY",
    ),
    ModelServerRuntime.TGI: ModelServerPreset(
        image="ghcr.io/huggingface/text-generation-inference:3.3.6",
        command=None,  # the image's entrypoint is text-generation-launcher
        model_flag="--model-id",
        served_name_flag="--served-model-name",
        host_flag="--hostname",
        tensor_parallel_flag="--num-shard",
        api_key_env="API_KEY",  # text-generation-launcher --api-key [env: API_KEY]
    ),
    ModelServerRuntime.SGLANG: ModelServerPreset(
        image="lmsysorg/sglang:v0.5.5",
        command=("python3", "-m", "sglang.launch_server"),
        model_flag="--model-path",
        served_name_flag="--served-model-name",
        host_flag="--host",
        tensor_parallel_flag="--tp-size",
        api_key_env="API_KEY",
        api_key_flag="--api-key",  # no environment variable of its own: the key is on the command line
    ),
}


def sidecar_inflight_body_bytes(memory_limit_mib: int = SIDECAR_MEMORY_LIMIT_MIB) -> int:
    """``MAX_INFLIGHT_BODY_BYTES`` for a sidecar with this memory limit: half of what its fixed worst case
    leaves (88 MiB of 512 MiB), the other half is headroom."""
    return (memory_limit_mib - SIDECAR_FIXED_MEMORY_MIB) // 2 * 1024 * 1024


MAX_REQUEST_BODY_KB = sidecar_inflight_body_bytes() // 1024  # a buffered request body must fit the bound


@dataclasses.dataclass(frozen=True, kw_only=True)
class PortableApiKey(SpecBlock):
    """Request authentication for one server: a random key generated in Secrets Manager and synced into the
    namespace (``ApiKeySync``); clients send it as ``Authorization: Bearer <key>``.

    YAML: ``apiKey: {enabled: true, clientRoleArns: [arn:aws:iam::111122223333:role/chat-frontend]}``. The client
    roles may read the key (``secretsmanager:GetSecretValue``); nobody else but the syncing role may.
    """

    enabled: bool = True
    client_role_arns: tuple[str, ...] = crd_field(
        default=(), code="Portable.ApiKeyClientRoleInvalid", item_pattern=IAM_ROLE_ARN.pattern, hint="an IAM role ARN"
    )


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

    # At most 55: the metrics Service is "<name>-metrics", and a Service name has at most 63 characters.
    name: str = crd_field(code="Portable.NameInvalid", pattern=DNS1123_LABEL.pattern, max_length=55)
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
    # Who may connect to the load balancer (hostname only). None: the platform's VPC CIDR.
    allowed_source_ranges: tuple[str, ...] | None = crd_field(
        default=None, code="Portable.SourceRangeInvalid", min_items=1
    )
    api_key: PortableApiKey | None = None
    # The sidecar answers 413 to larger request bodies (capture only); 8 MiB fits a 128k-token prompt and a
    # few inline images (docs/capture-sidecar.md). At most the sidecar's in-flight bound.
    max_request_body_kb: int = crd_field(
        default=8192, key="maxRequestBodyKB", code="Portable.RequestBodyCapOutOfRange", minimum=1,
        maximum=MAX_REQUEST_BODY_KB,
    )
    # The model server's root filesystem; /tmp and $HOME are writable emptyDirs either way. Off only for
    # an image that writes elsewhere.
    read_only_root_filesystem: bool = True
    # A namespace of its own (None: the platform's): its Pod Security level and policies are then this server's alone.
    namespace: str | None = crd_field(default=None, code="Portable.NamespaceInvalid", pattern=DNS1123_LABEL.pattern,
                                      max_length=63)
    # Budgets and rate limits per caller, enforced by the capture sidecar (docs/usage-and-budgets.md).
    usage_limits: UsageLimits | None = None

    @property
    def preset(self) -> ModelServerPreset:
        return PRESETS[ModelServerRuntime(self.runtime)]

    @property
    def pod_capture(self) -> ModelPodCapture | None:
        tier = self.data_capture.model_pod if self.data_capture is not None else None
        return tier if tier is not None and tier.enabled else None

    @property
    def api_key_enabled(self) -> bool:
        return self.api_key is not None and self.api_key.enabled

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.image is not None and self.image.endswith(":latest"):
            problems.add("Portable.ImageNotPinned", join_path(path, "image"), "must not use :latest", self.image)
        self._check_source_ranges(path, problems)
        if self.pre_stop_sleep_seconds >= self.termination_grace_period_seconds:
            problems.add(
                "Portable.GracePeriodOutOfRange",
                join_path(path, "terminationGracePeriodSeconds"),
                "must be longer than preStopSleepSeconds, or the server is killed before it drains",
                self.termination_grace_period_seconds,
            )
        if self.usage_limits is not None and self.pod_capture is None:
            problems.add("UsageLimits.NeedsCaptureSidecar", join_path(path, "usageLimits"),
                         "limits are enforced by the capture sidecar: enable dataCapture.modelPod (sampling may be 0)")
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

    def _check_source_ranges(self, path: str, problems: Problems) -> None:
        """Each range is a network (``10.0.0.0/16``, host bits zero); ranges without a load balancer protect nothing,
        so they are refused rather than ignored."""
        if self.allowed_source_ranges is None:
            return
        ranges_path = join_path(path, "allowedSourceRanges")
        if self.hostname is None:
            problems.add("Portable.SourceRangesWithoutHostname", ranges_path,
                         "apply to the load balancer a hostname creates; set hostname or remove allowedSourceRanges")
        for index, cidr in enumerate(self.allowed_source_ranges):
            if is_unresolved(cidr):
                continue
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                problems.add("Portable.SourceRangeInvalid", join_path(ranges_path, index),
                             "must be a CIDR block with its host bits zero, e.g. 10.0.0.0/16", cidr)


class PortableModelServerChart(cdk8s.Chart):
    """ServiceAccount, Deployment, Services and NetworkPolicy for one planned portable model server.

    :param workload: the server as planned (:class:`~hyperpod_inference_iac.charts.plan.PortableWorkload`):
        its settings, its identity, where its sidecar captures and where its loader reads weights.
    :param namespace: the namespace of the Deployment.
    :param values: resolves the platform values the plan refers to (the capture bucket and key, the sidecar
        image, the certificate of a hostname).
    :param create_namespace: also emit the Namespace (with the Pod Security labels). @default False

    Children: ``.service_account``, ``.deployment``, ``.service`` (cdk8s-plus objects), ``.metrics_service``
    (with capture), ``.network_policy``.
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
        # With capture, the sidecar is the only way in (the model server listens on loopback).
        self.capturing = workload.capture is not None
        self.namespace_object: cdk8s.ApiObject | None = None
        if create_namespace:
            self.namespace_object = cdk8s.ApiObject(
                self, "namespace", api_version="v1", kind="Namespace",
                metadata=namespace_metadata(namespace, security=namespace_security(
                    host_paths=True, operator_pods=False, root_pods=True))
            )
        labels = {"app.kubernetes.io/name": server.name, "app.kubernetes.io/component": "model-server"}
        # No role on the service account: the loader and the sidecar each get their own token and role
        # (ContainerCredentials, added in to_json), and the model server none.
        self.service_account = kplus.ServiceAccount(
            self,
            "service-account",
            metadata=cdk8s.ApiObjectMetadata(name=workload.service_account, namespace=namespace),
        )
        self._api_key = (
            kplus.Secret.from_secret_name(self, "api-key", workload.api_key.name) if workload.api_key else None
        )
        self.deployment = self._deployment(namespace, labels)
        self._add_model_server()
        capture = server.pod_capture
        if capture is not None and workload.capture is not None:
            key = workload.capture_key
            self._add_capture_sidecar(capture, values.resolve(workload.capture),
                                      values.resolve(key) if key is not None else None)
        self.service = self._service(namespace, labels)
        self.metrics_service = self._metrics_service(namespace, labels) if self.capturing else None
        self.network_policy = self._network_policy(namespace, labels)

    def _deployment(self, namespace: str, labels: dict[str, str]) -> kplus.Deployment:
        server = self.server
        deployment = kplus.Deployment(
            self,
            "deployment",
            metadata=cdk8s.ApiObjectMetadata(name=server.name, namespace=namespace, labels=labels),
            # The workload label marks the pod as the platform's own (the namespace's policies tell it from the
            # operator's pods by it); the selector keeps the two labels it always had (selectors are immutable).
            pod_metadata=cdk8s.ApiObjectMetadata(labels={**labels, WORKLOAD_LABEL: PORTABLE_WORKLOAD}),
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
        self._add_weights_loader(weights)
        # With capture, only the sidecar (same pod, same network namespace) can reach the model server.
        host = "127.0.0.1" if self.capturing else "0.0.0.0"
        args = preset.args(model_dir=DEFAULT_MODEL_MOUNT_PATH, served_name=server.name, gpu_count=server.gpu_count,
                           host=host)
        # Caches under the writable $HOME, also Hugging Face's (the TGI image points HF_HOME at /data).
        # HF_HUB_OFFLINE: the weights are on the volume; a runtime never reaches for the Hub (its egress is closed).
        env = {"HOME": kplus.EnvValue.from_value(MODEL_SERVER_HOME),
               "HF_HOME": kplus.EnvValue.from_value(f"{MODEL_SERVER_HOME}/.cache/huggingface"),
               "HF_HUB_OFFLINE": kplus.EnvValue.from_value("1")}
        if self._api_key is not None and not self.capturing:  # with capture the sidecar checks it (loopback only)
            env[preset.api_key_env] = self._api_key_value()
            args += preset.api_key_args()
        startup, readiness, liveness = self._model_server_probes()
        container = self.deployment.add_container(
            name=MODEL_SERVER_CONTAINER,
            image=server.image or preset.image,
            command=list(preset.command) if preset.command else None,
            args=args + list(server.extra_args),
            env_variables=env,
            ports=[kplus.ContainerPort(number=MODEL_PORT, name="http")],
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            startup=startup,
            readiness=readiness,
            liveness=liveness,
            lifecycle=kplus.ContainerLifecycle(
                pre_stop=kplus.Handler.from_command(["sleep", str(server.pre_stop_sleep_seconds)])
            ),
            security_context=kplus.ContainerSecurityContextProps(
                ensure_non_root=False,  # the images run as root (docs: Pod security)
                read_only_root_filesystem=server.read_only_root_filesystem,
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
        # What the runtimes write while the root filesystem is read-only: temporary files and compile caches
        # (torch.compile, Triton, FlashInfer, CUDA, Hugging Face) under $HOME.
        # Bounded, so a runaway cache evicts this pod instead of filling the node's disk.
        tmp = kplus.Volume.from_empty_dir(self, "model-server-tmp", "model-server-tmp",
                                          size_limit=cdk8s.Size.gibibytes(MODEL_SERVER_TMP_GIB))
        home = kplus.Volume.from_empty_dir(self, "model-server-home", "model-server-home",
                                           size_limit=cdk8s.Size.gibibytes(MODEL_SERVER_HOME_GIB))
        container.mount("/tmp", tmp)
        container.mount(MODEL_SERVER_HOME, home)

    def _model_server_probes(self) -> tuple[kplus.Probe, kplus.Probe, kplus.Probe]:
        """Startup, readiness and liveness. With capture the model server listens on loopback, which the kubelet
        cannot reach, so they ask the sidecar, which asks the model server's health path."""
        if self.capturing:
            path, port = UPSTREAM_HEALTH_PATH, SIDECAR_METRICS_PORT
        else:
            path, port = self.server.preset.health_path, MODEL_PORT
        timeout = cdk8s.Duration.seconds(PROBE_TIMEOUT_SECONDS)
        # Loading tens of GB of weights takes minutes: the startup probe allows 30 min before
        # liveness takes over, so a slow cold start is not mistaken for a hung server.
        startup = kplus.Probe.from_http_get(path, port=port, period_seconds=cdk8s.Duration.seconds(10),
                                            failure_threshold=180, timeout_seconds=timeout)
        readiness = kplus.Probe.from_http_get(path, port=port, period_seconds=cdk8s.Duration.seconds(5),
                                              timeout_seconds=timeout)
        liveness = kplus.Probe.from_http_get(path, port=port, period_seconds=cdk8s.Duration.seconds(10),
                                             failure_threshold=6, timeout_seconds=timeout)
        return startup, readiness, liveness

    def _add_weights_loader(self, weights: kplus.Volume) -> None:
        loader = self.server.model_cache.init_container()
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

    def _api_key_value(self) -> kplus.EnvValue:
        """The synced Secret's key, by reference: the value is never in a manifest."""
        assert self._api_key is not None and self.workload.api_key is not None
        return kplus.EnvValue.from_secret_value(kplus.SecretValue(secret=self._api_key, key=self.workload.api_key.key))

    def to_json(self) -> list[Any]:
        """The synthesized manifests, with what cdk8s-plus cannot express.

        cdk8s-plus has no extended resources, no pod-level seccomp profile and no
        ``allocateLoadBalancerNodePorts``, and a JsonPatch into ``containers/0`` is dropped without an
        error (cdk8s applies patches before it resolves cdk8s-plus's lazily built container list), so
        they are added to the synthesized objects here.
        """
        manifests: list[Any] = super().to_json()
        for manifest in manifests:
            if manifest["kind"] == "Deployment":
                self._finish_pod(manifest["spec"]["template"]["spec"])
            elif manifest["kind"] == "Service" and manifest["spec"].get("type") == "LoadBalancer":
                # NLB IP targets reach the pods directly: no node port on every node, where a plain-HTTP port
                # would bypass the TLS listener and the source ranges.
                manifest["spec"]["allocateLoadBalancerNodePorts"] = False
        return manifests

    def _finish_pod(self, pod: dict[str, Any]) -> None:
        pod.setdefault("securityContext", {})["seccompProfile"] = {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            if container["name"] == MODEL_SERVER_CONTAINER:
                for section in ("limits", "requests"):
                    container["resources"].setdefault(section, {})[GPU_RESOURCE] = str(self.server.gpu_count)
        # Credentials for the two containers that call AWS, each its own; nothing for the model server. The loader
        # is exactly the planned one (admission compares it field by field), with cdk8s-plus's resources.
        init = pod.get("initContainers", [])
        for index, container in enumerate(init):
            if container["name"] == LOADER_CONTAINER:
                init[index] = {**self.workload.loader_container(), "resources": container["resources"],
                               "imagePullPolicy": container["imagePullPolicy"]}
                pod.setdefault("volumes", []).append(
                    self.workload.loader_identity.credentials(self.workload.region).volume())
            elif container["name"] == CAPTURE_SIDECAR_CONTAINER and self.workload.capture_identity is not None:
                self.workload.capture_identity.credentials(self.workload.region).add_to(pod, container)

    def _add_capture_sidecar(self, capture: ModelPodCapture, capture_s3_uri: str, kms_key_id: str | None) -> None:
        env = capture_environment(capture, capture_s3_uri, kms_key_id,
                                  max_request_body_bytes=self.server.max_request_body_kb * 1024,
                                  health_path=self.server.preset.health_path, model_name=self.server.name)
        env_values = {name: kplus.EnvValue.from_value(value) for name, value in env.items()}
        if ModelServerRuntime(self.server.runtime) == ModelServerRuntime.TGI:
            # vLLM and SGLang honour stream_options.include_usage; TGI's support is not verified here, so its streams
            # are left as they are (usageSource "none"; docs/usage-and-budgets.md).
            env_values["STREAM_USAGE"] = kplus.EnvValue.from_value("off")
        if self.server.usage_limits is not None:
            prefix = f"budget:{self.workload.namespace}/{self.server.name}:"
            env_values.update({name: kplus.EnvValue.from_value(value) for name, value in
                               usage_limits_environment(self.server.usage_limits, key_prefix=prefix).items()})
        if self._api_key is not None:  # checked on every request, whatever its path
            env_values["API_KEYS_FILE"] = kplus.EnvValue.from_value(f"{API_KEYS_MOUNT_PATH}/{API_KEYS_FILE_SECRET_KEY}")
        scratch = kplus.Volume.from_empty_dir(self, "capture-scratch", "capture-scratch")
        sidecar = self.deployment.add_init_container(
            name=CAPTURE_SIDECAR_CONTAINER,
            image=self._values.get(PlatformValue.SIDECAR_IMAGE),
            # A native sidecar (init container that keeps running): it starts before the model
            # server and stops after it, so the last requests are captured and flushed.
            restart_policy=kplus.ContainerRestartPolicy.ALWAYS,
            ports=[
                kplus.ContainerPort(number=SIDECAR_LISTEN_PORT, name="capture"),
                kplus.ContainerPort(number=SIDECAR_METRICS_PORT, name="metrics"),
            ],
            env_variables=env_values,
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
                memory=kplus.MemoryResources(request=cdk8s.Size.mebibytes(256),
                                             limit=cdk8s.Size.mebibytes(SIDECAR_MEMORY_LIMIT_MIB)),
            ),
        )
        sidecar.mount("/tmp", scratch)  # buffered batches; the root filesystem stays read-only
        if self._api_key is not None:
            self._mount_api_keys(sidecar)

    def _mount_api_keys(self, sidecar: kplus.Container) -> None:
        """The synced Secret's list of accepted keys, as a file of a whole-Secret volume (the kubelet updates those
        in place, never a subPath mount): the sidecar re-reads it, so a rotated key is accepted, and a dropped one
        refused, without a restart."""
        assert self._api_key is not None
        volume = kplus.Volume.from_secret(
            self, "api-keys", self._api_key, name="api-keys", default_mode=0o444,
            items={API_KEYS_FILE_SECRET_KEY: kplus.PathMapping(path=API_KEYS_FILE_SECRET_KEY)})
        sidecar.mount(API_KEYS_MOUNT_PATH, volume, read_only=True)

    def _service(self, namespace: str, labels: dict[str, str]) -> kplus.Service:
        """The API. In the cluster (no hostname): a ClusterIP Service on plain HTTP port 80. With a hostname: an
        internal NLB whose only listener is TLS on 443 with the platform certificate, open to the allowed source
        ranges; ExternalDNS publishes the name."""
        server = self.server
        # With capture on, clients reach the sidecar, which forwards to the model server.
        target = SIDECAR_LISTEN_PORT if self.capturing else MODEL_PORT
        annotations: dict[str, str] = {}
        source_ranges = None
        service_type = kplus.ServiceType.CLUSTER_IP
        port = kplus.ServicePort(name="http", port=SERVICE_PORT, target_port=target)
        if server.hostname is not None:
            assert self.workload.certificate is not None  # the plan names it for every hostname
            certificate = self._values.resolve(self.workload.certificate)  # may wait for a deploy (AwaitingDeploy)
            annotations = {
                EXTERNAL_DNS_HOSTNAME: server.hostname,
                "service.beta.kubernetes.io/aws-load-balancer-type": "external",
                "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
                "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
                "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": certificate,
                "service.beta.kubernetes.io/aws-load-balancer-ssl-ports": str(TLS_SERVICE_PORT),
                "service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy": TLS_NEGOTIATION_POLICY,
            }
            source_ranges = list(self.workload.source_ranges)
            service_type = kplus.ServiceType.LOAD_BALANCER
            port = kplus.ServicePort(name="https", port=TLS_SERVICE_PORT, target_port=target)
        service = kplus.Service(
            self,
            "service",
            metadata=cdk8s.ApiObjectMetadata(name=server.name, namespace=namespace, annotations=annotations),
            type=service_type,
            ports=[port],
            load_balancer_source_ranges=source_ranges,
        )
        for key, value in labels.items():
            service.select_label(key, value)
        return service

    def _metrics_service(self, namespace: str, labels: dict[str, str]) -> kplus.Service:
        """The sidecar's /metrics for in-cluster scrapers, never on the load balancer."""
        service = kplus.Service(
            self,
            "metrics-service",
            metadata=cdk8s.ApiObjectMetadata(name=f"{self.server.name}-metrics", namespace=namespace),
            type=kplus.ServiceType.CLUSTER_IP,
            ports=[kplus.ServicePort(name="metrics", port=SIDECAR_METRICS_PORT, target_port=SIDECAR_METRICS_PORT)],
        )
        for key, value in labels.items():
            service.select_label(key, value)
        return service

    def _network_policy(self, namespace: str, labels: dict[str, str]) -> cdk8s.ApiObject:
        """What the server's pods may receive and send (the namespace denies everything else,
        :mod:`charts.network_policies`). In: with capture, the sidecar's port from anywhere (the NLB's IP targets,
        in-cluster clients) and its metrics port from the VPC (scrapers, the kubelet's probes), nothing to the model's
        port; without, the model's port from anywhere. Out: HTTPS to AWS (the loader's S3 and STS, the sidecar's S3)
        and nothing else (DNS is the namespace's own policy)."""
        if self.capturing:
            assert self.workload.vpc_cidr is not None  # the plan requires it for capture
            ingress = [
                {"ports": [tcp(SIDECAR_LISTEN_PORT)]},
                {"from": [{"ipBlock": {"cidr": self.workload.vpc_cidr}}], "ports": [tcp(SIDECAR_METRICS_PORT)]},
            ]
        else:
            ingress = [{"ports": [tcp(MODEL_PORT)]}]
        policy = cdk8s.ApiObject(
            self,
            "network-policy",
            api_version="networking.k8s.io/v1",
            kind="NetworkPolicy",
            metadata={"name": self.server.name, "namespace": namespace, "labels": labels},
        )
        # ApiObject's Python props take no body: the spec is its first patch.
        egress = [aws_api_egress(self.workload.vpc_cidr)]
        limits = self.server.usage_limits
        if self.capturing and limits is not None and limits.store_url is not None:
            # The budget store (ElastiCache in the VPC): its port, inside the VPC only.
            egress.append({"to": [{"ipBlock": {"cidr": self.workload.vpc_cidr}}], "ports": [tcp(limits.store_port)]})
        policy.add_json_patch(cdk8s.JsonPatch.add("/spec", {
            "podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress", "Egress"], "ingress": ingress,
            "egress": egress}))
        return policy


def capture_environment(capture: ModelPodCapture, capture_s3_uri: str, kms_key_id: str | None = None, *,
                        max_request_body_bytes: int = 8 * 1024 * 1024, health_path: str = "/health",
                        memory_limit_mib: int = SIDECAR_MEMORY_LIMIT_MIB, model_name: str | None = None,
                        ) -> dict[str, str]:
    """The sidecar's settings: the operator's modelPod knobs, with the operator's defaults, and its memory bounds
    from its memory limit. ``capture_s3_uri`` and ``kms_key_id`` are the planned ones (the same the sidecar's role
    is granted); ``model_name`` is the served model name (the ``model`` label of its metrics, which the per-model
    alarms select). The API key is not here: it is a Secret reference, never a value."""
    modes = capture.capture_options or (CaptureMode.INPUT, CaptureMode.OUTPUT)
    buffer = capture.buffer_config or BufferConfig()
    payload = capture.payload_config or PayloadConfig()
    env = {
        "UPSTREAM_URL": f"http://127.0.0.1:{MODEL_PORT}",
        "UPSTREAM_HEALTH_PATH": health_path,
        "UPSTREAM_HEALTH_TIMEOUT_SECONDS": str(UPSTREAM_HEALTH_TIMEOUT_SECONDS),
        "LISTEN_PORT": str(SIDECAR_LISTEN_PORT),
        "METRICS_PORT": str(SIDECAR_METRICS_PORT),
        "CAPTURE_S3_URI": capture_s3_uri,
        "SAMPLING_PERCENTAGE": str(_or(capture.initial_sampling_percentage, 100)),
        "CAPTURE_MODES": ",".join(str(mode) for mode in modes),
        "BATCH_SIZE": str(_or(buffer.batch_size, 10)),
        "FLUSH_INTERVAL_SECONDS": str(_or(buffer.flush_interval_seconds, 60)),
        "MAX_PAYLOAD_SIZE_KB": str(_or(payload.max_payload_size_kb, 0)),
        # Every body byte held at once, from the memory limit (sidecar_inflight_body_bytes); larger bodies get 413.
        "MAX_INFLIGHT_BODY_BYTES": str(sidecar_inflight_body_bytes(memory_limit_mib)),
        "MAX_REQUEST_BODY_BYTES": str(max_request_body_bytes),
        # Batches that cannot reach S3 wait on the pod's scratch volume (bounded) instead of being dropped.
        "SPOOL_DIR": "/tmp/capture-spool",
        "SPOOL_MAX_BYTES": str(256 * 1024 * 1024),
    }
    if kms_key_id is not None:
        env["KMS_KEY_ID"] = kms_key_id
    if model_name is not None:
        env["MODEL_NAME"] = model_name
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

"""What a portable model server is: its runtimes and presets, its properties (:class:`PortableModelServer`), its
API key, the capture prefix hash and the sidecar's memory bounds; no Kubernetes object. The workload plan
(:mod:`~hyperpod_inference_iac.charts.plan`) reads these, and the chart that renders a planned server
(:mod:`~hyperpod_inference_iac.charts.portable`) imports both: the plan never imports the chart
(docs/architecture.md)."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import ipaddress
from collections.abc import Callable, Mapping, Sequence

from hyperpod_inference_iac.charts._spec_fields import (
    SpecBlock,
    crd_field,
)
from hyperpod_inference_iac.charts.capture import (
    DataCapture,
    ModelPodCapture,
)
from hyperpod_inference_iac.charts.nvme_cache import (
    NvmeModelCache,
)
from hyperpod_inference_iac.charts.usage_limits import (
    UsageLimits,
)
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
    DOMAIN_NAME,
    IAM_ROLE_ARN,
    PINNED_IMAGE,
)
from hyperpod_inference_iac.foundation.validation import (
    Problems,
    is_unresolved,
    join_path,
)

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


#: A caller id of an API key (the keys file's ``caller_id:key`` lines, records' ``callerId``, usage limits): the
#: capture sidecar's own pattern (``capture_sidecar.settings.CALLER_ID``).
API_KEY_CALLER_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def legacy_api_key_caller_id(server_name: str) -> str:
    """The caller id of a server's one key in the single-key form (``apiKey: {enabled, clientRoleArns}``): the synced
    Secret's name, ``<server>-api-key``, as records have named it since the key exists. A caller of the ``callers``
    form with this id keeps the single key's Secrets Manager secret (the migration: docs/upgrading.md)."""
    return f"{server_name}-api-key"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ApiKeyCaller(SpecBlock):
    """One caller of a server (a team, an application): a key of its own in a Secrets Manager secret of its own,
    rotated and revoked alone, named in the keys file and in records by ``id``, whatever its key.

    YAML: ``{id: team-a, clientRoleArns: [arn:aws:iam::111122223333:role/team-a], revoked: false}``."""

    id: str = crd_field(code="Portable.ApiKeyCallerIdInvalid", pattern=API_KEY_CALLER_ID,
                        hint="1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (e.g. team-a)")
    client_role_arns: tuple[str, ...] = crd_field(
        default=(), code="Portable.ApiKeyClientRoleInvalid", item_pattern=IAM_ROLE_ARN.pattern, hint="an IAM role ARN"
    )
    # Revoked: its lines leave the keys file (its requests get 401), its secret stays (not rotated, unreadable by
    # its clients), so un-revoking gives the caller back its id.
    revoked: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class PortableApiKey(SpecBlock):
    """Request authentication for one server: random keys generated in Secrets Manager and synced into the
    namespace (``ApiKeySync``); clients send theirs as ``Authorization: Bearer <key>``.

    YAML, one key: ``apiKey: {enabled: true, clientRoleArns: [arn:aws:iam::111122223333:role/chat-frontend]}`` (one
    caller, id ``<server>-api-key``). Several callers, each with its own key, rotated and revoked alone:
    ``apiKey: {callers: [{id: team-a, clientRoleArns: [...]}, {id: team-b}]}``. A caller's client roles may read
    its key (``secretsmanager:GetSecretValue``); nobody else but the syncing role may.
    """

    enabled: bool = True
    client_role_arns: tuple[str, ...] = crd_field(
        default=(), code="Portable.ApiKeyClientRoleInvalid", item_pattern=IAM_ROLE_ARN.pattern, hint="an IAM role ARN"
    )
    callers: tuple[ApiKeyCaller, ...] | None = None

    def callers_of(self, server_name: str) -> tuple[ApiKeyCaller, ...]:
        """Every caller, revoked ones included: the ``callers`` given, or the single key's one caller."""
        if self.callers is not None:
            return self.callers
        return (ApiKeyCaller(id=legacy_api_key_caller_id(server_name), client_role_arns=self.client_role_arns),)

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.callers is None or not self.enabled:
            return
        callers_path = join_path(path, "callers")
        if self.client_role_arns:
            problems.add("Portable.ApiKeyClientRolesBesideCallers", join_path(path, "clientRoleArns"),
                         "with callers, each caller names the roles that may read its own key: move these to "
                         "callers[i].clientRoleArns")
        if not [caller for caller in self.callers if not caller.revoked]:
            problems.add("Portable.ApiKeyNoCaller", callers_path,
                         "needs at least one caller that is not revoked (to refuse every request, scale the server "
                         "to 0 replicas: turning the key off would open it)")
        seen: dict[str, int] = {}
        for index, caller in enumerate(self.callers):
            folded = caller.id.lower()  # one secret name and one keys file entry per caller, whatever the case
            if folded in seen:
                problems.add("Portable.ApiKeyCallerDuplicate", join_path(join_path(callers_path, index), "id"),
                             f"is already the id of callers[{seen[folded]}] (ids are unique per server, case "
                             "ignored)", caller.id)
            seen.setdefault(folded, index)


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
        self._check_api_key_callers(path, problems)
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

    def _check_api_key_callers(self, path: str, problems: Problems) -> None:
        """Several callers need the capture sidecar (the model server itself checks one key); a usage limit names a
        caller of the server's keys (or ``*``)."""
        if not self.api_key_enabled or self.api_key is None:
            return
        callers = self.api_key.callers_of(self.name)
        if self.api_key.callers is not None and self.pod_capture is None:
            problems.add("Portable.ApiKeyCallersNeedCaptureSidecar", join_path(path, "apiKey.callers"),
                         "callers need the capture sidecar, which checks each caller's keys from the synced file and "
                         "takes a new one without a restart (the model server alone reads one key, at start): enable "
                         "dataCapture.modelPod (sampling may be 0), or use the single-key form")
        if self.usage_limits is None:
            return
        known = {caller.id for caller in callers}
        for index, limit in enumerate(self.usage_limits.callers):
            if limit.caller_id != "*" and limit.caller_id not in known and not is_unresolved(limit.caller_id):
                problems.add("UsageLimits.UnknownCaller", join_path(path, f"usageLimits.callers[{index}].callerId"),
                             f"is no caller of this server's API keys ({', '.join(sorted(known))}): a limit for it "
                             "would never apply", limit.caller_id)

    def _check_source_ranges(self, path: str, problems: Problems) -> None:
        """Each range is a network (``10.0.0.0/16``, host bits zero); ranges without a load balancer protect nothing,
        so they are refused rather than ignored."""
        if self.allowed_source_ranges is None:
            return
        ranges_path = join_path(path, "allowedSourceRanges")
        if self.hostname is None:
            problems.add("Portable.SourceRangesWithoutHostname", ranges_path,
                         "apply to the load balancer a hostname creates; set hostname or remove allowedSourceRanges")
        check_source_ranges(self.allowed_source_ranges, "Portable.SourceRangeInvalid",
                            lambda index: join_path(ranges_path, index), problems)


def check_source_ranges(ranges: Sequence[str], code: str, path_of: Callable[[int], str], problems: Problems) -> None:
    """Each source range of a load balancer is a network (``10.0.0.0/16``, host bits zero); tokens are skipped.
    ``path_of`` names the key of the range at an index."""
    for index, cidr in enumerate(ranges):
        if is_unresolved(cidr):
            continue
        try:
            ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            problems.add(code, path_of(index), "must be a CIDR block with its host bits zero, e.g. 10.0.0.0/16", cidr)

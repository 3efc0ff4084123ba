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

from typing import TYPE_CHECKING, Any

import cdk8s
import cdk8s_plus_34 as kplus
from constructs import Construct

from hyperpod_inference_iac.charts.capture import (
    BufferConfig,
    CaptureMode,
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
)
from hyperpod_inference_iac.charts.pod_security import (
    namespace_metadata,
    namespace_security,
)
from hyperpod_inference_iac.charts.portable_server import (
    _CPU_PATTERN as _CPU_PATTERN,
)
from hyperpod_inference_iac.charts.portable_server import (
    _MEMORY_PATTERN as _MEMORY_PATTERN,
)
from hyperpod_inference_iac.charts.portable_server import (
    API_KEY_SECRET_KEY as API_KEY_SECRET_KEY,
)
from hyperpod_inference_iac.charts.portable_server import (  # (what the server is; re-exported here)
    API_KEYS_FILE_SECRET_KEY as API_KEYS_FILE_SECRET_KEY,
)
from hyperpod_inference_iac.charts.portable_server import (
    API_KEYS_MOUNT_PATH as API_KEYS_MOUNT_PATH,
)
from hyperpod_inference_iac.charts.portable_server import (
    CAPTURE_SIDECAR_CONTAINER as CAPTURE_SIDECAR_CONTAINER,
)
from hyperpod_inference_iac.charts.portable_server import (
    EXTERNAL_DNS_HOSTNAME as EXTERNAL_DNS_HOSTNAME,
)
from hyperpod_inference_iac.charts.portable_server import (
    GPU_RESOURCE as GPU_RESOURCE,
)
from hyperpod_inference_iac.charts.portable_server import (
    MAX_REQUEST_BODY_KB as MAX_REQUEST_BODY_KB,
)
from hyperpod_inference_iac.charts.portable_server import (
    MODEL_PORT as MODEL_PORT,
)
from hyperpod_inference_iac.charts.portable_server import (
    MODEL_SERVER_CONTAINER as MODEL_SERVER_CONTAINER,
)
from hyperpod_inference_iac.charts.portable_server import (
    MODEL_SERVER_HOME as MODEL_SERVER_HOME,
)
from hyperpod_inference_iac.charts.portable_server import (
    MODEL_SERVER_HOME_GIB as MODEL_SERVER_HOME_GIB,
)
from hyperpod_inference_iac.charts.portable_server import (
    MODEL_SERVER_TMP_GIB as MODEL_SERVER_TMP_GIB,
)
from hyperpod_inference_iac.charts.portable_server import (
    PORTABLE_WORKLOAD as PORTABLE_WORKLOAD,
)
from hyperpod_inference_iac.charts.portable_server import (
    PRESETS as PRESETS,
)
from hyperpod_inference_iac.charts.portable_server import (
    PROBE_TIMEOUT_SECONDS as PROBE_TIMEOUT_SECONDS,
)
from hyperpod_inference_iac.charts.portable_server import (
    SERVICE_PORT as SERVICE_PORT,
)
from hyperpod_inference_iac.charts.portable_server import (
    SIDECAR_FIXED_MEMORY_MIB as SIDECAR_FIXED_MEMORY_MIB,
)
from hyperpod_inference_iac.charts.portable_server import (
    SIDECAR_LISTEN_PORT as SIDECAR_LISTEN_PORT,
)
from hyperpod_inference_iac.charts.portable_server import (
    SIDECAR_MEMORY_LIMIT_MIB as SIDECAR_MEMORY_LIMIT_MIB,
)
from hyperpod_inference_iac.charts.portable_server import (
    SIDECAR_METRICS_PORT as SIDECAR_METRICS_PORT,
)
from hyperpod_inference_iac.charts.portable_server import (
    TLS_NEGOTIATION_POLICY as TLS_NEGOTIATION_POLICY,
)
from hyperpod_inference_iac.charts.portable_server import (
    TLS_SERVICE_PORT as TLS_SERVICE_PORT,
)
from hyperpod_inference_iac.charts.portable_server import (
    UPSTREAM_HEALTH_PATH as UPSTREAM_HEALTH_PATH,
)
from hyperpod_inference_iac.charts.portable_server import (
    UPSTREAM_HEALTH_TIMEOUT_SECONDS as UPSTREAM_HEALTH_TIMEOUT_SECONDS,
)
from hyperpod_inference_iac.charts.portable_server import (
    ApiKeyCaller as ApiKeyCaller,
)
from hyperpod_inference_iac.charts.portable_server import (
    ModelServerPreset as ModelServerPreset,
)
from hyperpod_inference_iac.charts.portable_server import (
    ModelServerRuntime as ModelServerRuntime,
)
from hyperpod_inference_iac.charts.portable_server import (
    PortableApiKey as PortableApiKey,
)
from hyperpod_inference_iac.charts.portable_server import (
    PortableModelServer as PortableModelServer,
)
from hyperpod_inference_iac.charts.portable_server import (
    capture_prefix_hash as capture_prefix_hash,
)
from hyperpod_inference_iac.charts.portable_server import (
    sidecar_inflight_body_bytes as sidecar_inflight_body_bytes,
)
from hyperpod_inference_iac.charts.usage_limits import (
    usage_limits_environment,
)
from hyperpod_inference_iac.foundation.platform_values import (
    PlatformValue,
    PlatformValues,
)

if TYPE_CHECKING:
    from hyperpod_inference_iac.charts.plan import PortableWorkload


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
            # The platform's store (when the limits name none): its address is a deploy-time value.
            store = self.workload.usage_store
            endpoint = (store, self._values.get(PlatformValue.USAGE_STORE_ENDPOINT)) if store is not None else None
            env_values.update({name: kplus.EnvValue.from_value(value) for name, value in
                               usage_limits_environment(self.server.usage_limits, key_prefix=prefix,
                                                        store=endpoint).items()})
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
            security_context=sidecar_security_context(),
            resources=sidecar_resources(),
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
            annotations = internal_tls_load_balancer(server.hostname, certificate)
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
        store = self.workload.usage_store
        if self.capturing and limits is not None and (limits.store_url is not None or store is not None):
            # The budget store (ElastiCache in the VPC): its port, inside the VPC only.
            port = limits.store_port if limits.store_url is not None or store is None else store.port
            egress.append({"to": [{"ipBlock": {"cidr": self.workload.vpc_cidr}}], "ports": [tcp(port)]})
        policy.add_json_patch(cdk8s.JsonPatch.add("/spec", {
            "podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress", "Egress"], "ingress": ingress,
            "egress": egress}))
        return policy


def internal_tls_load_balancer(hostname: str, certificate: str) -> dict[str, str]:
    """A Service's annotations for an internal NLB (AWS Load Balancer Controller, IP targets) whose only listener is
    TLS on 443 with ``certificate`` (TLS 1.3/1.2), its ``hostname`` published by ExternalDNS: a portable server's and a
    gateway entry's way in."""
    return {
        EXTERNAL_DNS_HOSTNAME: hostname,
        "service.beta.kubernetes.io/aws-load-balancer-type": "external",
        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
        "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
        "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": certificate,
        "service.beta.kubernetes.io/aws-load-balancer-ssl-ports": str(TLS_SERVICE_PORT),
        "service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy": TLS_NEGOTIATION_POLICY,
    }


SIDECAR_USER = 65532  # the uid it runs as, whatever the image says: it writes only its scratch volume


def sidecar_security_context() -> kplus.ContainerSecurityContextProps:
    """The capture sidecar's container: its non-root user, read-only root filesystem, no privilege escalation and no
    capability (a portable server's and a gateway entry's alike)."""
    return kplus.ContainerSecurityContextProps(
        ensure_non_root=True,
        user=SIDECAR_USER,
        group=SIDECAR_USER,
        read_only_root_filesystem=True,
        allow_privilege_escalation=False,
        capabilities=kplus.ContainerSecutiryContextCapabilities(drop=[kplus.Capability.ALL]),
    )


def sidecar_resources() -> kplus.ContainerResources:
    """The capture sidecar's CPU and memory: the memory limit its in-flight bound is derived from
    (:func:`sidecar_inflight_body_bytes`)."""
    return kplus.ContainerResources(
        cpu=kplus.CpuResources(request=kplus.Cpu.millis(250), limit=kplus.Cpu.units(1)),
        memory=kplus.MemoryResources(request=cdk8s.Size.mebibytes(256),
                                     limit=cdk8s.Size.mebibytes(SIDECAR_MEMORY_LIMIT_MIB)),
    )


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

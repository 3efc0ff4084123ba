"""The capture entry of one Inference Gateway as Kubernetes objects (:class:`GatewayEntryChart`): a ServiceAccount, a
Deployment of the capture sidecar in JWT mode, an internal NLB Service with a TLS listener on the platform certificate
(published by ExternalDNS), a metrics Service and a NetworkPolicy. What the entry is and why:
:mod:`~hyperpod_inference_iac.charts.gateway_entry`; the plan makes it (``WorkloadPlan.entries``)."""

from __future__ import annotations

from typing import Any

import cdk8s
import cdk8s_plus_34 as kplus
from constructs import Construct

from hyperpod_inference_iac.charts.capture import ModelPodCapture
from hyperpod_inference_iac.charts.network_policies import WORKLOAD_LABEL, aws_api_egress, tcp
from hyperpod_inference_iac.charts.plan import PlannedGatewayEntry
from hyperpod_inference_iac.charts.portable import (
    CAPTURE_SIDECAR_CONTAINER,
    SIDECAR_LISTEN_PORT,
    SIDECAR_METRICS_PORT,
    TLS_SERVICE_PORT,
    capture_environment,
    internal_tls_load_balancer,
    sidecar_resources,
    sidecar_security_context,
)
from hyperpod_inference_iac.charts.usage_limits import usage_limits_environment
from hyperpod_inference_iac.foundation.platform_values import PlatformValue, PlatformValues

GATEWAY_ENTRY_WORKLOAD = "gateway-entry"  # its pods' WORKLOAD_LABEL
# Long enough for in-flight generations to finish and the last batch to be flushed.
TERMINATION_GRACE_SECONDS = 120


def entry_environment(entry: PlannedGatewayEntry, capture_s3_uri: str, kms_key_id: str | None,
                      store_endpoint: str | None = None) -> dict[str, str]:
    """The entry's capture sidecar environment but its credentials: a portable sidecar's capture settings
    (:func:`~hyperpod_inference_iac.charts.portable.capture_environment`) with the entry's sampling and body bound,
    the gateway as upstream (HTTPS, verified), the gateway's own JWT settings and the entry's limits.
    ``capture_s3_uri`` and ``kms_key_id`` are the planned ``capture`` and ``capture_key`` resolved: what its role may
    write with. ``store_endpoint``: the address of the platform's budget store, when the plan gives the entry that
    store (``entry.usage_store``)."""
    options = entry.options
    capture = ModelPodCapture(enabled=True, initial_sampling_percentage=options.sampling_percentage)
    env = capture_environment(capture, capture_s3_uri, kms_key_id,
                              max_request_body_bytes=options.max_request_body_kb * 1024)
    # No MODEL_NAME: each record's model is the request's own ``model`` (the gateway serves several).
    env["UPSTREAM_URL"] = entry.upstream_url
    env.update(entry.jwt_environment)
    if options.usage_limits is not None:
        store = entry.usage_store
        endpoint = (store, store_endpoint) if store is not None and store_endpoint is not None else None
        env.update(usage_limits_environment(options.usage_limits, key_prefix=entry.limits_key_prefix, store=endpoint))
    return env


class GatewayEntryChart(cdk8s.Chart):
    """ServiceAccount, Deployment, Services and NetworkPolicy of one planned gateway entry.

    :param entry: the entry as planned (:class:`~hyperpod_inference_iac.charts.gateway_entry.PlannedGatewayEntry`).
    :param values: resolves the platform values it refers to (the capture bucket and key, the sidecar image, the
        certificate); a value not known yet raises ``AwaitingDeploy``.

    Children: ``.service_account``, ``.deployment``, ``.service``, ``.metrics_service`` (cdk8s-plus objects),
    ``.network_policy``.
    """

    def __init__(self, scope: Construct, id: str, *, entry: PlannedGatewayEntry, values: PlatformValues) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        self.entry = entry
        namespace = entry.namespace
        labels = {"app.kubernetes.io/name": entry.name, "app.kubernetes.io/component": "gateway-entry"}
        self._labels = labels
        capture_uri = values.resolve(entry.capture.uri(values))
        key = values.resolve(entry.capture_key) if entry.capture_key is not None else None
        # The platform's budget store (when the plan gives the entry that store): its address is a deploy-time value.
        store_endpoint = values.get(PlatformValue.USAGE_STORE_ENDPOINT) if entry.usage_store is not None else None
        env = entry_environment(entry, capture_uri, key, store_endpoint)
        certificate = values.resolve(entry.certificate)
        image = values.get(PlatformValue.SIDECAR_IMAGE)
        self.service_account = kplus.ServiceAccount(
            self, "service-account", metadata=cdk8s.ApiObjectMetadata(name=entry.service_account, namespace=namespace),
            automount_token=False)
        self.deployment = kplus.Deployment(
            self, "deployment",
            metadata=cdk8s.ApiObjectMetadata(name=entry.name, namespace=namespace, labels=labels),
            pod_metadata=cdk8s.ApiObjectMetadata(labels={**labels, WORKLOAD_LABEL: GATEWAY_ENTRY_WORKLOAD}),
            select=False, replicas=entry.options.replicas, service_account=self.service_account,
            automount_service_account_token=False,
            termination_grace_period=cdk8s.Duration.seconds(TERMINATION_GRACE_SECONDS),
            security_context=kplus.PodSecurityContextProps(ensure_non_root=True))
        self.deployment.select(kplus.LabelSelector.of(labels=labels))
        container = self.deployment.add_container(
            name=CAPTURE_SIDECAR_CONTAINER, image=image,
            ports=[kplus.ContainerPort(number=SIDECAR_LISTEN_PORT, name="capture"),
                   kplus.ContainerPort(number=SIDECAR_METRICS_PORT, name="metrics")],
            env_variables={name: kplus.EnvValue.from_value(value) for name, value in env.items()},
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            # /healthz answers 503 while the sidecar drains, taking the pod out of the load balancer. (Until it has
            # the issuer's keys it answers every request 503 itself, and stays ready: capture_sidecar_jwt_keys says it.)
            readiness=kplus.Probe.from_http_get("/healthz", port=SIDECAR_METRICS_PORT,
                                                period_seconds=cdk8s.Duration.seconds(5)),
            liveness=kplus.Probe.from_http_get("/healthz", port=SIDECAR_METRICS_PORT,
                                               period_seconds=cdk8s.Duration.seconds(10), failure_threshold=6),
            security_context=sidecar_security_context(), resources=sidecar_resources())
        container.mount("/tmp", kplus.Volume.from_empty_dir(self, "capture-scratch", "capture-scratch"))
        self.service = self._service(namespace, labels, certificate)
        self.metrics_service = kplus.Service(
            self, "metrics-service",
            metadata=cdk8s.ApiObjectMetadata(name=f"{entry.name}-metrics", namespace=namespace),
            type=kplus.ServiceType.CLUSTER_IP,
            ports=[kplus.ServicePort(name="metrics", port=SIDECAR_METRICS_PORT, target_port=SIDECAR_METRICS_PORT)])
        for key_, value in labels.items():
            self.metrics_service.select_label(key_, value)
        self.network_policy = self._network_policy(namespace, labels)

    def _service(self, namespace: str, labels: dict[str, str], certificate: str) -> kplus.Service:
        """An internal NLB whose only listener is TLS on 443 with the platform certificate, open to the allowed source
        ranges (a portable server's way in); ExternalDNS publishes the entry's name."""
        entry = self.entry
        annotations = internal_tls_load_balancer(entry.hostname, certificate)
        service = kplus.Service(
            self, "service", metadata=cdk8s.ApiObjectMetadata(name=entry.name, namespace=namespace,
                                                              annotations=annotations),
            type=kplus.ServiceType.LOAD_BALANCER,
            ports=[kplus.ServicePort(name="https", port=TLS_SERVICE_PORT, target_port=SIDECAR_LISTEN_PORT)],
            load_balancer_source_ranges=list(entry.source_ranges))
        for key, value in labels.items():
            service.select_label(key, value)
        return service

    def _network_policy(self, namespace: str, labels: dict[str, str]) -> cdk8s.ApiObject:
        """In: the entry's port and its metrics port from the VPC only (the NLB's IP targets see the NLB's own VPC
        addresses; in-cluster clients, scrapers and the kubelet are in the VPC too). Out: HTTPS to every address but
        the link-local range, the VPC's included, since the gateway's load balancer is internal (its addresses are
        the VPC's and change) and the issuer's JWKS host, S3 and STS are wherever they are: NetworkPolicy names
        addresses, not hosts. The budget store's port, in the VPC only, when the limits have one (their ``storeUrl``,
        or the platform's store the plan gives them)."""
        entry = self.entry
        vpc = {"ipBlock": {"cidr": entry.vpc_cidr}}
        ingress = [{"from": [vpc], "ports": [tcp(SIDECAR_LISTEN_PORT), tcp(SIDECAR_METRICS_PORT)]}]
        egress: list[dict[str, Any]] = [aws_api_egress(None)]  # (None: the VPC is not excluded)
        limits = entry.options.usage_limits
        if limits is not None and limits.store_url is not None:
            egress.append({"to": [vpc], "ports": [tcp(limits.store_port)]})
        elif entry.usage_store is not None:
            egress.append({"to": [vpc], "ports": [tcp(entry.usage_store.port)]})
        policy = cdk8s.ApiObject(self, "network-policy", api_version="networking.k8s.io/v1", kind="NetworkPolicy",
                                 metadata={"name": entry.name, "namespace": namespace, "labels": labels})
        policy.add_json_patch(cdk8s.JsonPatch.add("/spec", {
            "podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress", "Egress"], "ingress": ingress,
            "egress": egress}))
        return policy

    def to_json(self) -> list[Any]:
        """The synthesized manifests, with what cdk8s-plus cannot express: the pod's seccomp profile, the sidecar's
        own credentials (a projected token of its own audience, :mod:`charts.pod_credentials`), and no node port on
        the load balancer (its IP targets reach the pods directly)."""
        manifests: list[Any] = super().to_json()
        for manifest in manifests:
            if manifest["kind"] == "Deployment":
                pod = manifest["spec"]["template"]["spec"]
                pod.setdefault("securityContext", {})["seccompProfile"] = {"type": "RuntimeDefault"}
                for container in pod["containers"]:
                    if container["name"] == CAPTURE_SIDECAR_CONTAINER:
                        self.entry.identity.credentials(self.entry.region).add_to(pod, container)
            elif manifest["kind"] == "Service" and manifest["spec"].get("type") == "LoadBalancer":
                manifest["spec"]["allocateLoadBalancerNodePorts"] = False
        return manifests


__all__ = ["GATEWAY_ENTRY_WORKLOAD", "GatewayEntryChart", "entry_environment"]

"""A :class:`~hyperpod_inference_iac.charts.plan.WorkloadPlan` as cdk8s charts: the namespaces with their security,
then one small chart per workload, in a fixed order. The CDK app and the GitOps hand-off both call
:func:`render_workloads` on the same plan, with their own
:class:`~hyperpod_inference_iac.foundation.platform_values.PlatformValues`.

The namespace chart holds, per namespace, the Namespace (its Pod Security level: :mod:`charts.pod_security`) and
its network policies (:mod:`charts.network_policies`), and once for the cluster the host-path admission policy when
any namespace needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cdk8s

from hyperpod_inference_iac.charts.gateway import PlannedGateway
from hyperpod_inference_iac.charts.gateway_entry_chart import GatewayEntryChart
from hyperpod_inference_iac.charts.inference_chart import InferenceChart, WorkloadServiceAccount
from hyperpod_inference_iac.charts.inference_endpoint import InferenceEndpointConfig
from hyperpod_inference_iac.charts.network_policies import namespace_policies
from hyperpod_inference_iac.charts.nvme_cache import EKS_AL2023_NVME_ROOT, HYPERPOD_NVME_ROOT
from hyperpod_inference_iac.charts.plan import ModelWorkload, PlannedGatewayEntry, PortableWorkload, WorkloadPlan
from hyperpod_inference_iac.charts.pod_credentials import CredentialScope
from hyperpod_inference_iac.charts.pod_security import (
    CacheWriter,
    NamespaceSecurity,
    host_path_policy,
    namespace_metadata,
    namespace_security,
)
from hyperpod_inference_iac.charts.portable import PortableModelServerChart
from hyperpod_inference_iac.charts.token_policy import TokenHolder, holders_of_pod, token_audience_policy
from hyperpod_inference_iac.foundation.platform_values import AwaitingDeploy, PlatformValues

NAMESPACE_CHART = "namespace"


@dataclass
class RenderedWorkloads:
    namespace: cdk8s.Chart
    charts: dict[str, cdk8s.Chart] = field(default_factory=dict)
    # Charts left out because a value they need exists only after a deploy (chart id -> what it needs).
    waiting: dict[str, AwaitingDeploy] = field(default_factory=dict)
    # Which planned workload each chart renders.
    workloads: dict[str, ModelWorkload | PortableWorkload] = field(default_factory=dict)
    # Which planned gateway each gateway chart renders.
    gateways: dict[str, PlannedGateway] = field(default_factory=dict)
    # Which planned gateway entry each entry chart renders.
    entries: dict[str, PlannedGatewayEntry] = field(default_factory=dict)


def render_workloads(app: cdk8s.App, plan: WorkloadPlan, values: PlatformValues, *,
                     namespace_labels: Mapping[str, str] | None = None) -> RenderedWorkloads:
    """Every chart of ``plan`` in ``app``. A chart whose values are not all known is left out and listed
    in ``waiting`` (GitOps rendering before a deploy); nothing is ever rendered with a placeholder."""
    namespace_chart = cdk8s.Chart(app, NAMESPACE_CHART, disable_resource_name_hashes=True)
    for index, obj in enumerate(namespace_objects(plan, namespace_labels)):
        cdk8s.ApiObject(namespace_chart, f"{obj['kind']}-{obj['metadata']['name']}-{index}",
                        api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"]) \
            .add_json_patch(*(cdk8s.JsonPatch.add(f"/{key}", value) for key, value in obj.items()
                              if key not in ("apiVersion", "kind", "metadata")))
    rendered = RenderedWorkloads(namespace_chart)
    for item in plan.workloads:
        try:
            chart = _chart(app, item, plan, values)
        except AwaitingDeploy as awaiting:
            app.node.try_remove_child(item.chart_id)
            rendered.waiting[item.chart_id] = awaiting
            continue
        rendered.charts[item.chart_id] = chart
        rendered.workloads[item.chart_id] = item
    for gateway in plan.gateways:
        try:
            manifest = values.resolve(gateway.manifest())
        except AwaitingDeploy as awaiting:
            rendered.waiting[gateway.chart_id] = awaiting
            continue
        chart = cdk8s.Chart(app, gateway.chart_id, disable_resource_name_hashes=True)
        cdk8s.ApiObject(chart, f"{manifest['kind']}-{gateway.name}", api_version=manifest["apiVersion"],
                        kind=manifest["kind"], metadata=manifest["metadata"]) \
            .add_json_patch(cdk8s.JsonPatch.add("/spec", manifest["spec"]))
        rendered.charts[gateway.chart_id] = chart
        rendered.gateways[gateway.chart_id] = gateway
    for entry in plan.entries:
        try:
            rendered.charts[entry.chart_id] = GatewayEntryChart(app, entry.chart_id, entry=entry, values=values)
        except AwaitingDeploy as awaiting:
            app.node.try_remove_child(entry.chart_id)
            rendered.waiting[entry.chart_id] = awaiting
            continue
        rendered.entries[entry.chart_id] = entry
    holders = token_holders(plan, rendered)
    if holders:
        for obj in token_audience_policy(holders):
            cdk8s.ApiObject(namespace_chart, f"{obj['kind']}-{obj['metadata']['name']}", api_version=obj["apiVersion"],
                            kind=obj["kind"], metadata=obj["metadata"]).add_json_patch(
                cdk8s.JsonPatch.add("/spec", obj["spec"]))
    return rendered


def token_holders(plan: WorkloadPlan, rendered: RenderedWorkloads) -> list[TokenHolder]:
    """Every planned container that mounts a token of a platform audience: the operator models' loaders (from the
    plan: the operator copies them into its pods), the rendered portable pods' loaders and sidecars, and the gateway
    entries' sidecars."""
    holders: list[TokenHolder] = []
    for model in plan.models:
        workload = model.workload
        kubernetes = workload.effective_spec().kubernetes if isinstance(workload, InferenceEndpointConfig) else None
        if kubernetes is not None:
            pod = {"serviceAccountName": kubernetes.service_account_name, "volumes": list(kubernetes.volumes or ()),
                   "initContainers": list(kubernetes.init_containers or ())}
            holders += holders_of_pod(model.namespace or plan.context.namespace, pod, model.name)
    for chart_id, item in rendered.workloads.items():
        if isinstance(item, PortableWorkload):
            for manifest in rendered.charts[chart_id].to_json():
                if manifest["kind"] == "Deployment":
                    holders += holders_of_pod(item.namespace or plan.context.namespace,
                                              manifest["spec"]["template"]["spec"], manifest["metadata"]["name"])
    for chart_id, entry in rendered.entries.items():
        for manifest in rendered.charts[chart_id].to_json():
            if manifest["kind"] == "Deployment":
                holders += holders_of_pod(entry.namespace, manifest["spec"]["template"]["spec"],
                                          manifest["metadata"]["name"])
    return holders


def namespace_security_of(plan: WorkloadPlan, namespace: str | None = None) -> NamespaceSecurity:
    """What the pods of one namespace of the plan need of it (:func:`charts.pod_security.namespace_security`).
    @default namespace: the platform's"""
    namespace = namespace or plan.context.namespace
    part = plan.in_namespace(namespace)
    # Root: every model server image, and the capture sidecars' metrics agent, which runs in the platform's namespace
    # and in every namespace with a capturing sidecar (a portable server's, a gateway entry's).
    root_pods = bool(part.models or part.portable or part.entries) or namespace == plan.context.namespace
    return namespace_security(host_paths=bool(_cache_paths(part)), operator_pods=bool(part.models),
                              root_pods=root_pods)


def namespace_objects(plan: WorkloadPlan, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each namespace of the plan with its Pod Security labels and its network policies, and the host-path admission
    policy with its bindings when some namespace mounts a cache."""
    context = plan.context
    objects: list[dict[str, Any]] = []
    needs_policy = False
    for namespace in plan.namespaces:
        security = namespace_security_of(plan, namespace)
        needs_policy = needs_policy or security.host_path_action is not None
        objects.append({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": namespace_metadata(namespace, labels, security)})
        part = plan.in_namespace(namespace)
        objects += namespace_policies(namespace, vpc_cidr=context.vpc_cidr, operator_workloads=bool(part.models),
                                      gateway_schedulers=bool(part.gateways))
    if needs_policy:
        objects += host_path_policy(_cache_paths_by_namespace(plan), _cache_writers(plan))
    return objects


def _pod_volumes(item: ModelWorkload | PortableWorkload) -> list[Any]:
    if isinstance(item, PortableWorkload):
        return [item.server.model_cache.volume(EKS_AL2023_NVME_ROOT)]
    if isinstance(item.workload, InferenceEndpointConfig):
        kubernetes = item.workload.effective_spec().kubernetes
        return list(kubernetes.volumes or ()) if kubernetes is not None else []
    return []


def _cache_paths(plan: WorkloadPlan) -> list[str]:
    """Every host path a planned pod mounts: the NVMe caches, and a model's own hostPath volumes."""
    return sorted({path for paths in _cache_paths_by_namespace(plan).values() for path in paths})


def _cache_paths_by_namespace(plan: WorkloadPlan) -> dict[str, list[str]]:
    """The host paths the planned pods of each namespace mount."""
    paths: dict[str, set[str]] = {}
    for item in plan.workloads:
        for volume in _pod_volumes(item):
            if isinstance(volume, Mapping) and "hostPath" in volume:
                paths.setdefault(item.namespace or plan.context.namespace, set()).add(volume["hostPath"]["path"])
    return {namespace: sorted(found) for namespace, found in sorted(paths.items())}


def _cache_writers(plan: WorkloadPlan) -> list[CacheWriter]:
    """The one loader of each cache path: its namespace, service account, volume and container as planned."""
    writers = []
    for portable in plan.portable:
        cache = portable.server.model_cache
        writers.append(CacheWriter.of(host_path=cache.host_path(EKS_AL2023_NVME_ROOT),
                                      namespace=portable.namespace or plan.context.namespace,
                                      service_account=portable.service_account, volume=cache.volume_name,
                                      container=portable.loader_container(), workload=portable.name))
    for model in plan.models:
        workload = model.workload
        if isinstance(workload, InferenceEndpointConfig) and workload.nvme_cache is not None:
            cache, kubernetes = workload.nvme_cache, workload.effective_spec().kubernetes
            writers.append(CacheWriter.of(host_path=cache.host_path(HYPERPOD_NVME_ROOT),
                                          namespace=model.namespace or plan.context.namespace,
                                          service_account=kubernetes.service_account_name if kubernetes else None,
                                          volume=cache.volume_name, container=cache.init_container(),
                                          workload=model.name))
    return sorted(set(writers), key=lambda w: (w.namespace, w.host_path, w.container_json))


def _chart(app: cdk8s.App, item: ModelWorkload | PortableWorkload, plan: WorkloadPlan,
           values: PlatformValues) -> cdk8s.Chart:
    namespace = item.namespace or plan.context.namespace
    if isinstance(item, PortableWorkload):
        return PortableModelServerChart(app, item.chart_id, workload=item, namespace=namespace, values=values)
    # The service account carries the role only when every container may use it; a loader's role reaches the loader
    # alone, through its own token (the plan put it into the loader's container).
    identity = item.identity
    accounts = [WorkloadServiceAccount(
        name=identity.service_account,
        role_arn=identity.role_arn if identity.scope is CredentialScope.POD else None)] if identity is not None else []
    return InferenceChart(app, item.chart_id, namespace=namespace, models=[item.workload], service_accounts=accounts,
                          custom_service_accounts_enabled=plan.context.custom_service_accounts_enabled,
                          values=values, checked=True)

"""A :class:`~hyperpod_inference_iac.charts.plan.WorkloadPlan` as cdk8s charts: the namespace, then one small
chart per workload, in a fixed order. The CDK app and the GitOps hand-off both call :func:`render_workloads`
on the same plan, with their own :class:`~hyperpod_inference_iac.platform_values.PlatformValues`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import cdk8s

from hyperpod_inference_iac.charts.inference_chart import InferenceChart, WorkloadServiceAccount
from hyperpod_inference_iac.charts.plan import ModelWorkload, PortableWorkload, WorkloadPlan
from hyperpod_inference_iac.charts.pod_security import namespace_metadata
from hyperpod_inference_iac.charts.portable import PortableModelServerChart
from hyperpod_inference_iac.platform_values import AwaitingDeploy, PlatformValues

NAMESPACE_CHART = "namespace"


@dataclass
class RenderedWorkloads:
    namespace: cdk8s.Chart
    charts: dict[str, cdk8s.Chart] = field(default_factory=dict)
    # Charts left out because a value they need exists only after a deploy (chart id -> what it needs).
    waiting: dict[str, AwaitingDeploy] = field(default_factory=dict)
    # Which planned workload each chart renders.
    workloads: dict[str, ModelWorkload | PortableWorkload] = field(default_factory=dict)


def render_workloads(app: cdk8s.App, plan: WorkloadPlan, values: PlatformValues, *,
                     namespace_labels: Mapping[str, str] | None = None) -> RenderedWorkloads:
    """Every chart of ``plan`` in ``app``. A chart whose values are not all known is left out and listed
    in ``waiting`` (GitOps rendering before a deploy); nothing is ever rendered with a placeholder."""
    context = plan.context
    namespace_chart = cdk8s.Chart(app, NAMESPACE_CHART, disable_resource_name_hashes=True)
    cdk8s.ApiObject(namespace_chart, "namespace", api_version="v1", kind="Namespace",
                    metadata=namespace_metadata(context.namespace, namespace_labels))
    rendered = RenderedWorkloads(namespace_chart)
    for item in (*plan.models, *plan.portable):
        try:
            chart = _chart(app, item, plan, values)
        except AwaitingDeploy as awaiting:
            app.node.try_remove_child(item.chart_id)
            rendered.waiting[item.chart_id] = awaiting
            continue
        rendered.charts[item.chart_id] = chart
        rendered.workloads[item.chart_id] = item
    return rendered


def _chart(app: cdk8s.App, item: ModelWorkload | PortableWorkload, plan: WorkloadPlan,
           values: PlatformValues) -> cdk8s.Chart:
    namespace = plan.context.namespace
    if isinstance(item, PortableWorkload):
        return PortableModelServerChart(app, item.chart_id, workload=item, namespace=namespace, values=values)
    accounts = [WorkloadServiceAccount(name=item.identity.service_account, role_arn=item.identity.role_arn)] \
        if item.identity is not None else []
    return InferenceChart(app, item.chart_id, namespace=namespace, models=[item.workload], service_accounts=accounts,
                          custom_service_accounts_enabled=plan.context.custom_service_accounts_enabled,
                          values=values, checked=True)

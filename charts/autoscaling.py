"""``spec.autoScalingSpec``: the operator's KEDA autoscaling, with scale from zero (both kinds, same block).

The operator turns this block into a KEDA ``ScaledObject`` for the model's Deployment. KEDA's operator reads
the metrics with its own role (the add-on's ``keda`` IRSA role), so what the triggers read is what that role
must be allowed: :meth:`AutoScalingSpec.scaling_metrics` says exactly that, and
:class:`~hyperpod_inference_iac.InferenceOperator` grants nothing more.

Field meanings, defaults and the rules the CRD states only in prose come from the operator's documentation
"Autoscaling policies for your HyperPod inference model deployment"
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-model-deployment-autoscaling.html) and
the CRD (chart 2.3.0).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.foundation.scaling_metrics import AMP_WORKSPACE_URL, PrometheusWorkspace, ScalingMetrics
from hyperpod_inference_iac.foundation.validation import Problems, is_unresolved, join_path

# Kubernetes caps an HPA stabilization window at one hour (HorizontalPodAutoscalerBehavior).
MAX_STABILIZATION_SECONDS = 3600
# The statistics KEDA's CloudWatch scaler accepts (its checkMetricStat: CloudWatch's Statistic values; no
# percentiles), and the periods it accepts (checkMetricStatPeriod: 1, 5, 10, 30, 60 or a multiple of 60).
# Source: kedacore/keda pkg/scalers/aws_cloudwatch_scaler.go.
CLOUDWATCH_STATISTIC = r"^(Average|Sum|Minimum|Maximum|SampleCount)$"
# The defaults of the CRD, used where a rule needs the effective value of an unset field.
DEFAULT_MIN_REPLICAS = 1
DEFAULT_MAX_REPLICAS = 5
DEFAULT_COLLECTION_PERIOD = 300
DEFAULT_COLLECTION_START = 300


class MetricType(enum.StrEnum):
    """How HPA uses the metric: ``Average`` per pod (desired = metric / target) or the ``Value`` itself."""

    AVERAGE = "Average"
    VALUE = "Value"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MetricDimension(SpecBlock):
    name: str
    value: str


def _seconds(code: str, *, maximum: int | None = None) -> Any:
    return crd_field(default=None, code=code, minimum=0, maximum=maximum)


def _check_target(target: float, path: str, problems: Problems) -> None:
    if target <= 0:
        problems.add("AutoScaling.TargetValueOutOfRange", join_path(path, "targetValue"),
                     "must be greater than 0: HPA divides the metric by it", target)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CloudWatchTrigger(SpecBlock):
    """One CloudWatch metric KEDA scales on. ``namespace``, ``metric_name`` and ``target_value`` are required
    (the operator's documentation marks them so); the rest keep the CRD defaults when ``None``."""

    namespace: str
    metric_name: str
    target_value: float
    name: str | None = None
    dimensions: tuple[MetricDimension, ...] | None = None
    metric_stat: str | None = crd_field(
        default=None, code="AutoScaling.MetricStatInvalid", pattern=CLOUDWATCH_STATISTIC,
        hint="a statistic KEDA's CloudWatch scaler accepts: Average, Sum, Minimum, Maximum or SampleCount")
    metric_type: MetricType | None = crd_field(default=None, code="AutoScaling.MetricTypeInvalid", allowed=MetricType)
    activation_target_value: float | None = crd_field(
        default=None, code="AutoScaling.ActivationValueOutOfRange", minimum=0)
    min_value: float | None = None
    metric_collection_period: int | None = None
    metric_collection_start_time: int | None = None
    use_cached_metrics: bool | None = None

    @classmethod
    def sagemaker_invocations(cls, *, endpoint_name: str, target_value: float, activation_target_value: float = 0,
                              period_seconds: int = 60) -> CloudWatchTrigger:
        """Requests per period at the model's SageMaker endpoint (``AWS/SageMaker`` ``Invocations``, ``Sum``, variant
        ``AllTraffic``): the trigger the operator's documentation uses. Counted by SageMaker, not by the pods, so it
        also wakes a deployment scaled to zero. Needs the workload's SageMaker endpoint (``endpointName``)."""
        return cls(namespace="AWS/SageMaker", metric_name="Invocations", target_value=target_value,
                   metric_stat="Sum", metric_type=MetricType.AVERAGE, min_value=0,
                   activation_target_value=activation_target_value, metric_collection_period=period_seconds,
                   metric_collection_start_time=max(period_seconds, DEFAULT_COLLECTION_START),
                   dimensions=(MetricDimension(name="EndpointName", value=endpoint_name),
                               MetricDimension(name="VariantName", value="AllTraffic")))

    @classmethod
    def alb_request_count(cls, *, load_balancer: str, target_value: float, activation_target_value: float = 0,
                          period_seconds: int = 60) -> CloudWatchTrigger:
        """Requests per period at the model's Application Load Balancer (``AWS/ApplicationELB`` ``RequestCount``,
        ``Sum``). ``load_balancer`` is the ALB's CloudWatch dimension, ``app/<name>/<id>``, known once the operator
        has created the load balancer. Counted at the ALB, so it also wakes a deployment scaled to zero."""
        return cls(namespace="AWS/ApplicationELB", metric_name="RequestCount", target_value=target_value,
                   metric_stat="Sum", metric_type=MetricType.AVERAGE, min_value=0,
                   activation_target_value=activation_target_value, metric_collection_period=period_seconds,
                   metric_collection_start_time=max(period_seconds, DEFAULT_COLLECTION_START),
                   dimensions=(MetricDimension(name="LoadBalancer", value=load_balancer),))

    def check_rules(self, path: str, problems: Problems) -> None:
        _check_target(self.target_value, path, problems)
        period = self.metric_collection_period
        if period is not None and not (period in (1, 5, 10, 30) or (period > 0 and period % 60 == 0)):
            problems.add("AutoScaling.CollectionPeriodInvalid", join_path(path, "metricCollectionPeriod"),
                         "must be a period CloudWatch supports: 1, 5, 10, 30 or a multiple of 60 seconds", period)
        start = self.metric_collection_start_time
        effective_period = period if period is not None else DEFAULT_COLLECTION_PERIOD
        effective_start = start if start is not None else DEFAULT_COLLECTION_START
        if effective_start < effective_period:
            problems.add("AutoScaling.CollectionStartTooShort", join_path(path, "metricCollectionStartTime"),
                         f"must be at least metricCollectionPeriod ({effective_period} s): the query looks back this "
                         f"far{'' if start is not None else ' (unset: the CRD default 300)'}", effective_start)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrometheusTrigger(SpecBlock):
    """One PromQL query KEDA scales on, against an Amazon Managed Service for Prometheus workspace (the CRD
    accepts no other server). The query must return one value."""

    server_address: str = crd_field(
        code="AutoScaling.PrometheusServerInvalid", pattern=AMP_WORKSPACE_URL,
        hint="an Amazon Managed Service for Prometheus workspace URL, "
             "https://aps-workspaces.<region>.amazonaws.com/workspaces/ws-<id>")
    query: str
    target_value: float
    name: str | None = None
    namespace: str | None = None
    custom_headers: str | None = None
    metric_type: MetricType | None = crd_field(default=None, code="AutoScaling.MetricTypeInvalid", allowed=MetricType)
    activation_target_value: float | None = crd_field(
        default=None, code="AutoScaling.ActivationValueOutOfRange", minimum=0)
    use_cached_metrics: bool | None = None

    def check_rules(self, path: str, problems: Problems) -> None:
        _check_target(self.target_value, path, problems)
        if not self.query.strip():
            problems.add("AutoScaling.PrometheusQueryEmpty", join_path(path, "query"), "must be a PromQL query")

    @property
    def workspace(self) -> PrometheusWorkspace | None:
        return None if is_unresolved(self.server_address) else PrometheusWorkspace.from_url(self.server_address)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoScalingSpec(SpecBlock):
    """KEDA autoscaling of one deployment. ``min_replica_count=0`` scales to zero when idle (then
    ``cooldown_period`` says how long the last trigger must stay inactive first, and each trigger's
    ``activation_target_value`` what wakes it). Give the triggers as lists (one or more); the CRD's single
    ``cloudWatchTrigger`` / ``prometheusTrigger`` are accepted too, but not beside a list of the same kind."""

    min_replica_count: int | None = crd_field(default=None, code="AutoScaling.ReplicasOutOfRange", minimum=0)
    max_replica_count: int | None = crd_field(default=None, code="AutoScaling.ReplicasOutOfRange", minimum=1)
    polling_interval: int | None = _seconds("AutoScaling.IntervalOutOfRange")
    cooldown_period: int | None = _seconds("AutoScaling.IntervalOutOfRange")
    initial_cooldown_period: int | None = _seconds("AutoScaling.IntervalOutOfRange")
    scale_down_stabilization_time: int | None = _seconds(
        "AutoScaling.StabilizationOutOfRange", maximum=MAX_STABILIZATION_SECONDS)
    scale_up_stabilization_time: int | None = _seconds(
        "AutoScaling.StabilizationOutOfRange", maximum=MAX_STABILIZATION_SECONDS)
    cloud_watch_trigger: CloudWatchTrigger | None = None
    cloud_watch_trigger_list: tuple[CloudWatchTrigger, ...] | None = crd_field(
        default=None, code="AutoScaling.TriggerCountInvalid", min_items=1, max_items=100)
    prometheus_trigger: PrometheusTrigger | None = None
    prometheus_trigger_list: tuple[PrometheusTrigger, ...] | None = crd_field(
        default=None, code="AutoScaling.TriggerCountInvalid", min_items=1, max_items=100)

    @property
    def effective_min(self) -> int:
        return DEFAULT_MIN_REPLICAS if self.min_replica_count is None else self.min_replica_count

    @property
    def effective_max(self) -> int:
        return DEFAULT_MAX_REPLICAS if self.max_replica_count is None else self.max_replica_count

    @property
    def cloud_watch_triggers(self) -> tuple[CloudWatchTrigger, ...]:
        single = (self.cloud_watch_trigger,) if self.cloud_watch_trigger is not None else ()
        return (*single, *(self.cloud_watch_trigger_list or ()))

    @property
    def prometheus_triggers(self) -> tuple[PrometheusTrigger, ...]:
        single = (self.prometheus_trigger,) if self.prometheus_trigger is not None else ()
        return (*single, *(self.prometheus_trigger_list or ()))

    def scaling_metrics(self) -> ScalingMetrics:
        """What KEDA must be allowed to read for these triggers."""
        workspaces = tuple(w for t in self.prometheus_triggers if (w := t.workspace) is not None)
        return ScalingMetrics(cloudwatch=bool(self.cloud_watch_triggers), prometheus_workspaces=workspaces)

    def check_rules(self, path: str, problems: Problems) -> None:
        if not self.cloud_watch_triggers and not self.prometheus_triggers:
            problems.add("AutoScaling.NoTrigger", path,
                         "needs at least one trigger (cloudWatchTriggerList or prometheusTriggerList): without "
                         "one KEDA has nothing to scale on")
        for single, listed, key in ((self.cloud_watch_trigger, self.cloud_watch_trigger_list, "cloudWatchTrigger"),
                                    (self.prometheus_trigger, self.prometheus_trigger_list, "prometheusTrigger")):
            if single is not None and listed:
                problems.add("AutoScaling.TriggerShadowed", join_path(path, key),
                             f"is ignored by the operator beside {key}List (the list takes priority): move it into "
                             "the list")
        if self.effective_min > self.effective_max:
            given = "minReplicaCount" if self.min_replica_count is not None else "maxReplicaCount"
            problems.add("AutoScaling.MinAboveMax", join_path(path, given),
                         f"minReplicaCount ({self.effective_min}) must not exceed maxReplicaCount "
                         f"({self.effective_max}; unset values take the CRD defaults 1 and 5)", self.effective_min)

    def check_replicas(self, replicas: int | None, path: str, problems: Problems) -> None:
        """``spec.replicas`` (the initial pod count) within the range KEDA will keep it in."""
        if replicas is not None and not self.effective_min <= replicas <= self.effective_max:
            problems.add("AutoScaling.ReplicasOutsideRange", join_path(path, "replicas"),
                         f"must lie within autoScalingSpec's {self.effective_min}..{self.effective_max} (KEDA moves it "
                         "there at once)", replicas)


__all__ = [
    "AutoScalingSpec",
    "CloudWatchTrigger",
    "MetricDimension",
    "MetricType",
    "PrometheusTrigger",
]

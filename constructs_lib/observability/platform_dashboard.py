"""PlatformDashboard: one CloudWatch dashboard for the on-call engineer of the inference platform.

Rows, top to bottom: the state of every alarm given; capture volume per tier (records and bytes the processor
read); processor throughput and errors (objects, curated files, failed messages, errors, throttles, the
longest invocation against its timeout); quarantined lines per tier and the queues (dead-letter depth, the age
of the oldest event); days left on each certificate; with sidecar metrics, what the capture sidecars
captured, uploaded and lost, and, with budget alerts, the callers past each level of their budgets (a count per
level and who, from the agent's log events); and, with model metrics, each operator model's requests, error rate,
mean latency and time to first token, and its custom resource's state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Duration
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from hyperpod_inference_iac.capture.capture_pipeline import FUNCTION_TIMEOUT, CapturePipeline
from hyperpod_inference_iac.foundation.props import Props, listed, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved
from hyperpod_inference_iac.observability.alarms import imported_alarms
from hyperpod_inference_iac.observability.budget_alarms import BUDGET_ALERTS, budget_crossings_query
from hyperpod_inference_iac.observability.capture_alarms import TIERS, processor_metric
from hyperpod_inference_iac.observability.certificate_alarms import DAYS_TO_EXPIRY, MANAGED_RENEWAL_DAYS
from hyperpod_inference_iac.observability.model_metrics import KEPT_STATES, MODEL_STATE, ModelServingMetrics
from hyperpod_inference_iac.observability.sidecar_metrics import (
    DROP_REASONS,
    RECORDS_CAPTURED,
    RECORDS_DROPPED,
    RECORDS_UPLOADED,
    REQUESTS_REJECTED,
    UPLOAD_RESULTS,
    UPLOADS,
    CaptureSidecarMetrics,
    format_bound,
)

FIVE_MINUTES = Duration.minutes(5)
DASHBOARD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")  # PutDashboard's rule


@dataclass(frozen=True, kw_only=True)
class PlatformDashboardProps(Props):
    """:class:`PlatformDashboard`'s properties (only Python code passes them: the app's ``alarms.dashboard`` decides
    whether it makes one, named after ``project``)."""

    CONSTRUCT: ClassVar[str] = "PlatformDashboard"

    dashboard_name: str = prop(config=False, doc="The dashboard's name (1-255 letters, digits, '_', '-').")
    pipeline: CapturePipeline | None = prop(None, config=False, default_doc="none",
                                            doc="The capture pipeline whose processor and queues are shown.")
    tiers: Sequence[str] = prop(TIERS, config=False, doc="The capture tiers to plot (`sme`, `pod`, `alb`).")
    certificates: Mapping[str, acm.ICertificate] | None = prop(None, config=False, default_doc="none",
                                                               doc="Label -> certificate whose days left are shown.")
    sidecar_metrics: CaptureSidecarMetrics | None = prop(None, config=False, default_doc="none",
                                                         doc="The capture sidecars' metrics (`CaptureSidecarMetrics`).")
    model_metrics: ModelServingMetrics | None = prop(
        None, config=False, default_doc="none",
        doc="The operator models' metrics (`ModelServingMetrics`): per model, requests, error rate, latency, TTFT and "
            "custom resource state.")
    alarms: Sequence[cloudwatch.IAlarm] = prop(
        (), config=False, doc="Shown in an alarm status widget at the top, most recently changed first (alarms of "
                              "another stack are referenced by their fixed names, without exports).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        code = "PlatformDashboard"
        dashboard_name = self.dashboard_name
        if not is_unresolved(dashboard_name) and not DASHBOARD_NAME.match(dashboard_name):
            problems.add(f"{code}.BadName", at.at("dashboard_name"),
                         "must be 1-255 letters, digits, '_' or '-' (a CloudWatch dashboard name)", dashboard_name)
        for index, tier in enumerate(self.tiers):
            if tier not in TIERS:
                problems.add(f"{code}.UnknownTier", at.at("tiers", index), f"must be one of {', '.join(TIERS)}",
                             tier)


def check_platform_dashboard(problems: Problems, at: KeyPaths = PROPS, **options: Any) -> None:
    """:meth:`PlatformDashboardProps.check` of these properties (kept for callers of 0.2.0)."""
    PlatformDashboardProps(**options).check(problems, at)


@real_signature
class PlatformDashboard(Construct):
    """The platform's dashboard (``AWS::CloudWatch::Dashboard``); every part is optional.

    Properties: :class:`PlatformDashboardProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``dashboard``, ``dashboard_name``.
    """

    PROPS: ClassVar[type[Props]] = PlatformDashboardProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dashboard_name: str,
        pipeline: CapturePipeline | None = PlatformDashboardProps.pipeline,
        tiers: Sequence[str] = PlatformDashboardProps.tiers,
        certificates: Mapping[str, acm.ICertificate] | None = PlatformDashboardProps.certificates,
        sidecar_metrics: CaptureSidecarMetrics | None = PlatformDashboardProps.sidecar_metrics,
        model_metrics: ModelServingMetrics | None = PlatformDashboardProps.model_metrics,
        alarms: Sequence[cloudwatch.IAlarm] = PlatformDashboardProps.alarms,
    ) -> None:
        """Create the construct. Its properties (:class:`PlatformDashboardProps`, kept as ``self.props``):

        :param dashboard_name: The dashboard's name (1-255 letters, digits, '_', '-'). Default: required.
        :param pipeline: The capture pipeline whose processor and queues are shown. Default: ``None`` (none).
        :param tiers: The capture tiers to plot (`sme`, `pod`, `alb`). Default: ``('sme', 'pod', 'alb')``.
        :param certificates: Label -> certificate whose days left are shown. Default: ``None`` (none).
        :param sidecar_metrics: The capture sidecars' metrics (`CaptureSidecarMetrics`). Default: ``None``
            (none).
        :param model_metrics: The operator models' metrics (`ModelServingMetrics`): per model, requests, error
            rate, latency, TTFT and custom resource state. Default: ``None`` (none).
        :param alarms: Shown in an alarm status widget at the top, most recently changed first (alarms of
            another stack are referenced by their fixed names, without exports). Default: ``()``.
        """
        super().__init__(scope, id)
        self.props = props = PlatformDashboardProps(
            dashboard_name=dashboard_name, pipeline=pipeline, tiers=listed(tiers),
            certificates=None if certificates is None else dict(certificates), sidecar_metrics=sidecar_metrics,
            model_metrics=model_metrics, alarms=listed(alarms))
        props.raise_if_invalid(f"PlatformDashboard {self.node.path}")
        pipeline, certificates, sidecar_metrics, alarms = props.pipeline, props.certificates, props.sidecar_metrics, \
            props.alarms
        tiers = [tier for tier in TIERS if tier in props.tiers]
        rows: list[list[cloudwatch.IWidget]] = []
        if alarms:
            rows.append([cloudwatch.AlarmStatusWidget(
                title="Alarms", alarms=imported_alarms(self, alarms), width=24,
                height=2 + (len(alarms) + 3) // 4, sort_by=cloudwatch.AlarmStatusWidgetSortBy.STATE_UPDATED_TIMESTAMP)])
        if pipeline is not None:
            rows.extend(self._capture_rows(pipeline, tiers))
        if certificates:
            rows.append([cloudwatch.GraphWidget(
                title="Certificate days left (ACM DaysToExpiry)", width=24, height=5,
                left=[cert.metric_days_to_expiry(statistic="Minimum", label=label, period=Duration.days(1))
                      for label, cert in certificates.items()],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=MANAGED_RENEWAL_DAYS, label="ACM renewal starts"),
                    cloudwatch.HorizontalAnnotation(value=DAYS_TO_EXPIRY.threshold, label="alarm (default)")],
                left_y_axis=cloudwatch.YAxisProps(min=0, label="days", show_units=False))])
        if sidecar_metrics is not None:
            rows.append(self._sidecar_row(sidecar_metrics))
            if sidecar_metrics.budget_query is not None:
                rows.append(self._budget_row(sidecar_metrics))
        if props.model_metrics is not None:
            rows.extend(self._model_rows(props.model_metrics))
        self.dashboard_name = dashboard_name
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=dashboard_name,
                                              default_interval=Duration.days(1), widgets=rows)

    @staticmethod
    def _capture_rows(pipeline: CapturePipeline, tiers: Sequence[str]) -> list[list[cloudwatch.IWidget]]:
        function, name = pipeline.function, pipeline.metrics_pipeline
        per_tier: list[cloudwatch.IWidget] = [
            cloudwatch.GraphWidget(title="Capture volume per tier (records)", width=12, height=6, stacked=True,
                                   left=[processor_metric("Records", pipeline=name, tier=t, label=t) for t in tiers]),
            cloudwatch.GraphWidget(title="Capture volume per tier (bytes read)", width=12, height=6, stacked=True,
                                   left=[processor_metric("SourceBytes", pipeline=name, tier=t, label=t)
                                         for t in tiers]),
        ]
        processor: list[cloudwatch.IWidget] = [
            cloudwatch.GraphWidget(
                title="Processor throughput", width=8, height=6,
                left=[processor_metric("Objects", pipeline=name, tier=t, label=f"objects {t}") for t in tiers],
                right=[processor_metric("FilesWritten", pipeline=name, tier=t, label=f"curated files {t}")
                       for t in tiers],
                left_y_axis=cloudwatch.YAxisProps(label="objects", show_units=False),
                right_y_axis=cloudwatch.YAxisProps(label="curated files", show_units=False)),
            cloudwatch.GraphWidget(
                title="Processor errors", width=8, height=6,
                left=[processor_metric("FailedMessages", pipeline=name, label="FailedMessages"),
                      function.metric_errors(statistic="Sum", period=FIVE_MINUTES, label="Errors"),
                      function.metric_throttles(statistic="Sum", period=FIVE_MINUTES, label="Throttles")]),
            cloudwatch.GraphWidget(
                title="Processor duration", width=8, height=6,
                left=[function.metric_duration(statistic="Maximum", period=FIVE_MINUTES, label="Maximum"),
                      function.metric_duration(statistic="p90", period=FIVE_MINUTES, label="p90")],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=FUNCTION_TIMEOUT.to_milliseconds(),
                                                                  label="timeout")]),
        ]
        quality: list[cloudwatch.IWidget] = [
            cloudwatch.GraphWidget(title="Quarantined lines per tier", width=12, height=6, stacked=True,
                                   left=[processor_metric("QuarantinedLines", pipeline=name, tier=t, label=t)
                                         for t in tiers]),
            cloudwatch.GraphWidget(
                title="Queues", width=12, height=6,
                left=[pipeline.dead_letter_queue.metric_approximate_number_of_messages_visible(
                    statistic="Maximum", period=FIVE_MINUTES, label="dead letters")],
                right=[pipeline.queue.metric_approximate_age_of_oldest_message(
                    statistic="Maximum", period=FIVE_MINUTES, label="oldest event (s)")],
                left_y_axis=cloudwatch.YAxisProps(min=0, label="messages", show_units=False),
                right_y_axis=cloudwatch.YAxisProps(min=0, label="seconds", show_units=False)),
        ]
        return [per_tier, processor, quality]

    @staticmethod
    def _model_rows(metrics: ModelServingMetrics) -> list[list[cloudwatch.IWidget]]:
        """Per model with an engine: requests, error rate, the share of requests slower than the latency and TTFT
        alarms' bounds; then every model's state."""
        served = [m for m in metrics.models if m.engine is not None]
        rows: list[list[cloudwatch.IWidget]] = []
        if served:
            rows.append([
                cloudwatch.GraphWidget(title="Operator models: finished requests", width=6, height=6,
                                       left=[metrics.math("requests", m) for m in served]),
                cloudwatch.GraphWidget(title="Operator models: failed requests (%)", width=6, height=6,
                                       left=[metrics.math("error_rate", m) for m in served]),
                cloudwatch.GraphWidget(
                    title=f"Operator models: requests over {format_bound(metrics.bound('latency'))} s end to end (%, "
                          "p90 above it over 10)", width=6, height=6,
                    left=[metrics.math("latency", m) for m in served]),
                cloudwatch.GraphWidget(
                    title=f"Operator models: first token after {format_bound(metrics.bound('time_to_first_token'))} "
                          "s (%, p90 above it over 10)", width=6, height=6,
                    left=[metrics.math("time_to_first_token", m) for m in served]),
            ])
        rows.append([cloudwatch.GraphWidget(
            title="Operator models: custom resource state (1 = in that state)", width=24, height=5,
            left=[metrics.metric(MODEL_STATE, m, statistic="Maximum", state=state, label=f"{m.name} {state}")
                  for m in metrics.models for state in KEPT_STATES],
            left_y_axis=cloudwatch.YAxisProps(min=0, max=1, show_units=False))])
        return rows

    @staticmethod
    def _budget_row(metrics: CaptureSidecarMetrics) -> list[cloudwatch.IWidget]:
        """Callers past each budget level (one series per level, no caller dimension), and who they are: the saved
        query's table over the agent's log events (Logs Insights bills the bytes it scans, when the widget is seen)."""
        return [
            cloudwatch.GraphWidget(
                title=f"Budgets in {metrics.namespace}: callers past each level", width=8, height=6, stacked=True,
                left=[metrics.metric(BUDGET_ALERTS, percent=str(percent), label=f"{percent} %")
                      for percent in metrics.budget_alert_percents],
                left_y_axis=cloudwatch.YAxisProps(min=0, label="crossings", show_units=False)),
            cloudwatch.LogQueryWidget(
                title="Budgets: who crossed which level (callers, servers, windows)", width=16, height=6,
                log_group_names=[metrics.log_group_name], query_string=budget_crossings_query(100),
                view=cloudwatch.LogQueryVisualizationType.TABLE),
        ]

    @staticmethod
    def _sidecar_row(metrics: CaptureSidecarMetrics) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(title=f"Capture sidecars in {metrics.namespace}: records", width=8, height=6,
                                   left=[metrics.metric(RECORDS_CAPTURED, label="captured"),
                                         metrics.metric(RECORDS_UPLOADED, label="uploaded")],
                                   right=[metrics.metric(REQUESTS_REJECTED, label="requests answered 503")]),
            cloudwatch.GraphWidget(title="Capture sidecars: records lost, by reason", width=8, height=6, stacked=True,
                                   left=[metrics.metric(RECORDS_DROPPED, reason=r, label=r) for r in DROP_REASONS]),
            cloudwatch.GraphWidget(title="Capture sidecars: S3 uploads", width=8, height=6,
                                   left=[metrics.metric(UPLOADS, result=r, label=r) for r in UPLOAD_RESULTS]),
        ]

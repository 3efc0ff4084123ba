"""Alarms before a budget runs out (docs/usage-and-budgets.md#3-alarms-before-a-budget-runs-out, docs/alarms.md,
section ``sidecar-budget-threshold``).

The capture sidecar reports each caller's crossing of a level of a day or month budget once, across replicas (the
store's grant script marks it: capture_sidecar.limits). Two series carry it to CloudWatch through the sidecars'
metrics agent (:class:`~hyperpod_inference_iac.CaptureSidecarMetrics`):

- ``capture_sidecar_budget_alerts_total{limit, percent}``, a counter without the caller: the agent makes it ONE
  metric per level and namespace (dimensions ``ClusterName``, ``Namespace``, ``percent``), and one alarm per level
  fires when any caller crossed it. The cost does not grow with the callers;
- ``capture_sidecar_budget_threshold_crossed{caller_id, limit, percent, window}``, a gauge the replica that reported a
  crossing shows for 15 minutes: the agent writes it as log events of its log group and no metric is declared for
  it, so the caller is a field to query (the saved Logs Insights query, the dashboard's table), never a dimension.

Nothing here imports the sidecar (runtime code); the series' names and labels are kept in step by tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_logs as logs
from constructs import Construct

from hyperpod_inference_iac.observability.alarms import AlarmSettings, AlarmWiring

# What the sidecar exposes (sidecar/capture_sidecar/metrics.py).
BUDGET_ALERTS = "capture_sidecar_budget_alerts_total"  # {limit, percent}
BUDGET_CROSSED = "capture_sidecar_budget_threshold_crossed"  # {caller_id, limit, percent, window}
CROSSED_LABELS = ("caller_id", "limit", "percent", "window")
# The agent's label of the server (the pod's app.kubernetes.io/name), added to every series it scrapes.
WORKLOAD_LABEL = "Workload"
# The default levels (the sidecar's DEFAULT_ALERT_PERCENTS, usageLimits.alertPercents).
DEFAULT_BUDGET_PERCENTS = (80, 100)
# Any crossing in 5 minutes: each is counted once, by one replica.
BUDGET_THRESHOLD = AlarmSettings(threshold=0, period=Duration.minutes(5))
ANCHOR = "sidecar-budget-threshold"


def budget_crossings_query(limit: int = 1000) -> str:
    """The Logs Insights query that names who crossed what (the agent's log events of the crossed gauge: one per
    scrape while a replica shows it, so the first and last time it was seen)."""
    return "\n".join([
        f"fields @timestamp, {', '.join(CROSSED_LABELS)}, {WORKLOAD_LABEL}, Namespace",
        f"| filter ispresent({BUDGET_CROSSED})",
        f"| stats min(@timestamp) as firstSeen, max(@timestamp) as lastSeen by caller_id, {WORKLOAD_LABEL}, "
        "limit, window, percent",
        "| sort percent desc, firstSeen desc",
        f"| limit {limit}",
    ])


def budget_alarm_name(percent: int) -> str:
    return f"sidecar-budget-{percent}-percent"


def budget_alarm_suffixes(percents: Sequence[int]) -> dict[str, str]:
    """The budget alarms, key ``budget_threshold:<percent>`` -> name suffix, one per level (none without levels)."""
    return {f"budget_threshold:{percent}": budget_alarm_name(percent) for percent in sorted(set(percents))}


def add_budget_alarms(scope: Construct, *, wiring: AlarmWiring, settings: AlarmSettings, percents: Sequence[int],
                      metric: cloudwatch.Metric, namespace: str, log_group: logs.ILogGroup, log_group_name: str,
                      query_name: str, suffixes: Mapping[str, str] | None = None,
                      ) -> tuple[dict[str, cloudwatch.Alarm], logs.CfnQueryDefinition]:
    """One alarm per level (``metric`` is the alerts counter of the namespace, without ``percent``: it is added),
    named ``<prefix>-sidecar-budget-<percent>-percent``, and the saved query on the agent's log group. Returns the
    alarms by key ``budget_threshold:<percent>`` and the query (on ``log_group``, by its literal name)."""
    query = logs.CfnQueryDefinition(scope, "BudgetCrossingsQuery", name=query_name,
                                    query_string=budget_crossings_query(), log_group_names=[log_group_name])
    query.node.add_dependency(log_group)
    alarms: dict[str, cloudwatch.Alarm] = {}
    suffixes = {**budget_alarm_suffixes(percents), **(suffixes or {})}
    for percent in sorted(set(percents)):
        dimensions = {**(metric.dimensions or {}), "percent": str(percent)}
        level = cloudwatch.Metric(namespace=metric.namespace, metric_name=metric.metric_name,
                                  dimensions_map=dimensions, statistic="Sum", period=settings.period)
        alarms[f"budget_threshold:{percent}"] = wiring.alarm(
            scope, f"BudgetThreshold{percent}", suffix=suffixes[f"budget_threshold:{percent}"], anchor=ANCHOR,
            text=f"A caller of a portable server in {namespace} has used {percent} % of a day or month token budget "
                 f"(usageLimits){' and is now refused (429)' if percent >= 100 else ''}. Who: the Logs Insights "
                 f"query {query_name} (caller, server, limit, window).",
            metric=level, settings=settings, comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING)
    return alarms, query


__all__ = ["BUDGET_ALERTS", "BUDGET_CROSSED", "BUDGET_THRESHOLD", "CROSSED_LABELS", "DEFAULT_BUDGET_PERCENTS",
           "add_budget_alarms", "budget_alarm_suffixes",
           "budget_crossings_query"]

"""Budget alarms (docs/usage-and-budgets.md#3-alarms-before-a-budget-runs-out): one metric and one alarm per level on
the platform's topic whatever the number of callers, the caller never a dimension (a field of the agent's log
events, named by a saved Logs Insights query and the dashboard's table), the names and labels the sidecar exposes,
the levels from each portable server's and gateway entry's usageLimits, and their rules with key paths."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Template

from hyperpod_inference_iac import CaptureSidecarMetrics, PlatformDashboard, sidecar_metrics_manifests
from hyperpod_inference_iac.foundation.validation import ConfigError
from hyperpod_inference_iac.observability import budget_alarms
from platform_config.loader import parse_config
from tests.support.synth import REPO
from tests.unit.test_alarms import REGION, _alarms_by_name, _cluster_stack, _joined, _only, _topic
from tests.unit.test_config import _with

BASE_DIMENSIONS = [{"Name": "ClusterName", "Value": "gpu-cluster"}, {"Name": "Namespace", "Value": "inference"}]


def _metrics(stack: Stack, cluster: Any, **props: Any) -> CaptureSidecarMetrics:
    return CaptureSidecarMetrics(stack, "SidecarMetrics", cluster=cluster, namespace="inference",
                                 cluster_name="gpu-cluster", role_name="gpu-capture-metrics-agent",
                                 topic=_topic(stack), alarm_name_prefix="probe", **props)


@pytest.fixture(scope="module")
def budget() -> tuple[dict[str, Any], CaptureSidecarMetrics]:
    stack, cluster = _cluster_stack()
    metrics = _metrics(stack, cluster, budget_alert_percents=[100, 80])
    return Template.from_stack(stack).to_json(), metrics


def test_one_alarm_per_level_on_one_metric_without_a_caller_notifying_the_topic(
        budget: tuple[dict[str, Any], CaptureSidecarMetrics]) -> None:
    template, metrics = budget
    alarms = _alarms_by_name(template)
    for percent in (80, 100):
        alarm = alarms[f"probe-sidecar-budget-{percent}-percent"]
        assert (alarm["Namespace"], alarm["MetricName"], alarm["Dimensions"]) == (
            "ContainerInsights/Prometheus", "capture_sidecar_budget_alerts_total",
            [*BASE_DIMENSIONS, {"Name": "percent", "Value": str(percent)}])
        assert (alarm["Statistic"], alarm["ComparisonOperator"], alarm["Threshold"], alarm["Period"],
                alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (
            "Sum", "GreaterThanThreshold", 0, 300, 1, "notBreaching")
        assert alarm["AlarmActions"] and alarm["OKActions"] == alarm["AlarmActions"]  # the platform's topic
        description = alarm["AlarmDescription"]
        assert f"{percent} %" in description and "probe/budget-crossings" in description
        assert description.endswith("section sidecar-budget-threshold")
    assert len(alarms) == 4 + 2  # the sidecar alarms and one per level: nothing per caller
    assert sorted(key for key in metrics.alarms if key.startswith("budget")) == [
        "budget_threshold:100", "budget_threshold:80"]


def test_the_saved_query_reads_the_agents_log_group_and_names_the_caller(
        budget: tuple[dict[str, Any], CaptureSidecarMetrics]) -> None:
    template, _ = budget
    query = _only(template, "AWS::Logs::QueryDefinition")
    assert query["Name"] == "probe/budget-crossings"
    assert query["LogGroupNames"] == ["/aws/containerinsights/gpu-cluster/capture-sidecar"]
    text = query["QueryString"]
    assert "filter ispresent(capture_sidecar_budget_threshold_crossed)" in text
    assert "by caller_id, Workload, limit, window, percent" in text


def test_no_levels_no_budget_alarm_and_no_query() -> None:
    stack, cluster = _cluster_stack()
    metrics = _metrics(stack, cluster)
    template = Template.from_stack(stack).to_json()
    assert not any(name.startswith("probe-sidecar-budget") for name in _alarms_by_name(template))
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::Logs::QueryDefinition"]
    assert metrics.budget_query is None
    stack, cluster = _cluster_stack()  # levels, but the alarm switched off (alarms.sidecar.budgetThreshold: null)
    assert _metrics(stack, cluster, budget_alert_percents=[80], budget_threshold=None).budget_query is None


def test_the_agent_makes_the_counter_a_metric_per_level_and_the_caller_never_a_dimension() -> None:
    objects = sidecar_metrics_manifests(namespace="inference", cluster_name="c", region=REGION,
                                        role_arn="arn:aws:iam::111122223333:role/r", log_group_name="/g")
    (config,) = [o["data"] for o in objects if o["metadata"]["name"] == "capture-metrics-agent-config"]
    declarations = json.loads(config["cwagentconfig.json"])["logs"]["metrics_collected"]["prometheus"][
        "emf_processor"]["metric_declaration"]
    declared = {(selector.strip("^$"), tuple(dims)) for d in declarations
                for selector in d["metric_selectors"] for dims in d["dimensions"]}
    assert (budget_alarms.BUDGET_ALERTS, ("ClusterName", "Namespace", "percent")) in declared
    assert not [name for name, _ in declared if name == budget_alarms.BUDGET_CROSSED]  # log events only
    assert not [dims for _, dims in declared if "caller_id" in dims or "window" in dims]
    # The scrape keeps both series (every capture_sidecar_* series but the histograms).
    (scrape,) = [o["data"]["prometheus.yaml"] for o in objects
                 if o["metadata"]["name"] == "capture-metrics-agent-scrape"]
    assert "regex: capture_sidecar_.*" in scrape


def test_the_series_and_labels_are_the_ones_the_sidecar_exposes() -> None:
    sys.path.insert(0, str(REPO / "sidecar"))
    from capture_sidecar import limits as sidecar_limits
    from capture_sidecar import metrics as sidecar_metrics

    replica = sidecar_limits.Limiter({"*": sidecar_limits.CallerLimits(tokens_per_day=10)}, store=None,
                                     key_prefix="p:", fail_mode="open", store_timeout_seconds=0.1,
                                     on_crossing=lambda _: None)
    replica._crossed(sidecar_limits.Crossing("team-a", "tokensPerDay", "d20261207", 80, 10, replica.clock()))
    exposition = sidecar_metrics.SidecarMetrics(limits=lambda: replica).render()
    assert f"# TYPE {budget_alarms.BUDGET_ALERTS} counter" in exposition
    assert f'{budget_alarms.BUDGET_ALERTS}{{limit="tokensPerDay",percent="80"}} 1' in exposition
    assert f"# TYPE {budget_alarms.BUDGET_CROSSED} gauge" in exposition
    (line,) = [line for line in exposition.splitlines() if line.startswith(budget_alarms.BUDGET_CROSSED + "{")]
    assert tuple(re.findall(r'([a-z_]+)="', line)) == budget_alarms.CROSSED_LABELS
    assert budget_alarms.DEFAULT_BUDGET_PERCENTS == sidecar_limits.DEFAULT_ALERT_PERCENTS
    from hyperpod_inference_iac.charts import usage_limits

    assert usage_limits.DEFAULT_ALERT_PERCENTS == sidecar_limits.DEFAULT_ALERT_PERCENTS
    assert usage_limits.MAX_ALERT_PERCENTS == sidecar_limits.MAX_ALERT_PERCENTS


def test_the_dashboard_shows_callers_past_each_level_and_who() -> None:
    stack, cluster = _cluster_stack()
    metrics = _metrics(stack, cluster, budget_alert_percents=[80, 100])
    PlatformDashboard(stack, "Dashboard", dashboard_name="p", sidecar_metrics=metrics)
    body = json.loads(_joined(_only(Template.from_stack(stack).to_json(), "AWS::CloudWatch::Dashboard")[
        "DashboardBody"]))
    widgets = {w["properties"].get("title"): w for w in body["widgets"]}
    graph = widgets["Budgets in inference: callers past each level"]["properties"]
    assert [(m[1], m[m.index("percent") + 1]) for m in graph["metrics"]] == [
        (budget_alarms.BUDGET_ALERTS, "80"), (budget_alarms.BUDGET_ALERTS, "100")]
    table = widgets["Budgets: who crossed which level (callers, servers, windows)"]
    assert table["type"] == "log"
    assert "SOURCE '/aws/containerinsights/gpu-cluster/capture-sidecar'" in table["properties"]["query"]
    assert "by caller_id, Workload" in table["properties"]["query"]


@pytest.mark.parametrize("percents", [[0], [80, 80], [101]])
def test_bad_levels_are_refused_with_their_property(percents: list[int]) -> None:
    stack, cluster = _cluster_stack()
    with pytest.raises(ConfigError, match=r"\[CaptureSidecarMetrics.BadBudgetPercent\] budget_alert_percents\["):
        _metrics(stack, cluster, budget_alert_percents=percents)


def _portable_limits(limits: dict[str, Any]) -> Any:
    def change(data: dict[str, Any]) -> None:
        data["portable"][0]["usageLimits"] = limits
    return _with(change)


STORE = "rediss://budgets.example.cache.amazonaws.com:6379"


def test_the_levels_come_from_the_servers_with_a_day_or_month_budget() -> None:
    config = parse_config(_portable_limits({"storeUrl": STORE, "alertPercents": [50, 90, 100],
                                            "callers": [{"callerId": "team-b", "tokensPerDay": 1000}]}))
    assert config.metrics_agent is not None and config.metrics_agent.budget_alert_percents == (50, 90, 100)
    minute_only = parse_config(_portable_limits({"storeUrl": STORE,
                                                 "callers": [{"callerId": "team-b", "tokensPerMinute": 1000}]}))
    assert minute_only.metrics_agent is not None and minute_only.metrics_agent.budget_alert_percents == ()
    assert parse_config(_with(lambda data: None)).metrics_agent.budget_alert_percents == ()  # type: ignore[union-attr]


def test_a_gateway_entrys_levels_join_the_servers() -> None:
    def change(data: dict[str, Any]) -> None:
        data["gateways"][0]["entry"]["usageLimits"] = {
            "alertPercents": [50, 100], "callers": [{"callerId": "team-a", "tokensPerMonth": 1000}]}
    config = parse_config(_with(change))  # (the entry's budgets alone: the platform's store, the alarms' levels)
    assert config.metrics_agent is not None and config.metrics_agent.budget_alert_percents == (50, 100)
    (entry,) = config.workloads.entries
    assert entry.namespace == config.metrics_agent.namespace  # (the agent scrapes the entry's sidecars)


def test_a_bad_level_in_the_config_is_refused_with_its_key_path() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_portable_limits({"storeUrl": STORE, "alertPercents": [80, 120],
                                       "callers": [{"callerId": "team-b", "tokensPerDay": 1000}]}))
    assert [(p.code, p.path) for p in caught.value.problems] == [
        ("UsageLimits.AlertPercentsInvalid", "portable[0].usageLimits.alertPercents[1]")]


def test_the_budget_alarm_settings_are_read_from_the_config() -> None:
    config = parse_config(_with(lambda data: data.setdefault("alarms", {}).setdefault("sidecar", {}).update(
        {"budgetThreshold": {"periodMinutes": 15, "threshold": 2}})))
    settings = config.alarms.sidecar.budget_threshold
    assert settings is not None and (settings.threshold, settings.period.to_minutes()) == (2, 15)

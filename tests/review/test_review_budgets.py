"""`make review` on budgets, their alerts and what the GPUs cost (docs/review.md, "budgets and costs";
docs/usage-and-budgets.md, "Reviewable"): each change in a reviewer's words, the exact line, and what it does to
``FAIL_ON=broadening``. The inputs are rendered by the library's own code, cheaply: the portable server's and the
gateway entry's charts (cdk8s, from config dicts), the budget alarms in a small stack, the cost sampler's environment
from ``GpuCostProps``; one test runs the real CDK CLI's diff on a hand-made assembly. No platform synth."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import cdk8s
import pytest
from aws_cdk.assertions import Template as CdkTemplate

from hyperpod_inference_iac import CostGroup, InstancePrice
from hyperpod_inference_iac.capture.gpu_cost import GpuCostProps, cost_environment, cost_settings
from hyperpod_inference_iac.charts.portable import PortableModelServerChart
from hyperpod_inference_iac.charts.usage_limits import CallerLimit, UsageLimits
from hyperpod_inference_iac.observability import budget_alarms
from tests.charts import samples
from tools.review import budgets, cdkdiff, cfn, k8s, render
from tools.review.model import Review, merge_lines
from tools.review.review import exit_status
from tools.review.template import Template

Said = tuple[str, str, str, bool]
STORE = "rediss://budgets-abc123.serverless.use1.cache.amazonaws.com:6379"
TEAM_A = CallerLimit(caller_id="team-a", tokens_per_minute=200_000, tokens_per_day=20_000_000)
EVERYONE = CallerLimit(caller_id="*", tokens_per_month=10**8)
LIMITS = UsageLimits(store_url=STORE, store_failure="closed", callers=(TEAM_A, EVERYONE))
SERVER = "qwen3-8b/capture-sidecar"
GROUP = "budgets_costs"


# ---- inputs ---------------------------------------------------------------------------------------------------


def portable(limits: UsageLimits | None, **server: Any) -> dict[k8s.Key, dict[str, Any]]:
    """Every object of a portable server's chart, as the review keys them."""
    workload = samples.planned_portable(samples.portable_server(usage_limits=limits, **server))
    chart = PortableModelServerChart(cdk8s.Testing.app(), "portable", workload=workload, namespace=samples.NAMESPACE,
                                     values=samples.VALUES)
    return {k8s.key_of(doc): doc for doc in cdk8s.Testing.synth(chart)}


def entry(**changes: Any) -> dict[k8s.Key, dict[str, Any]]:
    """Every object of a gateway's capture entry, from the gateway's config dict (``gateways[i].entry``)."""
    from tests.charts.test_gateway_entry import _manifests, _plan, _with_entry

    gateway = _with_entry(**changes)
    return {k8s.key_of(doc): doc for doc in _manifests(_plan(gateway)).values()}


def reviewed(old: dict[k8s.Key, dict[str, Any]], new: dict[k8s.Key, dict[str, Any]]) -> Review:
    return Review("base", "head", merge_lines(k8s.diff_objects(old, new, lambda key: ("dist/x.k8s.yaml",))))


def said(review: Review) -> list[Said]:
    return [(line.group, line.subject, line.text, line.broadens) for line in review.lines]


def gate(review: Review) -> int:
    return exit_status(review, "broadening")


# ---- 1. budget alert levels -------------------------------------------------------------------------------------


def test_a_budget_alert_level_removed_broadens_and_one_added_does_not() -> None:
    both, top = portable(LIMITS), portable(dataclasses.replace(LIMITS, alert_percents=(100,)))
    weaker = reviewed(both, top)
    assert said(weaker) == [
        (GROUP, SERVER, "budget alert for * (every other caller) at 80 % of tokensPerMonth removed", True),
        (GROUP, SERVER, "budget alert for team-a at 80 % of tokensPerDay removed", True)]
    assert gate(weaker) == 1
    stronger = reviewed(top, both)
    assert said(stronger) == [
        (GROUP, SERVER, "budget alert for * (every other caller) at 80 % of tokensPerMonth added", False),
        (GROUP, SERVER, "budget alert for team-a at 80 % of tokensPerDay added", False)]
    assert gate(stronger) == 0 and exit_status(stronger, "any-change") == 1
    text = render.text(weaker)
    assert "budgets and costs (2)" in text
    assert f"! {SERVER}: budget alert for team-a at 80 % of tokensPerDay removed [broadens]" in text
    assert "### budgets and costs (2)" in render.markdown(weaker)


def test_a_callers_budget_removed_takes_its_alerts_with_it_and_a_new_one_brings_them() -> None:
    minute_only = dataclasses.replace(TEAM_A, tokens_per_day=None)
    without = portable(dataclasses.replace(LIMITS, callers=(minute_only, EVERYONE)))
    review = reviewed(portable(LIMITS), without)
    assert said(review) == [
        (GROUP, SERVER, "budget alerts for team-a at 80 %, 100 % of tokensPerDay removed", True),
        (GROUP, SERVER, "caller limits: team-a tokensPerDay 20000000 → none", True)]
    team_b = CallerLimit(caller_id="team-b", tokens_per_day=1000)
    more = reviewed(portable(LIMITS), portable(dataclasses.replace(LIMITS, callers=(TEAM_A, EVERYONE, team_b))))
    assert said(more) == [
        (GROUP, SERVER, "budget alerts for team-b at 80 %, 100 % of tokensPerDay added", False),
        (GROUP, SERVER, "caller limits: team-b tokensPerDay none → 1000", False)]
    assert gate(more) == 0  # a budget for a caller that had none narrows


def test_levels_changed_where_no_day_or_month_budget_exists_alert_nobody() -> None:
    minute = UsageLimits(store_url=STORE, callers=(CallerLimit(caller_id="team-a", tokens_per_minute=5),))
    review = reviewed(portable(minute), portable(dataclasses.replace(minute, alert_percents=())))
    assert said(review) == [(GROUP, SERVER, "budget alert levels 80 %, 100 % → none (no day or month budget: no "
                                            "alert changes)", False)]


def test_budget_alarms_of_a_level_removed_or_silenced_broaden(alarm_templates: tuple[dict, dict, dict]) -> None:
    both, top, silent = alarm_templates
    lines = lines_of(both, top)
    [removed] = [line for line in lines if line[1].endswith("sidecar-budget-80-percent")]
    assert removed[0] == "alarms" and removed[3] is True and gate(template_review(both, top)) == 1
    assert removed[2] == ("removed: no alarm when a caller crosses 80 % of a day or month token budget "
                          "(ContainerInsights/Prometheus/capture_sidecar_budget_alerts_total Sum GreaterThanThreshold "
                          "0 over 1 x 300 s, actions: ${Topic85E630E2})")
    [added] = [line for line in lines_of(top, both) if line[1].endswith("sidecar-budget-80-percent")]
    assert added[2].startswith("new: budget alert level 80 %: ") and added[3] is False
    # Its actions removed (the alarm stays, tells nobody): a weakening; a threshold tuned is an alarm change.
    assert lines_of(both, silent) == [
        ("alarms", "alarm probe-sidecar-budget-100-percent", "alarm actions ${Topic85E630E2} (removed): the 100 % "
         "budget alert no longer notifies ${Topic85E630E2}", True)]
    assert lines_of(silent, both)[0][3] is False
    moved, tuned = copy.deepcopy(both), copy.deepcopy(both)
    for template, change in ((moved, {"AlarmActions": ["arn:aws:sns:us-east-1:111122223333:elsewhere"]}),
                             (tuned, {"Threshold": 3})):
        for resource in template["Resources"].values():
            if resource["Properties"].get("AlarmName") == "probe-sidecar-budget-100-percent":
                resource["Properties"].update(change)
    [(_, _, text, broadens)] = lines_of(both, moved)
    assert broadens and text.endswith("the 100 % budget alert no longer notifies ${Topic85E630E2}"), text
    assert lines_of(both, tuned) == [("alarms", "alarm probe-sidecar-budget-100-percent", "threshold 0 → 3", False)]


# ---- 2. prices and cost groups ----------------------------------------------------------------------------------


PRICES = (InstancePrice(instance_type="p5.48xlarge", usd_per_node_hour=98.32),
          InstancePrice(instance_type="ml.g5.12xlarge", usd_per_node_hour=7.09))
GROUPS = (CostGroup(name="gpu-p5", models=["Qwen/Qwen3-8B"]),
          CostGroup(name="inference-g5", models=["mistral-7b-instruct"], usd_per_node_hour=5.20))


def sampler(**props: Any) -> dict[str, Any]:
    """A template with the cost sampler's function, its environment rendered by the library from ``props``."""
    settings = cost_settings(GpuCostProps(**({  # type: ignore[arg-type]
        "tables": None, "instance_prices": PRICES, "groups": GROUPS, "eks_cluster_name": "llm-platform",
        "node_groups": {"gpu-p5": ["p5.48xlarge"]}, "hyperpod_cluster_name": "llm-platform-hp",
        "instance_groups": {"inference-g5": "ml.g5.12xlarge"}} | props)))
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return {"Resources": {"GpuCostFunction3693D79A": {
        "Type": "AWS::Lambda::Function", "Metadata": {"aws:cdk:path": "demo/GpuCost/Function/Resource"},
        "Properties": {"MemorySize": 512, "Environment": {"Variables": {
            **cost_environment(settings), "ICEBERG_TABLE": "gpu_node_hours", "DEPLOYMENT_HASH": digest}}}}}}


def test_a_price_changed_added_or_removed_is_its_own_line_and_does_not_broaden() -> None:
    cheaper = (InstancePrice(instance_type="p5.48xlarge", usd_per_node_hour=55.04),
               InstancePrice(instance_type="g6e.12xlarge", usd_per_node_hour=10.49))
    review = template_review(sampler(), sampler(instance_prices=cheaper, instance_groups=None,
                                                hyperpod_cluster_name=None))
    found = said(review)
    assert (GROUP, "price of p5.48xlarge", "98.32 → 55.04 USD per node-hour", False) in found
    assert (GROUP, "price of g6e.12xlarge", "10.49 USD per node-hour (new)", False) in found
    assert (GROUP, "price of ml.g5.12xlarge", "7.09 USD per node-hour (removed)", False) in found
    assert (GROUP, "cost group inference-g5", "no longer sampled (removed): its node-hours are no longer costed "
            "(hyperpod-instance-group of llm-platform-hp, ml.g5.12xlarge, models mistral-7b-instruct, priced at "
            "5.2 USD per node-hour of its own)", False) in found
    assert len(found) == 4, found  # nothing else: the settings' hash is said by these lines
    assert gate(review) == 0 and exit_status(review, "any-change") == 1
    assert "budgets and costs (4)" in render.text(review)


def test_a_groups_models_and_own_price_changed_are_read() -> None:
    moved = (CostGroup(name="gpu-p5", models=["Qwen/Qwen3-8B", "llama-3-8b"], usd_per_node_hour=60),
             CostGroup(name="inference-g5", models=[], usd_per_node_hour=5.20))
    assert sorted(lines_of(sampler(), sampler(groups=moved))) == [
        (GROUP, "cost group gpu-p5", "models + llama-3-8b (its node-hours are shared among these models' callers)",
         False),
        (GROUP, "cost group gpu-p5", "own price 60 USD per node-hour (new; was its instance type's price)", False),
        (GROUP, "cost group inference-g5", "models - mistral-7b-instruct (its node-hours are shared among these "
         "models' callers)", False)]


def test_another_functions_settings_hash_is_still_reported() -> None:
    def function(digest: str) -> dict[str, Any]:
        return {"Resources": {"Other1234ABCD": {
            "Type": "AWS::Lambda::Function", "Metadata": {"aws:cdk:path": "demo/Other/Resource"},
            "Properties": {"Environment": {"Variables": {"DEPLOYMENT_HASH": digest}}}}}}
    assert lines_of(function("a"), function("b")) == [
        ("other", "Function Other", "Environment.Variables.DEPLOYMENT_HASH a → b", False)]


# ---- 3. the rest of issue 29's settings ---------------------------------------------------------------------------


ENTRY = "models-entry/capture-sidecar"
ENTRY_LIMITS = {"storeUrl": STORE, "storeFailure": "closed",
                "callers": [{"callerId": "alice.example.com", "tokensPerMinute": 1000, "tokensPerDay": 50_000}]}


def test_a_gateway_entrys_store_failure_and_tokens_per_minute() -> None:
    opened = copy.deepcopy(ENTRY_LIMITS)
    opened["storeFailure"] = "open"
    opened["callers"][0]["tokensPerMinute"] = 4000
    review = reviewed(entry(usageLimits=ENTRY_LIMITS), entry(usageLimits=opened))
    assert said(review) == [
        (GROUP, ENTRY, "budget store down means closed → open", True),
        (GROUP, ENTRY, "caller limits: alice.example.com tokensPerMinute 1000 → 4000", True)]
    back = reviewed(entry(usageLimits=opened), entry(usageLimits=ENTRY_LIMITS))
    assert said(back) == [
        (GROUP, ENTRY, "budget store down means open → closed", False),
        (GROUP, ENTRY, "caller limits: alice.example.com tokensPerMinute 4000 → 1000", False)]
    assert gate(back) == 0


def test_records_of_every_exchange_are_data_collection() -> None:
    every = dict(ENTRY_LIMITS, usageRecords="all")
    review = reviewed(entry(usageLimits=ENTRY_LIMITS), entry(usageLimits=every))
    assert said(review) == [("data_governance", ENTRY, "usage records sampled → all (a record of the caller, model and "
                             "tokens of every metered exchange; no prompt)", True)]
    assert said(reviewed(entry(usageLimits=every), entry(usageLimits=ENTRY_LIMITS))) == [
        ("data_governance", ENTRY, "usage records all → sampled", False)]


def test_a_new_key_prefix_starts_the_counters_again_and_the_caller_claim_rekeys_them() -> None:
    renamed = entry(usageLimits=ENTRY_LIMITS)
    base = entry(usageLimits=ENTRY_LIMITS)
    for obj in renamed.values():
        for container in ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", []):
            for item in container.get("env", []):
                if item["name"] == "LIMITS_KEY_PREFIX":
                    item["value"] = "budget:inference/other-entry:"
                if item["name"] == "JWT_CALLER_CLAIM":
                    item["value"] = "sub"
    review = reviewed(base, renamed)
    assert said(review) == [
        (GROUP, ENTRY, f"budget counters' key prefix budget:{samples.NAMESPACE}/models-entry: → "
                       "budget:inference/other-entry: (the current windows' counters start again at 0)", True),
        (GROUP, ENTRY, "caller id from the JWT claim email → sub (callers named in usageLimits may no longer "
                       "match; counters start again)", True)]


def test_the_usage_stores_caps_are_read() -> None:
    def cache(data_gb: int, ecpu: int) -> dict[str, Any]:
        return {"Resources": {"UsageStoreCache1234ABCD": {
            "Type": "AWS::ElastiCache::ServerlessCache", "Metadata": {"aws:cdk:path": "demo/UsageStore/Cache"},
            "Properties": {"ServerlessCacheName": "llm-platform-usage", "Engine": "valkey", "CacheUsageLimits": {
                "DataStorage": {"Unit": "GB", "Maximum": data_gb}, "ECPUPerSecond": {"Maximum": ecpu}}}}}}
    assert sorted(lines_of(cache(1, 5000), cache(5, 20_000))) == [
        (GROUP, "cache llm-platform-usage", "most ECPUs per second 5000 → 20000", False),
        (GROUP, "cache llm-platform-usage", "most data 1 GB → 5 GB", False)]


# ---- controls -----------------------------------------------------------------------------------------------------


def test_an_unrelated_change_reports_no_budget_line() -> None:
    review = reviewed(portable(LIMITS), portable(LIMITS, replicas=3))
    assert said(review) and all(line.group != GROUP for line in review.lines), said(review)
    reordered = dataclasses.replace(LIMITS, callers=(EVERYONE, TEAM_A))  # the same limits, listed in another order
    assert said(reviewed(portable(LIMITS), portable(reordered))) == []
    assert lines_of(sampler(), sampler(groups=tuple(reversed(GROUPS)))) == []


def test_the_review_knows_the_alarms_metric_and_the_sidecars_default_levels() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sidecar"))
    from capture_sidecar.limits import DEFAULT_ALERT_PERCENTS

    assert budgets.BUDGET_ALERTS_METRIC == budget_alarms.BUDGET_ALERTS
    assert budgets.DEFAULT_ALERT_PERCENTS == DEFAULT_ALERT_PERCENTS == budget_alarms.DEFAULT_BUDGET_PERCENTS


# ---- through the CDK's own diff engine ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_cdk_diff_reports_them_and_the_review_reads_them(tmp_path: Path,
                                                             alarm_templates: tuple[dict, dict, dict]) -> None:
    from tests.review.test_review_engine import review_of

    both, top, _ = alarm_templates
    base = {"Resources": both["Resources"] | sampler()["Resources"]}
    cheaper = (InstancePrice(instance_type="p5.48xlarge", usd_per_node_hour=55.04), PRICES[1])
    head = {"Resources": top["Resources"] | sampler(instance_prices=cheaper)["Resources"]}
    review, _ = review_of(tmp_path, base, head)
    found = said(review)
    assert (GROUP, "price of p5.48xlarge", "98.32 → 55.04 USD per node-hour", False) in found
    assert any(line[1].endswith("sidecar-budget-80-percent") and line[3] for line in found)
    assert gate(review) == 1


# ---- helpers: a change between two templates, as the CDK's diff reports it ---------------------------------------


@pytest.fixture(scope="module")
def alarm_templates() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The budget alarms at 80 % and 100 %; at 100 % only; at both with the 100 % alarm's actions removed."""
    from tests.unit.test_alarms import _cluster_stack
    from tests.unit.test_budget_alarms import _metrics

    def synth(percents: list[int]) -> dict[str, Any]:
        stack, cluster = _cluster_stack()
        _metrics(stack, cluster, budget_alert_percents=percents)
        return CdkTemplate.from_stack(stack).to_json()

    both = synth([80, 100])
    silent = copy.deepcopy(both)
    for resource in silent["Resources"].values():
        if resource["Properties"].get("AlarmName") == "probe-sidecar-budget-100-percent":
            del resource["Properties"]["AlarmActions"]
    return both, synth([100]), silent


def template_review(base: dict[str, Any], head: dict[str, Any]) -> Review:
    """What the review says of two templates, each resource changed as ``cdk diff`` lists it (op and top-level
    properties), without the CLI."""
    old, new = Template("demo", base), Template("demo", head)
    found = []
    for logical_id in sorted(set(old.resources) | set(new.resources)):
        before, after = old.resource(logical_id), new.resource(logical_id)
        if before == after:
            continue
        op = "+" if not before else "-" if not after else "~"
        props_before, props_after = (before or {}).get("Properties", {}), (after or {}).get("Properties", {})
        props = sorted(key for key in set(props_before) | set(props_after)
                       if props_before.get(key) != props_after.get(key))
        type_ = (after or before or {})["Type"]
        found += cfn.review_resource(cfn.Resource(cdkdiff.ResourceChange(op, type_, logical_id, "", props), old, new))
    return Review("base", "head", merge_lines(found))


def lines_of(base: dict[str, Any], head: dict[str, Any]) -> list[Said]:
    return said(template_review(base, head))

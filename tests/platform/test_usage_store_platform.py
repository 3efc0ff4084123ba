"""The app's budget store (issue 29): token budgets without a storeUrl make the cluster stack create the store; the
sidecar that uses it is told its address (the stack output too, for dist/), and its role, no other, may connect; the
store admits the cluster's security group only. The config's usageStore section, and its one mistake. A gateway
entry's budgets alone do the same, and get the budget alarms."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import cdk8s
import pytest
import yaml
from aws_cdk import App
from aws_cdk.assertions import Template

from hyperpod_inference_iac import PlatformValue
from hyperpod_inference_iac.charts.gateway_entry_chart import GatewayEntryChart
from hyperpod_inference_iac.foundation.validation import ConfigError
from platform_config import parse_config, read_stack_outputs
from stacks.gitops import stage_dist
from stacks.platform import Platform, build_platform
from tests.support.synth import REPO

DEFAULT = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
SERVER = "qwen3-8b-portable"
LIMITS = {"callers": [{"callerId": "team-b", "tokensPerDay": 20_000_000}]}


def _data(**usage_limits: Any) -> dict[str, Any]:
    data = copy.deepcopy(DEFAULT)
    data["portable"][0]["usageLimits"] = {**LIMITS, **usage_limits}
    return data


@pytest.fixture(scope="module")
def platform() -> Platform:
    return build_platform(App(), parse_config(_data()))


def test_budgets_without_a_store_url_get_the_platforms_store_and_only_the_sidecars_role_connects(
        platform: Platform) -> None:
    stack = platform.cluster
    template = Template.from_stack(stack)
    (cache,) = template.find_resources("AWS::ElastiCache::ServerlessCache").values()
    assert cache["Properties"]["ServerlessCacheName"] == "llm-platform-usage"
    store = stack.usage_store
    assert store is not None
    # The store admits the cluster security group (the nodes, and the pods on them), on 6379 only.
    group_id = stack.resolve(store.security_group.security_group_id)
    rules = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()
             if r["Properties"]["GroupId"] == group_id]
    inline = template.to_json()["Resources"][group_id["Fn::GetAtt"][0]]["Properties"].get("SecurityGroupIngress", [])
    rules += inline
    assert [(rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) for rule in rules] == [("tcp", 6379, 6379)]
    assert rules[0]["SourceSecurityGroupId"] == stack.resolve(stack.cluster.cluster.cluster_security_group_id)
    # elasticache:Connect: the sidecar's role, and no other role of the stack.
    connecting = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(action.startswith("elasticache:") or action == "*" for action in actions):
                assert actions == ["elasticache:Connect"]  # (nothing else of ElastiCache, no wildcard)
                connecting.update(json.dumps(role) for role in policy["Properties"]["Roles"])
    sidecar_role = platform.cluster.workloads.identities[f"llm-platform-{SERVER}-capture"].role
    assert connecting == {json.dumps(stack.resolve(sidecar_role.node.default_child.ref))}  # type: ignore[union-attr]
    outputs = template.find_outputs(PlatformValue.USAGE_STORE_ENDPOINT.output_name)
    (output,) = outputs.values()
    assert output["Value"] == stack.resolve(store.endpoint)


def test_dist_waits_for_the_stores_address_then_names_it(tmp_path: Path) -> None:
    config = parse_config(_data())
    staged = stage_dist(config, outdir=tmp_path / "dist", sidecar_image="registry.example/sidecar:1",
                        complete_with="make synth OUTPUTS=cdk-outputs.json")
    assert f"portable-{SERVER}" in staged.waiting
    endpoint = "llm-platform-usage-abc123.serverless.usw2.cache.amazonaws.com"
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps({"llm-platform-cluster": {"UsageStoreEndpoint": endpoint}}))
    staged = stage_dist(config, outdir=tmp_path / "dist2", sidecar_image="registry.example/sidecar:1",
                        outputs=read_stack_outputs(config, outputs))
    staged.commit()
    manifest = (tmp_path / "dist2" / f"portable-{SERVER}.k8s.yaml").read_text()
    assert f"rediss://{endpoint}:6379" in manifest and "llm-platform-usage-sidecar" in manifest


def test_no_budgets_no_store_and_a_server_with_its_own_store_url_uses_it() -> None:
    config = parse_config(DEFAULT)
    assert config.workloads.usage_store_users == ()
    own = parse_config(_data(storeUrl="rediss://own.example.com:6379"))
    assert own.workloads.usage_store_users == ()


def test_a_usage_store_section_nothing_uses_and_a_bad_size_are_each_one_error() -> None:
    data = _data(storeUrl="rediss://own.example.com:6379")
    data["usageStore"] = {"maxDataGb": 0}
    with pytest.raises(ConfigError) as raised:
        parse_config(data)
    assert sorted((p.code, p.path) for p in raised.value.problems) == [
        ("UsageStore.MaxDataOutOfRange", "usageStore.maxDataGb"), ("UsageStore.Unused", "usageStore")]
    data = _data()
    data["usageStore"] = {"maxDataGb": 2, "maxEcpuPerSecond": 2000}
    assert parse_config(data).usage_store is not None


# -- a gateway entry's budgets (gateways[i].entry.usageLimits): the same store, grant and alarms ---------------
ENTRY_BUDGETS = {"callers": [{"callerId": "team-a", "tokensPerMonth": 50_000_000}],
                 "alertPercents": [80, 100]}


def _entry_data() -> dict[str, Any]:
    data = copy.deepcopy(DEFAULT)
    assert all("usageLimits" not in server for server in data["portable"])  # (the entry's budgets are the only ones)
    data["gateways"][0]["entry"]["usageLimits"] = ENTRY_BUDGETS
    return data


@pytest.fixture(scope="module")
def entry_platform() -> Platform:
    return build_platform(App(), parse_config(_entry_data()))


def _connecting_roles(template: Template) -> set[str]:
    roles = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(action.startswith("elasticache:") or action == "*" for action in actions):
                assert actions == ["elasticache:Connect"]
                roles.update(json.dumps(role) for role in policy["Properties"]["Roles"])
    return roles


def test_budgets_only_on_a_gateway_entry_create_the_store_and_only_the_entrys_role_connects(
        entry_platform: Platform) -> None:
    stack = entry_platform.cluster
    template = Template.from_stack(stack)
    (cache,) = template.find_resources("AWS::ElastiCache::ServerlessCache").values()
    assert cache["Properties"]["ServerlessCacheName"] == "llm-platform-usage"
    store = stack.usage_store
    assert store is not None
    (entry,) = stack.workloads.plan.entries
    assert stack.workloads.plan.usage_store_users == (entry,) and entry.usage_store == store.ref
    entry_role = stack.workloads.identities[entry.identity.role_name].role
    assert entry.identity.role_name == "llm-platform-models-entry"
    assert _connecting_roles(template) == {
        json.dumps(stack.resolve(entry_role.node.default_child.ref))}  # type: ignore[union-attr]
    # The entry is told the store's address (the same token as the output's), its user and cache.
    chart = GatewayEntryChart(cdk8s.App(), entry.chart_id, entry=entry, values=stack.workloads.values)
    deployment = next(m for m in chart.to_json() if m["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["LIMITS_STORE_URL"] == f"rediss://{store.endpoint}:6379"
    assert (env["LIMITS_STORE_IAM_USER"], env["LIMITS_STORE_IAM_CACHE"]) == (store.user_id, "llm-platform-usage")


def test_a_gateway_entrys_budgets_get_the_budget_alarms(entry_platform: Platform) -> None:
    config = parse_config(_entry_data())
    assert config.metrics_agent is not None and config.metrics_agent.budget_alert_percents == (80, 100)
    (entry,) = config.workloads.entries
    assert entry.namespace == config.metrics_agent.namespace  # (the agent scrapes the entry's sidecars)
    metrics = entry_platform.cluster.sidecar_metrics
    assert sorted(key for key in metrics.alarms if key.startswith("budget")) == [
        "budget_threshold:100", "budget_threshold:80"]


def test_an_entrys_budgets_without_any_store_are_refused_as_a_servers_are() -> None:
    data = _entry_data()
    data["gateways"][0]["entry"]["usageLimits"] = {**ENTRY_BUDGETS, "storeUrl": "rediss://own.example.com:6379"}
    config = parse_config(data)
    assert config.workloads.usage_store_users == () and config.workloads.entries[0].usage_store is None
    data["usageStore"] = {"maxDataGb": 2}
    with pytest.raises(ConfigError) as raised:
        parse_config(data)
    assert [(p.code, p.path) for p in raised.value.problems] == [("UsageStore.Unused", "usageStore")]

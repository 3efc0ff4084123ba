"""The app's capture sidecar metrics agents (docs/alarms.md#one-agent-per-namespace): one per namespace that holds a
capturing sidecar (a portable server with capture, a gateway's capture entry), each discovering its own namespace
only, with a role trusted by its own service account, a log group and alarm names of its own, the `Namespace`
dimension of its namespace, budget levels from its namespace's servers; dist/ renders every agent; the app no longer
warns `captureNotMonitored`; the default config's agent keeps its names. One in-process synth of the variant."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk import App
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import CaptureSidecarMetrics, sidecar_metrics_log_group_name
from hyperpod_inference_iac.foundation.validation import ConfigError
from hyperpod_inference_iac.observability.sidecar_metrics import AGENT_NAME
from platform_config import PlatformConfig, parse_config
from tests.support.synth import REPO
from tests.unit.test_alarms import _cluster_stack

DEFAULT = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
STORE = "rediss://budgets.example.cache.amazonaws.com:6379"
NAMESPACES = ("inference", "team-x", "team-y")


def _variant() -> dict[str, Any]:
    """The default file plus a capturing portable server in ``team-x`` (with day budgets alerting at 50 and 100 %),
    and the gateway with its capture entry (and the models behind it) in ``team-y``."""
    data = copy.deepcopy(DEFAULT)
    server = copy.deepcopy(data["portable"][0])
    server.update(name="team-x-server", namespace="team-x")
    del server["hostname"]  # (the certificate covers the platform's names only)
    server["usageLimits"] = {"storeUrl": STORE, "alertPercents": [100, 50],
                             "callers": [{"callerId": "team-b", "tokensPerDay": 1000}]}
    data["portable"].append(server)
    gateway = data["gateways"][0]
    gateway["namespace"] = "team-y"
    for model in data["models"]:
        if model.get("gateway") == gateway["name"]:
            if "tokenSecretRef" in json.dumps(model):  # (reads the synced token: stays in the platform's namespace)
                del model["gateway"]
            else:
                model["namespace"] = "team-y"
    return data


@pytest.fixture(scope="module")
def config() -> PlatformConfig:
    return parse_config(_variant())


@pytest.fixture(scope="module")
def synthesized(config: PlatformConfig) -> tuple[Any, dict[str, Any]]:
    from stacks.platform import build_platform

    platform = build_platform(App(), config)
    return platform.cluster, Template.from_stack(platform.cluster).to_json()


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {key: value for key, value in template["Resources"].items() if value["Type"] == kind}


def _manifest_objects(agent: CaptureSidecarMetrics, template: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's Kubernetes objects as the template applies them (tokens, the role ARN among them, as ``<ref>``)."""
    found = []
    for resource in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        parts = resource["Properties"]["Manifest"]
        text = "".join(part if isinstance(part, str) else "<ref>" for part in parts["Fn::Join"][1]) \
            if isinstance(parts, dict) else parts
        objects = json.loads(text)
        if any(obj["kind"] == "Deployment" and obj["metadata"]["name"] == AGENT_NAME
               and obj["metadata"]["namespace"] == agent.namespace for obj in objects):
            found.append(objects)
    (objects,) = found
    return list(objects)


# ---- the plan -----------------------------------------------------------------------------------------------------

def test_the_plan_has_one_agent_per_capturing_namespace_with_names_of_its_own(config: PlatformConfig) -> None:
    agents = config.metrics_agents
    assert [agent.namespace for agent in agents] == list(NAMESPACES)
    assert config.monitored_namespaces == NAMESPACES
    home, team_x, team_y = agents
    assert (home.construct_id, home.role_name, home.alarm_name_prefix, home.dist_name, home.log_group_name) == (
        "CaptureSidecarMetrics", "llm-platform-capture-metrics-agent", "llm-platform", "capture-sidecar-metrics",
        "/aws/containerinsights/llm-platform/capture-sidecar")
    assert (team_x.construct_id, team_x.role_name, team_x.alarm_name_prefix, team_x.dist_name,
            team_x.log_group_name) == (
        "CaptureSidecarMetrics-team-x", "llm-platform-capture-metrics-agent-team-x", "llm-platform-team-x",
        "capture-sidecar-metrics-team-x", "/aws/containerinsights/llm-platform/capture-sidecar/team-x")
    # Each alarms on its own namespace's servers and budget levels only (the entry has no model of its own).
    assert (home.models, team_x.models, team_y.models) == (("qwen3-8b-portable",), ("team-x-server",), ())
    assert (home.budget_alert_percents, team_x.budget_alert_percents, team_y.budget_alert_percents) == ((), (50, 100),
                                                                                                      ())
    for field in ("construct_id", "role_name", "alarm_name_prefix", "dist_name", "log_group_name"):
        assert len({getattr(agent, field) for agent in agents}) == len(agents), field


def test_a_long_namespace_gets_a_role_name_iam_takes() -> None:
    namespace = "a" * 63
    config = parse_config(_variant())
    name = config.sidecar_metrics_role_name_in(namespace)
    assert len(name) == 64 and name.startswith("llm-platform-capture-metrics-agent-aaa")
    assert name != config.sidecar_metrics_role_name_in("a" * 62)


def test_the_default_config_keeps_its_one_agent() -> None:
    config = parse_config(copy.deepcopy(DEFAULT))
    (agent,) = config.metrics_agents
    assert agent == config.metrics_agent
    assert (agent.namespace, agent.construct_id, agent.role_name, agent.alarm_name_prefix, agent.dist_name) == (
        "inference", "CaptureSidecarMetrics", "llm-platform-capture-metrics-agent", "llm-platform",
        "capture-sidecar-metrics")
    assert config.monitored_namespaces == ("inference",)


def test_no_capture_in_the_platforms_namespace_means_no_agent_there() -> None:
    """An agent where nothing captures would only fire its no-metrics alarm."""
    data = _variant()
    del data["portable"][0]
    config = parse_config(data)
    assert [agent.namespace for agent in config.metrics_agents] == ["team-x", "team-y"]
    assert config.metrics_agent is not None and config.metrics_agent.construct_id == "CaptureSidecarMetrics-team-x"


def test_the_app_no_longer_warns_about_unmonitored_capture(config: PlatformConfig) -> None:
    from platform_config.acknowledgments import review_warnings

    ids = [warning.id for warning in review_warnings(config).unacknowledged]
    assert not [warning for warning in ids if warning.endswith("captureNotMonitored")], ids


# ---- the cluster stack ----------------------------------------------------------------------------------------------

def test_each_agent_discovers_only_its_namespace(synthesized: tuple[Any, dict[str, Any]]) -> None:
    stack, template = synthesized
    assert list(stack.sidecar_metrics_agents) == list(NAMESPACES)
    for namespace, agent in stack.sidecar_metrics_agents.items():
        objects = _manifest_objects(agent, template)
        assert {obj["metadata"]["namespace"] for obj in objects} == {namespace}
        (scrape,) = [obj for obj in objects if obj["kind"] == "ConfigMap" and "prometheus.yaml" in obj["data"]]
        (job,) = yaml.safe_load(scrape["data"]["prometheus.yaml"])["scrape_configs"]
        assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [namespace]}}]
        (config_map,) = [obj for obj in objects if obj["kind"] == "ConfigMap" and "cwagentconfig.json" in obj["data"]]
        prometheus = json.loads(config_map["data"]["cwagentconfig.json"])["logs"]["metrics_collected"]["prometheus"]
        assert prometheus["log_group_name"] == agent.log_group_name
        (role,) = [obj for obj in objects if obj["kind"] == "Role"]
        assert role["metadata"]["namespace"] == namespace  # (a Role, never a ClusterRole: pods of its namespace)
        (account,) = [obj for obj in objects if obj["kind"] == "ServiceAccount"]
        assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith(
            f":role/{agent.props.role_name}")


def test_each_agents_role_is_trusted_by_its_own_service_account_only(
        synthesized: tuple[Any, dict[str, Any]]) -> None:
    stack, template = synthesized
    roles = _resources(template, "AWS::IAM::Role")
    trusts = _resources(template, "Custom::AWSCDKCfnJson")
    seen = set()
    for namespace, agent in stack.sidecar_metrics_agents.items():
        role = roles[stack.get_logical_id(agent.role.node.default_child)]["Properties"]
        seen.add(role["RoleName"])
        assert len(role["RoleName"]) <= 64
        ((statement,),) = [role["AssumeRolePolicyDocument"]["Statement"]]
        trust_id = statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]
        trust = json.dumps(trusts[trust_id]["Properties"]["Value"])
        assert f"system:serviceaccount:{namespace}:{AGENT_NAME}" in trust
        others = [other for other in NAMESPACES if other != namespace]
        assert not [other for other in others if f"system:serviceaccount:{other}:" in trust]
    assert len(seen) == len(NAMESPACES)


def test_log_groups_and_alarm_names_do_not_collide(synthesized: tuple[Any, dict[str, Any]]) -> None:
    stack, template = synthesized
    groups = [value["Properties"]["LogGroupName"] for value in _resources(template, "AWS::Logs::LogGroup").values()
              if isinstance(value["Properties"].get("LogGroupName"), str)]
    assert len(groups) == len(set(groups))
    assert {sidecar_metrics_log_group_name("llm-platform"), *(sidecar_metrics_log_group_name("llm-platform", ns)
                                                               for ns in NAMESPACES[1:])} <= set(groups)
    alarms = [value["Properties"] for value in _resources(template, "AWS::CloudWatch::Alarm").values()]
    names = [alarm["AlarmName"] for alarm in alarms]
    assert len(names) == len(set(names))  # (every alarm of the stack: CloudFormation refuses a second name)
    for namespace, agent in stack.sidecar_metrics_agents.items():
        for alarm in agent.alarms.values():
            properties = template["Resources"][stack.get_logical_id(alarm.node.default_child)]["Properties"]
            prefix = "llm-platform-" if namespace == "inference" else f"llm-platform-{namespace}-"
            assert properties["AlarmName"].startswith(prefix + "sidecar-")
            dimensions = [d for m in properties.get("Metrics", [{"MetricStat": {"Metric": properties}}])
                          if "MetricStat" in m for d in m["MetricStat"]["Metric"].get("Dimensions", [])]
            assert {"Name": "Namespace", "Value": namespace} in dimensions, properties["AlarmName"]
            assert not [d for d in dimensions if d["Name"] == "Namespace" and d["Value"] != namespace]


def test_budget_alarms_follow_their_namespaces_servers(synthesized: tuple[Any, dict[str, Any]]) -> None:
    stack, _template = synthesized
    budget = {namespace: sorted(key for key in agent.alarms if key.startswith("budget"))
              for namespace, agent in stack.sidecar_metrics_agents.items()}
    assert budget["inference"] == [] and budget["team-y"] == []
    assert len(budget["team-x"]) == 2


def test_every_agents_alarms_are_on_the_dashboard_and_no_capture_goes_unwatched(
        synthesized: tuple[Any, dict[str, Any]]) -> None:
    stack, template = synthesized
    assert stack.sidecar_metrics is stack.sidecar_metrics_agents["inference"]  # (its graphs: the platform's)
    body = json.dumps(next(iter(_resources(template, "AWS::CloudWatch::Dashboard").values()))["Properties"])
    for agent in stack.sidecar_metrics_agents.values():
        for alarm in agent.alarms.values():
            assert stack.get_logical_id(alarm.node.default_child) in body
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("captureNotMonitored"))
    assert warnings == []


def test_the_agents_in_other_namespaces_are_admitted_as_the_platforms(
        synthesized: tuple[Any, dict[str, Any]], config: PlatformConfig) -> None:
    """Same-namespace rules as in the platform's namespace: the agent's own policy lets it out to the sidecars'
    metrics port of its namespace; the namespace allows root pods (the agent image's user)."""
    from hyperpod_inference_iac.charts.pod_security import PodSecurityLevel
    from hyperpod_inference_iac.charts.render import namespace_security_of

    stack, template = synthesized
    egress, levels = {}, {}
    for namespace, agent in stack.sidecar_metrics_agents.items():
        (policy,) = [obj for obj in _manifest_objects(agent, template) if obj["kind"] == "NetworkPolicy"]
        egress[namespace] = policy["spec"]["egress"]
        levels[namespace] = namespace_security_of(config.workloads, namespace).level
    assert levels["team-x"] is not PodSecurityLevel.RESTRICTED and levels["team-y"] is not PodSecurityLevel.RESTRICTED
    assert egress["team-x"] == egress["team-y"] == egress["inference"]


# ---- dist/ --------------------------------------------------------------------------------------------------------

def test_dist_renders_every_agent(config: PlatformConfig, tmp_path: Path) -> None:
    from stacks.gitops import stage_dist

    staged = stage_dist(config, outdir=tmp_path / "dist", sidecar_image="registry.invalid/sidecar:1")
    try:
        for agent in config.metrics_agents:
            assert f"{agent.dist_name}.k8s.yaml" in staged.written
            objects = list(yaml.safe_load_all((staged.staging / f"{agent.dist_name}.k8s.yaml").read_text()))
            assert {obj["metadata"]["namespace"] for obj in objects} == {agent.namespace}
            (account,) = [obj for obj in objects if obj["kind"] == "ServiceAccount"]
            assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == config.role_arn(agent.role_name)
    finally:
        staged.discard()


# ---- the construct: a second agent of one namespace or log group is refused -----------------------------------------

def _agent(stack: Any, cluster: Any, id: str, **props: Any) -> CaptureSidecarMetrics:
    return CaptureSidecarMetrics(stack, id, cluster=cluster, cluster_name="gpu-cluster", alarm_name_prefix=id.lower(),
                                 **({"namespace": "inference"} | props))


def test_a_second_agent_in_another_namespace_needs_a_log_group_of_its_own() -> None:
    stack, cluster = _cluster_stack()
    _agent(stack, cluster, "First")
    with pytest.raises(ConfigError) as raised:
        _agent(stack, cluster, "Second", namespace="team-x")
    assert raised.value.codes == ["CaptureSidecarMetrics.SharedLogGroup"]
    assert "log_group_name" in str(raised.value) and "Traceback" not in str(raised.value)
    stack, cluster = _cluster_stack()
    _agent(stack, cluster, "First")
    third = _agent(stack, cluster, "Third", namespace="team-x",
                   log_group_name=sidecar_metrics_log_group_name("gpu-cluster", "team-x"))
    assert third.log_group_name == "/aws/containerinsights/gpu-cluster/capture-sidecar/team-x"


def test_a_second_agent_in_the_same_namespace_is_refused() -> None:
    stack, cluster = _cluster_stack()
    _agent(stack, cluster, "First")
    with pytest.raises(ConfigError) as raised:
        _agent(stack, cluster, "Second", log_group_name="/other")
    assert raised.value.codes == ["CaptureSidecarMetrics.SecondAgent"]


def test_a_bad_log_group_name_is_refused() -> None:
    stack, cluster = _cluster_stack()
    with pytest.raises(ConfigError) as raised:
        _agent(stack, cluster, "First", log_group_name="no spaces here")
    assert raised.value.codes == ["CaptureSidecarMetrics.BadLogGroupName"]

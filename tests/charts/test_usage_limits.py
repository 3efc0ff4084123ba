"""``portable[i].usageLimits`` (docs/usage-and-budgets.md): checked with key paths, rendered into the capture
sidecar's settings (which the sidecar checks again), the store reachable on its port inside the VPC only, and a
raised limit read as broadening by the review."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import cdk8s

from hyperpod_inference_iac.charts.portable import PortableModelServerChart
from hyperpod_inference_iac.charts.usage_limits import CallerLimit, UsageLimits, usage_limits_environment
from hyperpod_inference_iac.foundation.validation import Problems
from tests.charts import samples
from tools.review.k8s import caller_limits_change as review_env

STORE = "rediss://budgets-abc123.serverless.use1.cache.amazonaws.com:6379"
TEAM_A = CallerLimit(caller_id="team-a", tokens_per_minute=200_000, tokens_per_day=20_000_000)
LIMITS = UsageLimits(store_url=STORE, callers=(TEAM_A, CallerLimit(caller_id="*", tokens_per_month=10**8)))

# (code, server changes, key path): run by tests/charts/test_validation_codes.py with the other portable cases.
USAGE_LIMITS_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("UsageLimits.LimitOutOfRange",
     {"usage_limits": UsageLimits(store_url=STORE, callers=(CallerLimit(caller_id="team-a", tokens_per_day=0),))},
     "server.usageLimits.callers[0].tokensPerDay"),
    ("UsageLimits.CallerIdInvalid",
     {"usage_limits": UsageLimits(store_url=STORE, callers=(CallerLimit(caller_id="team a", tokens_per_day=5),))},
     "server.usageLimits.callers[0].callerId"),
    ("UsageLimits.NoLimit", {"usage_limits": UsageLimits(store_url=STORE, callers=(CallerLimit(caller_id="t"),))},
     "server.usageLimits.callers[0]"),
    ("UsageLimits.DuplicateCaller", {"usage_limits": UsageLimits(store_url=STORE, callers=(TEAM_A, TEAM_A))},
     "server.usageLimits.callers[1].callerId"),
    ("UsageLimits.NoStore", {"usage_limits": UsageLimits(callers=(TEAM_A,))}, "server.usageLimits.storeUrl"),
    ("UsageLimits.StoreUrlInvalid", {"usage_limits": UsageLimits(store_url="redis://plain:6379", callers=(TEAM_A,))},
     "server.usageLimits.storeUrl"),
    ("UsageLimits.StoreFailureInvalid", {"usage_limits": dataclasses.replace(LIMITS, store_failure="maybe")},
     "server.usageLimits.storeFailure"),
    ("UsageLimits.UsageRecordsInvalid", {"usage_limits": dataclasses.replace(LIMITS, usage_records="some")},
     "server.usageLimits.usageRecords"),
    ("UsageLimits.AlertPercentsInvalid", {"usage_limits": dataclasses.replace(LIMITS, alert_percents=(80, 0))},
     "server.usageLimits.alertPercents[1]"),
    ("UsageLimits.NeedsCaptureSidecar", {"usage_limits": LIMITS, "data_capture": None}, "server.usageLimits"),
]


def test_a_malformed_limit_in_yaml_is_refused_with_its_key_path() -> None:
    problems = Problems()
    parsed = UsageLimits.from_dict(
        {"storeUrl": STORE, "callers": [{"callerId": "team-a", "tokensPerDay": -5, "tokensPerWeek": 3}]},
        "portable[0].usageLimits", problems)
    if parsed is not None:
        parsed.validate("portable[0].usageLimits", problems)
    paths = {(problem.code, problem.path) for problem in problems.items}
    assert ("UsageLimits.LimitOutOfRange", "portable[0].usageLimits.callers[0].tokensPerDay") in paths
    assert any(path == "portable[0].usageLimits.callers[0].tokensPerWeek" for _, path in paths)


def _sidecar_env(server: Any) -> dict[str, str]:
    app = cdk8s.Testing.app()
    chart = PortableModelServerChart(app, "portable", workload=samples.planned_portable(server),
                                     namespace=samples.NAMESPACE, values=samples.VALUES)
    manifests = cdk8s.Testing.synth(chart)
    pod = next(m for m in manifests if m["kind"] == "Deployment")["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "capture-sidecar")
    return {item["name"]: item.get("value") for item in sidecar["env"]}


def test_the_limits_reach_the_sidecar_as_the_settings_it_checks() -> None:
    env = _sidecar_env(samples.portable_server(usage_limits=LIMITS))
    assert json.loads(env["CALLER_LIMITS"]) == {
        "team-a": {"tokensPerMinute": 200_000, "tokensPerDay": 20_000_000},
        "*": {"tokensPerMonth": 10**8},
    }
    assert env["LIMITS_STORE_URL"] == STORE and env["LIMITS_STORE_FAILURE"] == "open"
    assert env["LIMITS_KEY_PREFIX"] == f"budget:{samples.NAMESPACE}/qwen3-8b:"
    assert env["BUDGET_ALERT_PERCENTS"] == "80,100"  # the default levels of the budget alerts
    assert "CALLER_LIMITS" not in _sidecar_env(samples.portable_server())
    assert "STREAM_USAGE" not in env  # vLLM: streams are asked for their usage
    assert _sidecar_env(samples.portable_server(runtime="tgi"))["STREAM_USAGE"] == "off"

    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sidecar"))
    from capture_sidecar.settings import load_settings

    settings = load_settings({**env, "UPSTREAM_URL": "http://127.0.0.1:8000"})
    assert settings.usage.limits["team-a"].tokens_per_day == 20_000_000
    assert settings.usage.alert_percents == (80, 100)


def test_the_store_is_reachable_on_its_port_inside_the_vpc_only() -> None:
    app = cdk8s.Testing.app()
    server = samples.portable_server(usage_limits=LIMITS)
    chart = PortableModelServerChart(app, "portable", workload=samples.planned_portable(server),
                                     namespace=samples.NAMESPACE, values=samples.VALUES)
    policy = next(m for m in cdk8s.Testing.synth(chart) if m["kind"] == "NetworkPolicy")
    store_rules = [rule for rule in policy["spec"]["egress"] if rule["ports"] == [{"port": 6379, "protocol": "TCP"}]]
    assert store_rules == [{"to": [{"ipBlock": {"cidr": samples.context().vpc_cidr}}],
                            "ports": [{"port": 6379, "protocol": "TCP"}]}]


def test_a_raised_or_removed_limit_is_broadening_and_a_lowered_one_is_not() -> None:
    before = usage_limits_environment(LIMITS, key_prefix="p:")["CALLER_LIMITS"]
    raised = dataclasses.replace(TEAM_A, tokens_per_day=40_000_000)
    lowered = dataclasses.replace(TEAM_A, tokens_per_day=1_000_000)
    unlimited = dataclasses.replace(TEAM_A, tokens_per_minute=None)

    def after(caller: CallerLimit) -> str:
        limits = dataclasses.replace(LIMITS, callers=(caller, LIMITS.callers[1]))
        return usage_limits_environment(limits, key_prefix="p:")["CALLER_LIMITS"]

    group, _, text, broadens = review_env("CALLER_LIMITS", before, after(raised))
    assert (group, broadens) == ("budgets_costs", True) and "team-a tokensPerDay 20000000 → 40000000" in text
    assert review_env("CALLER_LIMITS", before, after(lowered))[3] is False
    assert review_env("CALLER_LIMITS", before, after(unlimited))[3] is True  # no per-minute limit any more
    assert review_env("LIMITS_STORE_FAILURE", "closed", "open")[3] is True
    assert review_env("CALLER_LIMITS", before, None)[3] is True  # every limit gone


def test_the_review_engine_reads_a_raised_budget_in_the_sidecars_deployment_as_broadening() -> None:
    from tests.review.test_review_engine import edited, lines

    limits = json.dumps({"team-a": {"tokensPerDay": 1000}})
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "qwen", "namespace": "ai"},
                  "spec": {"template": {"spec": {"initContainers": [{"name": "capture-sidecar", "image": "s:1", "env": [
                      {"name": "CALLER_LIMITS", "value": limits}]}]}}}}

    def raise_budget(obj: dict[str, Any]) -> None:
        obj["spec"]["template"]["spec"]["initContainers"][0]["env"][0]["value"] = json.dumps(
            {"team-a": {"tokensPerDay": 5000}})

    assert lines(deployment, edited(deployment, raise_budget)) == [
        ("budgets_costs", "qwen/capture-sidecar", "caller limits: team-a tokensPerDay 1000 → 5000", True)]
    assert lines(edited(deployment, raise_budget), deployment)[0][3] is False

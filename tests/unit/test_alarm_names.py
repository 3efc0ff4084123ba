"""Alarm names that can collide across families (docs/alarms.md#alarm-names): the config check plans every alarm name
the stacks create, with the functions the constructs name them with, and refuses two of one name with ONE
``Config.AlarmNameCollision`` per name naming both key paths; a name over 255 characters is refused too. The plan is
what a synthesized platform names (an in-process synth of a variant with three sidecar agents, budgets and API key
callers), the default config's names are those it always had, and the constructs refuse their own collisions (models
one ``/`` apart, one model name in two namespaces) and names that are too long."""

from __future__ import annotations

import copy
import random
import re
from typing import Any

import pytest
import yaml
from aws_cdk import App
from aws_cdk.assertions import Template

from hyperpod_inference_iac import CaptureSidecarMetrics, ModelServingMetrics, WatchedModel
from hyperpod_inference_iac.foundation.validation import ConfigError
from hyperpod_inference_iac.observability.alarm_names import ALARM_NAME_MAX
from platform_config import parse_config
from platform_config.alarm_names import platform_alarms
from tests.support.synth import REPO
from tests.unit.test_alarms import _cluster_stack
from tests.unit.test_sidecar_agents_per_namespace import _variant

DEFAULT = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
REVIEWED_TABLE = REPO / "tests" / "platform" / "__snapshots__" / "test_alarms.ambr"


def _server(data: dict[str, Any], name: str, namespace: str | None = None) -> None:
    """One more capturing portable server, like the default's (no hostname, no API key)."""
    server = copy.deepcopy(DEFAULT["portable"][0])
    server["name"] = name
    server.pop("hostname", None)
    server.pop("apiKey", None)
    if namespace is not None:
        server["namespace"] = namespace
    data["portable"].append(server)


def _model(data: dict[str, Any], name: str, namespace: str | None = None) -> None:
    """One more vLLM InferenceEndpointConfig, like the default's first (its own endpoint name, no domain or gateway)."""
    model = copy.deepcopy(DEFAULT["models"][0])
    model["name"] = name
    model["spec"]["endpointName"] = name
    model.pop("endpointDomain", None)
    model.pop("gateway", None)
    if namespace is not None:
        model["namespace"] = namespace
    data["models"].append(model)


def _problems(data: dict[str, Any]) -> list[tuple[str, str, Any]]:
    with pytest.raises(ConfigError) as raised:
        parse_config(data)
    return [(p.code, p.path, p.value) for p in raised.value.problems]


# ---- the default config --------------------------------------------------------------------------------------------

def test_the_default_config_plans_exactly_the_names_it_always_had() -> None:
    """The plan of the default file is the reviewed alarm table's names (tests/platform/__snapshots__/test_alarms.ambr,
    the synthesized default platform's), each once."""
    planned = [alarm.name for alarm in platform_alarms(parse_config(DEFAULT))]
    reviewed = set(re.findall(r"llm-platform-[a-z0-9-]+", REVIEWED_TABLE.read_text())) - {
        "llm-platform-storage", "llm-platform-cluster"}  # (the stacks' names)
    assert len(planned) == len(set(planned))
    assert set(planned) == reviewed


def test_alarms_off_plans_none() -> None:
    data = copy.deepcopy(DEFAULT)
    data.setdefault("alarms", {})["enabled"] = False
    assert platform_alarms(parse_config(data)) == []


# ---- the plan is what the stacks name ------------------------------------------------------------------------------

def test_the_plan_is_every_alarm_name_a_synthesized_platform_has() -> None:
    """Three sidecar agents (team-x's with budget levels, team-y's for the gateway entry), the operator models, the API
    key with two callers, the capture tiers and the certificate: the names of every AWS::CloudWatch::Alarm of both
    stacks are the plan's, each once."""
    from stacks.platform import build_platform

    config = parse_config(_variant())
    platform = build_platform(App(), config)
    synthesized = [resource["Properties"]["AlarmName"]
                   for stack in (platform.storage, platform.cluster)
                   for resource in Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm").values()]
    planned = [alarm.name for alarm in platform_alarms(config)]
    assert sorted(planned) == sorted(synthesized)
    assert any(name.startswith("llm-platform-team-x-sidecar-budget-") for name in planned)
    assert "llm-platform-api-key-qwen3-8b-portable-team-b-keys-not-synced" in planned


# ---- collisions the config check refuses ---------------------------------------------------------------------------

COLLISION = "Config.AlarmNameCollision"


def test_a_namespace_and_a_model_that_meet_are_one_error_per_name_naming_both_keys() -> None:
    """The platform namespace's server ``x-sidecar-y`` and the server ``y`` of namespace ``sidecar-x``: both agents
    would name alarms ``llm-platform-sidecar-x-sidecar-y-server-error-rate`` and ``...-first-chunk-p99``."""
    data = copy.deepcopy(DEFAULT)
    _server(data, "x-sidecar-y")
    _server(data, "y", namespace="sidecar-x")
    with pytest.raises(ConfigError) as raised:
        parse_config(data)
    problems = raised.value.problems
    assert [(p.code, p.path, p.value) for p in problems] == [
        (COLLISION, "portable[1].name", "llm-platform-sidecar-x-sidecar-y-server-error-rate"),
        (COLLISION, "portable[1].name", "llm-platform-sidecar-x-sidecar-y-first-chunk-p99")]
    assert all("portable[2].name" in p.message and "namespace sidecar-x" in p.message for p in problems)
    assert "Traceback" not in str(raised.value)


def test_a_sidecar_agent_and_an_operator_model_that_meet_are_refused() -> None:
    """Namespace ``model-a`` with the server ``b``, and the operator model ``a-sidecar-b-server``: the agent's 5xx rate
    alarm and the model's error-rate alarm would both be ``llm-platform-model-a-sidecar-b-server-error-rate``."""
    data = copy.deepcopy(DEFAULT)
    _server(data, "b", namespace="model-a")
    _model(data, "a-sidecar-b-server")
    problems = _problems(data)
    assert problems == [(COLLISION, "portable[1].name", "llm-platform-model-a-sidecar-b-server-error-rate")]


def test_a_mistake_the_plan_reports_is_not_reported_again_as_a_collision() -> None:
    """One operator model name in two namespaces is the plan's ``Model.DuplicateName``; its alarms are not counted
    again (one problem per mistake)."""
    data = copy.deepcopy(DEFAULT)
    _model(data, "qwen3-8b", namespace="inference")
    codes = [code for code, _, _ in _problems(data)]
    assert "Model.DuplicateName" in codes and COLLISION not in codes


def test_names_that_do_not_meet_are_fine() -> None:
    data = copy.deepcopy(DEFAULT)
    _server(data, "y", namespace="sidecar-x")  # (its alarms: llm-platform-sidecar-x-sidecar-...)
    _model(data, "a-sidecar-b-server")
    names = [alarm.name for alarm in platform_alarms(parse_config(data))]
    assert len(names) == len(set(names)) and max(map(len, names)) <= ALARM_NAME_MAX


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 6)))


@pytest.mark.parametrize("seed", range(12))
def test_seeded_random_names_are_refused_exactly_when_two_families_meet(seed: int) -> None:
    """Random words A, B, C, D; the platform namespace's server ``A-sidecar-B'`` beside namespace ``sidecar-A``'s
    server ``B``, and namespace ``model-C``'s server ``D`` beside the operator model ``C-sidecar-D'-server``, where
    ``B'`` is ``B`` or another word, and ``D'`` is ``D`` or another word (coin flips). The oracle is how the names were
    built: the check reports exactly the names that meet (two for the sidecar pair, one for the model pair), each once;
    a config it accepts has every alarm name once."""
    rng = random.Random(seed)
    a, b, c, d = (_word(rng) for _ in range(4))
    b_same, d_same = rng.random() < 0.5, rng.random() < 0.5
    data = copy.deepcopy(DEFAULT)
    _server(data, f"{a}-sidecar-{b if b_same else b + 'z'}")
    _server(data, b, namespace=f"sidecar-{a}")
    _server(data, d, namespace=f"model-{c}")
    _model(data, f"{c}-sidecar-{d if d_same else d + 'z'}-server")
    expected = ([f"llm-platform-sidecar-{a}-sidecar-{b}-server-error-rate",
                 f"llm-platform-sidecar-{a}-sidecar-{b}-first-chunk-p99"] if b_same else []) \
        + ([f"llm-platform-model-{c}-sidecar-{d}-server-error-rate"] if d_same else [])
    if not expected:
        names = [alarm.name for alarm in platform_alarms(parse_config(data))]
        assert len(names) == len(set(names))
        return
    problems = _problems(data)
    assert [code for code, _, _ in problems] == [COLLISION] * len(expected)
    assert sorted(value for _, _, value in problems) == sorted(expected)


# ---- the constructs' own collisions and lengths --------------------------------------------------------------------

def test_two_models_one_slash_apart_are_one_error_per_name_of_the_construct() -> None:
    stack, cluster = _cluster_stack()
    with pytest.raises(ConfigError) as raised:
        CaptureSidecarMetrics(stack, "Agent", cluster=cluster, namespace="inference", cluster_name="gpu-cluster",
                              alarm_name_prefix="p", models=["meta-llama/Llama-3", "meta-llama-Llama-3"])
    assert [(p.code, p.path, p.value) for p in raised.value.problems] == [
        ("CaptureSidecarMetrics.AlarmNameCollision", "models[0]", "p-sidecar-meta-llama-Llama-3-server-error-rate"),
        ("CaptureSidecarMetrics.AlarmNameCollision", "models[0]", "p-sidecar-meta-llama-Llama-3-first-chunk-p99")]
    assert "models[1]" in raised.value.problems[0].message


def test_a_name_over_255_characters_is_refused_by_the_construct() -> None:
    stack, cluster = _cluster_stack()
    with pytest.raises(ConfigError) as raised:
        CaptureSidecarMetrics(stack, "Agent", cluster=cluster, namespace="inference", cluster_name="gpu-cluster",
                              alarm_name_prefix="p" * 128, models=["m" * 128], first_chunk_p99=None)
    ((code, path, value),) = [(p.code, p.path, p.value) for p in raised.value.problems]
    assert (code, path, len(value)) == ("CaptureSidecarMetrics.AlarmNameTooLong", "models[0]", 128 + 1 + 8 + 128 + 18)


def test_one_model_name_in_two_namespaces_is_refused_by_the_model_metrics() -> None:
    stack, cluster = _cluster_stack()
    with pytest.raises(ConfigError) as raised:
        ModelServingMetrics(stack, "Models", cluster=cluster, namespace="inference", cluster_name="gpu-cluster",
                            alarm_name_prefix="p", pod_cidrs=["10.0.0.0/16"],
                            models=[WatchedModel(name="m", namespace="team-a", kind="JumpStartModel"),
                                    WatchedModel(name="m", namespace="team-b", kind="JumpStartModel")])
    assert [(p.code, p.path) for p in raised.value.problems] == [
        ("ModelServingMetrics.AlarmNameCollision", "models[0]")] * 2

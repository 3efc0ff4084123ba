"""The gateway's config read through its props classes (issue 30, 5): ``read_props`` reads each ``gateways:`` entry
into ``InferenceGateway`` as every other section into its class, a mistake is one problem at its key, all of them in
one run, and a Python consumer gets the same rules named by its properties."""

from __future__ import annotations

from typing import Any

import pytest

from hyperpod_inference_iac.charts.gateway import (
    ConfigMapRef,
    GatewayModel,
    InferenceGateway,
    JwtAuthentication,
    SchedulerOptions,
)
from hyperpod_inference_iac.foundation.validation import ConfigError, Problems
from platform_config.gateways import read_gateway
from tests.charts.test_gateway import _jwt, _plan, _with

AT = "gateways[0]"


def _read(entry: Any) -> tuple[InferenceGateway | None, list[tuple[str, str]]]:
    problems = Problems()
    gateway = read_gateway(entry, AT, problems)
    return gateway, [(p.code, p.path) for p in problems]


def test_an_entry_is_read_into_the_props_with_their_defaults() -> None:
    gateway, problems = _read(_with(schedulers={"qwen3-8b": {"configMapRef": {"name": "plugins"}, "replicas": 3}},
                                    jwt=_jwt(requiredClaims=[{"name": "scope", "values": ["inference"]}])))
    assert problems == []
    assert gateway is not None and gateway.jwt is not None
    assert (gateway.bbr_replicas, gateway.metrics, gateway.jwt.provider_name, gateway.jwt.caller_claim) == (
        2, True, "platform", "sub")
    assert gateway.jwt.required_claims[0].value_type == "String"
    options = gateway.schedulers["qwen3-8b"]
    assert options == SchedulerOptions(config_map=ConfigMapRef(name="plugins"), replicas=3)
    entry = GatewayModel(name="qwen3-8b", model_name="Qwen3-8B", target_port=8000, engine_type="vllm",
                         options=options).scheduler()
    assert entry["configMapRef"] == {"name": "plugins", "key": "default-plugins.yaml"}


@pytest.mark.parametrize(("entry", "expected"), [
    # The old parser made 0 replicas 2 without a word.
    (_with(schedulers={"qwen3-8b": {"replicas": 0}}), [("Gateway.ReplicasOutOfRange",
                                                        f"{AT}.schedulers.qwen3-8b.replicas")]),
    # A weight of the wrong kind is a wrong kind, at its scorer.
    (_with(schedulers={"qwen3-8b": {"weights": {"queue": "x"}}}), [("Config.WrongType",
                                                                    f"{AT}.schedulers.qwen3-8b.weights.queue")]),
    (_with(schedulers={"qwen3-8b": {"weights": {"queue": True}}}), [("Config.WrongType",
                                                                     f"{AT}.schedulers.qwen3-8b.weights.queue")]),
    (_with(schedulers={1: {}}), [("Config.WrongType", f"{AT}.schedulers.1")]),
    # A block that is no mapping: one problem, its keys not also missing, no "jwt is required".
    (_with(jwt="https://idp.example.com"), [("Config.WrongType", f"{AT}.jwt")]),
    (_with(schedulers={"qwen3-8b": {"configMapRef": "plugins"}}), [("Config.WrongType",
                                                                    f"{AT}.schedulers.qwen3-8b.configMapRef")]),
    # An explicit "" is never the default (the old parser took it as `platform`, `sub`).
    (_with(jwt=_jwt(providerName="")), [("Config.EmptyString", f"{AT}.jwt.providerName")]),
    (_with(jwt=_jwt(callerClaim="")), [("Config.EmptyString", f"{AT}.jwt.callerClaim")]),
    (_with(jwt=_jwt(audiences=["ok", 7])), [("Config.WrongType", f"{AT}.jwt.audiences[1]")]),
    (_with(jwt=_jwt(requiredClaims=["scope"])), [("Config.WrongType", f"{AT}.jwt.requiredClaims[0]")]),
    (_with(jwt=_jwt(requiredClaims=[{"name": "scope"}])), [("Config.MissingKey",
                                                            f"{AT}.jwt.requiredClaims[0].values")]),
    (_with(jwt=_jwt(requiredClaims=[{"name": "scope", "values": ["x"], "typo": 1}])),
     [("Config.UnknownKey", f"{AT}.jwt.requiredClaims[0].typo")]),
    (_with(schedulers={"qwen3-8b": {"replica": 1}}), [("Config.UnknownKey", f"{AT}.schedulers.qwen3-8b.replica")]),
])
def test_one_mistake_is_one_problem_at_its_key(entry: Any, expected: list[tuple[str, str]]) -> None:
    assert _read(entry)[1] == expected


def test_every_mistake_of_an_entry_in_one_run_even_without_its_name() -> None:
    gateway, problems = _read({"endpointDomain": "Models", "bbrReplicas": 0, "jwt": {"issuer": "http://idp"}})
    assert gateway is not None and gateway.name == ""  # (a stand-in: the plan leaves it out)
    assert sorted(problems) == sorted([
        ("Config.MissingKey", f"{AT}.name"), ("Gateway.EndpointDomainInvalid", f"{AT}.endpointDomain"),
        ("Gateway.ReplicasOutOfRange", f"{AT}.bbrReplicas"), ("Config.MissingKey", f"{AT}.jwt.jwksUri"),
        ("Gateway.JwtUrlInvalid", f"{AT}.jwt.issuer"), ("Gateway.JwtUnbound", f"{AT}.jwt")])


def test_the_plan_does_not_judge_again_what_could_not_be_read() -> None:
    """The reader holds a stand-in where a key could not be read (an empty issuer); the plan runs the gateway's
    rules again (for a gateway built in Python) and leaves out what is already a problem at that key."""
    problems = _plan(_with(jwt=_jwt(issuer=None)))
    assert [(p.code, p.path) for p in problems if p.path.startswith(f"{AT}.jwt")] == [
        ("Config.MissingKey", f"{AT}.jwt.issuer")]


@pytest.mark.parametrize("name", [None, "", 7])
def test_a_gateway_whose_name_cannot_be_read_is_one_problem_and_the_next_keeps_its_index(name: Any) -> None:
    """Its models are not told their gateway is unknown; the next gateway's problems stay at gateways[1]."""
    first = _with(name=name)  # (None: left out)
    problems = _plan([first, _with(name="others", bbrReplicas=0)], behind={0: "models", 2: "others"})
    assert [(p.code, p.path) for p in problems] == [
        ("Config.MissingKey" if name is None else "Config.EmptyString" if name == "" else "Config.WrongType",
         f"{AT}.name"), ("Gateway.ReplicasOutOfRange", "gateways[1].bbrReplicas")]


def test_a_python_consumer_gets_the_rules_by_its_property_names() -> None:
    gateway = InferenceGateway(
        name="models", endpoint_domain="models.inference.example.com",
        jwt=JwtAuthentication(issuer="http://idp.example.com", jwks_uri="https://idp.example.com/keys",
                              audiences=("inference",)),
        schedulers={"qwen3-8b": SchedulerOptions(engine_type="tgi")})
    with pytest.raises(ConfigError) as raised:
        gateway.raise_if_invalid("gateway")
    assert [(p.code, p.path) for p in raised.value.problems] == [
        ("Gateway.JwtUrlInvalid", "jwt.issuer"), ("Gateway.EngineInvalid", "schedulers.qwen3-8b.engine_type")]


def test_a_python_consumer_gets_a_wrong_type_once_and_the_other_rules() -> None:
    gateway = InferenceGateway(name="models", endpoint_domain="models.inference.example.com",
                               unauthenticated_reason="a load test cluster without an identity provider",
                               bbr_replicas="2", max_request_body_bytes=0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as raised:
        gateway.raise_if_invalid("gateway")
    assert [(p.code, p.path) for p in raised.value.problems] == [
        ("Gateway.WrongType", "bbr_replicas"), ("Gateway.BodyLimitOutOfRange", "max_request_body_bytes")]


def test_the_config_keys_of_the_nested_props_are_the_files() -> None:
    names = InferenceGateway.key_paths(AT)
    assert names.block("jwt").child("required_claims", 0).at("value_type") == f"{AT}.jwt.requiredClaims[0].valueType"
    assert names.child("schedulers", "qwen3-8b").at("engine_type") == f"{AT}.schedulers.qwen3-8b.engineType"
    assert names.child("schedulers", "qwen3-8b").at("config_map") == f"{AT}.schedulers.qwen3-8b.configMapRef"

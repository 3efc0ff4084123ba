"""The Inference Gateway: each rule of the developer guide and of the platform refused at the key that breaks it,
the opt-in on the models, the rendered InferenceGatewayConfig, and reading a gateways: entry."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hyperpod_inference_iac.charts import ModelDeployment, parse_models, plan_workloads
from hyperpod_inference_iac.charts.gateway import (
    API_VERSION,
    KIND,
    engine_of_image,
)
from hyperpod_inference_iac.foundation.platform_values import PlatformValue, PlatformValues
from hyperpod_inference_iac.foundation.validation import ConfigError, Problems
from platform_config.gateways import read_gateway
from tests.charts import samples

GATEWAY_DOMAIN = "models.inference.example.com"
GATEWAY: dict[str, Any] = {
    "name": "models",
    "endpointDomain": GATEWAY_DOMAIN,
    "jwt": {"issuer": "https://idp.example.com/oauth2/default", "jwksUri": "https://idp.example.com/oauth2/keys",
            "audiences": ["inference"]},
}
PLATFORM: dict[str, Any] = {"endpoint_domains": (samples.PORTABLE_HOSTNAME, GATEWAY_DOMAIN),
                            "operator_addon_version": "v2.0.0-eksbuild.2"}
# models[0] (qwen3-8b) and models[2] (llama-s3) run vLLM 0.11.0: behind the gateway by default.
BEHIND = {0: "models", 2: "models"}


def _plan(gateway: dict[str, Any] | list[dict[str, Any]] | None = None, *, behind: dict[int, str] | None = None,
          platform: dict[str, Any] | None = None, models: dict[int, dict[str, Any]] | None = None) -> Problems:
    entries = samples.model_entries()
    for index, changes in (models or {}).items():
        entries[index].update(changes)
    problems = Problems()
    parsed = parse_models(entries, problems=problems)
    chosen = BEHIND if behind is None else behind
    deployments = [ModelDeployment(workload, path=path, gateway=chosen.get(int(path[7:-1])))
                   for path, workload in parsed]
    raw = [GATEWAY] if gateway is None else gateway if isinstance(gateway, list) else [gateway]
    gateways = [g for i, data in enumerate(raw) if (g := read_gateway(data, f"gateways[{i}]", problems)) is not None]
    plan_workloads(samples.context(**{**PLATFORM, **(platform or {})}), models=deployments, gateways=gateways,
                   problems=problems)
    return problems


def _with(**changes: Any) -> dict[str, Any]:
    gateway = copy.deepcopy(GATEWAY)
    for key, value in changes.items():
        if value is None:
            gateway.pop(key, None)
        else:
            gateway[key] = value
    return gateway


def _jwt(**changes: Any) -> dict[str, Any]:
    return {key: value for key, value in {**GATEWAY["jwt"], **changes}.items() if value is not None}


SGLANG = {"spec": {**samples.model_entries()[2]["spec"],
                   "worker": {**samples.model_entries()[2]["spec"]["worker"], "image": "lmsysorg/sglang:v0.4.6.post1"}}}
OLD_VLLM = {"spec": {**samples.model_entries()[2]["spec"],
                     "worker": {**samples.model_entries()[2]["spec"]["worker"], "image": "vllm/vllm-openai:v0.8.5"}}}
ROUTED = {"spec": {**samples.model_entries()[2]["spec"], "intelligentRoutingSpec": {"enabled": True}}}

# (code, gateway, models behind it by index, platform changes, model changes, the path of the problem)
GATEWAY_CASES: list[tuple[str, Any, dict[int, str] | None, dict[str, Any], dict[int, dict[str, Any]], str]] = [
    ("Gateway.NameInvalid", _with(name="Models_1"), {0: "Models_1"}, {}, {}, "gateways[0].name"),
    ("Gateway.NamespaceInvalid", _with(namespace="Inference"), None, {}, {}, "gateways[0].namespace"),
    ("Gateway.EndpointDomainMissing", _with(endpointDomain=None), None, {}, {}, "gateways[0].endpointDomain"),
    ("Gateway.EndpointDomainInvalid", _with(endpointDomain="Models.Example"), None, {}, {},
     "gateways[0].endpointDomain"),
    ("Gateway.EndpointDomainNotCertified", _with(endpointDomain="other.inference.example.com"), None, {}, {},
     "gateways[0].endpointDomain"),
    ("Gateway.Unauthenticated", _with(jwt=None), None, {}, {}, "gateways[0].jwt"),
    ("Gateway.ReasonTooShort", _with(jwt=None, unauthenticatedReason="lab"), None, {}, {},
     "gateways[0].unauthenticatedReason"),
    ("Gateway.AuthConflict", _with(unauthenticatedReason="an isolated test cluster without an IdP"), None, {}, {},
     "gateways[0].unauthenticatedReason"),
    ("Gateway.JwtUrlInvalid", _with(jwt=_jwt(issuer="http://idp.example.com")), None, {}, {},
     "gateways[0].jwt.issuer"),
    ("Gateway.JwtUnbound", _with(jwt=_jwt(audiences=None)), None, {}, {}, "gateways[0].jwt"),
    ("Gateway.CallerClaimInvalid", _with(jwt=_jwt(callerClaim="sub claim")), None, {}, {},
     "gateways[0].jwt.callerClaim"),
    ("Gateway.CallerClaimInvalid", _with(jwt=_jwt(callerClaim="sub\n")), None, {}, {},
     "gateways[0].jwt.callerClaim"),
    ("Gateway.AudienceInvalid", _with(jwt=_jwt(audiences=["a,b"])), None, {}, {}, "gateways[0].jwt.audiences"),
    ("Gateway.TooManyAudiences", _with(jwt=_jwt(audiences=[f"a{i}" for i in range(9)])), None, {}, {},
     "gateways[0].jwt.audiences"),
    ("Gateway.TooManyClaims", _with(jwt=_jwt(requiredClaims=[{"name": f"c{i}", "values": ["x"]} for i in range(17)])),
     None, {}, {}, "gateways[0].jwt.requiredClaims"),
    ("Gateway.ClaimTypeInvalid", _with(jwt=_jwt(requiredClaims=[{"name": "scope", "values": ["x"],
                                                                 "valueType": "Number"}])),
     None, {}, {}, "gateways[0].jwt.requiredClaims[0].valueType"),
    ("Gateway.ClaimInvalid", _with(jwt=_jwt(requiredClaims=[{"name": "scope", "values": []}])), None, {}, {},
     "gateways[0].jwt.requiredClaims[0].values"),
    ("Gateway.ReplicasOutOfRange", _with(bbrReplicas=0), None, {}, {}, "gateways[0].bbrReplicas"),
    ("Gateway.BodyLimitOutOfRange", _with(maxRequestBodyBytes=268435457), None, {}, {},
     "gateways[0].maxRequestBodyBytes"),
    ("Gateway.SchedulerInvalid", _with(schedulers={"qwen3-8b": {"scheduler": "round-robin"}}), None, {}, {},
     "gateways[0].schedulers.qwen3-8b.scheduler"),
    ("Gateway.EngineInvalid", _with(schedulers={"qwen3-8b": {"engineType": "tgi"}}), None, {}, {},
     "gateways[0].schedulers.qwen3-8b.engineType"),
    ("Gateway.WeightsAndConfigMap", _with(schedulers={"qwen3-8b": {"weights": {"queue": 2},
                                                                   "configMapRef": {"name": "plugins"}}}),
     None, {}, {}, "gateways[0].schedulers.qwen3-8b.configMapRef"),
    ("Gateway.WeightUnknown", _with(schedulers={"qwen3-8b": {"weights": {"latency": 2}}}), None, {}, {},
     "gateways[0].schedulers.qwen3-8b.weights.latency"),
    ("Gateway.WeightInvalid", _with(schedulers={"qwen3-8b": {"weights": {"queue": -1}}}), None, {}, {},
     "gateways[0].schedulers.qwen3-8b.weights.queue"),
    ("Gateway.LruNeedsLlmD", _with(schedulers={"qwen3-8b": {"scheduler": "epp", "weights": {"lru": 1}}}), None, {},
     {}, "gateways[0].schedulers.qwen3-8b.weights.lru"),
    ("Gateway.LoraAdaptersInvalid", _with(schedulers={"qwen3-8b": {"loraAdapters": [""]}}), None, {}, {},
     "gateways[0].schedulers.qwen3-8b.loraAdapters"),
    ("Gateway.RouteTimeoutInvalid", _with(schedulers={"qwen3-8b": {"routeTimeout": "5 minutes"}}), None, {}, {},
     "gateways[0].schedulers.qwen3-8b.routeTimeout"),
    ("Gateway.NameDuplicate", [GATEWAY, GATEWAY], None, {}, {}, "gateways[1].name"),
    ("Gateway.Unknown", GATEWAY, {0: "models", 2: "others"}, {}, {}, "models[2].gateway"),
    ("Gateway.NotAModel", GATEWAY, {0: "models", 5: "models"}, {}, {}, "models[5].gateway"),
    ("Gateway.NamespaceMismatch", _with(namespace="team-a"), None, {}, {}, "models[0].gateway"),
    ("Gateway.SchedulerForNoModel", _with(schedulers={"deepseek-fsx": {"replicas": 1}}), None, {}, {},
     "gateways[0].schedulers.deepseek-fsx"),
    ("Gateway.NoModels", GATEWAY, {}, {}, {}, "gateways[0]"),
    ("Gateway.ModelNameDuplicate", GATEWAY, None, {}, {2: {"spec": {**samples.model_entries()[2]["spec"],
                                                                    "modelName": "Qwen3-8B"}}}, "gateways[0]"),
    ("Gateway.IntelligentRoutingConflict", GATEWAY, None, {}, {2: ROUTED}, "models[2].gateway"),
    ("Gateway.EngineUnknown", GATEWAY, {0: "models", 1: "models"}, {}, {}, "models[1].gateway"),
    ("Gateway.EngineTooOld", GATEWAY, None, {}, {2: OLD_VLLM}, "models[2].gateway"),
    ("Gateway.MetricsDisabled", GATEWAY, None, {}, {2: SGLANG}, "models[2].gateway"),
    ("Gateway.OptInConflict", GATEWAY, None, {}, {2: {"extraSpec": {"inferenceGateway": {"enabled": True}}}},
     "models[2].gateway"),
    ("OperatorVersion.FeatureUnavailable", GATEWAY, None, {"operator_addon_version": "v1.5.0-eksbuild.1"}, {},
     "gateways[0]"),
]


@pytest.mark.parametrize(("code", "gateway", "behind", "platform", "models", "path"), GATEWAY_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(GATEWAY_CASES)])
def test_gateway_problem(code: str, gateway: Any, behind: dict[int, str] | None, platform: dict[str, Any],
                         models: dict[int, dict[str, Any]], path: str) -> None:
    problems = _plan(gateway, behind=behind, platform=platform, models=models)
    with pytest.raises(ConfigError) as raised:
        problems.raise_if_any()
    assert (code, path) in [(p.code, p.path) for p in raised.value.problems], str(raised.value)


def test_the_sample_gateway_plans_without_a_problem() -> None:
    problems = _plan()
    assert not problems, [str(p) for p in problems]


def _planned(gateway: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    entries = samples.model_entries()
    problems = Problems()
    parsed = parse_models(entries, problems=problems)
    deployments = [ModelDeployment(w, path=p, gateway=BEHIND.get(int(p[7:-1]))) for p, w in parsed]
    gateways = [read_gateway(gateway or GATEWAY, "gateways[0]", problems)]
    plan = plan_workloads(samples.context(**PLATFORM), models=deployments,
                          gateways=[g for g in gateways if g is not None], problems=problems)
    assert not problems, [str(p) for p in problems]
    return plan


def test_the_gateway_manifest_serves_the_platform_certificate_and_requires_tokens() -> None:
    plan = _planned(_with(schedulers={"llama-s3": {"scheduler": "epp", "weights": {"queue": 3}}}))
    (gateway,) = plan.gateways
    manifest = PlatformValues({PlatformValue.CERTIFICATE_ARN: samples.CERTIFICATE_ARN}).resolve(gateway.manifest())
    assert manifest["apiVersion"] == API_VERSION and manifest["kind"] == KIND
    assert manifest["metadata"] == {"name": "models", "namespace": samples.NAMESPACE}
    spec = manifest["spec"]
    assert spec["tls"] == {"acmArn": samples.CERTIFICATE_ARN}  # never empty: no cert-manager auto-issue
    assert spec["bbr"]["enabled"] is True
    assert spec["auth"]["jwt"]["provider"] == {
        "name": "platform", "issuer": "https://idp.example.com/oauth2/default",
        "remoteJWKS": {"uri": "https://idp.example.com/oauth2/keys"}, "audiences": ["inference"]}
    assert [(s["name"], s["modelName"], s["targetPort"], s["scheduler"], s["engineType"]) for s in spec["schedulers"]] \
        == [("qwen3-8b", "Qwen3-8B", 8000, "llm-d", "vllm"), ("llama-s3", "llama-s3", 8000, "epp", "vllm")]
    assert spec["schedulers"][1]["weights"] == {"queue": 3}


def test_what_the_plan_emits_is_valid_against_the_kinds_schemas_overlays_included() -> None:
    """The gateway (a kind with no vendored CRD: its overlay, closed) and the models' opt-in (an overlay field of the
    vendored CRDs): a field the overlays do not have would be refused here, as the API server would."""
    from hyperpod_inference_iac.charts.crd_schema import schema_errors

    plan = _planned(_with(schedulers={"llama-s3": {"scheduler": "epp", "weights": {"queue": 3}, "replicas": 1,
                                                   "loraAdapters": ["sql"], "routeTimeout": "300s"}},
                          maxRequestBodyBytes=1048576, bbrReplicas=3,
                          jwt=_jwt(requiredClaims=[{"name": "scope", "values": ["inference"],
                                                    "valueType": "StringArray"}])))
    values = PlatformValues({PlatformValue.CERTIFICATE_ARN: samples.CERTIFICATE_ARN})
    manifests = [values.resolve(g.manifest()) for g in plan.gateways]
    manifests += [samples.VALUES.resolve(m.workload.manifest(namespace=samples.NAMESPACE)) for m in plan.models
                  if m.gateway is not None]
    assert len(manifests) == 3
    for manifest in manifests:
        assert list(schema_errors(manifest)) == [], manifest["kind"]


def test_each_model_behind_the_gateway_opts_in_and_the_others_do_not() -> None:
    plan = _planned()
    opted = {m.name: m.workload.manifest(namespace="x")["spec"].get("inferenceGateway") for m in plan.models}
    assert opted["qwen3-8b"] == {"enabled": True, "name": "models"}
    assert opted["llama-s3"] == {"enabled": True, "name": "models"}
    assert opted["deepseek-fsx"] is None
    assert "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com" in plan.crd_names


def test_an_unauthenticated_gateway_needs_a_reason_and_is_still_warned() -> None:
    from hyperpod_inference_iac import RiskWarnings, warn_gateway

    plan = _planned(_with(jwt=None, unauthenticatedReason="an isolated load test cluster, no IdP reachable"))
    warnings = RiskWarnings()
    warn_gateway(warnings, plan.gateways[0])
    assert [(w.id, w.path) for w in warnings] == [
        ("@hyperpod-inference-iac/InferenceWorkloads:gatewayUnauthenticated", "gateways[0].unauthenticatedReason")]
    assert "auth" not in plan.gateways[0].manifest()["spec"]


@pytest.mark.parametrize(("image", "engine", "version"), [
    ("vllm/vllm-openai:v0.11.0", "vllm", (0, 11, 0, 0)),
    ("docker.io/vllm/vllm-openai:0.9.2", "vllm", (0, 9, 2, 0)),
    ("lmsysorg/sglang:v0.3.5.post1-cu124", "sglang", (0, 3, 5, 1)),
    ("vllm/vllm-openai@sha256:" + "a" * 64, "vllm", None),
    ("ghcr.io/huggingface/text-generation-inference:3.3.6", None, (3, 3, 6, 0)),
])
def test_engine_and_version_are_read_from_the_image(image: str, engine: str | None,
                                                    version: tuple[int, ...] | None) -> None:
    assert engine_of_image(image) == (engine, version)


@pytest.mark.parametrize(("entry", "code", "path"), [
    ("models", "Config.WrongType", "gateways[0]"),
    ({"endpointDomain": GATEWAY_DOMAIN}, "Config.MissingKey", "gateways[0].name"),
    ({**GATEWAY, "tls": {"acmArn": ""}}, "Config.UnknownKey", "gateways[0].tls"),
    ({**GATEWAY, "bbrReplicas": "two"}, "Config.WrongType", "gateways[0].bbrReplicas"),
    ({**GATEWAY, "jwt": {"issuer": "https://idp.example.com"}}, "Config.MissingKey", "gateways[0].jwt.jwksUri"),
    ({**GATEWAY, "schedulers": {"qwen3-8b": {"configMapRef": {"key": "x"}}}}, "Config.MissingKey",
     "gateways[0].schedulers.qwen3-8b.configMapRef.name"),
])
def test_reading_a_gateways_entry(entry: Any, code: str, path: str) -> None:
    problems = Problems()
    read_gateway(entry, "gateways[0]", problems)
    assert (code, path) in [(p.code, p.path) for p in problems], [str(p) for p in problems]


def test_at_most_one_hundred_models_behind_one_gateway() -> None:
    base = samples.model_entries()[2]
    entries = [{**copy.deepcopy(base), "name": f"llama-{i}", "spec": {**base["spec"], "modelName": f"llama-{i}"}}
               for i in range(101)]
    problems = Problems()
    deployments = [ModelDeployment(w, path=p, gateway="models") for p, w in parse_models(entries, problems=problems)]
    gateway = read_gateway(GATEWAY, "gateways[0]", problems)
    assert gateway is not None
    plan_workloads(samples.context(**PLATFORM), models=deployments, gateways=[gateway], problems=problems)
    assert [(p.code, p.path) for p in problems if p.code.startswith("Gateway.")] == [
        ("Gateway.TooManyModels", "gateways[0]")]


def test_the_endpoint_pickers_may_reach_the_api_server_only_where_a_gateway_lives() -> None:
    """The pickers run among the operator's pods of the gateway's namespace and watch the model pods through the
    Kubernetes API (HTTPS to the VPC's private API endpoint); a namespace without a gateway keeps AWS-only egress."""
    from hyperpod_inference_iac.charts.render import namespace_objects

    def policies(plan: Any) -> dict[str, Any]:
        return {o["metadata"]["name"]: o for o in namespace_objects(plan) if o["kind"] == "NetworkPolicy"}

    planned = _planned()
    with_gateway = policies(planned)
    assert with_gateway["gateway-schedulers"]["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": samples.VPC_CIDR}}], "ports": [{"protocol": "TCP", "port": 443}]}]
    # The pickers only, by the label the gateway's podDefaults puts on them; not every operator pod (a model server
    # would reach the whole VPC on 443).
    (gateway,) = planned.gateways
    labels = gateway.manifest()["spec"]["podDefaults"]["labels"]
    assert labels == {"hyperpod-inference-iac/gateway": gateway.name}
    assert with_gateway["gateway-schedulers"]["spec"]["podSelector"] == {"matchExpressions": [
        {"key": "hyperpod-inference-iac/workload", "operator": "DoesNotExist"},
        {"key": "hyperpod-inference-iac/gateway", "operator": "Exists"}]}
    model_server = {"app": "qwen3-8b"}  # an operator model pod's labels
    assert not any(e["key"] in model_server for e in
                   with_gateway["gateway-schedulers"]["spec"]["podSelector"]["matchExpressions"][1:])
    problems = Problems()
    plain = plan_workloads(samples.context(**PLATFORM), models=[
        ModelDeployment(w, path=p) for p, w in parse_models(samples.model_entries(), problems=problems)],
        problems=problems)
    assert "gateway-schedulers" not in policies(plain)

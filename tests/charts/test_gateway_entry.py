"""The platform's capture entry in front of an Inference Gateway (``gateways[i].entry``): planned from the gateway and
the platform, each rule refused at its key, rendered as valid Kubernetes objects at Pod Security's restricted level,
and its parts agreeing: the role's token audience is the one the pod mounts, the role's prefix is the one the sidecar
writes and lies in the platform's capture location the processor reads, and the JWT settings are the gateway's."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import cdk8s
import pytest

from hyperpod_inference_iac.charts import ModelDeployment, parse_models, plan_workloads
from hyperpod_inference_iac.charts.gateway_entry_chart import GATEWAY_ENTRY_WORKLOAD, GatewayEntryChart
from hyperpod_inference_iac.charts.network_policies import WORKLOAD_LABEL
from hyperpod_inference_iac.charts.plan import WorkloadPlan
from hyperpod_inference_iac.charts.pod_credentials import CredentialScope
from hyperpod_inference_iac.charts.portable_server import PortableModelServer
from hyperpod_inference_iac.charts.render import render_workloads, token_holders
from hyperpod_inference_iac.charts.usage_limits import UsageStoreRef
from hyperpod_inference_iac.foundation.platform_values import AwaitingDeploy, PlatformValue, PlatformValues, S3Location
from hyperpod_inference_iac.foundation.validation import ConfigError, Problems
from platform_config.gateways import read_gateway
from tests.charts import samples
from tests.support.k8s_schemas import validate_core

GATEWAY_DOMAIN = "models.inference.example.com"
ENTRY_DOMAIN = "llm.inference.example.com"
BUCKET = "example-capture"  # (the sample models capture there: the platform's capture bucket in these tests)
CAPTURE = S3Location(PlatformValue.CAPTURE_BUCKET, "")
GATEWAY: dict[str, Any] = {
    "name": "models",
    "endpointDomain": GATEWAY_DOMAIN,
    "jwt": {"issuer": "https://idp.example.com/oauth2/default", "jwksUri": "https://idp.example.com/oauth2/keys",
            "audiences": ["inference"], "callerClaim": "email",
            "requiredClaims": [{"name": "scope", "valueType": "StringArray", "values": ["inference:invoke"]}]},
    "entry": {"endpointDomain": ENTRY_DOMAIN},
}
PLATFORM: dict[str, Any] = {"endpoint_domains": (samples.PORTABLE_HOSTNAME, GATEWAY_DOMAIN, ENTRY_DOMAIN),
                            "operator_addon_version": "v2.0.0-eksbuild.2", "capture": CAPTURE,
                            "capture_key": PlatformValue.CAPTURE_KEY_ID, "zone_name": "inference.example.com",
                            "known_values": {PlatformValue.CAPTURE_BUCKET: BUCKET}}
BEHIND = (0, 2)  # the sample models on vLLM 0.11.0
KEY_ARN = f"arn:aws:kms:us-east-1:{samples.ACCOUNT}:key/0b6d8a4e-1111-2222-3333-444455556666"
VALUES = samples.VALUES.merged({PlatformValue.CAPTURE_BUCKET: BUCKET, PlatformValue.CAPTURE_KEY_ID: KEY_ARN})
LIMITS = {"storeUrl": "rediss://budgets.example.use1.cache.amazonaws.com:6380", "storeFailure": "closed",
          "usageRecords": "all",
          "callers": [{"callerId": "alice.example.com", "tokensPerMinute": 1000}, {"callerId": "*", "tokensPerDay": 5}]}


def _plan(gateway: dict[str, Any] | None = None, *, platform: dict[str, Any] | None = None,
          problems: Problems | None = None, portable: Sequence[PortableModelServer] = ()) -> WorkloadPlan:
    """The sample models behind one gateway read as the config loader reads it (``read_gateway``)."""
    collected = Problems() if problems is None else problems
    data = GATEWAY if gateway is None else gateway
    parsed = parse_models(samples.model_entries(), problems=collected)
    deployments = [ModelDeployment(w, path=p, gateway=data["name"] if int(p[7:-1]) in BEHIND else None)
                   for p, w in parsed]
    found = read_gateway(data, "gateways[0]", collected)
    gateways = [found] if found is not None else []
    servers = list(portable)
    plan = plan_workloads(samples.context(**{**PLATFORM, **(platform or {})}), models=deployments, gateways=gateways,
                          portable=servers, problems=collected)
    if problems is None:
        collected.raise_if_any()
    return plan


def _with_entry(**changes: Any) -> dict[str, Any]:
    gateway = copy.deepcopy(GATEWAY)
    gateway["entry"].update(changes)
    return gateway


def _manifests(plan: WorkloadPlan, values: PlatformValues = VALUES) -> dict[str, dict[str, Any]]:
    (entry,) = plan.entries
    chart = GatewayEntryChart(cdk8s.App(), entry.chart_id, entry=entry, values=values)
    return {manifest["kind"] + ("/metrics" if manifest["metadata"]["name"].endswith("-metrics") else ""): manifest
            for manifest in chart.to_json()}


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"]}


@pytest.fixture(scope="module")
def plan() -> WorkloadPlan:
    return _plan()


@pytest.fixture(scope="module")
def manifests(plan: WorkloadPlan) -> dict[str, dict[str, Any]]:
    return _manifests(plan)


def test_every_object_is_valid_kubernetes(manifests: dict[str, dict[str, Any]]) -> None:
    assert sorted(manifests) == ["Deployment", "NetworkPolicy", "Service", "Service/metrics", "ServiceAccount"]
    for manifest in manifests.values():
        validate_core(manifest)


def test_the_entry_pod_meets_pod_securitys_restricted_level(manifests: dict[str, dict[str, Any]]) -> None:
    """Restricted (v1.34): non-root, no privilege escalation, every capability dropped, RuntimeDefault seccomp, only
    volume types the level allows (emptyDir, projected); and here also a read-only root filesystem."""
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    assert {next(k for k in volume if k != "name") for volume in pod["volumes"]} <= {"emptyDir", "projected"}
    (container,) = pod["containers"]
    assert not pod.get("initContainers")
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert container["resources"]["limits"]["memory"] == "512Mi"
    assert manifests["Deployment"]["spec"]["replicas"] == 2
    assert pod["automountServiceAccountToken"] is False  # no Kubernetes API token: only its own audience's
    assert pod["serviceAccountName"] == "models-entry"
    assert manifests["Deployment"]["spec"]["template"]["metadata"]["labels"][WORKLOAD_LABEL] == GATEWAY_ENTRY_WORKLOAD


def test_the_image_is_the_portable_sidecars(manifests: dict[str, dict[str, Any]]) -> None:
    (container,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == VALUES.get(PlatformValue.SIDECAR_IMAGE)
    assert container["name"] == "capture-sidecar"  # what the sidecar metrics agent scrapes (its metrics port)
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"capture": 8080, "metrics": 9090}


def test_the_role_the_sidecar_gets_is_the_planned_one_with_its_own_audience(
        plan: WorkloadPlan, manifests: dict[str, dict[str, Any]]) -> None:
    (entry,) = plan.entries
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = _env(container)
    (token,) = [v for v in pod["volumes"] if "projected" in v]
    audience = token["projected"]["sources"][0]["serviceAccountToken"]["audience"]
    assert entry.identity.scope is CredentialScope.CAPTURE_SIDECAR
    assert audience == entry.identity.audience == "hyperpod-inference-iac/capture-sidecar"
    assert env["AWS_ROLE_ARN"] == entry.identity.role_arn
    assert env["AWS_WEB_IDENTITY_TOKEN_FILE"].startswith(
        next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == token["name"]))
    assert entry.identity in plan.identities  # so InferenceWorkloads creates it, trusting that audience
    assert (entry.identity.namespace, entry.identity.service_account) == (samples.NAMESPACE, pod["serviceAccountName"])
    # The token admission policy knows this holder exactly as rendered.
    app = cdk8s.App()
    holders = token_holders(plan, render_workloads(app, plan, VALUES))
    assert any(h.service_account == "models-entry" and h.container == container for h in holders)


def test_the_sidecar_writes_where_its_role_may_and_the_processor_reads(
        plan: WorkloadPlan, manifests: dict[str, dict[str, Any]]) -> None:
    (entry,) = plan.entries
    (container,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = _env(container)
    (access,) = entry.identity.accesses
    assert access.write and access.location == entry.capture and access.key is PlatformValue.CAPTURE_KEY_ID
    assert env["CAPTURE_S3_URI"] == access.location.uri(VALUES)
    assert env["KMS_KEY_ID"] == KEY_ARN
    # Inside the platform's capture location (what the processor is notified of), in the tier-3 layout.
    assert access.location.within(CAPTURE) and access.location.prefix.endswith("/pod/")


def test_the_sidecar_verifies_what_the_gateway_verifies_and_forwards_to_it(
        plan: WorkloadPlan, manifests: dict[str, dict[str, Any]]) -> None:
    (container,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = _env(container)
    (gateway,) = plan.gateways
    assert gateway.gateway.jwt is not None
    assert {k: v for k, v in env.items() if k.startswith("JWT_")} == gateway.gateway.jwt.capture_environment()
    assert env["JWT_CALLER_CLAIM"] == "email"
    assert env["UPSTREAM_URL"] == f"https://{GATEWAY_DOMAIN}"  # TLS, verified by the sidecar's default context
    assert "API_KEYS_FILE" not in env and "MODEL_NAME" not in env
    assert "CALLER_LIMITS" not in env  # no limits configured


def test_the_way_in_is_an_internal_tls_load_balancer_with_a_published_name(
        plan: WorkloadPlan, manifests: dict[str, dict[str, Any]]) -> None:
    service = manifests["Service"]
    annotations = service["metadata"]["annotations"]
    assert annotations["external-dns.alpha.kubernetes.io/hostname"] == ENTRY_DOMAIN
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-cert"] == samples.CERTIFICATE_ARN
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": 8080}]
    assert service["spec"]["loadBalancerSourceRanges"] == [samples.VPC_CIDR]
    assert service["spec"]["allocateLoadBalancerNodePorts"] is False
    assert manifests["Service/metrics"]["spec"]["type"] == "ClusterIP"
    assert ENTRY_DOMAIN in plan.published_hostnames and samples.NAMESPACE in plan.external_dns_namespaces
    assert plan.needs_sidecar_image


def test_the_network_policy_admits_the_vpc_and_sends_https_only(manifests: dict[str, dict[str, Any]]) -> None:
    spec = manifests["NetworkPolicy"]["spec"]
    assert spec["podSelector"]["matchLabels"] == manifests["Deployment"]["spec"]["selector"]["matchLabels"]
    assert spec["ingress"] == [{"from": [{"ipBlock": {"cidr": samples.VPC_CIDR}}],
                                "ports": [{"protocol": "TCP", "port": 8080}, {"protocol": "TCP", "port": 9090}]}]
    # Out: HTTPS anywhere but the instance metadata range (the gateway's internal LB, the JWKS host, S3, STS).
    assert spec["egress"] == [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}],
                               "ports": [{"protocol": "TCP", "port": 443}]}]


def test_limits_are_enforced_by_the_entry_and_reach_their_store() -> None:
    manifests = _manifests(_plan(_with_entry(usageLimits=LIMITS, samplingPercentage=0, replicas=3)))
    (container,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = _env(container)
    assert json.loads(env["CALLER_LIMITS"]) == {"*": {"tokensPerDay": 5},
                                                "alice.example.com": {"tokensPerMinute": 1000}}
    assert env["LIMITS_STORE_URL"] == LIMITS["storeUrl"] and env["LIMITS_STORE_FAILURE"] == "closed"
    assert env["LIMITS_KEY_PREFIX"] == f"budget:{samples.NAMESPACE}/models-entry:"
    assert env["USAGE_RECORDS"] == "all" and env["SAMPLING_PERCENTAGE"] == "0"
    assert manifests["Deployment"]["spec"]["replicas"] == 3
    assert {"to": [{"ipBlock": {"cidr": samples.VPC_CIDR}}], "ports": [{"protocol": "TCP", "port": 6380}]} \
        in manifests["NetworkPolicy"]["spec"]["egress"]


STORE = UsageStoreRef.of_cache("demo-usage")
STORE_ENDPOINT = "demo-usage-abc123.serverless.use1.cache.amazonaws.com"
BUDGETS = {"callers": [{"callerId": "alice.example.com", "tokensPerDay": 5000}, {"callerId": "*", "tokensPerMonth": 9}],
           "alertPercents": [50, 100]}


def test_budgets_without_a_store_url_use_the_platforms_store_as_a_portable_servers_do() -> None:
    plan = _plan(_with_entry(usageLimits=BUDGETS), platform={"usage_store": STORE})
    (entry,) = plan.entries
    assert entry.usage_store == STORE and plan.usage_store_users == (entry,)
    assert entry.capture_identity == entry.identity  # (the role granted elasticache:Connect: the entry's own)
    manifests = _manifests(plan, VALUES.merged({PlatformValue.USAGE_STORE_ENDPOINT: STORE_ENDPOINT}))
    (container,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = _env(container)
    assert env["LIMITS_STORE_URL"] == f"rediss://{STORE_ENDPOINT}:6379"
    assert (env["LIMITS_STORE_IAM_USER"], env["LIMITS_STORE_IAM_CACHE"]) == (STORE.user_id, "demo-usage")
    assert env["LIMITS_KEY_PREFIX"] == f"budget:{samples.NAMESPACE}/models-entry:"
    assert env["BUDGET_ALERT_PERCENTS"] == "50,100"
    assert env["AWS_REGION"] == samples.REGION  # (the region the IAM token is signed for)
    # Out: the store's port, inside the VPC only, besides HTTPS.
    assert manifests["NetworkPolicy"]["spec"]["egress"][1:] == [
        {"to": [{"ipBlock": {"cidr": samples.VPC_CIDR}}], "ports": [{"protocol": "TCP", "port": 6379}]}]


def test_the_entry_waits_for_the_stores_address() -> None:
    plan = _plan(_with_entry(usageLimits=BUDGETS), platform={"usage_store": STORE})
    with pytest.raises(AwaitingDeploy) as raised:
        _manifests(plan)
    assert PlatformValue.USAGE_STORE_ENDPOINT in raised.value.missing


@pytest.mark.parametrize("limits", [
    LIMITS,  # (its own storeUrl)
    {"callers": [{"callerId": "*", "concurrentRequestsPerReplica": 4}]},  # (per replica: no store)
])
def test_limits_with_their_own_store_or_without_budgets_do_not_use_the_platforms(limits: dict[str, Any]) -> None:
    plan = _plan(_with_entry(usageLimits=limits), platform={"usage_store": STORE})
    assert plan.entries[0].usage_store is None and plan.usage_store_users == ()
    env = _env(_manifests(plan)["Deployment"]["spec"]["template"]["spec"]["containers"][0])
    assert "LIMITS_STORE_IAM_USER" not in env and env.get("LIMITS_STORE_URL") == limits.get("storeUrl")


def test_the_entry_renders_with_the_plan_and_waits_for_the_certificate() -> None:
    plan = _plan()
    rendered = render_workloads(cdk8s.App(), plan, VALUES)
    assert "gateway-entry-models" in rendered.charts and rendered.entries["gateway-entry-models"] == plan.entries[0]
    without = PlatformValues({k: v for k, v in VALUES.known.items() if k is not PlatformValue.CERTIFICATE_ARN})
    waiting = render_workloads(cdk8s.App(), plan, without)
    assert "gateway-entry-models" in waiting.waiting and "gateway-entry-models" not in waiting.charts


def test_a_gateway_without_entry_has_none() -> None:
    gateway = copy.deepcopy(GATEWAY)
    del gateway["entry"]
    assert _plan(gateway).entries == ()


ENTRY_CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("GatewayEntry.EndpointDomainInvalid", _with_entry(endpointDomain="LLM.example"), {},
     "gateways[0].entry.endpointDomain"),
    ("GatewayEntry.EndpointDomainNotCertified", _with_entry(endpointDomain="other.inference.example.com"), {},
     "gateways[0].entry.endpointDomain"),
    ("GatewayEntry.EndpointDomainOutsideZone", _with_entry(endpointDomain="llm.elsewhere.example.org"),
     {"endpoint_domains": (GATEWAY_DOMAIN, "llm.elsewhere.example.org")}, "gateways[0].entry.endpointDomain"),
    ("GatewayEntry.SameDomainAsGateway", _with_entry(endpointDomain=GATEWAY_DOMAIN), {},
     "gateways[0].entry.endpointDomain"),
    ("GatewayEntry.ReplicasOutOfRange", _with_entry(replicas=0), {}, "gateways[0].entry.replicas"),
    ("GatewayEntry.SamplingOutOfRange", _with_entry(samplingPercentage=101), {},
     "gateways[0].entry.samplingPercentage"),
    ("GatewayEntry.RequestBodyCapOutOfRange", _with_entry(maxRequestBodyKB=10**7), {},
     "gateways[0].entry.maxRequestBodyKB"),
    ("GatewayEntry.SourceRangeInvalid", _with_entry(allowedSourceRanges=["10.0.0.1/16"]), {},
     "gateways[0].entry.allowedSourceRanges[0]"),
    ("GatewayEntry.NoCaptureDestination", GATEWAY, {"capture": None}, "gateways[0].entry"),
    ("GatewayEntry.VpcCidrMissing", GATEWAY, {"vpc_cidr": None}, "gateways[0].entry"),
    ("GatewayEntry.NeedsJwt", {**{k: v for k, v in GATEWAY.items() if k != "jwt"},
                               "unauthenticatedReason": "an isolated load-test cluster without an issuer"}, {},
     "gateways[0].entry"),
    ("GatewayEntry.GatewayNameTooLong", {**GATEWAY, "name": "g" * 50}, {}, "gateways[0].name"),
    ("UsageLimits.NoStore", _with_entry(usageLimits={"callers": [{"callerId": "*", "tokensPerDay": 5}]}), {},
     "gateways[0].entry.usageLimits.storeUrl"),
    ("UsageLimits.LimitOutOfRange", _with_entry(usageLimits={**LIMITS, "callers": [{"callerId": "a",
                                                                                      "tokensPerDay": 0}]}), {},
     "gateways[0].entry.usageLimits.callers[0].tokensPerDay"),
    ("Config.UnknownKey", _with_entry(hostname="llm.inference.example.com"), {}, "gateways[0].entry.hostname"),
    ("Config.WrongType", _with_entry(replicas="two"), {}, "gateways[0].entry.replicas"),
    ("Config.MissingKey", {**GATEWAY, "entry": {"replicas": 2}}, {}, "gateways[0].entry.endpointDomain"),
]


@pytest.mark.parametrize(("code", "gateway", "platform", "path"), ENTRY_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ENTRY_CASES)])
def test_entry_problem(code: str, gateway: dict[str, Any], platform: dict[str, Any], path: str) -> None:
    problems = Problems()
    _plan(gateway, platform=platform, problems=problems)
    with pytest.raises(ConfigError) as raised:
        problems.raise_if_any()
    assert (code, path) in [(p.code, p.path) for p in raised.value.problems], str(raised.value)


def test_the_entry_cannot_take_a_portable_servers_name() -> None:
    server = dataclasses.replace(samples.portable_server(), name="models-entry")
    problems = Problems()
    _plan(problems=problems, portable=[server])
    assert ("GatewayEntry.NameTaken", "gateways[0].name") in [(p.code, p.path) for p in problems]


def _plan_in(namespace: str) -> WorkloadPlan:
    """The sample models behind one gateway with an entry, all in ``namespace``."""
    problems = Problems()
    parsed = parse_models(samples.model_entries(), problems=problems)
    deployments = [ModelDeployment(w, path=p, gateway="models", namespace=namespace)
                   for p, w in parsed if int(p[7:-1]) in BEHIND]
    found = read_gateway({**GATEWAY, "namespace": namespace}, "gateways[0]", problems)
    plan = plan_workloads(samples.context(**PLATFORM), models=deployments, gateways=[found] if found else [],
                          problems=problems)
    problems.raise_if_any()
    return plan


@pytest.mark.parametrize(("namespace", "monitored", "warned"), [
    ("team-models", (samples.NAMESPACE,), True),  # the agent watches the platform's namespace only
    ("team-models", (samples.NAMESPACE, "team-models"), False),
    (samples.NAMESPACE, (samples.NAMESPACE,), False),
    ("team-models", None, False),  # no agent: nothing to say (the loader's and the construct's None)
])
def test_an_entry_where_no_metrics_agent_looks_is_warned_at_its_key(namespace: str, monitored: tuple[str, ...] | None,
                                                                   warned: bool) -> None:
    """As a capturing portable server in another namespace is: its sidecar's lost records and 5xx would be alarmed
    by no one (the sidecar metrics agent discovers pods of its own namespace only)."""
    from hyperpod_inference_iac import RiskWarnings, warn_entry
    from hyperpod_inference_iac.foundation.risks import warning_id

    (entry,) = _plan_in(namespace).entries
    assert entry.namespace == namespace
    warnings = RiskWarnings()
    warn_entry(warnings, entry, monitored_namespaces=monitored)
    found = [(w.id, w.path) for w in warnings.items]
    assert found == ([(warning_id("InferenceWorkloads:captureNotMonitored"), "gateways[0].entry")] if warned else [])
    if warned:
        (text,) = [w.message for w in warnings.items]
        assert f"capture entry in {namespace} are not alarmed" in text

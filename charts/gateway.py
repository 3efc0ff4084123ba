"""The Inference Gateway: one OpenAI-compatible, JWT-authenticated entry point for several operator models.

The ``InferenceGatewayConfig`` kind (``inference.sagemaker.aws.amazon.com/v1alpha1``, add-on v2.0.0-eksbuild.2 and
later, operator 3.6) puts a body-based router (BBR: reads ``model`` from the request body) and one endpoint picker per
model (the "scheduler": llm-d or EPP, scoring pods on queue depth, KV cache and prefix affinity) in front of the
operator's models. Each model opts in with ``spec.inferenceGateway {enabled, name}``. The developer guide's CRD
reference is the source of every field here ("Inference Gateway for Amazon SageMaker HyperPod Inference"); the kind's
schema is closed (unknown fields are refused at admission).

What this module decides, and why:

* **Authentication is required.** Without ``spec.auth.jwt`` the gateway accepts every request that reaches it (the
  guide: "no request-level authentication"). A gateway here needs a JWT provider (HTTPS issuer and JWKS URI, and at
  least one of audiences or required claims, so a token minted for another application is refused), or an explicit
  ``unauthenticatedReason``, which is still warned about at every synth.
* **TLS from the platform's ACM certificate.** ``spec.tls.acmArn`` is always the platform certificate, and the
  gateway's ``endpointDomain`` must be one of the names it covers. The alternative, an empty ``acmArn``, makes the
  controller issue a certificate with cert-manager and import it into ACM, which needs ``acm:ImportCertificate`` on
  any certificate in the account for the controller's role: refused.
* **The rules the guide states are checked before anything is built**: BBR on (always, here: it is what makes one
  entry point serve several models, and the guide requires it with more than one scheduler), model names unique in a
  gateway, ``weights`` XOR ``configMapRef``, ``lru`` only for llm-d, the gateway XOR ``intelligentRoutingSpec``,
  worker images new enough to publish the metrics the schedulers read (vLLM >= 0.9.2; SGLang >= 0.3.5.post1 with
  ``--enable-metrics``), and an add-on version that has the kind.
* **Schedulers are written out**, one per opted-in model, though the operator would merge its own entry: the kind
  requires at least one, and a reviewer sees each model's routing choices in the pull request. The operator sets
  ``name``, ``modelName``, ``targetPort`` and ``modelSelector`` of a model's entry itself and keeps the rest
  (``scheduler``, ``weights``, ``loraAdapters``), so what this module writes for the first four is what the operator
  would, and the rest is the platform's choice.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hyperpod_inference_iac.charts.gateway_entry import GatewayEntryOptions
from hyperpod_inference_iac.charts.network_policies import GATEWAY_POD_LABEL, OPERATOR_NAMESPACE
from hyperpod_inference_iac.foundation.operator_versions import INFERENCE_GATEWAY, missing_features
from hyperpod_inference_iac.foundation.patterns import DNS1123_LABEL, DOMAIN_NAME
from hyperpod_inference_iac.foundation.platform_values import PlatformValue
from hyperpod_inference_iac.foundation.validation import (
    MISSING_KEY,
    REQUIRED,
    UNKNOWN_KEY,
    WRONG_TYPE,
    Problems,
    join_path,
    unknown_key,
    wrong_type,
)

API_VERSION = "inference.sagemaker.aws.amazon.com/v1alpha1"
KIND = "InferenceGatewayConfig"
PLURAL = "inferencegatewayconfigs"
# The first add-on build the developer guide names for the gateway (the version table's row, with its sources); the
# model opt-in (operator 3.6) is in every build that has the kind.
GATEWAY_MINIMUM_ADDON = INFERENCE_GATEWAY.minimum
# The controller's service account (add-on key inferenceGateway.serviceAccount.roleArn).
CONTROLLER_NAMESPACE = OPERATOR_NAMESPACE  # (the add-on's namespace: the controller runs beside the operator)
CONTROLLER_SERVICE_ACCOUNT = "inference-gateway-controller"

SCHEDULERS = ("llm-d", "epp")
ENGINES = ("vllm", "sglang")
WEIGHT_KEYS = ("queue", "kvCache", "prefix", "lru", "loraAffinity", "runningRequests", "predictedLatency")
CLAIM_VALUE_TYPES = ("String", "StringArray")
MAX_AUDIENCES = 8
MAX_REQUIRED_CLAIMS = 16
MAX_SCHEDULERS = 100
MAX_REPLICAS = 100
MAX_BODY_BYTES = 268435456
# The oldest model servers whose metrics the schedulers can read (the guide's requirements).
MINIMUM_ENGINE = {"vllm": (0, 9, 2), "sglang": (0, 3, 5)}
ROUTE_TIMEOUT = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")  # Gateway API Duration
_HTTPS_URL = re.compile(r"^https://[^\s/?#]+[^\s]*$")
# A claim name the capture sidecar's JWT mode can record (its JWT_CALLER_CLAIM).
CALLER_CLAIM = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")
_UNAUTHENTICATED_REASON = re.compile(r"\S.{19,}", re.DOTALL)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequiredClaim:
    """A claim a token must carry (``auth.jwt.provider.requiredClaims[]``)."""

    name: str
    values: tuple[str, ...]
    value_type: str = "String"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "valueType": self.value_type, "values": list(self.values)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class JwtAuthentication:
    """``spec.auth.jwt.provider``: who issues the tokens the gateway accepts.

    :param issuer: the OIDC issuer (HTTPS); the gateway checks it against each token's ``iss``.
    :param jwks_uri: where its signing keys are published (HTTPS, ``remoteJWKS.uri``).
    :param audiences: ``aud`` values accepted (at most 8).
    :param required_claims: claims a token must carry (at most 16). At least one of these or ``audiences``.
    :param provider_name: the provider's name in the resource. @default ``platform``
    :param caller_claim: the claim that identifies the caller (its value is the capture records' ``caller_id``
        where the request path carries the token: docs/gateway.md). @default ``sub``
    """

    issuer: str
    jwks_uri: str
    audiences: tuple[str, ...] = ()
    required_claims: tuple[RequiredClaim, ...] = ()
    provider_name: str = "platform"
    caller_claim: str = "sub"

    def to_dict(self) -> dict[str, Any]:
        provider: dict[str, Any] = {"name": self.provider_name, "issuer": self.issuer,
                                    "remoteJWKS": {"uri": self.jwks_uri}}
        if self.audiences:
            provider["audiences"] = list(self.audiences)
        if self.required_claims:
            provider["requiredClaims"] = [claim.to_dict() for claim in self.required_claims]
        return {"jwt": {"provider": provider}}

    def capture_environment(self) -> dict[str, str]:
        """The capture sidecar's JWT mode for this issuer (``JWT_*``, docs/capture-sidecar.md): the same issuer, keys,
        audiences and required claims the gateway checks, and ``caller_claim`` as the recorded caller. Derived here so
        the platform's capture entry in front of the gateway and the gateway agree on what a valid token is."""
        environment = {"JWT_ISSUER": self.issuer, "JWT_JWKS_URI": self.jwks_uri,
                       "JWT_CALLER_CLAIM": self.caller_claim}
        if self.audiences:
            environment["JWT_AUDIENCES"] = ",".join(self.audiences)
        if self.required_claims:
            environment["JWT_REQUIRED_CLAIMS"] = json.dumps([claim.to_dict() for claim in self.required_claims],
                                                            separators=(",", ":"))
        return environment


@dataclasses.dataclass(frozen=True, kw_only=True)
class SchedulerOptions:
    """How one model's requests are spread over its pods (``spec.schedulers[]``, the platform's part of it).

    :param scheduler: ``llm-d`` or ``epp``. @default ``llm-d``
    :param engine_type: ``vllm`` or ``sglang``. @default read from the worker image (required when it cannot be)
    :param weights: scorer weights (``queue``, ``kvCache``, ``prefix``, ``lru`` (llm-d only), ``loraAffinity``,
        ``runningRequests``, ``predictedLatency``). @default the scheduler's own
    :param config_map: ``(name, key)`` of a ConfigMap with the scheduler's plugin configuration, instead of
        ``weights``. @default none
    :param replicas: endpoint picker replicas (more than one elects a leader). @default 2
    :param lora_adapters: LoRA adapter names served by the model. @default none
    :param route_timeout: the route's timeout as a Gateway API duration (``0s`` disables). @default the gateway's
    """

    scheduler: str = "llm-d"
    engine_type: str | None = None
    weights: Mapping[str, int] | None = None
    config_map: tuple[str, str] | None = None
    replicas: int = 2
    lora_adapters: tuple[str, ...] = ()
    route_timeout: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class InferenceGateway:
    """One gateway of the platform: its name, who may call it, its TLS name and how each model is scheduled.

    :param name: the ``InferenceGatewayConfig``'s name, which models name in their ``gateway``.
    :param endpoint_domain: the name clients call; one of the platform certificate's names (its ACM ARN is the
        gateway's TLS certificate).
    :param jwt: the token issuer; required unless ``unauthenticated_reason`` says why not.
    :param unauthenticated_reason: why this gateway may accept requests without a token (at least 20 characters;
        warned at every synth). @default none: JWT required
    :param namespace: where it lives; every model behind it must live there too. @default the platform's
    :param bbr_replicas: body-based router replicas. @default 2
    :param max_request_body_bytes: the largest request body BBR reads. @default the kind's (256 MiB)
    :param metrics: the OpenTelemetry collector sidecar in BBR and EPP pods. @default True
    :param schedulers: per model name, how its requests are scheduled. @default llm-d with its own weights
    :param entry: the platform's capture entry in front of it (records the caller, enforces per-caller limits:
        :class:`~hyperpod_inference_iac.charts.gateway_entry.GatewayEntryOptions`). @default none
    """

    name: str
    endpoint_domain: str | None = None
    jwt: JwtAuthentication | None = None
    unauthenticated_reason: str | None = None
    namespace: str | None = None
    bbr_replicas: int = 2
    max_request_body_bytes: int | None = None
    metrics: bool = True
    schedulers: Mapping[str, SchedulerOptions] = dataclasses.field(default_factory=dict)
    entry: GatewayEntryOptions | None = None

    def check(self, path: str, problems: Problems) -> None:
        """The gateway's own rules (those between it and its models are the plan's)."""
        if not DNS1123_LABEL.match(self.name) or len(self.name) > 63:
            problems.add("Gateway.NameInvalid", join_path(path, "name"),
                         "must be a DNS-1123 label of at most 63 characters", self.name)
        if self.namespace is not None and (not DNS1123_LABEL.match(self.namespace) or len(self.namespace) > 63):
            problems.add("Gateway.NamespaceInvalid", join_path(path, "namespace"),
                         "must be a DNS-1123 label of at most 63 characters", self.namespace)
        if self.endpoint_domain is None:
            problems.add("Gateway.EndpointDomainMissing", join_path(path, "endpointDomain"),
                         "is required: the gateway serves TLS with the platform certificate, for one of its names "
                         "(cert-manager auto-issue is not offered: its role could import any certificate into ACM)")
        elif not DOMAIN_NAME.match(self.endpoint_domain):
            problems.add("Gateway.EndpointDomainInvalid", join_path(path, "endpointDomain"),
                         "must be a lowercase DNS name such as models.inference.example.com", self.endpoint_domain)
        self._check_auth(path, problems)
        if not 1 <= self.bbr_replicas <= MAX_REPLICAS:
            problems.add("Gateway.ReplicasOutOfRange", join_path(path, "bbrReplicas"),
                         f"must be from 1 to {MAX_REPLICAS}", self.bbr_replicas)
        if self.max_request_body_bytes is not None and not 1 <= self.max_request_body_bytes <= MAX_BODY_BYTES:
            problems.add("Gateway.BodyLimitOutOfRange", join_path(path, "maxRequestBodyBytes"),
                         f"must be from 1 to {MAX_BODY_BYTES} (256 MiB, the kind's maximum)",
                         self.max_request_body_bytes)
        for model, options in self.schedulers.items():
            _check_scheduler(options, join_path(join_path(path, "schedulers"), model), problems)

    def _check_auth(self, path: str, problems: Problems) -> None:
        if self.jwt is None:
            if self.unauthenticated_reason is None:
                problems.add("Gateway.Unauthenticated", join_path(path, "jwt"),
                             "is required: without it the gateway accepts every request that reaches it. Give the "
                             "token issuer (issuer, jwksUri, audiences or requiredClaims), or, for a gateway that "
                             "must stay open, unauthenticatedReason saying why (it is still warned at every synth)")
            elif not _UNAUTHENTICATED_REASON.fullmatch(self.unauthenticated_reason):
                problems.add("Gateway.ReasonTooShort", join_path(path, "unauthenticatedReason"),
                             "must say why the gateway may accept unauthenticated requests (at least 20 characters)",
                             self.unauthenticated_reason)
            return
        if self.unauthenticated_reason is not None:
            problems.add("Gateway.AuthConflict", join_path(path, "unauthenticatedReason"),
                         "the gateway has a JWT provider: remove unauthenticatedReason (or jwt)")
        jwt, at = self.jwt, join_path(path, "jwt")
        for key, value in (("issuer", jwt.issuer), ("jwksUri", jwt.jwks_uri)):
            if not _HTTPS_URL.match(value):
                problems.add("Gateway.JwtUrlInvalid", join_path(at, key), "must be an https:// URL", value)
        if not CALLER_CLAIM.fullmatch(jwt.caller_claim):
            problems.add("Gateway.CallerClaimInvalid", join_path(at, "callerClaim"),
                         "must be a claim name of 1 to 128 letters, digits and '_.:/-' (the claim whose value is "
                         "recorded as caller_id)", jwt.caller_claim)
        if any("," in audience for audience in jwt.audiences):
            problems.add("Gateway.AudienceInvalid", join_path(at, "audiences"),
                         "an audience may not contain ',' (the capture sidecar reads them as a comma list)",
                         list(jwt.audiences))
        if not jwt.audiences and not jwt.required_claims:
            problems.add("Gateway.JwtUnbound", at,
                         "needs audiences or requiredClaims (or both): otherwise any token of the issuer is accepted, "
                         "including those minted for other applications")
        if len(jwt.audiences) > MAX_AUDIENCES:
            problems.add("Gateway.TooManyAudiences", join_path(at, "audiences"), f"at most {MAX_AUDIENCES}",
                         len(jwt.audiences))
        if len(jwt.required_claims) > MAX_REQUIRED_CLAIMS:
            problems.add("Gateway.TooManyClaims", join_path(at, "requiredClaims"), f"at most {MAX_REQUIRED_CLAIMS}",
                         len(jwt.required_claims))
        for index, claim in enumerate(jwt.required_claims):
            claim_at = join_path(join_path(at, "requiredClaims"), index)
            if claim.value_type not in CLAIM_VALUE_TYPES:
                problems.add("Gateway.ClaimTypeInvalid", join_path(claim_at, "valueType"),
                             f"must be one of {', '.join(CLAIM_VALUE_TYPES)}", claim.value_type)
            if not claim.name:
                problems.add("Gateway.ClaimInvalid", join_path(claim_at, "name"), REQUIRED)
            if not 1 <= len(claim.values) <= 128 or any(not 1 <= len(v) <= 1024 for v in claim.values):
                problems.add("Gateway.ClaimInvalid", join_path(claim_at, "values"),
                             "must hold 1 to 128 values of 1 to 1024 characters each", list(claim.values))


def _check_scheduler(options: SchedulerOptions, at: str, problems: Problems) -> None:
    if options.scheduler not in SCHEDULERS:
        problems.add("Gateway.SchedulerInvalid", join_path(at, "scheduler"), f"must be one of {', '.join(SCHEDULERS)}",
                     options.scheduler)
    if options.engine_type is not None and options.engine_type not in ENGINES:
        problems.add("Gateway.EngineInvalid", join_path(at, "engineType"), f"must be one of {', '.join(ENGINES)}",
                     options.engine_type)
    if options.weights is not None and options.config_map is not None:
        problems.add("Gateway.WeightsAndConfigMap", join_path(at, "configMapRef"),
                     "give weights or configMapRef, not both (the kind refuses both)")
    for key, weight in (options.weights or {}).items():
        if key not in WEIGHT_KEYS:
            problems.add("Gateway.WeightUnknown", join_path(join_path(at, "weights"), key),
                         f"must be one of {', '.join(WEIGHT_KEYS)}", key)
        elif isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            problems.add("Gateway.WeightInvalid", join_path(join_path(at, "weights"), key),
                         "must be a whole number of at least 0", weight)
    if "lru" in (options.weights or {}) and options.scheduler != "llm-d":
        problems.add("Gateway.LruNeedsLlmD", join_path(join_path(at, "weights"), "lru"),
                     "the lru scorer exists only in the llm-d scheduler: remove it or use scheduler: llm-d")
    if not 1 <= options.replicas <= MAX_REPLICAS:
        problems.add("Gateway.ReplicasOutOfRange", join_path(at, "replicas"), f"must be from 1 to {MAX_REPLICAS}",
                     options.replicas)
    if len(options.lora_adapters) > 50 or any(not 1 <= len(a) <= 253 for a in options.lora_adapters):
        problems.add("Gateway.LoraAdaptersInvalid", join_path(at, "loraAdapters"),
                     "at most 50 names of 1 to 253 characters", list(options.lora_adapters))
    if options.route_timeout is not None and not ROUTE_TIMEOUT.match(options.route_timeout):
        problems.add("Gateway.RouteTimeoutInvalid", join_path(at, "routeTimeout"),
                     "must be a Gateway API duration such as 300s, 5m or 1h30m (0s disables it)", options.route_timeout)


# -- the models behind a gateway ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class GatewayModel:
    """One opted-in model as its scheduler entry needs it: the custom resource's ``name``, the ``model`` clients
    send (``model_name``), the port its server listens on and the engine its metrics come from."""

    name: str
    model_name: str
    target_port: int
    engine_type: str
    options: SchedulerOptions

    def scheduler(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "modelName": self.model_name,
            # The operator labels a model's pods with the custom resource's name and sets this selector itself.
            "modelSelector": {"matchLabels": {"app": self.name}},
            "targetPort": self.target_port,
            "scheduler": self.options.scheduler,
            "engineType": self.engine_type,
            "replicas": self.options.replicas,
        }
        if self.options.weights is not None:
            entry["weights"] = dict(self.options.weights)
        if self.options.config_map is not None:
            entry["configMapRef"] = {"name": self.options.config_map[0], "key": self.options.config_map[1]}
        if self.options.lora_adapters:
            entry["loraAdapters"] = list(self.options.lora_adapters)
        if self.options.route_timeout is not None:
            entry["routeTimeout"] = self.options.route_timeout
        return entry


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlannedGateway:
    """A gateway as planned: the models behind it and the certificate it serves (the platform's)."""

    path: str
    gateway: InferenceGateway
    namespace: str
    models: tuple[GatewayModel, ...]
    certificate: str | PlatformValue = PlatformValue.CERTIFICATE_ARN

    @property
    def name(self) -> str:
        return self.gateway.name

    @property
    def chart_id(self) -> str:
        return f"gateway-{self.gateway.name}"

    def manifest(self) -> dict[str, Any]:
        gateway = self.gateway
        bbr: dict[str, Any] = {"enabled": True, "replicas": gateway.bbr_replicas}
        if gateway.max_request_body_bytes is not None:
            bbr["maxRequestBodyBytes"] = gateway.max_request_body_bytes
        spec: dict[str, Any] = {
            "bbr": bbr,
            "tls": {"acmArn": self.certificate},
            "observability": {"metrics": {"enabled": gateway.metrics}},
            "schedulers": [model.scheduler() for model in self.models],
            # The operator puts these on the BBR and endpoint picker pods: network policy tells the pickers by it.
            "podDefaults": {"labels": {GATEWAY_POD_LABEL: gateway.name}},
        }
        if gateway.jwt is not None:
            spec["auth"] = gateway.jwt.to_dict()
        return {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": gateway.name, "namespace": self.namespace}, "spec": spec}


def engine_of_image(image: str) -> tuple[str | None, tuple[int, ...] | None]:
    """The serving engine an image runs, from its repository name, and its version, from its tag
    (``vllm/vllm-openai:v0.11.0`` is vLLM 0.11.0; ``lmsysorg/sglang:v0.4.6.post1-cu124`` SGLang 0.4.6.1). A
    digest-pinned image gives the engine but no version. The one reading of an image: the model alarms' engine is
    this one's (:func:`hyperpod_inference_iac.observability.model_metrics.engine_of_image`)."""
    reference = image.partition("@")[0]
    # (a registry's port is not a tag: the tag is after the last ':' of the last path segment only)
    repository, _, tag = reference.rpartition(":") if ":" in reference.rpartition("/")[2] else (reference, "", "")
    name = repository.lower()
    engine = "sglang" if "sglang" in name else "vllm" if "vllm" in name else None
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", tag)
    version = tuple(int(part) for part in match.groups(default="0")) if match else None
    return engine, version


def check_engine_version(engine: str, version: tuple[int, ...] | None, args: Sequence[str], at: str,
                         problems: Problems) -> None:
    """The guide's requirements on the model servers behind a gateway: their metrics feed the schedulers."""
    minimum = MINIMUM_ENGINE[engine]
    wanted = {"vllm": "0.9.2", "sglang": "0.3.5.post1"}[engine]
    if version is not None and (version[:3] < minimum or (engine == "sglang" and version[:3] == minimum
                                                          and (len(version) < 4 or version[3] < 1))):
        problems.add("Gateway.EngineTooOld", at,
                     f"the gateway's schedulers read metrics that {engine} publishes from {wanted} on: use a newer "
                     "image", ".".join(str(part) for part in version))
    if engine == "sglang" and "--enable-metrics" not in args:
        problems.add("Gateway.MetricsDisabled", at,
                     "an SGLang server behind the gateway needs --enable-metrics in worker.args (its scheduler reads "
                     "the server's metrics)")


def gateway_available(addon_version: str | None) -> bool:
    """Whether an add-on version has the gateway (``None``: an operator whose version the platform does not know; a
    version that does not parse is the version rule's problem): the version table's own comparison."""
    return addon_version is None or not any(missing_features(KIND, {}, addon_version))


# -- reading a gateways: entry ---------------------------------------------------------------------------
_GATEWAY_KEYS = ("name", "endpointDomain", "jwt", "unauthenticatedReason", "namespace", "bbrReplicas",
                 "maxRequestBodyBytes", "metrics", "schedulers", "entry")  # (entry: the loader reads it)
_JWT_KEYS = ("issuer", "jwksUri", "audiences", "requiredClaims", "providerName", "callerClaim")
_CLAIM_KEYS = ("name", "values", "valueType")
_SCHEDULER_KEYS = ("scheduler", "engineType", "weights", "configMapRef", "replicas", "loraAdapters", "routeTimeout")


class _Reader:
    def __init__(self, data: Mapping[str, Any], path: str, problems: Problems, known: Sequence[str]) -> None:
        self.data, self.path, self.problems = data, path, problems
        for key in data:
            if key not in known:
                problems.add(UNKNOWN_KEY, join_path(path, str(key)), unknown_key(known), data[key])

    def get(self, key: str, kind: type | tuple[type, ...], expected: str, *, required: bool = False) -> Any:
        value = self.data.get(key)
        if value is None:
            if required:
                self.problems.add(MISSING_KEY, join_path(self.path, key), REQUIRED)
            return None
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            self.problems.add(WRONG_TYPE, join_path(self.path, key), wrong_type(expected, value), value)
            return None
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.get(key, list, "a list of strings")
        if value is None:
            return ()
        if not all(isinstance(item, str) for item in value):
            self.problems.add(WRONG_TYPE, join_path(self.path, key), wrong_type("a list of strings", value), value)
            return ()
        return tuple(value)


def _mapping(data: Any, path: str, problems: Problems) -> Mapping[str, Any] | None:
    if not isinstance(data, Mapping):
        problems.add(WRONG_TYPE, path, wrong_type("a mapping", data), data)
        return None
    return data


def parse_gateway(data: Any, path: str, problems: Problems) -> InferenceGateway | None:
    """One ``gateways:`` entry (shape and types; the values are the plan's to check)."""
    entry = _mapping(data, path, problems)
    if entry is None:
        return None
    read = _Reader(entry, path, problems, _GATEWAY_KEYS)
    name = read.get("name", str, "a string", required=True)
    jwt = None
    if (jwt_data := read.get("jwt", Mapping, "a mapping")) is not None:
        jwt = _parse_jwt(jwt_data, join_path(path, "jwt"), problems)
    schedulers: dict[str, SchedulerOptions] = {}
    for model, options in (read.get("schedulers", Mapping, "a mapping of model name to options") or {}).items():
        parsed = _parse_scheduler(options, join_path(join_path(path, "schedulers"), str(model)), problems)
        if parsed is not None:
            schedulers[str(model)] = parsed
    if name is None:
        return None
    values: dict[str, Any] = {
        "endpoint_domain": read.get("endpointDomain", str, "a string"),
        "unauthenticated_reason": read.get("unauthenticatedReason", str, "a string"),
        "namespace": read.get("namespace", str, "a string"),
        "bbr_replicas": read.get("bbrReplicas", int, "an integer"),
        "max_request_body_bytes": read.get("maxRequestBodyBytes", int, "an integer"),
        "metrics": read.get("metrics", bool, "true or false"),
    }
    return InferenceGateway(name=name, jwt=jwt, schedulers=schedulers,
                            **{key: value for key, value in values.items()
                               if value is not None or key in ("endpoint_domain", "unauthenticated_reason",
                                                               "namespace", "max_request_body_bytes")})


def _parse_jwt(data: Mapping[str, Any], path: str, problems: Problems) -> JwtAuthentication | None:
    read = _Reader(data, path, problems, _JWT_KEYS)
    issuer = read.get("issuer", str, "a string", required=True)
    jwks_uri = read.get("jwksUri", str, "a string", required=True)
    claims = []
    for index, item in enumerate(read.get("requiredClaims", list, "a list of claims") or ()):
        claim_path = join_path(join_path(path, "requiredClaims"), index)
        claim = _mapping(item, claim_path, problems)
        if claim is None:
            continue
        claim_read = _Reader(claim, claim_path, problems, _CLAIM_KEYS)
        claim_name = claim_read.get("name", str, "a string", required=True)
        value_type = claim_read.get("valueType", str, "a string") or "String"
        if claim_name is not None:
            claims.append(RequiredClaim(name=claim_name, values=claim_read.strings("values"), value_type=value_type))
    if issuer is None or jwks_uri is None:
        return None
    return JwtAuthentication(issuer=issuer, jwks_uri=jwks_uri, audiences=read.strings("audiences"),
                             required_claims=tuple(claims),
                             provider_name=read.get("providerName", str, "a string") or "platform",
                             caller_claim=read.get("callerClaim", str, "a string") or "sub")


def _parse_scheduler(data: Any, path: str, problems: Problems) -> SchedulerOptions | None:
    entry = _mapping(data, path, problems)
    if entry is None:
        return None
    read = _Reader(entry, path, problems, _SCHEDULER_KEYS)
    config_map = None
    if (ref := read.get("configMapRef", Mapping, "a mapping with name (and key)")) is not None:
        ref_name = ref.get("name")
        if not isinstance(ref_name, str):
            problems.add(MISSING_KEY, join_path(join_path(path, "configMapRef"), "name"), REQUIRED)
        else:
            config_map = (ref_name, str(ref.get("key") or "default-plugins.yaml"))
    return SchedulerOptions(
        scheduler=read.get("scheduler", str, "a string") or "llm-d",
        engine_type=read.get("engineType", str, "a string"),
        weights=read.get("weights", Mapping, "a mapping of scorer to weight"),
        config_map=config_map,
        replicas=read.get("replicas", int, "an integer") or 2,
        lora_adapters=read.strings("loraAdapters"),
        route_timeout=read.get("routeTimeout", str, "a string"),
    )


__all__ = [
    "API_VERSION",
    "CONTROLLER_NAMESPACE",
    "CONTROLLER_SERVICE_ACCOUNT",
    "GATEWAY_MINIMUM_ADDON",
    "KIND",
    "GatewayModel",
    "InferenceGateway",
    "JwtAuthentication",
    "PlannedGateway",
    "RequiredClaim",
    "SchedulerOptions",
    "check_engine_version",
    "engine_of_image",
    "gateway_available",
    "parse_gateway",
]

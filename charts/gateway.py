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
from typing import Any, ClassVar

from hyperpod_inference_iac.charts.gateway_entry import GatewayEntryOptions
from hyperpod_inference_iac.charts.network_policies import GATEWAY_POD_LABEL, OPERATOR_NAMESPACE
from hyperpod_inference_iac.foundation.operator_versions import INFERENCE_GATEWAY, missing_features
from hyperpod_inference_iac.foundation.patterns import DNS1123_LABEL, DOMAIN_NAME
from hyperpod_inference_iac.foundation.platform_values import PlatformValue
from hyperpod_inference_iac.foundation.props import Props, prop
from hyperpod_inference_iac.foundation.validation import PROPS, REQUIRED, KeyPaths, Problems

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


def _either(values: Sequence[str]) -> str:
    return " or ".join(f"`{value}`" for value in values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequiredClaim(Props):
    """A claim a token must carry (``gateways[].jwt.requiredClaims[]``, the kind's ``requiredClaims[]``)."""

    CONSTRUCT: ClassVar[str] = "Gateway"

    name: str = prop(doc="The claim's name (`scope`, `groups`, a custom claim).")
    values: tuple[str, ...] = prop(doc="The values accepted: 1 to 128, each of 1 to 1024 characters.")
    value_type: str = prop("String", doc=f"How the claim's value is compared: {_either(CLAIM_VALUE_TYPES)} (a list "
                                         "of values, such as space-separated scopes).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if self.value_type not in CLAIM_VALUE_TYPES:
            problems.add("Gateway.ClaimTypeInvalid", at.at("value_type"),
                         f"must be one of {', '.join(CLAIM_VALUE_TYPES)}", self.value_type)
        if not self.name:
            problems.add("Gateway.ClaimInvalid", at.at("name"), REQUIRED)
        if not 1 <= len(self.values) <= 128 or any(not 1 <= len(v) <= 1024 for v in self.values):
            problems.add("Gateway.ClaimInvalid", at.at("values"),
                         "must hold 1 to 128 values of 1 to 1024 characters each", list(self.values))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "valueType": self.value_type, "values": list(self.values)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class JwtAuthentication(Props):
    """``spec.auth.jwt.provider``: who issues the tokens the gateway accepts (``gateways[].jwt``)."""

    CONSTRUCT: ClassVar[str] = "Gateway"

    issuer: str = prop(doc="The OIDC issuer, an `https://` URL: the gateway checks it against each token's `iss`.")
    jwks_uri: str = prop(doc="Where the issuer publishes its signing keys, an `https://` URL (`remoteJWKS.uri`).")
    audiences: tuple[str, ...] = prop((), doc=f"The `aud` values accepted (at most {MAX_AUDIENCES}, none with a "
                                              "`,`). At least one of these or the required claims.")
    required_claims: tuple[RequiredClaim, ...] = prop(
        (), doc=f"Claims a token must carry, each a `RequiredClaim` (at most {MAX_REQUIRED_CLAIMS}). At least one of "
                "these or the audiences, so a token the issuer minted for another application is refused.")
    provider_name: str = prop("platform", doc="The provider's name in the resource.")
    caller_claim: str = prop("sub", doc="The claim that identifies the caller, 1 to 128 letters, digits and "
                                        "`_.:/-`: its value is the capture records' `caller_id` where the request "
                                        "path carries the token (docs/gateway.md).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        for name, value in (("issuer", self.issuer), ("jwks_uri", self.jwks_uri)):
            if not _HTTPS_URL.match(value):
                problems.add("Gateway.JwtUrlInvalid", at.at(name), "must be an https:// URL", value)
        if not CALLER_CLAIM.fullmatch(self.caller_claim):
            problems.add("Gateway.CallerClaimInvalid", at.at("caller_claim"),
                         "must be a claim name of 1 to 128 letters, digits and '_.:/-' (the claim whose value is "
                         "recorded as caller_id)", self.caller_claim)
        if any("," in audience for audience in self.audiences):
            problems.add("Gateway.AudienceInvalid", at.at("audiences"),
                         "an audience may not contain ',' (the capture sidecar reads them as a comma list)",
                         list(self.audiences))
        if not self.audiences and not self.required_claims:
            problems.add("Gateway.JwtUnbound", at.at(),
                         "needs audiences or requiredClaims (or both): otherwise any token of the issuer is accepted, "
                         "including those minted for other applications")
        if len(self.audiences) > MAX_AUDIENCES:
            problems.add("Gateway.TooManyAudiences", at.at("audiences"), f"at most {MAX_AUDIENCES}",
                         len(self.audiences))
        if len(self.required_claims) > MAX_REQUIRED_CLAIMS:
            problems.add("Gateway.TooManyClaims", at.at("required_claims"), f"at most {MAX_REQUIRED_CLAIMS}",
                         len(self.required_claims))
        for index, claim in enumerate(self.required_claims):
            claim.check(problems, at.child("required_claims", index))

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
class ConfigMapRef(Props):
    """A ConfigMap holding a scheduler's plugin configuration (``gateways[].schedulers.<model>.configMapRef``)."""

    CONSTRUCT: ClassVar[str] = "Gateway"

    name: str = prop(doc="The ConfigMap's name, in the gateway's namespace.")
    key: str = prop("default-plugins.yaml", doc="The key of the ConfigMap that holds the configuration.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SchedulerOptions(Props):
    """How one model's requests are spread over its pods (``spec.schedulers[]``, the platform's part of it;
    ``gateways[].schedulers.<model>``)."""

    CONSTRUCT: ClassVar[str] = "Gateway"

    scheduler: str = prop("llm-d", doc=f"The endpoint picker: {_either(SCHEDULERS)}.")
    engine_type: str | None = prop(None, default_doc="read from the worker image (required when it cannot be)",
                                   doc=f"The model server's engine: {_either(ENGINES)}.")
    weights: Mapping[str, int] | None = prop(
        None, default_doc="the scheduler's own",
        doc=f"Scorer weights, whole numbers of at least 0, by scorer: {', '.join(f'`{k}`' for k in WEIGHT_KEYS)} "
            "(`lru` with llm-d only). Not with a ConfigMap reference.")
    config_map: ConfigMapRef | None = prop(None, key="configMapRef", default_doc="none",
                                           doc="A `ConfigMapRef` to the scheduler's plugin configuration, instead of "
                                               "`weights`.")
    replicas: int = prop(2, doc=f"Endpoint picker replicas, 1 to {MAX_REPLICAS} (more than one elects a leader).")
    lora_adapters: tuple[str, ...] = prop((), doc="LoRA adapter names the model serves (at most 50, each of 1 to 253 "
                                                  "characters).")
    route_timeout: str | None = prop(None, default_doc="the gateway's",
                                     doc="The route's timeout as a Gateway API duration (`300s`, `5m`, `1h30m`; "
                                         "`0s` disables it).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if self.scheduler not in SCHEDULERS:
            problems.add("Gateway.SchedulerInvalid", at.at("scheduler"), f"must be one of {', '.join(SCHEDULERS)}",
                         self.scheduler)
        if self.engine_type is not None and self.engine_type not in ENGINES:
            problems.add("Gateway.EngineInvalid", at.at("engine_type"), f"must be one of {', '.join(ENGINES)}",
                         self.engine_type)
        if self.weights is not None and self.config_map is not None:
            problems.add("Gateway.WeightsAndConfigMap", at.at("config_map"),
                         "give weights or configMapRef, not both (the kind refuses both)")
        for key, weight in (self.weights or {}).items():
            if key not in WEIGHT_KEYS:
                problems.add("Gateway.WeightUnknown", at.at("weights", key),
                             f"must be one of {', '.join(WEIGHT_KEYS)}", key)
            elif weight < 0:
                problems.add("Gateway.WeightInvalid", at.at("weights", key), "must be a whole number of at least 0",
                             weight)
        if "lru" in (self.weights or {}) and self.scheduler != "llm-d":
            problems.add("Gateway.LruNeedsLlmD", at.at("weights", "lru"),
                         "the lru scorer exists only in the llm-d scheduler: remove it or use scheduler: llm-d")
        if not 1 <= self.replicas <= MAX_REPLICAS:
            problems.add("Gateway.ReplicasOutOfRange", at.at("replicas"), f"must be from 1 to {MAX_REPLICAS}",
                         self.replicas)
        if len(self.lora_adapters) > 50 or any(not 1 <= len(a) <= 253 for a in self.lora_adapters):
            problems.add("Gateway.LoraAdaptersInvalid", at.at("lora_adapters"),
                         "at most 50 names of 1 to 253 characters", list(self.lora_adapters))
        if self.route_timeout is not None and not ROUTE_TIMEOUT.match(self.route_timeout):
            problems.add("Gateway.RouteTimeoutInvalid", at.at("route_timeout"),
                         "must be a Gateway API duration such as 300s, 5m or 1h30m (0s disables it)",
                         self.route_timeout)


@dataclasses.dataclass(frozen=True, kw_only=True)
class InferenceGateway(Props):
    """One gateway of the platform: its name, who may call it, its TLS name and how each model is scheduled
    (``gateways[]``). Its rules are checked by :meth:`check`; those between it and its models are the plan's."""

    CONSTRUCT: ClassVar[str] = "Gateway"

    name: str = prop(doc="The `InferenceGatewayConfig`'s name, a DNS-1123 label of at most 63 characters, which "
                         "models name in their `gateway`.")
    endpoint_domain: str | None = prop(
        None, default_doc="required",
        doc="The name clients call, one of the platform certificate's names (its ACM ARN is the gateway's TLS "
            "certificate; cert-manager auto-issue is not offered).")
    jwt: JwtAuthentication | None = prop(
        None, default_doc="required unless an unauthenticated reason is given",
        doc="The token issuer, a `JwtAuthentication`: without it the gateway accepts every request that reaches it.")
    unauthenticated_reason: str | None = prop(
        None, default_doc="a token required",
        doc="Why this gateway may accept requests without a token, at least 20 characters (warned at every synth).")
    namespace: str | None = prop(None, default_doc="the platform's",
                                 doc="Where it lives, a DNS-1123 label; every model behind it must live there too. "
                                     "With an `entry` there, the app runs a capture sidecar metrics agent in that "
                                     "namespace too (a consumer's own agents: `captureNotMonitored` warns a namespace "
                                     "none watches).")
    bbr_replicas: int = prop(2, doc=f"Body-based router replicas, 1 to {MAX_REPLICAS}.")
    max_request_body_bytes: int | None = prop(None, default_doc="the kind's, 256 MiB",
                                              doc=f"The largest request body the router reads, 1 to "
                                                  f"{MAX_BODY_BYTES} bytes.")
    metrics: bool = prop(True, doc="The OpenTelemetry collector sidecar in the router's and pickers' pods.")
    schedulers: Mapping[str, SchedulerOptions] = prop(
        default_factory=dict, default_doc="llm-d with its own weights, for each model",
        doc="How each model's requests are scheduled, a `SchedulerOptions` by model name (a model of the gateway).")
    entry: GatewayEntryOptions | None = prop(
        None, default_doc="none: gateway traffic records no caller",
        doc="The platform's capture entry in front of the gateway, a `GatewayEntryOptions`: it records the verified "
            "token's caller and enforces per-caller limits (docs/gateway.md, \"The capture entry\").")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        """The gateway's own rules (those between it and its models are the plan's)."""
        if not DNS1123_LABEL.match(self.name) or len(self.name) > 63:
            problems.add("Gateway.NameInvalid", at.at("name"), "must be a DNS-1123 label of at most 63 characters",
                         self.name)
        if self.namespace is not None and (not DNS1123_LABEL.match(self.namespace) or len(self.namespace) > 63):
            problems.add("Gateway.NamespaceInvalid", at.at("namespace"),
                         "must be a DNS-1123 label of at most 63 characters", self.namespace)
        if self.endpoint_domain is None:
            problems.add("Gateway.EndpointDomainMissing", at.at("endpoint_domain"),
                         "is required: the gateway serves TLS with the platform certificate, for one of its names "
                         "(cert-manager auto-issue is not offered: its role could import any certificate into ACM)")
        elif not DOMAIN_NAME.match(self.endpoint_domain):
            problems.add("Gateway.EndpointDomainInvalid", at.at("endpoint_domain"),
                         "must be a lowercase DNS name such as models.inference.example.com", self.endpoint_domain)
        self._check_auth(problems, at)
        if not 1 <= self.bbr_replicas <= MAX_REPLICAS:
            problems.add("Gateway.ReplicasOutOfRange", at.at("bbr_replicas"), f"must be from 1 to {MAX_REPLICAS}",
                         self.bbr_replicas)
        if self.max_request_body_bytes is not None and not 1 <= self.max_request_body_bytes <= MAX_BODY_BYTES:
            problems.add("Gateway.BodyLimitOutOfRange", at.at("max_request_body_bytes"),
                         f"must be from 1 to {MAX_BODY_BYTES} (256 MiB, the kind's maximum)",
                         self.max_request_body_bytes)
        for model, options in self.schedulers.items():
            options.check(problems, at.child("schedulers", model))

    def _check_auth(self, problems: Problems, at: KeyPaths) -> None:
        if self.jwt is None:
            if self.unauthenticated_reason is None:
                problems.add("Gateway.Unauthenticated", at.at("jwt"),
                             "is required: without it the gateway accepts every request that reaches it. Give the "
                             "token issuer (issuer, jwksUri, audiences or requiredClaims), or, for a gateway that "
                             "must stay open, unauthenticatedReason saying why (it is still warned at every synth)")
            elif not _UNAUTHENTICATED_REASON.fullmatch(self.unauthenticated_reason):
                problems.add("Gateway.ReasonTooShort", at.at("unauthenticated_reason"),
                             "must say why the gateway may accept unauthenticated requests (at least 20 characters)",
                             self.unauthenticated_reason)
            return
        if self.unauthenticated_reason is not None:
            problems.add("Gateway.AuthConflict", at.at("unauthenticated_reason"),
                         "the gateway has a JWT provider: remove unauthenticatedReason (or jwt)")
        self.jwt.check(problems, at.block("jwt"))


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
            entry["configMapRef"] = {"name": self.options.config_map.name, "key": self.options.config_map.key}
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


__all__ = [
    "API_VERSION",
    "CONTROLLER_NAMESPACE",
    "CONTROLLER_SERVICE_ACCOUNT",
    "GATEWAY_MINIMUM_ADDON",
    "KIND",
    "ConfigMapRef",
    "GatewayModel",
    "InferenceGateway",
    "JwtAuthentication",
    "PlannedGateway",
    "RequiredClaim",
    "SchedulerOptions",
    "check_engine_version",
    "engine_of_image",
    "gateway_available",
]

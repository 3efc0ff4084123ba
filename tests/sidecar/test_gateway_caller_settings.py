"""The gateway and the platform's capture entry in front of it agree on what a valid token is: the sidecar's JWT
settings are derived from the gateway's ``jwt`` as the config reader parses it (``capture_environment``), and the
sidecar reads them back to the same issuer, keys, audiences, required claims and caller claim."""

from __future__ import annotations

from capture_sidecar.jwt_settings import ClaimRule
from capture_sidecar.settings import load_settings
from hyperpod_inference_iac.foundation.validation import Problems
from platform_config.gateways import read_gateway

GATEWAY = {
    "name": "models",
    "endpointDomain": "models.inference.example.com",
    "jwt": {
        "issuer": "https://idp.example.com/oauth2/llm-platform",
        "jwksUri": "https://idp.example.com/oauth2/llm-platform/v1/keys",
        "audiences": ["llm-platform-inference", "llm-platform-batch"],
        "requiredClaims": [{"name": "scope", "valueType": "StringArray", "values": ["inference:invoke"]},
                           {"name": "tier", "values": ["gold", "silver"]}],
        "callerClaim": "email",
    },
}


def test_the_sidecar_reads_the_gateways_jwt_back_unchanged() -> None:
    problems = Problems()
    gateway = read_gateway(GATEWAY, "gateways[0]", problems)
    assert gateway is not None and gateway.jwt is not None and not problems.items
    environment = gateway.jwt.capture_environment()
    settings = load_settings({"UPSTREAM_URL": "http://envoy.hyperpod-inference-system:80",
                              "CAPTURE_S3_URI": "s3://captures/gateway/models/", **environment})
    assert settings.jwt is not None
    assert (settings.jwt.issuer, settings.jwt.jwks_uri) == (GATEWAY["jwt"]["issuer"], GATEWAY["jwt"]["jwksUri"])
    assert settings.jwt.audiences == ("llm-platform-inference", "llm-platform-batch")
    assert settings.jwt.required_claims == (ClaimRule("scope", ("inference:invoke",), "StringArray"),
                                            ClaimRule("tier", ("gold", "silver"), "String"))
    assert settings.jwt.caller_claim == "email"


def test_the_default_caller_claim_is_sub() -> None:
    problems = Problems()
    jwt = {key: value for key, value in GATEWAY["jwt"].items() if key != "callerClaim"}  # type: ignore[attr-defined]
    gateway = read_gateway({**GATEWAY, "jwt": jwt}, "gateways[0]", problems)
    assert gateway is not None and gateway.jwt is not None
    assert gateway.jwt.capture_environment()["JWT_CALLER_CLAIM"] == "sub"

"""The sidecar's JWT mode, as configured (``JWT_*`` variables): the issuer, its keys, the rules a token must meet
and the claim that names the caller. Pure data and checks (no network, no crypto): read with the other settings
before anything heavy is imported; :mod:`.jwt_auth` verifies tokens with it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Signature algorithms a token may use (asymmetric only: a verifier holding public keys has no HMAC secret).
ALLOWED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
DEFAULT_ALGORITHMS = ("RS256",)
CLAIM_VALUE_TYPES = ("String", "StringArray")
MAX_LEEWAY_SECONDS = 300.0
DEFAULT_LEEWAY_SECONDS = 30.0
DEFAULT_JWKS_REFRESH_SECONDS = 300.0
DEFAULT_JWKS_TIMEOUT_SECONDS = 5.0
#: A caller claim's value as recorded: identity providers' subjects (UUIDs, ``auth0|...``, ``00u...``, e-mail
#: addresses, base64url ids) fit; control characters, spaces and quotes do not.
CALLER_CLAIM_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:|+=/~-]{0,255}$")


@dataclass(frozen=True)
class ClaimRule:
    """A claim a token must carry: ``name``, and a value (``String``) or a list of values (``StringArray``) holding
    one of ``values``."""

    name: str
    values: tuple[str, ...]
    value_type: str = "String"

    def satisfied_by(self, claims: Mapping[str, Any]) -> bool:
        value = claims.get(self.name)
        if self.value_type == "String":
            return isinstance(value, str) and value in self.values
        if isinstance(value, str):  # OAuth's scope: one space-separated string (RFC 8693, 4.2)
            value = value.split()
        return isinstance(value, list) and any(isinstance(item, str) and item in self.values for item in value)


@dataclass(frozen=True)
class JwtSettings:
    """The token issuer the sidecar verifies against (the gateway's ``spec.auth.jwt.provider``) and the claim that
    names the caller."""

    issuer: str
    jwks_uri: str
    audiences: tuple[str, ...] = ()
    required_claims: tuple[ClaimRule, ...] = ()
    caller_claim: str = "sub"
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    leeway_seconds: float = DEFAULT_LEEWAY_SECONDS
    jwks_refresh_seconds: float = DEFAULT_JWKS_REFRESH_SECONDS
    jwks_timeout_seconds: float = DEFAULT_JWKS_TIMEOUT_SECONDS


def parse_required_claims(raw: str) -> tuple[tuple[ClaimRule, ...], str | None]:
    """``JWT_REQUIRED_CLAIMS``: a JSON list of ``{name, values, valueType}`` (the gateway's ``requiredClaims``, as the
    chart renders them). The rules, or a problem to report."""
    try:
        data = json.loads(raw)
    except ValueError:
        return (), "must be a JSON list of {name, values, valueType}"
    if not isinstance(data, list):
        return (), "must be a JSON list of {name, values, valueType}"
    rules: list[ClaimRule] = []
    for index, item in enumerate(data):
        if not isinstance(item, dict) or set(item) - {"name", "values", "valueType"}:
            return (), f"entry {index}: must be an object with name, values and valueType only"
        name, values, value_type = item.get("name"), item.get("values"), item.get("valueType", "String")
        if not isinstance(name, str) or not name:
            return (), f"entry {index}: name must be a non-empty string"
        if value_type not in CLAIM_VALUE_TYPES:
            return (), f"entry {index}: valueType must be one of {', '.join(CLAIM_VALUE_TYPES)}"
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            return (), f"entry {index}: values must be a non-empty list of non-empty strings"
        rules.append(ClaimRule(name, tuple(values), value_type))
    return tuple(rules), None


def _loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost")


def check_jwks_uri(uri: str) -> str | None:
    """HTTPS (the gateway's ``remoteJWKS.uri`` is); plain HTTP only to a loopback address (a test's issuer)."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if not parts.hostname or parts.scheme not in ("https", "http") or any(c.isspace() for c in uri):
        return "must be an https:// URL"
    if parts.scheme == "http" and not _loopback(parts.hostname):
        return "must be an https:// URL (plain http only to a loopback address)"
    return None


def read_jwt_settings(env: Mapping[str, str], problems: list[str]) -> JwtSettings | None:
    """The ``JWT_*`` variables, or None when ``JWT_ISSUER`` is not set (then none of the others may be). Each bad
    variable adds one problem line naming it."""

    def raw(name: str) -> str | None:
        value = env.get(name)
        return value.strip() if value is not None and value.strip() else None

    others = ("JWT_JWKS_URI", "JWT_AUDIENCES", "JWT_REQUIRED_CLAIMS", "JWT_CALLER_CLAIM", "JWT_ALGORITHMS",
              "JWT_LEEWAY_SECONDS", "JWT_JWKS_REFRESH_SECONDS", "JWT_JWKS_TIMEOUT_SECONDS")
    issuer = raw("JWT_ISSUER")
    if issuer is None:
        problems += [f"{name} is set but JWT_ISSUER is not: set both, or neither" for name in others if raw(name)]
        return None
    if not issuer.startswith("https://") or any(c.isspace() for c in issuer):
        problems.append(f"JWT_ISSUER={issuer!r}: must be an https:// URL (the tokens' iss)")
    jwks_uri = raw("JWT_JWKS_URI")
    if jwks_uri is None:
        problems.append("JWT_JWKS_URI is required with JWT_ISSUER, e.g. https://idp.example.com/oauth2/v1/keys")
    elif (problem := check_jwks_uri(jwks_uri)) is not None:
        problems.append(f"JWT_JWKS_URI={jwks_uri!r}: {problem}")
    audiences = tuple(part.strip() for part in (raw("JWT_AUDIENCES") or "").split(",") if part.strip())
    required: tuple[ClaimRule, ...] = ()
    if (claims_raw := raw("JWT_REQUIRED_CLAIMS")) is not None:
        required, problem = parse_required_claims(claims_raw)
        if problem is not None:
            problems.append(f"JWT_REQUIRED_CLAIMS={claims_raw!r}: {problem}")
    if not audiences and not required and claims_raw is None:
        problems.append("JWT_AUDIENCES or JWT_REQUIRED_CLAIMS is required with JWT_ISSUER: otherwise any token of "
                        "the issuer is accepted, including those minted for other applications")
    caller_claim = raw("JWT_CALLER_CLAIM") or "sub"
    if not re.fullmatch(r"[A-Za-z0-9_.:/-]{1,128}", caller_claim):
        problems.append(f"JWT_CALLER_CLAIM={caller_claim!r}: must be a claim name (letters, digits, '_.:/-')")
    algorithms = tuple(part.strip() for part in (raw("JWT_ALGORITHMS") or ",".join(DEFAULT_ALGORITHMS)).split(",")
                       if part.strip())
    if not algorithms or any(algorithm not in ALLOWED_ALGORITHMS for algorithm in algorithms):
        problems.append(f"JWT_ALGORITHMS={','.join(algorithms)!r}: must be a comma list of "
                        f"{', '.join(ALLOWED_ALGORITHMS)} (asymmetric only: never none or HS256)")
    numbers: dict[str, float] = {}
    for name, default, low, high in (("JWT_LEEWAY_SECONDS", DEFAULT_LEEWAY_SECONDS, 0, MAX_LEEWAY_SECONDS),
                                     ("JWT_JWKS_REFRESH_SECONDS", DEFAULT_JWKS_REFRESH_SECONDS, 30, 86400),
                                     ("JWT_JWKS_TIMEOUT_SECONDS", DEFAULT_JWKS_TIMEOUT_SECONDS, 0.1, 30)):
        text = raw(name)
        try:
            value = float(text) if text is not None else default
        except ValueError:
            value = float("nan")
        if not low <= value <= high:
            problems.append(f"{name}={text!r}: must be a number from {low:g} to {high:g}")
            value = default
        numbers[name] = value
    return JwtSettings(issuer=issuer, jwks_uri=jwks_uri or "", audiences=audiences, required_claims=required,
                       caller_claim=caller_claim, algorithms=algorithms,
                       leeway_seconds=numbers["JWT_LEEWAY_SECONDS"],
                       jwks_refresh_seconds=numbers["JWT_JWKS_REFRESH_SECONDS"],
                       jwks_timeout_seconds=numbers["JWT_JWKS_TIMEOUT_SECONDS"])

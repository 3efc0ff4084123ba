"""The JWT mode's verifier in process (no sidecar, no server): key selection, the JWKS document's rules, the
required-claim rules, and a failed refresh that keeps the keys in force. The real process, end to end:
test_jwt_caller.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from capture_sidecar.jwt_auth import MAX_JWKS_BYTES, JwtVerifier, Refused
from capture_sidecar.jwt_settings import ClaimRule, JwtSettings

ISSUER = "https://idp.example.com/"
AUDIENCE = "inference"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def _jwk(key: Any, kid: str, **extra: Any) -> dict[str, Any]:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    return {**json.loads(algorithm.to_jwk(key.public_key())), "kid": kid, **extra}


def _verifier(*keys: dict[str, Any], **settings: Any) -> JwtVerifier:
    verifier = JwtVerifier(JwtSettings(issuer=ISSUER, jwks_uri="https://idp.example.com/keys",
                                       audiences=(AUDIENCE,), **settings))
    if keys:
        verifier.load(json.dumps({"keys": list(keys)}).encode())
    return verifier


def _bearer(key: Any = RSA_KEY, algorithm: str = "RS256", kid: str = "r1", **claims: Any) -> bytes:
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "00u1alice", "exp": now + 60, **claims}
    return b"Bearer " + jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid}).encode()


def test_rsa_and_ec_keys_each_verify_their_own_tokens() -> None:
    verifier = _verifier(_jwk(RSA_KEY, "r1"), _jwk(EC_KEY, "e1"), algorithms=("RS256", "ES256"))
    assert verifier.caller_of(_bearer()) == "00u1alice"
    assert verifier.caller_of(_bearer(EC_KEY, "ES256", "e1", sub="svc@x.example")) == "svc@x.example"
    with pytest.raises(Refused):  # an EC token under the RSA key's kid
        verifier.caller_of(_bearer(EC_KEY, "ES256", "r1"))
    with pytest.raises(Refused):  # ES256 not among the algorithms accepted
        _verifier(_jwk(EC_KEY, "e1")).caller_of(_bearer(EC_KEY, "ES256", "e1"))
    with pytest.raises(Refused, match="unknown key"):  # no kid, two keys: which one is not guessed
        verifier.caller_of(b"Bearer " + jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "a",
                                                    "exp": int(time.time()) + 60}, RSA_KEY, algorithm="RS256").encode())


def test_a_jwk_that_names_another_alg_is_not_used_for_this_one() -> None:
    verifier = _verifier(_jwk(RSA_KEY, "r1", alg="RS512"), algorithms=("RS256", "RS512"))
    with pytest.raises(Refused, match="does not match"):
        verifier.caller_of(_bearer())
    assert verifier.caller_of(_bearer(algorithm="RS512")) == "00u1alice"


@pytest.mark.parametrize("document", [
    b"not json",
    b"[]",
    b'{"keys": {}}',
    json.dumps({"keys": [_jwk(RSA_KEY, "r1", use="enc")]}).encode(),  # an encryption key only
    json.dumps({"keys": [{**_jwk(RSA_KEY, "r1"), "d": "AQAB"}]}).encode(),  # a private key published by mistake
    json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h1"}]}).encode(),  # a symmetric key
    b" " * (MAX_JWKS_BYTES + 1),
])
def test_a_jwks_without_a_usable_signing_key_is_refused_and_the_old_keys_stay(document: bytes) -> None:
    verifier = _verifier(_jwk(RSA_KEY, "r1"))
    with pytest.raises(ValueError):
        verifier.load(document)
    assert verifier.caller_of(_bearer()) == "00u1alice"


def test_without_keys_every_request_is_refused_with_503() -> None:
    with pytest.raises(Refused) as refused:
        _verifier().caller_of(_bearer())
    assert refused.value.status == 503


def test_a_failed_refresh_keeps_the_keys_and_answers_at_once() -> None:
    """A JWKS host that refuses connections: fetch() logs and counts, the keys in force stay."""

    async def run() -> None:
        import aiohttp

        from tests.support.s3server import free_loopback_port

        verifier = JwtVerifier(JwtSettings(issuer=ISSUER, audiences=(AUDIENCE,),
                                           jwks_uri=f"http://127.0.0.1:{free_loopback_port()}/keys"))
        verifier.load(json.dumps({"keys": [_jwk(RSA_KEY, "r1")]}).encode())
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            await verifier.fetch(session)
        assert verifier.fetch_failures == 1
        assert verifier.caller_of(_bearer()) == "00u1alice"

    asyncio.run(run())


@pytest.mark.parametrize(("rule", "claims", "passes"), [
    (ClaimRule("scope", ("inference:invoke",), "StringArray"), {"scope": "openid inference:invoke"}, True),
    (ClaimRule("scope", ("inference:invoke",), "StringArray"), {"scope": ["inference:invoke"]}, True),
    (ClaimRule("scope", ("inference:invoke",), "StringArray"), {"scope": "inference:invoke-all"}, False),
    (ClaimRule("scope", ("inference:invoke",), "StringArray"), {"scope": [["inference:invoke"]]}, False),
    (ClaimRule("tier", ("gold",)), {"tier": "gold"}, True),
    (ClaimRule("tier", ("gold",)), {"tier": ["gold"]}, False),
    (ClaimRule("tier", ("gold",)), {}, False),
])
def test_required_claims(rule: ClaimRule, claims: dict[str, Any], passes: bool) -> None:
    verifier = _verifier(_jwk(RSA_KEY, "r1"), required_claims=(rule,))
    if passes:
        assert verifier.caller_of(_bearer(**claims)) == "00u1alice"
    else:
        with pytest.raises(Refused, match="required claim"):
            verifier.caller_of(_bearer(**claims))


def test_the_leeway_bounds_expiry_both_ways() -> None:
    verifier = _verifier(_jwk(RSA_KEY, "r1"), leeway_seconds=30)
    assert verifier.caller_of(_bearer(exp=int(time.time()) - 10)) == "00u1alice"  # within the skew allowed
    with pytest.raises(Refused, match="expired"):
        verifier.caller_of(_bearer(exp=int(time.time()) - 120))


def test_a_caller_claim_other_than_sub() -> None:
    verifier = _verifier(_jwk(RSA_KEY, "r1"), caller_claim="email")
    assert verifier.caller_of(_bearer(email="alice@example.com")) == "alice@example.com"
    with pytest.raises(Refused, match="email"):
        verifier.caller_of(_bearer())

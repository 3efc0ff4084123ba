"""What the capture sidecar's JWT mode costs per request: one ``JwtVerifier.caller_of`` (header parse, key lookup,
signature check, claims), in process, one core. Prints figures; asserts nothing (docs/testing.md).

    .venv/bin/python benchmarks/jwt_verify_bench.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sidecar"))

from capture_sidecar.jwt_auth import JwtVerifier, Refused
from capture_sidecar.jwt_settings import ClaimRule, JwtSettings

ISSUER = "https://idp.example.com/"
ROUNDS = 5000


def _figure(label: str, verifier: JwtVerifier, bearer: bytes, *, refused: bool = False) -> None:
    start = time.perf_counter()
    for _ in range(ROUNDS):
        try:
            verifier.caller_of(bearer)
        except Refused:
            if not refused:
                raise
    elapsed = time.perf_counter() - start
    print(f"{label:<44} {elapsed / ROUNDS * 1e6:8.1f} µs per request ({ROUNDS / elapsed:,.0f} per second, one core)")


def main() -> None:
    keys = {"RS256": (rsa.generate_private_key(public_exponent=65537, key_size=2048), jwt.algorithms.RSAAlgorithm),
            "ES256": (ec.generate_private_key(ec.SECP256R1()), jwt.algorithms.ECAlgorithm)}
    rule = ClaimRule("scope", ("inference:invoke",), "StringArray")
    for algorithm, (key, family) in keys.items():
        jwk = {**json.loads(family.to_jwk(key.public_key())), "kid": "k1", "alg": algorithm}
        verifier = JwtVerifier(JwtSettings(issuer=ISSUER, jwks_uri="https://idp.example.com/keys",
                                           audiences=("inference",), required_claims=(rule,),
                                           algorithms=(algorithm,)))
        verifier.load(json.dumps({"keys": [jwk]}).encode())
        claims = {"iss": ISSUER, "aud": "inference", "sub": "00u1alice", "scope": "openid inference:invoke",
                  "exp": int(time.time()) + 3600}
        bearer = b"Bearer " + jwt.encode(claims, key, algorithm=algorithm, headers={"kid": "k1"}).encode()
        _figure(f"{algorithm} valid token", verifier, bearer)
        forged = bearer[: bearer.rindex(b".") + 1] + b"A" * 86
        _figure(f"{algorithm} forged signature (refused)", verifier, forged, refused=True)


if __name__ == "__main__":
    main()

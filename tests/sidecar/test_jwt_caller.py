"""The capture sidecar's JWT mode, end to end: the platform's capture point in front of a JWT gateway.

A real token, signed by a test RSA key whose JWKS this test serves on loopback, through the real sidecar process to
the stand-in upstream (standing for the gateway: it sees the request unchanged, ``Authorization`` included), the
capture written to moto S3 and read by the real capture processor into rows whose ``caller_id`` is the token's
subject. Then what an attacker or a broken issuer sends: expired, wrong issuer, wrong audience, ``alg: none``,
HS256 keyed with the public key, an unknown ``kid``, a foreign key under a known ``kid``, a token without the
caller claim or a required claim, two Authorization headers, and a JWKS that cannot be reached (refused at once,
never a hang)."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.capture_processor import transcripts
from tests.capture_processor.test_llm_traffic import ANSWER
from tests.capture_processor.transcripts import split
from tests.sidecar.conftest import free_loopback_port, read_records
from tests.sidecar.test_capture_to_curated import _curate
from tests.support.waiting import eventually

ISSUER = "https://idp.example.com/oauth2/llm-platform"
AUDIENCE = "llm-platform-inference"
REQUIRED = [{"name": "scope", "valueType": "StringArray", "values": ["inference:invoke"]}]
KID = "test-key-1"
SUBJECTS = ("00u1alice", "svc-batch@team-b.example.com")


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


SIGNING_KEY = _rsa_key()
OTHER_KEY = _rsa_key()  # an attacker's: its tokens name our kid


def _jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig", "alg": "RS256"}


class _JwksServer(ThreadingHTTPServer):
    """The issuer's JWKS endpoint, on loopback: ``keys`` is what it publishes now."""

    keys: list[dict[str, Any]]


class _Jwks(BaseHTTPRequestHandler):
    server: _JwksServer

    def do_GET(self) -> None:
        document = json.dumps({"keys": self.server.keys}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(document)))
        self.end_headers()
        self.wfile.write(document)

    def log_message(self, *_: object) -> None:
        pass


@contextlib.contextmanager
def _jwks_server() -> Iterator[_JwksServer]:
    server = _JwksServer(("127.0.0.1", 0), _Jwks)
    server.keys = [_jwk(SIGNING_KEY, KID)]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _uri(server: _JwksServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/oauth2/llm-platform/v1/keys"


@pytest.fixture(scope="module")
def jwks_uri() -> Iterator[str]:
    with _jwks_server() as server:
        yield _uri(server)


def token(subject: str | None = "00u1alice", *, key: Any = SIGNING_KEY, algorithm: str = "RS256",
          kid: str | None = KID, **overrides: Any) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300,
                              "scope": "openid inference:invoke"}
    if subject is not None:
        claims["sub"] = subject
    claims.update(overrides)
    claims = {name: value for name, value in claims.items() if value is not None}
    headers = {"kid": kid} if kid is not None else None
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers)


def _unsigned(claims_token: str, header: dict[str, Any]) -> str:
    """A token with the given header and the claims of ``claims_token``, and no signature (``alg: none``)."""
    encoded = base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()
    return f"{encoded}.{claims_token.split('.')[1]}."


def _hs256_with_public_key() -> str:
    """The classic confusion: HS256 keyed with the issuer's public key (PEM), which anyone can fetch."""
    import hashlib
    import hmac

    public_pem = SIGNING_KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo)
    header = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "kid": KID, "typ": "JWT"}).encode()).rstrip(b"=")
    payload = token().split(".")[1].encode()
    signature = hmac.new(public_pem, header + b"." + payload, hashlib.sha256).digest()
    return f"{header.decode()}.{payload.decode()}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _jwt_env(jwks: str, **overrides: str) -> dict[str, str]:
    return {"JWT_ISSUER": ISSUER, "JWT_JWKS_URI": jwks, "JWT_AUDIENCES": AUDIENCE,
            "JWT_REQUIRED_CLAIMS": json.dumps(REQUIRED), "MODEL_NAME": "served-model", **overrides}


def _wait_for_keys(sidecar: Any) -> None:
    """Until the sidecar fetched the JWKS (a 503 before: no keys to check a token with yet)."""
    assert eventually(lambda: sidecar.call("GET", "/v1/models", None,
                                           {"Authorization": f"Bearer {token()}"}).status != 503), sidecar.log()


def test_gateway_traffic_is_recorded_with_the_tokens_subject(
    start_sidecar, s3, jwks_uri: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sidecar = start_sidecar(**_jwt_env(jwks_uri))
    _wait_for_keys(sidecar)  # (GET /v1/models: not captured, a GET has no body)
    body = transcripts.chat_request("What is the capital of France?", model="served-model").encode()
    for subject in SUBJECTS:
        stream = transcripts.vllm_chat(split(ANSWER, 4), model="served-model")
        bearer = token(subject)
        headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json",
                   "X-Replay": base64.b64encode(stream.encode()).decode()}
        result = sidecar.call("POST", "/v1/chat/completions", body, headers)
        assert result.status == 200 and result.body.decode() == stream
    # What is behind (the gateway) gets the request unchanged, the token included: it verifies it again.
    bearer = token(SUBJECTS[0])
    echoed = sidecar.call("POST", "/echo", b"{}", {"Authorization": f"Bearer {bearer}"})
    assert echoed.status == 200
    assert ["Authorization", f"Bearer {bearer}"] in json.loads(echoed.header("X-Seen-Headers") or "[]")

    records = read_records(s3, sidecar.prefix, 3)
    assert sorted(record["eventMetadata"]["callerId"] for record in records) == sorted([*SUBJECTS, SUBJECTS[0]])
    raw = json.dumps(records)
    assert "eyJ" not in raw  # no token (nor a piece of one) is recorded

    rows = _curate(s3, sidecar.prefix, moto_endpoint, monkeypatch)
    chats = [row for row in rows if row["request_path"] == "/v1/chat/completions"]
    assert sorted(row["caller_id"] for row in chats) == sorted(SUBJECTS)
    assert {row["gen_ai_request_model"] for row in chats} == {"served-model"}


HOSTILE = {
    "expired": lambda: token(exp=int(time.time()) - 3600, iat=int(time.time()) - 7200),
    "not yet valid": lambda: token(nbf=int(time.time()) + 3600),
    "no expiry": lambda: token(exp=None),
    "wrong issuer": lambda: token(iss="https://evil.example.com/"),
    "wrong audience": lambda: token(aud="another-application"),
    "missing required claim": lambda: token(scope="openid"),
    "no caller claim": lambda: token(None),
    "caller claim not a string": lambda: token(sub=["a", "b"]),  # type: ignore[arg-type]
    "caller claim with a newline": lambda: token("alice\nbob"),
    "caller claim ending in a newline": lambda: token("alice\n"),
    "alg none": lambda: _unsigned(token(), {"alg": "none", "kid": KID}),
    "alg none, no kid": lambda: _unsigned(token(), {"alg": "none"}),
    "HS256 keyed with the public key": _hs256_with_public_key,
    "unknown kid": lambda: token(kid="rotated-in-by-nobody"),
    "foreign key under our kid": lambda: token(key=OTHER_KEY),
    "signature of another token": lambda: ".".join([*token("00u1alice").split(".")[:2],
                                                    token("00u1mallory").split(".")[2]]),
    "RS256 token as PS256": lambda: token(algorithm="PS256"),
    "not a JWT": lambda: "team-a-key-0123456789abcdef",
}


@pytest.fixture(scope="module")
def jwt_sidecar(start_module_sidecar, jwks_uri: str) -> Any:
    sidecar = start_module_sidecar(**_jwt_env(jwks_uri))
    _wait_for_keys(sidecar)
    return sidecar


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_tokens_are_refused_and_nothing_is_captured(jwt_sidecar: Any, case: str) -> None:
    result = jwt_sidecar.call("POST", "/echo", b'{"secret": "x"}', {"Authorization": f"Bearer {HOSTILE[case]()}"})
    assert result.status == 401, (case, result.status, result.body)
    assert b"X-Seen-Method" not in b"".join(name.encode() for name, _ in result.headers)  # never forwarded
    assert (result.header("WWW-Authenticate") or "").startswith("Bearer")


def test_no_token_and_two_tokens_are_refused(jwt_sidecar: Any) -> None:
    assert jwt_sidecar.call("POST", "/echo", b"{}", {}).status == 401
    assert jwt_sidecar.call("POST", "/echo", b"{}", {"Authorization": f"Basic {token()}"}).status == 401
    # Two Authorization headers: the sidecar and the gateway could read different ones, so neither is trusted.
    connection_headers = [("Authorization", f"Bearer {token('00u1alice')}"),
                          ("Authorization", f"Bearer {token('00u1mallory')}")]
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", jwt_sidecar.port, timeout=30)
    try:
        connection.putrequest("GET", "/echo", skip_accept_encoding=True)
        for name, value in connection_headers:
            connection.putheader(name, value)
        connection.endheaders()
        assert connection.getresponse().status == 401
    finally:
        connection.close()


def test_a_valid_token_passes_the_same_sidecar(jwt_sidecar: Any) -> None:
    """The control of the hostile cases: the same sidecar, a good token, answered by the upstream."""
    assert jwt_sidecar.metrics()["capture_sidecar_jwt_keys"] == 1
    assert jwt_sidecar.call("POST", "/echo", b"{}", {"Authorization": f"Bearer {token()}"}).status == 200
    # A token without kid is accepted from an issuer that publishes one key only.
    assert jwt_sidecar.call("POST", "/echo", b"{}", {"Authorization": f"Bearer {token(kid=None)}"}).status == 200


def test_an_unreachable_jwks_fails_closed_at_once(start_sidecar) -> None:
    """Nothing listens at the JWKS address: every request is refused (503) promptly, none is forwarded."""
    dead = f"http://127.0.0.1:{free_loopback_port()}/keys"
    sidecar = start_sidecar(**_jwt_env(dead, JWT_JWKS_TIMEOUT_SECONDS="1"))
    for _ in range(3):
        result = sidecar.call("POST", "/echo", b"{}", {"Authorization": f"Bearer {token()}"})
        assert result.status == 503 and b"keys" in result.body
    assert "JWKS" in sidecar.log()
    assert sidecar.metrics()["capture_sidecar_jwt_keys"] == 0
    assert sidecar.wait_for_metric("capture_sidecar_jwks_fetch_failures_total", 1) >= 1


def test_a_jwks_that_never_answers_costs_no_hang(start_sidecar) -> None:
    """The JWKS server accepts the connection and says nothing: requests are still answered (503) at once, since a
    request never waits on the fetch (http_call's own 30 s timeout would fail this test)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        silent = f"http://127.0.0.1:{listener.getsockname()[1]}/keys"
        sidecar = start_sidecar(**_jwt_env(silent, JWT_JWKS_TIMEOUT_SECONDS="30"))
        assert sidecar.call("POST", "/echo", b"{}", {"Authorization": f"Bearer {token()}"}).status == 503
    finally:
        listener.close()


def test_settings_refuse_a_weak_or_mixed_configuration(tmp_path: Path) -> None:
    from capture_sidecar.settings import SettingsError, load_settings

    base = {"UPSTREAM_URL": "http://127.0.0.1:8000", "CAPTURE_S3_URI": "s3://bucket/prefix/"}
    with pytest.raises(SettingsError) as raised:
        load_settings({**base, "JWT_ISSUER": "http://idp.example.com", "JWT_JWKS_URI": "http://idp.example.com/k",
                       "JWT_ALGORITHMS": "RS256,HS256,none", "JWT_LEEWAY_SECONDS": "3600",
                       "API_KEY": "0123456789abcdef0123"})
    message = str(raised.value)
    for variable in ("JWT_ISSUER=", "JWT_JWKS_URI=", "JWT_ALGORITHMS=", "JWT_LEEWAY_SECONDS=",
                     "JWT_AUDIENCES or JWT_REQUIRED_CLAIMS", "API_KEY/API_KEYS_FILE"):
        assert variable in message
    assert "0123456789abcdef0123" not in message
    with pytest.raises(SettingsError, match="JWT_JWKS_URI is set but JWT_ISSUER is not"):
        load_settings({**base, "JWT_JWKS_URI": "https://idp.example.com/k"})
    with pytest.raises(SettingsError, match="JWT_REQUIRED_CLAIMS="):
        load_settings({**base, "JWT_ISSUER": ISSUER, "JWT_JWKS_URI": "https://idp.example.com/k",
                       "JWT_REQUIRED_CLAIMS": '[{"name": "scope", "values": []}]'})
    settings = load_settings({**base, **_jwt_env("https://idp.example.com/k", JWT_CALLER_CLAIM="email")})
    assert settings.jwt is not None and settings.jwt.caller_claim == "email"
    assert settings.jwt.algorithms == ("RS256",) and settings.jwt.leeway_seconds == 30


def test_a_key_the_issuer_rotates_in_is_fetched_on_its_first_token(start_sidecar) -> None:
    """The issuer publishes a new key: its first token is refused (401, never held waiting on the fetch) and asks
    for a refresh; once fetched (rate-limited to one per 10 s), its tokens pass. A key the issuer dropped is refused
    from the refresh on."""
    with _jwks_server() as server:
        sidecar = start_sidecar(**_jwt_env(_uri(server)))
        _wait_for_keys(sidecar)
        server.keys = [_jwk(OTHER_KEY, "test-key-2")]
        rotated = {"Authorization": f"Bearer {token(key=OTHER_KEY, kid='test-key-2')}"}
        assert sidecar.call("POST", "/echo", b"{}", rotated).status == 401
        assert eventually(lambda: sidecar.call("POST", "/echo", b"{}", rotated).status != 401, interval=0.2), \
            sidecar.log()
        assert sidecar.call("POST", "/echo", b"{}", rotated).status == 200
        assert sidecar.call("POST", "/echo", b"{}", {"Authorization": f"Bearer {token()}"}).status == 401

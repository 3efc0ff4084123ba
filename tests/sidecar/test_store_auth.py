"""The budget store's connection as the platform's store (UsageStore) needs it: TLS that is verified (CA and host
name), IAM authentication with a SigV4 token signed by the sidecar's own credentials, and the store user's access
string, which lets the sidecar's calls through and nothing else. Against a real redis-server with TLS on loopback
(a test CA made with `cryptography`)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import botocore.session
import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from capture_sidecar.limits import RedisTokenStore
from capture_sidecar.settings import SettingsError, load_settings
from capture_sidecar.store_auth import TOKEN_REUSE_SECONDS, ElastiCacheIamAuth
from hyperpod_inference_iac.serving.usage_store import ACCESS_STRING
from tests.support.redis_server import ServerTls, redis_server
from tests.support.waiting import STORE_SAFETY_TIMEOUT

USER = "demo-usage-sidecar"
CACHE = "demo-usage"
ACCESS_KEY = "AKIDEXAMPLEEXAMPLE01"


def _session(monkeypatch: pytest.MonkeyPatch) -> botocore.session.Session:
    for name, value in {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": "secret-example",
                        "AWS_SESSION_TOKEN": "session-token-example", "AWS_REGION": "eu-west-1"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    return botocore.session.get_session()


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
                 issuer_key: ec.EllipticCurvePrivateKey, names: list[x509.GeneralName]) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(issuer.subject if issuer else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_tls(directory: Path, names: list[x509.GeneralName], prefix: str) -> ServerTls:
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate(f"{prefix} test CA", ca_key, None, ca_key, [])
    server = _certificate("budget store", server_key, ca, ca_key, names)
    pem = serialization.Encoding.PEM
    files = {f"{prefix}-ca.pem": ca.public_bytes(pem), f"{prefix}-server.pem": server.public_bytes(pem),
             f"{prefix}-server.key": server_key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL,
                                                              serialization.NoEncryption())}
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return ServerTls(str(directory / f"{prefix}-server.pem"), str(directory / f"{prefix}-server.key"),
                     str(directory / f"{prefix}-ca.pem"))


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> ServerTls:
    directory = tmp_path_factory.mktemp("store-tls")
    return _write_tls(directory, [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
                      "store")


def test_the_token_is_awss_documented_connect_request_signed_for_the_cache_and_user(
        monkeypatch: pytest.MonkeyPatch) -> None:
    auth = ElastiCacheIamAuth(USER, CACHE, session=_session(monkeypatch))
    user, token = auth.get_credentials()
    assert user == USER and not token.startswith("http")
    parts = urlsplit(f"http://{token}")
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    assert parts.hostname == CACHE and parts.path == "/"
    assert (query["Action"], query["User"], query["ResourceType"]) == ("connect", USER, "ServerlessCache")
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256" and query["X-Amz-Expires"] == "900"
    assert query["X-Amz-Credential"].startswith(ACCESS_KEY + "/")
    assert query["X-Amz-Credential"].endswith("/eu-west-1/elasticache/aws4_request")
    assert query["X-Amz-SignedHeaders"] == "host" and len(query["X-Amz-Signature"]) == 64
    assert query["X-Amz-Security-Token"] == "session-token-example"  # (the role's session: IRSA in the pod)
    # A provisioned cache's token has no ResourceType.
    provisioned = ElastiCacheIamAuth(USER, CACHE, serverless=False, session=_session(monkeypatch)).token()
    assert "ResourceType" not in provisioned


def test_a_token_is_reused_for_new_connections_then_signed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    auth = ElastiCacheIamAuth(USER, CACHE, session=_session(monkeypatch), clock=lambda: now[0])
    first = asyncio.run(auth.get_credentials_async())
    assert asyncio.run(auth.get_credentials_async()) == first and auth.tokens_signed == 1
    now[0] += TOKEN_REUSE_SECONDS
    asyncio.run(auth.get_credentials_async())
    assert auth.tokens_signed == 2


def test_the_sidecar_connects_over_verified_tls_with_its_token_and_its_user_may_do_its_calls_only(
        monkeypatch: pytest.MonkeyPatch, tls_files: ServerTls, tmp_path: Path) -> None:
    auth = ElastiCacheIamAuth(USER, CACHE, session=_session(monkeypatch))
    token = auth.token()  # (the server below checks this exact token: a stand-in for ElastiCache's IAM check)
    user_rule = f"{USER} {ACCESS_STRING} >{token}"  # the access string UsageStore gives the user
    with redis_server(tls=tls_files, users=["default off", user_rule]) as url:
        async def sidecar_calls() -> tuple[int, int]:
            store = RedisTokenStore(url, STORE_SAFETY_TIMEOUT, credentials=auth, ca_file=tls_files.ca_file)
            try:
                first, _ = await store.take("budget:ns/server:{team-a}:tokensPerDay:d20261205", 700, 1000, 60)
                second, _ = await store.take("budget:ns/server:{team-a}:tokensPerDay:d20261205", 700, 1000, 60)
                await store.give_back("budget:ns/server:{team-a}:tokensPerDay:d20261205", 100)
                await store.client.script_flush()  # a cache restarted: the script is loaded again (SCRIPT LOAD)
                third, _ = await store.take("budget:ns/server:{team-a}:tokensPerDay:d20261205", 500, 1000, 60)
                return first + second, third
            finally:
                await store.close()

        assert asyncio.run(sidecar_calls()) == (1000, 100)
        port = urlsplit(url).port
        assert port is not None
        sidecar = redis.Redis(host="localhost", port=port, ssl=True, ssl_ca_certs=tls_files.ca_file,
                              username=USER, password=token)
        for forbidden in (lambda: sidecar.set("budget:x", 1), lambda: sidecar.get("other:key"),
                          lambda: sidecar.keys("*"), lambda: sidecar.flushall(), lambda: sidecar.config_get("*"),
                          lambda: sidecar.delete("budget:x")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                forbidden()
        sidecar.close()
        # Without a token (the group's default user is off) nothing runs; a wrong token is refused.
        anonymous = redis.Redis(host="localhost", port=port, ssl=True, ssl_ca_certs=tls_files.ca_file)
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.get("budget:x")
        anonymous.close()
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(host="localhost", port=port, ssl=True, ssl_ca_certs=tls_files.ca_file, username=USER,
                        password=token + "x").ping()


def test_a_store_whose_certificate_is_not_trusted_or_not_its_name_is_not_spoken_to(
        monkeypatch: pytest.MonkeyPatch, tls_files: ServerTls, tmp_path: Path) -> None:
    auth = ElastiCacheIamAuth(USER, CACHE, session=_session(monkeypatch))
    wrong_name = _write_tls(tmp_path, [x509.DNSName("budgets.example.com")], "other")

    def take(url: str, ca_file: str | None) -> None:
        async def call() -> None:
            store = RedisTokenStore(url, STORE_SAFETY_TIMEOUT, credentials=auth, ca_file=ca_file)
            try:
                await store.take("budget:k", 1, 10, 60)
            finally:
                await store.close()

        asyncio.run(call())

    with redis_server(tls=tls_files) as url, pytest.raises(redis.exceptions.ConnectionError,
                                                           match="certificate verify failed"):
        take(url, None)  # the system's CAs do not know the test CA: no token is sent
    with redis_server(tls=wrong_name) as url, pytest.raises(redis.exceptions.ConnectionError,
                                                            match=r"certificate verify failed|match"):
        take(url, wrong_name.ca_file)  # trusted CA, but the certificate is for another host


def test_iam_authentication_needs_both_names_and_tls() -> None:
    base = {"UPSTREAM_URL": "http://127.0.0.1:8000", "CAPTURE_S3_URI": "s3://b/p/",
            "CALLER_LIMITS": '{"*":{"tokensPerDay":10}}'}
    store = "rediss://demo.serverless.euw1.cache.amazonaws.com:6379"
    settings = load_settings({**base, "LIMITS_STORE_URL": store, "LIMITS_STORE_IAM_USER": USER,
                              "LIMITS_STORE_IAM_CACHE": CACHE})
    assert (settings.usage.store_iam_user, settings.usage.store_iam_cache) == (USER, CACHE)
    with pytest.raises(SettingsError) as raised:
        load_settings({**base, "LIMITS_STORE_URL": "redis://plain:6379", "LIMITS_STORE_IAM_USER": USER})
    message = str(raised.value)
    assert "give both" in message and "never sent without TLS" in message


@pytest.fixture(autouse=True)
def _no_real_credentials(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield


def test_the_sidecar_signs_its_first_token_at_start_not_in_a_requests_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    from capture_sidecar.service import make_limiter

    _session(monkeypatch)
    settings = load_settings({"UPSTREAM_URL": "http://127.0.0.1:8000", "CAPTURE_S3_URI": "s3://b/p/",
                              "CALLER_LIMITS": '{"*":{"tokensPerDay":10}}',
                              "LIMITS_STORE_URL": "rediss://demo.serverless.euw1.cache.amazonaws.com:6379",
                              "LIMITS_STORE_IAM_USER": USER, "LIMITS_STORE_IAM_CACHE": CACHE})
    limiter = make_limiter(settings.usage)
    assert limiter is not None and isinstance(limiter.store, RedisTokenStore)
    provider = limiter.store.client.connection_pool.connection_kwargs["credential_provider"]
    assert isinstance(provider, ElastiCacheIamAuth) and provider.tokens_signed == 1
    kwargs = limiter.store.client.connection_pool.connection_kwargs
    # Verification is redis-py's default (certificate required, host name checked): never turned off here.
    assert "ssl_cert_reqs" not in kwargs and "ssl_check_hostname" not in kwargs and kwargs["ssl_ca_certs"]
    asyncio.run(limiter.store.close())

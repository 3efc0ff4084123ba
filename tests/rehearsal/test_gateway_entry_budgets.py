"""Rehearsal of the gateway entry's budget store path (``gateways[].entry.usageLimits`` without a ``storeUrl``: the
platform's store, UsageStore): the default config has no ``usageLimits``, so tests/rehearsal/test_gateway_entry.py never
reaches the store. Here the app is synthesized a second time (the CDK CLI, ~1-2 min of CPU: hence slow) from the default
file plus a day budget for one caller of the entry, with the store's address as the deploy's outputs file gives it; the
entry then runs as its rendered manifest configures it (the real process, its own role's temporary credentials from
moto, real RS256 tokens) against a local redis-server standing in for the store:

- the store's settings are the template's: the manifest's ``LIMITS_STORE_IAM_USER`` and ``LIMITS_STORE_IAM_CACHE`` are
  the ElastiCache user and serverless cache the cluster stack creates, the local server's user has that user's real
  access string (``UsageStore``'s), TLS is verified against a test CA (``AWS_CA_BUNDLE``), the default user is off;
- the entry authenticates as that user with an IAM token it signed itself with the role's credentials: a TLS proxy in
  front of the local server reads the token from the entry's ``AUTH``/``HELLO`` (ElastiCache's IAM check cannot run
  here: the token's request, user, cache, the role session's access key and session token are checked instead, and
  moto's evaluator says the role may ``elasticache:Connect`` to that cache and that user);
- the caller over its budget is refused (429, ``Retry-After``, ``insufficient_quota``), a caller without a budget is
  served, the store holds the budget's keys under the manifest's ``LIMITS_KEY_PREFIX``, the access string refused
  nothing the entry asked (no ``ACL LOG`` entry) and the entry counted no store error."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
import yaml

from capture_sidecar.settings import DEFAULT_BYTES_PER_TOKEN, DEFAULT_OUTPUT_TOKENS
from capture_sidecar.stream_usage import estimate_tokens
from hyperpod_inference_iac.serving.usage_store import ACCESS_STRING
from tests.capture_processor import transcripts
from tests.capture_processor.test_llm_traffic import ANSWER
from tests.capture_processor.transcripts import split
from tests.rehearsal.conftest import Platform, record_timing
from tests.rehearsal.test_gateway_entry import MODEL, entry_token, gateway_entries, start_entry
from tests.sidecar.test_jwt_caller import SUBJECTS
from tests.sidecar.test_jwt_caller import jwks_uri as jwks_uri  # (the JWKS of the test key, on loopback)
from tests.sidecar.test_store_auth import _write_tls
from tests.support.redis_server import ServerTls, redis_server
from tests.support.rehearsal import ContainerRuntime, MotoServer, Rehearsal, checkout_import_path
from tests.support.s3server import free_loopback_port
from tests.support.synth import REPO, Assembly, run_cdk_synth
from tests.support.waiting import SIDECAR_STORE_SAFETY_TIMEOUT

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

LIMITED, UNLIMITED = SUBJECTS[0], SUBJECTS[1]
# One chat completion with max_tokens, and what the entry reserves for it before the answer (its settings' defaults:
# the manifest sets no TOKEN_ESTIMATE_*, checked below): the day budget admits three reservations, so the first
# requests take leases from the store and the caller is refused once the store has no more to give.
BODY = json.dumps({"model": MODEL, "max_tokens": 20, "stream": True,
                   "messages": [{"role": "user", "content": "What is the capital of France?"}]}).encode()
ESTIMATE = estimate_tokens(BODY, bytes_per_token=DEFAULT_BYTES_PER_TOKEN, default_output_tokens=DEFAULT_OUTPUT_TOKENS)
BUDGETS = {"callers": [{"callerId": LIMITED, "tokensPerDay": 3 * ESTIMATE}], "alertPercents": [80, 100]}
MAX_REQUESTS = 30
ENDPOINT = "llm-platform-usage-abc123.serverless.usw2.cache.amazonaws.com"  # (what the deploy's outputs file holds)
ADMIN = "rehearsal-admin"
ADMIN_PASSWORD = "rehearsal-admin-password-0123456789"


@pytest.fixture(scope="module")
def budget_assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """``cdk synth`` of the default file plus the entry's budgets, with the store's address from an outputs file (the
    entry's manifest waits for it otherwise), importing this checkout's library."""
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("entry-budgets")
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    assert "usageLimits" not in data["gateways"][0]["entry"]  # (the default's entry has none: this file adds them)
    data["gateways"][0]["entry"]["usageLimits"] = BUDGETS
    config = folder / "entry-budgets.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    outputs = folder / "cdk-outputs.json"
    outputs.write_text(json.dumps({f"{data['project']}-cluster": {"UsageStoreEndpoint": ENDPOINT}}))
    shim = checkout_import_path(REPO, folder / "import-path")
    result = run_cdk_synth(folder / "cdk.out", config=config, context={"outputs": str(outputs)},
                           env={"PYTHONPATH": str(shim)})
    assert result.returncode == 0, f"cdk synth failed:\n{result.stdout}\n{result.stderr}"
    record_timing("cdk synth of the entry-budgets variant", time.monotonic() - started)
    return Assembly(folder / "cdk.out")


@pytest.fixture(scope="module")
def budget_rehearsal(budget_assembly: Assembly, platform: Platform,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    """The variant's templates in a moto server of their own (the session's holds the default platform's)."""
    server = MotoServer(account=platform.account, log_path=tmp_path_factory.mktemp("moto-budgets") / "moto.log")
    try:
        yield Rehearsal(server, budget_assembly.templates, account=platform.account, region=platform.region)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def budget_entry(budget_assembly: Assembly) -> ContainerRuntime:
    (entry,) = gateway_entries(budget_assembly)
    return entry


@dataclass(frozen=True)
class StoreSettings:
    """The budget store as the cluster stack creates it."""

    cache_name: str
    user_id: str
    access_string: str
    authentication: str
    default_access_string: str  # the group's "default" user (every group needs one)


def store_settings(assembly: Assembly) -> StoreSettings:
    template = assembly.template("-cluster")
    resources = template["Resources"].values()
    (cache,) = [r["Properties"] for r in resources if r["Type"] == "AWS::ElastiCache::ServerlessCache"]
    users = [r["Properties"] for r in resources if r["Type"] == "AWS::ElastiCache::User"]
    (user,) = [u for u in users if u["UserName"] != "default"]
    (default,) = [u for u in users if u["UserName"] == "default"]
    return StoreSettings(cache["ServerlessCacheName"], user["UserId"], user["AccessString"],
                         user["AuthenticationMode"]["Type"], default["AccessString"])


# ---- a TLS proxy that reads the entry's authentication --------------------------------------------------------------


@dataclass
class AuthProxy:
    """TLS on loopback (the test CA's certificate for ``localhost``) in front of a plain local server: every client's
    first command (redis-py's ``HELLO 3 AUTH <user> <token>`` or ``AUTH <user> <token>``) is kept, the bytes are passed
    on unchanged both ways."""

    port: int
    first_commands: list[list[str]] = field(default_factory=list)


async def _read_command(reader: asyncio.StreamReader) -> tuple[bytes, list[str]]:
    """One RESP array of bulk strings (the commands a client sends): its bytes and its arguments."""
    raw = await reader.readline()
    assert raw.startswith(b"*"), raw
    arguments = []
    for _ in range(int(raw[1:])):
        header = await reader.readline()
        body = await reader.readexactly(int(header[1:]) + 2)
        raw += header + body
        arguments.append(body[:-2].decode())
    return raw, arguments


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory,
          budget_assembly: Assembly) -> Iterator[tuple[AuthProxy, ServerTls, redis.Redis]]:
    """The local server with the store's users and their real access strings (the sidecar's user with any password:
    the proxy's record of the token stands in for ElastiCache's IAM check; the group's default user as the template
    has it, off), an admin to look inside; the TLS proxy; the admin's client."""
    settings = store_settings(budget_assembly)
    tls = _write_tls(tmp_path_factory.mktemp("budget-store-tls"), [_dns("localhost")], "store")
    users = [f"default {settings.default_access_string}", f"{settings.user_id} {settings.access_string} nopass",
             f"{ADMIN} on >{ADMIN_PASSWORD} ~* +@all"]
    with redis_server(users=users) as url:
        backend = urlsplit(url).port
        assert backend is not None
        proxy = AuthProxy(free_loopback_port())
        loop = asyncio.new_event_loop()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls.cert_file, tls.key_file)

        async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", backend)
            try:
                raw, arguments = await _read_command(client_reader)
                proxy.first_commands.append(arguments)
                server_writer.write(raw)

                async def pipe(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
                    while chunk := await source.read(65536):
                        target.write(chunk)
                        await target.drain()
                    target.close()

                await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer),
                                     return_exceptions=True)
            finally:
                server_writer.close()
                client_writer.close()

        async def serve() -> Any:
            return await asyncio.start_server(handle, "127.0.0.1", proxy.port, ssl=context)

        server = loop.run_until_complete(serve())
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        admin = redis.Redis(host="127.0.0.1", port=backend, username=ADMIN, password=ADMIN_PASSWORD)
        try:
            yield proxy, tls, admin
        finally:
            admin.close()
            loop.call_soon_threadsafe(server.close)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)


def _dns(name: str) -> Any:
    from cryptography import x509

    return x509.DNSName(name)


# ---- the run --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetRun:
    env: dict[str, str]
    limited_statuses: list[int]
    refused_headers: dict[str, str]
    refused_body: dict[str, Any]
    served_status: int
    metrics: dict[str, float]
    log: str


@pytest.fixture(scope="module")
def budget_run(budget_rehearsal: Rehearsal, budget_entry: ContainerRuntime, standin_port: int, jwks_uri: str,
               store: tuple[AuthProxy, ServerTls, redis.Redis],
               tmp_path_factory: pytest.TempPathFactory) -> BudgetRun:
    """The limited caller's requests until one is refused (at most ``MAX_REQUESTS``), then one of a caller without a
    budget."""
    proxy, tls, _ = store
    started = time.monotonic()
    # Only the store's address is this machine's (and the CA its certificate is verified with); the user, the cache,
    # the budgets, the key prefix and the failure policy are the manifest's.
    local = {"LIMITS_STORE_URL": f"rediss://localhost:{proxy.port}",
             "LIMITS_STORE_TIMEOUT_SECONDS": SIDECAR_STORE_SAFETY_TIMEOUT, "AWS_CA_BUNDLE": tls.ca_file}
    entry = start_entry(budget_rehearsal, budget_entry, standin_port, jwks_uri, local,
                        tmp_path_factory.mktemp("entry-budgets-run"))
    try:
        replay = base64.b64encode(transcripts.vllm_chat(split(ANSWER, 4), model=MODEL).encode()).decode()

        def chat(subject: str) -> Any:
            return entry.call("POST", "/v1/chat/completions", BODY, {
                "Authorization": f"Bearer {entry_token(budget_entry.env, subject)}",
                "Content-Type": "application/json", "X-Replay": replay})

        statuses: list[int] = []
        refused = None
        while refused is None and len(statuses) < MAX_REQUESTS:
            result = chat(LIMITED)
            statuses.append(result.status)
            if result.status != 200:
                refused = result
        served = chat(UNLIMITED)
        metrics = entry.metrics()
    finally:
        entry.terminate()
    record_timing("gateway entry with budgets: start, a caller to its budget, another", time.monotonic() - started)
    return BudgetRun(entry.env, statuses, dict(refused.headers) if refused else {},
                     json.loads(refused.body) if refused is not None and refused.body else {}, served.status,
                     metrics, entry.log())


def test_the_manifest_names_the_stores_user_and_cache_as_the_template_creates_them(
        budget_entry: ContainerRuntime, budget_assembly: Assembly) -> None:
    settings = store_settings(budget_assembly)
    env = budget_entry.env
    assert env["LIMITS_STORE_URL"] == f"rediss://{ENDPOINT}:6379"
    assert (env["LIMITS_STORE_IAM_USER"], env["LIMITS_STORE_IAM_CACHE"]) == (settings.user_id, settings.cache_name)
    assert settings.authentication == "iam" and settings.access_string == ACCESS_STRING
    assert settings.default_access_string.startswith("off ")
    assert json.loads(env["CALLER_LIMITS"]) == {LIMITED: {"tokensPerDay": 3 * ESTIMATE}}
    assert not any(name.startswith("TOKEN_ESTIMATE_") for name in env)  # (the estimate above is the entry's)


def test_the_entrys_role_may_connect_to_that_cache_as_that_user(budget_entry: ContainerRuntime,
                                                                budget_rehearsal: Rehearsal,
                                                                budget_assembly: Assembly) -> None:
    settings = store_settings(budget_assembly)
    region, account = budget_rehearsal.region, budget_rehearsal.account
    role = budget_entry.role_arn
    assert role is not None
    cache = f"arn:aws:elasticache:{region}:{account}:serverlesscache:{settings.cache_name}"
    user = f"arn:aws:elasticache:{region}:{account}:user:{settings.user_id}"
    assert budget_rehearsal.identity_allows(role, "elasticache:Connect", cache)
    assert budget_rehearsal.identity_allows(role, "elasticache:Connect", user)
    assert not budget_rehearsal.identity_allows(role, "elasticache:Connect", f"{cache}-other")
    assert not budget_rehearsal.identity_allows(role, "elasticache:CreateServerlessCache", cache)


def test_the_entry_signs_in_as_the_stores_user_with_a_token_of_its_roles_session(
        budget_run: BudgetRun, budget_rehearsal: Rehearsal, budget_entry: ContainerRuntime,
        budget_assembly: Assembly, store: tuple[AuthProxy, ServerTls, redis.Redis]) -> None:
    proxy, _, _ = store
    settings = store_settings(budget_assembly)
    assert proxy.first_commands, budget_run.log
    assert budget_entry.role_arn is not None
    credentials = budget_rehearsal.credentials(budget_entry.role_arn)
    for command in proxy.first_commands:
        name = command[0].upper()
        user, token = (command[3], command[4]) if name == "HELLO" else (command[1], command[2])
        assert (name, user) in {("HELLO", settings.user_id), ("AUTH", settings.user_id)}, command[:2]
        parts = urlsplit(f"http://{token}")
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        assert parts.hostname == settings.cache_name
        assert (query["Action"], query["User"], query["ResourceType"]) == ("connect", settings.user_id,
                                                                          "ServerlessCache")
        assert query["X-Amz-Credential"].startswith(f"{credentials.access_key}/")
        assert query["X-Amz-Credential"].endswith(f"/{budget_rehearsal.region}/elasticache/aws4_request")
        assert query["X-Amz-Security-Token"] == credentials.token


def test_the_caller_over_its_budget_is_refused_and_another_is_served(budget_run: BudgetRun) -> None:
    """Served while the store has budget to lease (three reservations at least), then 429 with Retry-After and
    OpenAI's ``insufficient_quota``; another caller (no budget) is served."""
    statuses = budget_run.limited_statuses
    assert statuses[:3] == [200, 200, 200] and statuses[-1] == 429, (statuses, budget_run.log)
    headers = {name.lower(): value for name, value in budget_run.refused_headers.items()}
    assert int(headers.get("retry-after", "0")) > 0
    assert budget_run.refused_body["error"]["code"] == "insufficient_quota"
    assert "tokensPerDay" in budget_run.refused_body["error"]["message"]
    assert budget_run.served_status == 200, budget_run.log
    metrics = budget_run.metrics
    assert metrics.get("capture_sidecar_limits_store_errors_total", 0) == 0, budget_run.log
    assert metrics['capture_sidecar_requests_refused_total{limit="tokensPerDay"}'] == 1


def test_the_store_holds_the_budget_under_the_manifests_prefix_and_refused_nothing(
        budget_run: BudgetRun, budget_entry: ContainerRuntime,
        store: tuple[AuthProxy, ServerTls, redis.Redis]) -> None:
    _, _, admin = store
    prefix = budget_entry.env["LIMITS_KEY_PREFIX"]
    keys = [key.decode() for key in admin.keys("*")]
    assert keys and all(key.startswith(prefix) for key in keys), (keys, prefix)
    assert any(LIMITED in key for key in keys)
    assert admin.acl_log() == [], admin.acl_log()  # the real access string admitted every call of the entry


def test_nothing_but_the_stores_address_and_ca_was_changed(budget_run: BudgetRun,
                                                          budget_entry: ContainerRuntime) -> None:
    local = {"UPSTREAM_URL", "LISTEN_PORT", "METRICS_PORT", "SPOOL_DIR", "JWT_JWKS_URI", "LIMITS_STORE_URL",
             "LIMITS_STORE_TIMEOUT_SECONDS"}
    manifest = budget_entry.env
    assert {k: v for k, v in manifest.items() if k not in local} == {
        k: budget_run.env[k] for k in manifest if k not in local}
    assert budget_run.env["AWS_ACCESS_KEY_ID"].startswith("ASIA")  # the role's temporary credentials


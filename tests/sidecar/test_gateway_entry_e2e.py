"""The gateway's capture entry end to end, as the platform renders it: the plan of a gateway with ``entry`` rendered by
its chart, the sidecar process started with that container's environment, a real RS256 token signed by a test key
whose JWKS is served on loopback, the stand-in upstream standing for the gateway, the capture written to moto's S3 and
read by the real capture processor into rows whose ``caller_id`` is the token's subject.

Only the addresses of the test's stand-ins replace the rendered ones: the gateway (``UPSTREAM_URL``), the issuer's
keys (``JWT_JWKS_URI``), the bucket (``CAPTURE_S3_URI``: moto's, the same ``.../pod/`` layout), the budget store
(``LIMITS_STORE_URL``: Debian's redis-server), and what a pod has of its own (ports, the spool directory, the flush
cadence, its web identity). The issuer, audiences, required claims, caller claim, limits, sampling and bounds are the
rendered ones. Then what the entry must refuse: no token, and a token of the same issuer for another audience."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.capture_processor import transcripts
from tests.capture_processor.test_llm_traffic import ANSWER
from tests.capture_processor.transcripts import split
from tests.charts.test_gateway_entry import GATEWAY, _manifests, _plan
from tests.sidecar.conftest import read_records
from tests.sidecar.test_capture_to_curated import _curate
from tests.sidecar.test_jwt_caller import AUDIENCE, ISSUER, REQUIRED, SUBJECTS, _wait_for_keys, token
from tests.sidecar.test_jwt_caller import jwks_uri as jwks_uri  # (the module's JWKS server fixture)
from tests.support.redis_server import redis_server
from tests.support.waiting import SIDECAR_STORE_SAFETY_TIMEOUT

# The test issuer's gateway (its JWKS URI is HTTPS as the plan requires; the process gets the loopback one).
ENTRY_GATEWAY: dict[str, Any] = {
    **GATEWAY,
    "jwt": {"issuer": ISSUER, "jwksUri": "https://idp.example.com/oauth2/llm-platform/v1/keys",
            "audiences": [AUDIENCE], "requiredClaims": REQUIRED},
}
# What a pod has of its own, and the platform's addresses (replaced by the stand-ins' or left to the launcher).
NOT_TAKEN = {"LISTEN_PORT", "METRICS_PORT", "SPOOL_DIR", "BATCH_SIZE", "FLUSH_INTERVAL_SECONDS", "CAPTURE_S3_URI",
             "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_STS_REGIONAL_ENDPOINTS", "AWS_REGION",
             "AWS_DEFAULT_REGION"}


def rendered_environment(gateway: dict[str, Any]) -> dict[str, str]:
    """The entry container's environment as its chart renders it."""
    (container,) = _manifests(_plan(gateway))["Deployment"]["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def entry_environment(gateway: dict[str, Any], *, upstream: str, jwks: str, tmp_path: Path,
                      store: str | None = None) -> dict[str, str]:
    rendered = rendered_environment(gateway)
    assert rendered["UPSTREAM_URL"].startswith("https://") and rendered["CAPTURE_S3_URI"].endswith("/pod/")
    env = {name: value for name, value in rendered.items() if name not in NOT_TAKEN}
    env.update({"UPSTREAM_URL": upstream, "JWT_JWKS_URI": jwks, "SPOOL_DIR": str(tmp_path / "spool")})
    if store is not None:
        assert rendered["LIMITS_STORE_URL"].startswith("rediss://")
        env["LIMITS_STORE_URL"] = store
        env["LIMITS_STORE_TIMEOUT_SECONDS"] = SIDECAR_STORE_SAFETY_TIMEOUT  # (a loaded machine's loopback call)
    return env


@pytest.fixture(scope="module")
def store_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def _headers(bearer: str, stream: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json",
            "X-Replay": base64.b64encode(stream.encode()).decode()}


def test_gateway_traffic_through_the_rendered_entry_is_recorded_with_the_tokens_subject(
    start_sidecar, standin_port: int, s3, jwks_uri: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    env = entry_environment(ENTRY_GATEWAY, upstream=f"http://127.0.0.1:{standin_port}", jwks=jwks_uri,
                            tmp_path=tmp_path)
    assert (env["JWT_ISSUER"], env["JWT_AUDIENCES"], env["JWT_CALLER_CLAIM"]) == (ISSUER, AUDIENCE, "sub")
    entry = start_sidecar(**env)
    _wait_for_keys(entry)
    body = transcripts.chat_request("What is the capital of France?", model="Qwen3-8B").encode()
    for subject in SUBJECTS:
        stream = transcripts.vllm_chat(split(ANSWER, 4), model="Qwen3-8B")
        result = entry.call("POST", "/v1/chat/completions", body, _headers(token(subject), stream))
        assert result.status == 200 and result.body.decode() == stream
    # The gateway behind gets the request unchanged, the token included: it verifies it again.
    bearer = token(SUBJECTS[0])
    echoed = entry.call("POST", "/echo", b"{}", {"Authorization": f"Bearer {bearer}"})
    assert echoed.status == 200
    assert ["Authorization", f"Bearer {bearer}"] in json.loads(echoed.header("X-Seen-Headers") or "[]")

    # What the entry must refuse, before anything reaches the gateway or is captured.
    another_audience = token(SUBJECTS[0], aud="another-application")
    for headers in ({}, {"Authorization": f"Bearer {another_audience}"}):
        refused = entry.call("POST", "/echo", b'{"secret": "x"}', headers)
        assert refused.status == 401, (headers, refused.status)
        assert "X-Seen-Method" not in dict(refused.headers)  # never forwarded

    records = read_records(s3, entry.prefix, 3)
    assert sorted(r["eventMetadata"]["callerId"] for r in records) == sorted([*SUBJECTS, SUBJECTS[0]])
    assert "eyJ" not in json.dumps(records)  # no token (nor a piece of one) is recorded
    rows = _curate(s3, entry.prefix, moto_endpoint, monkeypatch)
    chats = [row for row in rows if row["request_path"] == "/v1/chat/completions"]
    assert sorted(row["caller_id"] for row in chats) == sorted(SUBJECTS)
    assert {row["gen_ai_request_model"] for row in chats} == {"Qwen3-8B"}  # the request's model: no MODEL_NAME


def test_the_entry_holds_a_gateway_caller_to_its_budget(
    start_sidecar, standin_port: int, s3, jwks_uri: str, store_url: str, tmp_path: Path,
) -> None:
    """``usageLimits`` on the gateway's entry, per caller claim: the limited caller is refused with 429 and
    Retry-After and the refusal is recorded under its subject; another caller is served."""
    gateway = copy.deepcopy(ENTRY_GATEWAY)
    gateway["entry"]["usageLimits"] = {
        "storeUrl": "rediss://budgets.example.use1.cache.amazonaws.com:6379",
        "callers": [{"callerId": SUBJECTS[0], "tokensPerDay": 10}]}
    env = entry_environment(gateway, upstream=f"http://127.0.0.1:{standin_port}", jwks=jwks_uri, tmp_path=tmp_path,
                            store=store_url)
    assert json.loads(env["CALLER_LIMITS"]) == {SUBJECTS[0]: {"tokensPerDay": 10}}
    entry = start_sidecar(**env)
    _wait_for_keys(entry)
    body = transcripts.chat_request("What is the capital of France?", model="Qwen3-8B").encode()
    stream = transcripts.vllm_chat(split(ANSWER, 4), model="Qwen3-8B")
    refused = entry.call("POST", "/v1/chat/completions", body, _headers(token(SUBJECTS[0]), stream))
    assert refused.status == 429, refused.body
    assert int(refused.header("Retry-After") or "0") > 0
    assert json.loads(refused.body)["error"]["code"] == "insufficient_quota"
    served = entry.call("POST", "/v1/chat/completions", body, _headers(token(SUBJECTS[1]), stream))
    assert served.status == 200
    records = read_records(s3, entry.prefix, 2)
    by_caller = {r["eventMetadata"]["callerId"]: r["eventMetadata"] for r in records}
    assert by_caller[SUBJECTS[0]]["refusedBy"] == "tokensPerDay"
    assert "refusedBy" not in by_caller[SUBJECTS[1]]

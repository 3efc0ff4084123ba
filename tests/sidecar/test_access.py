"""Who can reach the model server through the sidecar: the upstream health check the kubelet probes
(the model server listens on loopback only), and the API key every proxied request must carry."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.s3server import free_loopback_port

from .conftest import SIDECAR_DIR, http_call
from .standin_server import STANDIN_API_KEY

API_KEY = "sidecar-test-key-abcdefghijklmnop"


def _upstream_health(sidecar) -> tuple[int, bytes]:
    result = http_call(sidecar.metrics_port, "GET", "/upstream/health")
    return result.status, result.body


def test_upstream_health_is_200_while_the_model_server_answers_its_health_path(start_sidecar) -> None:
    sidecar = start_sidecar()
    assert _upstream_health(sidecar) == (200, b"ok\n")


def test_upstream_health_is_503_when_the_model_server_is_unhealthy_or_redirects(start_sidecar) -> None:
    assert _upstream_health(start_sidecar(UPSTREAM_HEALTH_PATH="/status/503"))[0] == 503
    assert _upstream_health(start_sidecar(UPSTREAM_HEALTH_PATH="/status/302"))[0] == 503  # not followed
    assert _upstream_health(start_sidecar(UPSTREAM_HEALTH_PATH="/status/204"))[0] == 200  # any 2xx


def test_upstream_health_is_503_when_the_model_server_is_down(start_sidecar) -> None:
    sidecar = start_sidecar(UPSTREAM_URL=f"http://127.0.0.1:{free_loopback_port()}")
    status, body = _upstream_health(sidecar)
    assert status == 503 and b"unreachable" in body
    assert http_call(sidecar.metrics_port, "GET", "/healthz").status == 200  # the sidecar itself is fine


def test_upstream_health_gives_up_after_its_timeout(start_sidecar) -> None:
    sidecar = start_sidecar(UPSTREAM_HEALTH_PATH="/v1/completions?delay_ms=5000", UPSTREAM_HEALTH_TIMEOUT_SECONDS="0.5")
    status, _ = _upstream_health(sidecar)
    assert status == 503  # the stand-in answers 200 after 5 s: a 503 is the timeout's doing, not a stopwatch's


def test_upstream_health_is_neither_proxied_nor_captured(start_sidecar) -> None:
    sidecar = start_sidecar()
    for _ in range(3):
        assert _upstream_health(sidecar)[0] == 200
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_requests_proxied_total"] == 0
    assert metrics["capture_sidecar_records_captured_total"] == 0


def test_upstream_health_sends_the_api_key_for_a_model_server_that_wants_it(start_sidecar) -> None:
    with_key = start_sidecar(UPSTREAM_HEALTH_PATH="/health/authenticated", API_KEY=STANDIN_API_KEY)
    without_key = start_sidecar(UPSTREAM_HEALTH_PATH="/health/authenticated")
    assert _upstream_health(with_key)[0] == 200
    assert _upstream_health(without_key)[0] == 503


def test_with_an_api_key_every_request_needs_it_whatever_its_path(start_sidecar) -> None:
    sidecar = start_sidecar(API_KEY=API_KEY)
    for path in ("/v1/completions", "/invocations", "/health", "/tokenize"):
        refused = sidecar.call("POST", path, b"{}", {"Content-Type": "application/json"})
        assert refused.status == 401, path
        assert refused.header("WWW-Authenticate") == "Bearer"
    wrong = sidecar.call("POST", "/v1/completions", b"{}", {"Authorization": f"Bearer {API_KEY}x"})
    assert wrong.status == 401
    # A Host header that looks like a path changes nothing (the vLLM < 0.22 bypass, CVE-2026-48746).
    tricked = sidecar.call("POST", "/v1/completions", b"{}", {"Host": "a/health?"})
    assert tricked.status == 401
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_requests_unauthorized_total"] == 6
    assert metrics["capture_sidecar_records_captured_total"] == 0


def test_the_right_key_is_proxied_and_reaches_the_model_server(start_sidecar) -> None:
    sidecar = start_sidecar(API_KEY=API_KEY, SAMPLING_PERCENTAGE="0")
    for scheme in ("Bearer", "bearer"):
        result = sidecar.call("POST", "/echo", b"{}", {"Authorization": f"{scheme} {API_KEY}"})
        assert result.status == 200
        seen = {name.lower(): value for name, value in json.loads(result.header("X-Seen-Headers") or "[]")}
        assert seen["authorization"] == f"{scheme} {API_KEY}"  # the model server checks it too
    assert API_KEY not in sidecar.log()


@pytest.mark.slow  # the sidecar, a process of its own
def test_a_weak_api_key_is_refused_without_printing_it() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "UPSTREAM_URL": "http://127.0.0.1:8000",
        "CAPTURE_S3_URI": "s3://bucket/p/",
        "API_KEY": "short secret",
        "UPSTREAM_HEALTH_PATH": "health",
    }
    result = subprocess.run(
        [sys.executable, "-m", "capture_sidecar"], cwd=SIDECAR_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "API_KEY (value not shown)" in result.stderr
    assert "short secret" not in result.stderr
    assert "UPSTREAM_HEALTH_PATH='health'" in result.stderr

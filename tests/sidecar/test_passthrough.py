"""The sidecar is invisible to clients: methods, paths, headers, status codes and bodies pass."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from .conftest import Sidecar, http_call


@pytest.fixture(scope="module")
def sidecar(start_module_sidecar) -> Sidecar:
    return start_module_sidecar(SAMPLING_PERCENTAGE="0")


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_method_path_and_query_arrive_unchanged(sidecar: Sidecar, method: str) -> None:
    path = "/v1/some/path%2Fencoded?q=a%20b&empty=&q=2"
    body = b'{"k": "v"}' if method in ("POST", "PUT", "PATCH") else None

    result = sidecar.call(method, path, body, {"Content-Type": "application/json"})

    assert result.status == 200
    assert result.header("X-Seen-Method") == method
    assert result.header("X-Seen-Path") == path
    assert result.body == (body or b"")


def test_binary_request_and_response_bodies_are_byte_identical(sidecar: Sidecar) -> None:
    payload = os.urandom(200_000) + bytes(range(256))

    echoed = sidecar.call("POST", "/echo", payload, {"Content-Type": "application/octet-stream"})

    assert echoed.body == payload
    assert echoed.header("Content-Type") == "application/octet-stream"
    assert sidecar.call("GET", "/binary").body == bytes(range(256)) * 64


def test_compressed_response_passes_without_decompression(sidecar: Sidecar, standin_port: int) -> None:
    direct = http_call(standin_port, "GET", "/gzip")
    proxied = sidecar.call("GET", "/gzip")

    assert proxied.header("Content-Encoding") == "gzip"
    assert proxied.body == direct.body
    assert gzip.decompress(proxied.body).startswith(b'{"compressed": true}')


def test_request_headers_pass_except_hop_by_hop(sidecar: Sidecar) -> None:
    result = sidecar.call(
        "POST",
        "/echo",
        b"{}",
        {
            "Content-Type": "application/json; charset=utf-8",
            "Authorization": "Bearer token-123",
            "X-Custom": "kept",
            "Connection": "keep-alive, X-Per-Hop",
            "X-Per-Hop": "must not be forwarded",
            "Keep-Alive": "timeout=5",
            "Proxy-Authorization": "Basic c2VjcmV0",
        },
    )

    seen = {name.lower(): value for name, value in json.loads(result.header("X-Seen-Headers") or "[]")}
    assert seen["content-type"] == "application/json; charset=utf-8"
    assert seen["authorization"] == "Bearer token-123"
    assert seen["x-custom"] == "kept"
    assert seen["content-length"] == "2"
    for removed in ("x-per-hop", "keep-alive", "proxy-authorization"):
        assert removed not in seen
    # Nothing the client did not send is added (aiohttp would add these by default).
    for added in ("user-agent", "accept", "accept-encoding"):
        assert added not in seen


def test_response_headers_pass_including_repeated_ones(sidecar: Sidecar) -> None:
    result = sidecar.call("POST", "/echo", b"x", {"Content-Type": "text/plain"})

    assert result.header_values("Set-Cookie") == ["a=1; Path=/", "b=2; Path=/"]
    assert result.header("X-Seen-Method") == "POST"


@pytest.mark.parametrize("status", [201, 204, 301, 400, 404, 418, 500, 503])
def test_status_codes_pass(sidecar: Sidecar, status: int) -> None:
    result = sidecar.call("POST", f"/status/{status}", b"{}")

    assert result.status == status
    assert result.body == (b"" if status == 204 else b"as requested")
    if status == 301:
        assert result.header("Location") == "/elsewhere"  # handed to the client, not followed


def test_head_keeps_the_length_of_the_get(sidecar: Sidecar) -> None:
    result = sidecar.call("HEAD", "/binary")

    assert result.status == 200
    assert result.header("Content-Length") == str(256 * 64)
    assert result.body == b""


def test_model_server_health_and_metrics_stay_reachable(sidecar: Sidecar) -> None:
    assert sidecar.call("GET", "/health").body == b"standin healthy"
    assert sidecar.call("GET", "/metrics").body == b"standin_requests_total 1\n"


def test_large_streamed_response_arrives_whole(sidecar: Sidecar) -> None:
    result = sidecar.call("POST", "/large?bytes=1000000", b"{}")

    assert result.status == 200
    assert result.body == b"x" * 1_000_000


def test_sidecar_health_and_metrics_have_their_own_port(sidecar: Sidecar) -> None:
    assert http_call(sidecar.metrics_port, "GET", "/healthz").body == b"ok\n"
    assert sidecar.metrics()["capture_sidecar_requests_proxied_total"] >= 1

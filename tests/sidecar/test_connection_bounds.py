"""Hostile connections: heads sent slowly, in part, or not at all, and more connections than the caps. Each is
closed by a bound (header timeout, idle timeout, half-open close, MAX_UNAUTHENTICATED, MAX_CONNECTIONS), counted,
and never costs an exchange; a client with the key is served throughout."""

from __future__ import annotations

import asyncio
import http.client
import socket
import time
from types import SimpleNamespace

from .conftest import Sidecar

API_KEY = "sidecar-test-key-abcdefghijklmnop"
AUTH = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
PARTIAL_HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
AUTHENTICATED_REQUEST = (
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() + b"\r\n"
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)
# Safety timeouts only (docs/testing.md: no test asserts a duration): which bound closed a connection is read off
# the sidecar's counters, and a wait that ends here means the bound never acted.
SAFETY_TIMEOUT_S = 60


def connect(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    if data:
        sock.sendall(data)
    return sock


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the peer closed (EOF or reset), or None if it is still open after `seconds`."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while True:
            if not sock.recv(65536):
                return time.monotonic() - started
    except (ConnectionResetError, BrokenPipeError):
        return time.monotonic() - started
    except TimeoutError:
        return None


def response_on(sock: socket.socket, request: bytes = AUTHENTICATED_REQUEST) -> bytes:
    """The status line of the response to one request on an open keep-alive connection."""
    sock.settimeout(60)
    sock.sendall(request)
    response = http.client.HTTPResponse(sock)
    response.begin()
    response.read()
    return f"HTTP/1.1 {response.status} {response.reason}".encode()


def keyed_connections(port: int, count: int) -> list[socket.socket]:
    """Keep-alive connections, each authenticated by one request before the next is opened (opened all at once,
    silent, they would be unauthenticated together and meet MAX_UNAUTHENTICATED)."""
    socks = []
    for _ in range(count):
        sock = connect(port)
        assert response_on(sock).startswith(b"HTTP/1.1 200")
        socks.append(sock)
    return socks


def wait_until(predicate, timeout: float = SAFETY_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_slowloris_head_is_closed_at_the_header_timeout_though_bytes_keep_coming(start_sidecar) -> None:
    """Bytes keep coming, a tenth of a second apart, until the sidecar closes; the header-timeout counter (not a
    stopwatch) says why it closed. The loop's bound is a safety timeout, far above the 1 s header timeout."""
    sidecar: Sidecar = start_sidecar(API_KEY=API_KEY, HEADER_TIMEOUT_SECONDS="1")
    sock = connect(sidecar.port, b"POST /v1/completions HTTP/1.1\r\nX-Slow: ")
    closed = False
    try:
        for _ in range(SAFETY_TIMEOUT_S * 10):  # a byte every 0.1 s until closed
            sock.sendall(b"a")
            time.sleep(0.1)
            if closed_within(sock, 0.001) is not None:
                closed = True
                break
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    finally:
        sock.close()
    assert closed
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_header_timeouts_total"] == 1
    assert metrics["capture_sidecar_requests_proxied_total"] == 0
    assert sidecar.call("POST", "/v1/completions", b"{}", AUTH).status == 200


def test_a_partial_head_then_eof_is_closed_at_once(start_sidecar) -> None:
    # The header timeout is far longer than the safety timeout of the wait: a close within it is the EOF's doing.
    sidecar: Sidecar = start_sidecar(API_KEY=API_KEY, HEADER_TIMEOUT_SECONDS="300")
    sock = connect(sidecar.port, PARTIAL_HEAD)
    sock.shutdown(socket.SHUT_WR)
    assert closed_within(sock, SAFETY_TIMEOUT_S) is not None
    sock.close()
    # A complete request then EOF still gets its response, then the close.
    sock = connect(sidecar.port, AUTHENTICATED_REQUEST)
    sock.shutdown(socket.SHUT_WR)
    received = b""
    sock.settimeout(60)
    while piece := sock.recv(65536):
        received += piece
    sock.close()
    assert received.startswith(b"HTTP/1.1 200 ")
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_half_open_closed_total"] == 1
    assert metrics["capture_sidecar_header_timeouts_total"] == 0
    assert metrics["capture_sidecar_connections_open"] == 0


def test_a_partial_head_or_nothing_is_closed_by_the_header_timeout(start_sidecar) -> None:
    sidecar: Sidecar = start_sidecar(API_KEY=API_KEY, HEADER_TIMEOUT_SECONDS="1")
    partial = connect(sidecar.port, PARTIAL_HEAD)
    silent = connect(sidecar.port)
    assert wait_until(lambda: sidecar.metrics()["capture_sidecar_connections_unauthenticated"] == 2)
    for sock in (partial, silent):
        assert closed_within(sock, SAFETY_TIMEOUT_S) is not None
        sock.close()
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_header_timeouts_total"] == 2
    assert metrics["capture_sidecar_connections_open"] == 0
    assert metrics["capture_sidecar_connections_unauthenticated"] == 0


def test_idle_keep_alive_connections_close_after_the_idle_timeout_not_the_header_timeout(start_sidecar) -> None:
    # Which timeout closed the connection is read off the counters, not a stopwatch; the idle timeout is long
    # enough that a loaded machine still serves the second request within it.
    sidecar: Sidecar = start_sidecar(API_KEY=API_KEY, HEADER_TIMEOUT_SECONDS="0.5", IDLE_TIMEOUT_SECONDS="8")
    sock = connect(sidecar.port)
    assert response_on(sock).startswith(b"HTTP/1.1 200")
    time.sleep(1.0)  # past the header timeout, within the idle timeout: the next request is served
    assert response_on(sock).startswith(b"HTTP/1.1 200")
    idle_for = closed_within(sock, SAFETY_TIMEOUT_S)
    sock.close()
    assert idle_for is not None
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_idle_timeouts_total"] == 1
    assert metrics["capture_sidecar_header_timeouts_total"] == 0


def test_past_max_unauthenticated_the_oldest_is_evicted_and_a_keyed_client_is_served(start_sidecar) -> None:
    sidecar: Sidecar = start_sidecar(
        API_KEY=API_KEY, HEADER_TIMEOUT_SECONDS="60", MAX_CONNECTIONS="64", MAX_UNAUTHENTICATED="4"
    )
    socks = []
    for _ in range(10):
        socks.append(connect(sidecar.port, PARTIAL_HEAD))
        time.sleep(0.1)  # past the eviction grace (a wall-clock age: a loaded machine only makes it older)
    evicted = 'capture_sidecar_connections_evicted_total{reason="max_unauthenticated"}'
    assert wait_until(lambda: sidecar.metrics().get(evicted) == 6, timeout=SAFETY_TIMEOUT_S)
    assert [closed_within(sock, SAFETY_TIMEOUT_S) is not None for sock in socks[:6]] == [True] * 6
    assert [closed_within(sock, 0.2) is not None for sock in socks[6:]] == [False] * 4
    assert sidecar.call("POST", "/v1/completions", b"{}", AUTH).status == 200  # evicts one more
    metrics = sidecar.metrics()
    assert metrics[evicted] == 7
    assert metrics["capture_sidecar_connections_unauthenticated"] == 3
    assert metrics["capture_sidecar_requests_proxied_total"] == 1
    assert metrics["capture_sidecar_records_captured_total"] == 1
    for sock in socks:
        sock.close()


def test_past_max_connections_new_connections_are_refused_and_open_ones_served(start_sidecar) -> None:
    sidecar: Sidecar = start_sidecar(API_KEY=API_KEY, MAX_CONNECTIONS="16", MAX_UNAUTHENTICATED="8")
    keyed = keyed_connections(sidecar.port, 16)
    for _ in range(5):
        refused = connect(sidecar.port)
        answer = b""
        refused.settimeout(60)
        try:
            while piece := refused.recv(65536):
                answer += piece
        except ConnectionResetError:
            pass
        refused.close()
        assert answer.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in answer, answer
    assert response_on(keyed[0]).startswith(b"HTTP/1.1 200")  # authenticated connections are still served
    metrics = sidecar.metrics()
    assert metrics['capture_sidecar_connections_rejected_total{reason="max_connections"}'] == 5
    assert metrics["capture_sidecar_connections_open"] == 16
    keyed.pop().close()
    assert wait_until(lambda: sidecar.metrics()["capture_sidecar_connections_open"] == 15)
    assert sidecar.call("POST", "/v1/completions", b"{}", AUTH).status == 200
    for sock in keyed:
        sock.close()


def test_at_max_connections_an_unauthenticated_connection_makes_room_for_a_new_one(start_sidecar) -> None:
    sidecar: Sidecar = start_sidecar(API_KEY=API_KEY, MAX_CONNECTIONS="16", MAX_UNAUTHENTICATED="8")
    keyed = keyed_connections(sidecar.port, 12)
    partial = []
    for _ in range(4):
        partial.append(connect(sidecar.port, PARTIAL_HEAD))
        time.sleep(0.1)
    assert sidecar.call("POST", "/v1/completions", b"{}", AUTH).status == 200
    assert closed_within(partial[0], SAFETY_TIMEOUT_S) is not None
    metrics = sidecar.metrics()
    assert metrics['capture_sidecar_connections_evicted_total{reason="max_connections"}'] == 1
    assert metrics['capture_sidecar_connections_rejected_total{reason="max_connections"}'] == 0
    for sock in keyed + partial:
        sock.close()


def test_the_new_settings_are_validated_one_line_each() -> None:
    from capture_sidecar.settings import SettingsError, load_settings

    base = {"UPSTREAM_URL": "http://127.0.0.1:8000", "CAPTURE_S3_URI": "s3://bucket/p/"}
    settings = load_settings(base)
    assert (settings.header_timeout_seconds, settings.idle_timeout_seconds) == (10.0, 75.0)
    assert (settings.max_connections, settings.max_unauthenticated) == (1024, 256)
    bad = {"HEADER_TIMEOUT_SECONDS": "0", "IDLE_TIMEOUT_SECONDS": "x", "MAX_CONNECTIONS": "8"}
    try:
        load_settings(base | bad)
    except SettingsError as error:
        assert error.problems == [
            "MAX_CONNECTIONS='8': must be an integer from 16 to 1000000",
            "HEADER_TIMEOUT_SECONDS='0': must be a number from 0.1 to 300",
            "IDLE_TIMEOUT_SECONDS='x': must be a number from 0.1 to 3600",
        ]
    else:
        raise AssertionError("accepted")
    try:
        load_settings(base | {"MAX_CONNECTIONS": "100", "MAX_UNAUTHENTICATED": "200"})
    except SettingsError as error:
        assert error.problems == ["MAX_UNAUTHENTICATED='200': must not exceed MAX_CONNECTIONS (100)"]
    else:
        raise AssertionError("accepted")


class _Transport:
    """Enough of a transport for ClientConnection, recording what it was sent."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def set_write_buffer_limits(self, **_: int) -> None: ...

    def write(self, data: bytes) -> None:
        self.written += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None: ...

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def test_no_exchange_or_capture_before_the_head_is_whole_and_authenticated() -> None:
    from capture_sidecar.metrics import SidecarMetrics
    from capture_sidecar.proxy import CaptureProxy, ClientConnection, MemoryBudget
    from capture_sidecar.settings import load_settings

    settings = load_settings(
        {"UPSTREAM_URL": "http://127.0.0.1:9", "CAPTURE_S3_URI": "s3://bucket/p/", "API_KEY": API_KEY}
    )

    async def scenario() -> None:
        budget = MemoryBudget(settings.max_inflight_body_bytes)
        proxy = CaptureProxy(settings=settings, uploader=SimpleNamespace(), metrics=SidecarMetrics(), budget=budget)
        partial = ClientConnection(proxy)
        partial.connection_made(_Transport())  # type: ignore[arg-type]
        partial.data_received(PARTIAL_HEAD + b"Content-Length: 100000\r\nX-Pad: " + b"a" * 30000)
        assert not partial.exchanges and partial.parsing is None and budget.used == 0
        assert partial in proxy.unauthenticated and partial in proxy.head_deadlines
        refused_transport = _Transport()
        refused = ClientConnection(proxy)
        refused.connection_made(refused_transport)  # type: ignore[arg-type]
        refused.data_received(PARTIAL_HEAD + b"Content-Length: 5000000\r\nAuthorization: Bearer wrong\r\n\r\n")
        assert refused_transport.written.startswith(b"HTTP/1.1 401 ")
        assert not refused.exchanges and refused.parsing is None and budget.used == 0
        assert refused not in proxy.unauthenticated
        assert proxy.metrics.requests_by_class[2] == 1  # the 401 is counted, without an exchange
        partial.eof_received()
        assert proxy.metrics.half_open_closed == 1
        assert proxy.metrics.records_captured == 0 and not proxy.pool.idle

    asyncio.run(scenario())

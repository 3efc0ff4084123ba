"""The hand-written HTTP/1.1 data path on raw sockets: pipelining, partial reads, chunked request
bodies, Expect: 100-continue, slow and vanishing clients, upstreams that close keep-alive
connections, HTTP/1.0 and Upgrade requests."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httptools
import pytest

from .conftest import Sidecar, read_records

COMPLETION_REQUEST = (
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)


class Responses:
    """Parses the responses in a byte stream (httptools, as a client would)."""

    def __init__(self, count_only: bool = False) -> None:
        self.count_only = count_only
        self.items: list[dict] = []
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.items.append({"headers": {}, "body": b"", "size": 0, "complete": False})

    def on_header(self, name: bytes, value: bytes) -> None:
        self.items[-1]["headers"][name.decode().lower()] = value.decode()

    def on_headers_complete(self) -> None:
        self.items[-1]["status"] = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.items[-1]["size"] += len(body)
        if not self.count_only:
            self.items[-1]["body"] += body

    def on_message_complete(self) -> None:
        self.items[-1]["complete"] = True


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def parse(data: bytes) -> list[dict]:
    responses = Responses()
    responses.parser.feed_data(data)
    return responses.items


def connect(sidecar: Sidecar) -> socket.socket:
    return socket.create_connection(("127.0.0.1", sidecar.port), timeout=60)


@pytest.fixture(scope="module")
def sidecar(start_module_sidecar) -> Sidecar:
    return start_module_sidecar(MAX_REQUEST_BODY_BYTES="65536")


def test_pipelined_requests_are_answered_in_order(sidecar: Sidecar) -> None:
    with connect(sidecar) as sock:
        sock.sendall(
            b"POST /echo?first HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst"
            b"GET /v1/stream?events=3 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /echo?third HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nthird"
        )
        responses = parse(read_until_closed(sock))

    assert [r["status"] for r in responses] == [200, 200, 200]
    assert responses[0]["body"] == b"first"
    assert responses[1]["body"].count(b"data: ") == 4
    assert responses[2]["body"] == b"third"
    assert responses[2]["headers"]["connection"] == "close"
    assert all(r["complete"] for r in responses)


def test_a_request_arriving_a_few_bytes_at_a_time_is_proxied_whole(sidecar: Sidecar) -> None:
    request = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Custom: kept\r\n"
        b"Content-Length: 26\r\nConnection: close\r\n\r\n" + b'{"prompt": "in pieces"}   '
    )
    with connect(sidecar) as sock:
        for start in range(0, len(request), 7):
            sock.sendall(request[start : start + 7])
            time.sleep(0.005)
        [response] = parse(read_until_closed(sock))

    assert response["status"] == 200
    assert response["body"] == b'{"prompt": "in pieces"}   '
    seen = {name.lower(): value for name, value in json.loads(response["headers"]["x-seen-headers"])}
    assert seen["x-custom"] == "kept"


def test_chunked_request_body_reaches_the_model_server_with_a_content_length(start_sidecar, s3) -> None:
    sidecar: Sidecar = start_sidecar()
    body = b'{"prompt": "chunked"}' * 1000
    chunks = [body[i : i + 3000] for i in range(0, len(body), 3000)]
    framed = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"
    with connect(sidecar) as sock:
        sock.sendall(
            b"POST /sink HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + framed
        )
        [response] = parse(read_until_closed(sock))

    seen = json.loads(response["body"])
    assert seen["bytes"] == len(body)
    assert seen["content_length"] == str(len(body))
    assert seen["transfer_encoding"] is None
    [record] = read_records(s3, sidecar.prefix, expected=1)
    assert record["captureData"]["endpointInput"]["data"] == body.decode()


def test_expect_100_continue_is_answered_by_the_sidecar(sidecar: Sidecar) -> None:
    with connect(sidecar) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        sock.settimeout(60)
        interim = sock.recv(4096)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"body")
        sock.sendall(COMPLETION_REQUEST.replace(b"Content-Length: 2", b"Connection: close\r\nContent-Length: 2"))
        responses = parse(read_until_closed(sock))

    assert responses[0]["status"] == 200
    assert responses[0]["body"] == b"body"
    seen = {name.lower() for name, _ in json.loads(responses[0]["headers"]["x-seen-headers"])}
    assert "expect" not in seen  # the model server never sees it
    assert responses[1]["status"] == 200


def test_bodies_over_the_cap_get_413_without_100_continue(sidecar: Sidecar) -> None:
    with connect(sidecar) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\nExpect: 100-continue\r\n\r\n")
        [response] = parse(read_until_closed(sock))
    assert response["status"] == 413
    assert response["headers"]["connection"] == "close"

    with connect(sidecar) as sock:  # chunked: refused once the cap is passed
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(20):
                sock.sendall(b"4000\r\n" + b"x" * 0x4000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 413 ")
    assert sidecar.call("POST", "/echo", b"x" * 65536).status == 200  # at the cap is fine


def test_malformed_request_gets_400(sidecar: Sidecar) -> None:
    with connect(sidecar) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
        data = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 400 ")  # both framings at once: refused (request smuggling)


def test_http10_client_gets_the_body_delimited_by_the_close(sidecar: Sidecar) -> None:
    with connect(sidecar) as sock:
        sock.sendall(b"GET /v1/stream?events=2 HTTP/1.0\r\n\r\n")
        data = read_until_closed(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding" not in head.lower()
    assert body.count(b"data: ") == 3


def test_upgrade_requests_are_answered_as_plain_http(sidecar: Sidecar) -> None:
    with connect(sidecar) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        responses = parse(read_until_closed(sock))
    assert [(r["status"], r["body"]) for r in responses] == [(200, b"standin healthy")] * 2


def vm_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_client_that_does_not_read_costs_bounded_memory(start_sidecar) -> None:
    sidecar: Sidecar = start_sidecar(SAMPLING_PERCENTAGE="0")
    before = vm_rss_mib(sidecar.process.pid)
    size = 64_000_000
    with connect(sidecar) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(f"POST /large?bytes={size} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        time.sleep(1.5)  # the model server has long finished; the sidecar holds back, it does not buffer
        stalled = vm_rss_mib(sidecar.process.pid)
        assert sidecar.call("GET", "/health").status == 200  # others are served meanwhile
        sock.settimeout(60)
        responses = Responses(count_only=True)
        while not responses.items or not responses.items[-1]["complete"]:
            chunk = sock.recv(1 << 20)
            assert chunk, "the sidecar closed the connection early"
            responses.parser.feed_data(chunk)
    assert stalled - before < 16, f"RSS grew {stalled - before:.1f} MiB for a stalled client"
    assert responses.items[-1]["size"] == size


def test_a_client_that_leaves_mid_stream_is_counted_as_partial_and_the_sidecar_serves_on(start_sidecar) -> None:
    sidecar: Sidecar = start_sidecar()
    with connect(sidecar) as sock:
        sock.sendall(b"POST /v1/stream?events=50&delay_ms=20 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        sock.settimeout(60)
        received = b""
        while b"data: " not in received:
            received += sock.recv(65536)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    time.sleep(0.3)

    assert sidecar.call("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"}).status == 200
    # The cut-off stream is recorded as partial (tests/sidecar/test_exchange_metadata.py reads its record).
    assert sidecar.wait_for_metric("capture_sidecar_records_captured_total", 2) == 2
    partial = 'capture_sidecar_partial_exchanges_total{model="unknown",reason="client_disconnected"}'
    assert sidecar.metrics()[partial] == 1
    assert sidecar.metrics()["capture_sidecar_inflight_body_bytes"] >= 0


class ClosingUpstream:
    """A model server that answers the first request on each connection (keep-alive) and then
    closes the connection when the next request arrives, without answering it: the race of a
    server closing an idle keep-alive connection just as the proxy reuses it."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    @staticmethod
    def _handle(connection: socket.socket) -> None:
        with connection:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                data += chunk
            body = b'{"ok": true}'
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            connection.recv(65536)  # the next request: hang up without an answer

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def closing_upstream() -> Iterator[ClosingUpstream]:
    upstream = ClosingUpstream()
    yield upstream
    upstream.close()


def test_a_keep_alive_connection_closed_by_the_model_server_is_retried_on_a_new_one(
    start_sidecar, closing_upstream: ClosingUpstream
) -> None:
    sidecar: Sidecar = start_sidecar(UPSTREAM_URL=f"http://127.0.0.1:{closing_upstream.port}")

    results = [sidecar.call("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"}) for _ in range(4)]

    assert [(r.status, r.body) for r in results] == [(200, b'{"ok": true}')] * 4
    assert closing_upstream.connections >= 4
    assert sidecar.metrics()["capture_sidecar_upstream_errors_total"] == 0

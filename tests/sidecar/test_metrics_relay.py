"""The metrics relay (capture_sidecar.metrics_relay): recorded vLLM and SGLang /metrics text comes out as counters the
CloudWatch agent keeps, and each bound of its module docstring (docs/security.md, "Metrics relay") holds against a
test that tries to break it: hostile targets (SSRF), oversized, slow and odd answers, too many probes or connections,
a slowloris client, and hostile exposition text. Real sockets on loopback; the relay runs in this process."""

from __future__ import annotations

import http.client
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from capture_sidecar import metrics_relay as relay_module
from capture_sidecar.metrics_relay import (
    Refused,
    RelayServer,
    RelaySettings,
    SettingsError,
    load_settings,
    parse_target,
    relay,
)

from .conftest import SIDECAR_DIR, free_loopback_port, wait_for_port

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures"
VLLM = (FIXTURES / "vllm_metrics.txt").read_bytes()
SGLANG = (FIXTURES / "sglang_metrics.txt").read_bytes()
LOOPBACK = relay_module.ipaddress.IPv4Network("127.0.0.0/8")


def _settings(**changes: object) -> RelaySettings:
    # Loopback is forbidden in production (FORBIDDEN); these tests' stand-in targets live there. The bounds are
    # generous so a loaded machine never trips them; the tests of a bound set it small and prove it acted by what
    # came back (a 504, a close before the head was complete), never by a stopwatch.
    base = RelaySettings(target_networks=(LOOPBACK,), target_ports=frozenset(), forbidden=(), connect_timeout=10,
                         read_timeout=10, deadline=20, client_timeout=20)
    return replace(base, **changes)  # type: ignore[arg-type]


def _series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, parsed by prometheus_client (the reference parser): each family a counter."""
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "counter", family
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


# -- recorded expositions --------------------------------------------------------------------------------------------
def test_vllm_histograms_come_out_as_counters_and_nothing_else() -> None:
    text, skipped = relay(VLLM, _settings())
    assert skipped == 0
    series = _series(text)
    labels = (("engine", "0"), ("model_name", "/opt/ml/model"))
    e2e = "vllm:e2e_request_latency_seconds"
    assert series[(f"{e2e}_le_total", tuple(sorted((*labels, ("le", "60")))))] == 3040
    assert series[(f"{e2e}_le_total", tuple(sorted((*labels, ("le", "+Inf")))))] == 3042
    assert series[(f"{e2e}_sum_total", labels)] == 19873.4
    assert series[(f"{e2e}_count_total", labels)] == 3042
    assert series[("vllm:time_to_first_token_seconds_le_total", tuple(sorted((*labels, ("le", "10")))))] == 3042
    assert series[("vllm:request_success_total", tuple(sorted((*labels, ("finished_reason", "abort")))))] == 21
    names = {name for name, _ in series}
    assert names == {f"{h}_{kind}_total" for h in (e2e, "vllm:time_to_first_token_seconds")
                     for kind in ("le", "sum", "count")} | {"vllm:request_success_total"}
    # Every bound the server publishes, written as the alarms name it ("60", not "60.0").
    bounds = {dict(key)["le"] for name, key in series if name == f"{e2e}_le_total"}
    assert bounds == {relay_module.format_bound(b) for b in (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40,
                                                              50, 60, 120, 240, 480, 960, 1920, 7680, math.inf)}
    # Only the text the agent keeps: no gauge, no histogram, no other counter.
    assert "histogram" not in text and "gauge" not in text and "http_requests_total" not in text


def test_sglang_histograms_come_out_as_counters() -> None:
    text, skipped = relay(SGLANG, _settings())
    assert skipped == 0
    series = _series(text)
    model = (("model_name", "Qwen/Qwen3-8B"),)
    assert series[("sglang:e2e_request_latency_seconds_le_total", (("le", "60"), *model))] == 1513
    assert series[("sglang:e2e_request_latency_seconds_le_total", (("le", "+Inf"), *model))] == 11228
    assert series[("sglang:time_to_first_token_seconds_le_total", (("le", "10"), *model))] == 9800
    assert series[("sglang:time_to_first_token_seconds_count_total", model)] == 11008
    assert series[("sglang:num_aborted_requests_total", model)] == 37
    assert "sglang:token_usage" not in text and "sglang:prompt_tokens_total" not in text


# -- hostile exposition text -----------------------------------------------------------------------------------------
H = "# TYPE vllm:e2e_request_latency_seconds histogram\n"
C = "# TYPE vllm:request_success_total counter\n"


def _buckets(text: str, le_values: tuple[str, ...] = ("1.0", "60.0", "+Inf"), counts: tuple[int, ...] = (1, 2, 3),
             labels: str = 'model_name="m"') -> str:
    return "".join(f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="{le}"}} {c}\n'
                   for le, c in zip(le_values, counts, strict=False)) + text


def test_malformed_lines_are_skipped_and_the_rest_relayed() -> None:
    body = (C + 'vllm:request_success_total{finished_reason="stop"} 5\n'
            + 'vllm:request_success_total{finished_reason="stop" 5\n'  # no closing brace
            + 'vllm:request_success_total{finished_reason=stop} 5\n'  # unquoted value
            + "vllm:request_success_total{} five\n"  # not a number
            + 'vllm:request_success_total{reason="x"} 1 2 3\n'  # too many fields
            + '{finished_reason="x"} 1\n'  # no name
            + 'vllm:request_success_total{a="1",a="2"} 1\n'  # a label twice
            + 'vllm:request_success_total{finished_reason="length"} 7 1700000000000\n')  # timestamp: kept
    text, skipped = relay(body.encode(), _settings())
    series = _series(text)
    assert series == {("vllm:request_success_total", (("finished_reason", "stop"),)): 5,
                      ("vllm:request_success_total", (("finished_reason", "length"),)): 7}
    assert skipped == 6


def test_label_values_with_escapes_and_other_scripts_are_preserved() -> None:
    value = 'a "quoted" \\ back\nslash 模型 é'
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    body = C + f'vllm:request_success_total{{model_name="{escaped}",finished_reason="stop"}} 1\n'
    text, skipped = relay(body.encode("utf-8"), _settings())
    assert skipped == 0
    assert _series(text) == {("vllm:request_success_total",
                              (("finished_reason", "stop"), ("model_name", value))): 1}


def test_non_utf8_bytes_cost_their_line_only() -> None:
    body = (C + 'vllm:request_success_total{model_name="ok"} 1\n').encode() + \
        b'vllm:request_success_total{model_name="\xff\xfe"} 2\n'
    text, skipped = relay(body, _settings())
    assert skipped == 1 and _series(text) == {("vllm:request_success_total", (("model_name", "ok"),)): 1}


def test_a_histogram_split_across_the_text_is_relayed_whole() -> None:
    body = (H + 'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="1.0"} 1\n'
            + C + 'vllm:request_success_total{model_name="m"} 3\n'
            + 'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="+Inf"} 3\n'
            + 'vllm:e2e_request_latency_seconds_count{model_name="m"} 3\n')
    series = _series(relay(body.encode(), _settings())[0])
    assert series[("vllm:e2e_request_latency_seconds_le_total", (("le", "1"), ("model_name", "m")))] == 1
    assert series[("vllm:e2e_request_latency_seconds_le_total", (("le", "+Inf"), ("model_name", "m")))] == 3


@pytest.mark.parametrize(("le_values", "counts", "why"), [
    (("1.0", "60.0"), (1, 2), "no +Inf"),
    (("1.0", "60.0", "+Inf"), (5, 2, 9), "not cumulative"),
    (("1.0", "1", "+Inf"), (1, 1, 3), "a bound twice"),
    (("one", "60.0", "+Inf"), (1, 2, 3), "a bound that is no number"),
])
def test_a_broken_histogram_relays_no_buckets(le_values: tuple[str, ...], counts: tuple[int, ...], why: str) -> None:
    body = H + _buckets('vllm:e2e_request_latency_seconds_count{model_name="m"} 3\n'
                        'vllm:e2e_request_latency_seconds_sum{model_name="m"} 4.5\n', le_values, counts)
    series = _series(relay(body.encode(), _settings())[0])
    assert series == {("vllm:e2e_request_latency_seconds_count_total", (("model_name", "m"),)): 3,
                      ("vllm:e2e_request_latency_seconds_sum_total", (("model_name", "m"),)): 4.5}, why


def test_long_deep_and_wide_lines_are_skipped() -> None:
    long_value = "x" * (relay_module.MAX_LINE_BYTES + 1)
    many = ",".join(f'l{i}="v"' for i in range(relay_module.MAX_LABELS + 1))
    body = (C + f'vllm:request_success_total{{model_name="{long_value}"}} 1\n'
            + "vllm:request_success_total" + "{" * 10_000 + " 1\n"
            + f"vllm:request_success_total{{{many}}} 1\n"
            + 'vllm:request_success_total{model_name="ok"} 1\n')
    text, skipped = relay(body.encode(), _settings())
    assert skipped == 3 and _series(text) == {("vllm:request_success_total", (("model_name", "ok"),)): 1}


def test_only_typed_families_pass() -> None:
    # A gauge or untyped series with an allow-listed name, a histogram typed otherwise, NaN and negative counters.
    body = ("# TYPE vllm:request_success_total gauge\nvllm:request_success_total 1\n"
            "# TYPE vllm:e2e_request_latency_seconds summary\n"
            'vllm:e2e_request_latency_seconds_count{model_name="m"} 3\n'
            "# TYPE sglang:num_requests_total counter\nsglang:num_requests_total NaN\n"
            "# TYPE sglang:num_aborted_requests_total counter\nsglang:num_aborted_requests_total -1\n")
    text, skipped = relay(body.encode(), _settings())
    assert text == "" and skipped == 4


def test_openmetrics_counter_names_and_created_series() -> None:
    body = ("# TYPE vllm:request_success counter\n"
            'vllm:request_success_total{finished_reason="stop"} 4\n'
            'vllm:request_success_created{finished_reason="stop"} 1.7e9\n# EOF\n')
    assert _series(relay(body.encode(), _settings())[0]) == {
        ("vllm:request_success_total", (("finished_reason", "stop"),)): 4}


def test_too_many_series_out_is_refused() -> None:
    body = C + "".join(f'vllm:request_success_total{{model_name="m{i}"}} 1\n'
                       for i in range(relay_module.MAX_SERIES_OUT + 1))
    with pytest.raises(Refused) as refused:
        relay(body.encode(), _settings())
    assert refused.value.status == 502


# -- targets (SSRF) --------------------------------------------------------------------------------------------------
VPC = _settings(target_networks=(relay_module.ipaddress.IPv4Network("10.0.0.0/16"),), target_ports=frozenset({8000}),
                forbidden=relay_module.FORBIDDEN)


@pytest.mark.parametrize("target", [
    "metadata.google.internal:80", "localhost:8000", "model.models.svc:8000", "http://10.0.1.2:8000",
    "10.0.1.2:8000/admin", "user@10.0.1.2:8000", "10.0.1.2", "10.0.1.2:", ":8000", "010.0.1.2:8000",
    "10.0.1.2:08000x", "[::1]:8000", "10.0.1.2 :8000", "10.0.1.2:8000#", "0x0a.0.1.2:8000", "167772418:8000",
    "10.0.1.256:8000", "",
])
def test_a_target_that_is_not_an_ip_and_port_is_refused(target: str) -> None:
    with pytest.raises(Refused) as refused:
        parse_target(target, VPC)
    assert refused.value.status == 400


@pytest.mark.parametrize("target", ["10.1.0.1:8000", "10.0.1.2:22", "10.0.1.2:9400", "169.254.169.254:8000",
                                    "127.0.0.1:8000", "8.8.8.8:8000"])
def test_a_target_outside_the_cidrs_or_ports_is_refused(target: str) -> None:
    with pytest.raises(Refused) as refused:
        parse_target(target, VPC)
    assert refused.value.status == 403
    assert parse_target("10.0.1.2:8000", VPC) == ("10.0.1.2", 8000)


def test_loopback_and_metadata_stay_forbidden_whatever_the_cidrs() -> None:
    wide = replace(VPC, target_networks=(relay_module.ipaddress.IPv4Network("0.0.0.0/0"),))
    for target in ("127.0.0.1:8000", "169.254.169.254:8000", "0.0.0.0:8000", "224.0.0.1:8000"):
        with pytest.raises(Refused):
            parse_target(target, wide)
    for cidrs in ("0.0.0.0/0", "169.254.0.0/16", "127.0.0.0/8", "10.0.0.0/4", "10.0.0.1/16", "example.com"):
        with pytest.raises(SettingsError):
            load_settings({"RELAY_TARGET_CIDRS": cidrs, "RELAY_TARGET_PORTS": "8000"})


def test_settings_report_every_problem() -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings({"RELAY_TARGET_PORTS": "0,http", "RELAY_MAX_BODY_BYTES": "1e12", "RELAY_HISTOGRAMS": "a b"})
    message = str(raised.value)
    for name in ("RELAY_TARGET_CIDRS", "RELAY_TARGET_PORTS", "RELAY_MAX_BODY_BYTES", "RELAY_HISTOGRAMS"):
        assert name in message
    settings = load_settings({"RELAY_TARGET_CIDRS": "10.0.0.0/16,100.64.0.0/16", "RELAY_TARGET_PORTS": "8000,30000"})
    assert settings.forbidden == relay_module.FORBIDDEN and settings.target_ports == {8000, 30000}


# -- the server, against misbehaving targets and clients ---------------------------------------------------------------
class StandIn:
    """A target on loopback: ``serve(conn)`` answers each connection (in its own thread)."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.serve = serve
        self.requests: list[bytes] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(60)
                self.requests.append(conn.recv(65536))
                self.serve(conn)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


def answer(body: bytes, head: str = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
           length: bool = True) -> Callable[[socket.socket], None]:
    def serve(conn: socket.socket) -> None:
        conn.sendall((head + (f"Content-Length: {len(body)}\r\n" if length else "") + "\r\n").encode() + body)
    return serve


@contextmanager
def running(settings: RelaySettings, serve: Callable[[socket.socket], None] | None = None,
            ) -> Iterator[tuple[int, int]]:
    """(relay port, target port): the relay in a thread, the target a StandIn (or a closed port)."""
    stand_in = StandIn(serve) if serve is not None else None
    target_port = stand_in.port if stand_in else free_loopback_port()
    server = RelayServer(replace(settings, target_ports=frozenset({target_port})), ("127.0.0.1", 0))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], target_port
    finally:
        server.shutdown()
        server.server_close()
        if stand_in:
            stand_in.close()


def probe(port: int, target: str, timeout: float = 10) -> tuple[int, bytes, float]:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.request("GET", f"/probe?target={target}")
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, body, time.monotonic() - started


def test_a_probe_relays_the_recorded_exposition() -> None:
    with running(_settings(), answer(VLLM)) as (port, target):
        status, body, _ = probe(port, f"127.0.0.1:{target}")
    assert status == 200 and body.decode() == relay(VLLM, _settings())[0]


def test_the_target_is_always_asked_for_metrics_and_nothing_else() -> None:
    stand_in = StandIn(answer(VLLM))
    server = RelayServer(_settings(target_ports=frozenset({stand_in.port})), ("127.0.0.1", 0))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        port = server.server_address[1]
        for query in (f"127.0.0.1:{stand_in.port}", f"127.0.0.1:{stand_in.port}%2F..%2Fadmin"):
            probe(port, query)
    finally:
        server.shutdown()
        server.server_close()
        stand_in.close()
    (request,) = stand_in.requests  # the second target was refused before any connection
    head = request.decode().split("\r\n")
    assert head[0] == "GET /metrics HTTP/1.1"
    assert "Accept-Encoding: identity" in head


@pytest.mark.parametrize("query", ["target=127.0.0.1:{p}&target=127.0.0.1:{p}", "target=127.0.0.1:{p}&module=x",
                                   "", "target=127.0.0.1%3A{p}%2Fadmin", "target=http%3A%2F%2F127.0.0.1%3A{p}"])
def test_a_probe_names_exactly_one_target(query: str) -> None:
    with running(_settings(), answer(VLLM)) as (port, target):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/probe?" + query.format(p=target))
        assert connection.getresponse().status == 400


@pytest.mark.parametrize("length", [True, False])
def test_an_answer_over_the_size_bound_relays_nothing(length: bool) -> None:
    big = VLLM + b"# padding " + b"x" * 2048 + b"\n"
    settings = _settings(max_body_bytes=len(VLLM) + 1024)
    with running(settings, answer(big, length=length)) as (port, target):
        status, body, _ = probe(port, f"127.0.0.1:{target}")
    assert status == 502 and b"vllm:" not in body


def test_a_slow_target_is_cut_at_the_deadline() -> None:
    def drip(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        for line in VLLM.splitlines(keepends=True):  # each chunk within the read timeout, the whole past the deadline
            conn.sendall(line)
            time.sleep(0.2)

    settings = _settings(read_timeout=10, deadline=1.5)
    with running(settings, drip) as (port, target):
        status, body, _ = probe(port, f"127.0.0.1:{target}", timeout=60)
    assert status == 504 and b"vllm:" not in body  # the whole body would have come: the deadline cut it


def test_a_silent_target_times_out() -> None:
    with running(_settings(read_timeout=0.5, deadline=1.5), lambda conn: time.sleep(3)) as (port, target):
        status, _, _ = probe(port, f"127.0.0.1:{target}", timeout=60)
    assert status == 504  # a timeout, not the close the target makes after 3 s (that would be a 502)


@pytest.mark.parametrize(("serve", "why"), [
    (None, "nothing listens"),
    (answer(b"no", head="HTTP/1.1 500 Internal Server Error\r\n"), "an error status"),
    (answer(b"", head="HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/\r\n"),
     "a redirect (never followed)"),
    (answer(VLLM, head="HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"), "a content encoding"),
    (answer(VLLM, head="HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"), "another charset"),
    (answer(b"", head="garbage\r\n"), "not HTTP"),
])
def test_a_failing_target_relays_nothing(serve: Callable[[socket.socket], None] | None, why: str) -> None:
    with running(_settings(), serve) as (port, target):
        status, body, _ = probe(port, f"127.0.0.1:{target}")
    assert status == 502 and b"vllm:" not in body, why


def test_probes_beyond_the_bound_are_refused_at_once() -> None:
    release = threading.Event()
    arrived = threading.Event()

    def held(conn: socket.socket) -> None:
        arrived.set()
        release.wait(60)
        answer(VLLM)(conn)

    settings = _settings(max_probes=1)
    with running(settings, held) as (port, target):
        first: list[int] = []
        waiting = threading.Thread(target=lambda: first.append(probe(port, f"127.0.0.1:{target}", timeout=60)[0]))
        waiting.start()
        assert arrived.wait(60)  # the first probe holds the one slot
        # Refused at once: had it waited for the slot, it would wait for the release that follows it.
        status, _, _ = probe(port, f"127.0.0.1:{target}", timeout=60)
        release.set()
        waiting.join(60)
    assert status == 503 and first == [200]


def test_a_slowloris_client_is_closed() -> None:
    """Each byte comes within the per-read timeout and the head is never complete: only the client's whole-request
    bound can close the connection while bytes keep coming (60 s of them, a safety bound far above its 0.6 s)."""
    settings = _settings(read_timeout=10, client_timeout=0.6)
    head = b"GET /probe?target=127.0.0.1:1 HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 600
    with running(settings, answer(VLLM)) as (port, _):
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        closed_while_sending = False
        try:
            for byte in head:
                sock.sendall(bytes([byte]))
                time.sleep(0.1)
                sock.setblocking(False)
                with suppress(BlockingIOError):
                    if sock.recv(1) == b"":
                        closed_while_sending = True
                        break
                sock.setblocking(True)
        except OSError:
            closed_while_sending = True
        sock.close()
    assert closed_while_sending


def test_connections_beyond_the_bound_are_closed() -> None:
    settings = _settings(max_connections=2, client_timeout=3.0)
    with running(settings, answer(VLLM)) as (port, target):
        idle = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(2)]
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", port), timeout=60)
        assert extra.recv(1) == b""  # closed without an answer
        extra.close()
        for sock in idle:
            sock.close()
        assert wait_for_ok(port, target)  # the slots came back


def wait_for_ok(port: int, target: int, safety_timeout: float = 60) -> bool:
    deadline = time.monotonic() + safety_timeout
    while time.monotonic() < deadline:
        with suppress(OSError, http.client.HTTPException):
            if probe(port, f"127.0.0.1:{target}")[0] == 200:
                return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_the_module_runs_from_the_image_entry_point() -> None:
    env = {"PATH": "/usr/bin:/bin", "RELAY_TARGET_CIDRS": "10.0.0.0/16", "RELAY_TARGET_PORTS": "8000"}
    port = free_loopback_port()
    bad = subprocess.run([sys.executable, "-m", "capture_sidecar.metrics_relay"], cwd=SIDECAR_DIR, env={"PATH": ""},
                         capture_output=True, timeout=30, check=False)
    assert bad.returncode == 2 and b"RELAY_TARGET_CIDRS" in bad.stderr
    process = subprocess.Popen([sys.executable, "-m", "capture_sidecar.metrics_relay"], cwd=SIDECAR_DIR,
                               env={**env, "RELAY_PORT": str(port)}, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, process)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200
        assert probe(port, "127.0.0.1:8000")[0] == 403  # loopback: forbidden in the real process
    finally:
        process.terminate()
        assert process.wait(10) == 0

"""``python -m capture_sidecar.metrics_relay``: the model servers' latency histograms as counters the CloudWatch agent
keeps (docs/alarms.md, "The metrics relay").

Why: the CloudWatch agent's Prometheus path drops histogram *families* (``_bucket``, ``_sum`` and ``_count`` alike),
and vLLM and SGLang publish end-to-end latency and time to first token only as histograms. The model servers are the
operator's, not ours, so this relay re-exposes them: the Prometheus "multi-target exporter" pattern (like
blackbox_exporter). The agent scrapes ``GET /probe?target=<pod IP>:<port>``; the relay fetches
``http://<target>/metrics`` and answers with only the allow-listed families:

* each allow-listed histogram ``<h>`` (e.g. ``vllm:e2e_request_latency_seconds``) as three counter families,
  every label of the series kept:

  - ``<h>_le_total{le="X"}``: the cumulative bucket counts (``<h>_bucket``), ``le`` written as
    ``f"{X:g}"`` (``"60"``, ``"0.5"``, ``"+Inf"``) whatever the server wrote (``"60.0"``), so an alarm names one
    dimension value for every engine and client library;
  - ``<h>_sum_total``: ``<h>_sum`` (seconds); ``<h>_count_total``: ``<h>_count`` (observations);

* each allow-listed counter (e.g. ``vllm:request_success_total``) as it was, typed ``counter``.

"p90 above X s" is then "more than 10 % of requests took longer than X s": ``100 * (le=+Inf - le=X) / le=+Inf``,
exact when X is a bucket bound and correct across pods (what the capture sidecar does for its own histogram).

Stdlib only, and its own small parser of the text exposition format (0.0.4): ``prometheus_client`` is not in the
sidecar image's lock, and a parser that skips what it does not understand line by line (instead of failing the whole
scrape, as ``text_string_to_metric_families`` does on the first bad line) is what a relay of someone else's output
needs. Bounds (each tried by tests/sidecar/test_metrics_relay.py; docs/security.md, "Metrics relay"):

* the target is ``<IPv4>:<port>`` only: never a hostname, a URL, a path or credentials; the address inside
  ``RELAY_TARGET_CIDRS`` (the VPC's, where EKS pods get their IPs) and never loopback, link-local (the instance
  metadata service), multicast or unspecified whatever the CIDRs say; the port in ``RELAY_TARGET_PORTS``; the path
  is always ``/metrics``, no redirect is followed;
* the target's answer: 200 only, ``Content-Encoding`` identity, charset UTF-8 (or none), at most
  ``RELAY_MAX_BODY_BYTES`` (4 MiB; larger: 502 and nothing relayed), connect and read timeouts and a total deadline
  under the agent's 10 s scrape timeout (504);
* at most ``RELAY_MAX_PROBES`` probes at once (excess: 503 at once), at most ``RELAY_MAX_CONNECTIONS`` open client
  connections (excess: closed at once), a client's request head within ``RELAY_CLIENT_TIMEOUT_SECONDS`` in total
  (a slowloris is closed);
* parsing: a line longer than 16 KiB, with more than 32 labels, not UTF-8, or malformed is skipped; a histogram
  series whose buckets lack ``+Inf``, repeat a bound or are not cumulative is not relayed (its ``_sum``/``_count``
  are); at most 5,000 series out (the agent's ``sample_limit``), else 502.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import itertools
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("metrics_relay")

MIB = 1024 * 1024
DEFAULT_PORT = 9400
DEFAULT_MAX_BODY_BYTES = 4 * MIB
DEFAULT_CONNECT_TIMEOUT_SECONDS = 2.0
DEFAULT_READ_TIMEOUT_SECONDS = 5.0
DEFAULT_DEADLINE_SECONDS = 8.0  # under the agent's scrape_timeout (10 s)
DEFAULT_CLIENT_TIMEOUT_SECONDS = 5.0
DEFAULT_MAX_PROBES = 4
DEFAULT_MAX_CONNECTIONS = 32
MAX_LINE_BYTES = 16 * 1024
MAX_LABELS = 32
MAX_SERIES_OUT = 5000
# The families the relay passes (ModelServingMetrics' ENGINES; a test keeps the two in step).
DEFAULT_HISTOGRAMS = ("vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds",
                      "sglang:e2e_request_latency_seconds", "sglang:time_to_first_token_seconds")
DEFAULT_COUNTERS = ("vllm:request_success_total", "sglang:num_requests_total", "sglang:num_aborted_requests_total")
# Never a target, whatever RELAY_TARGET_CIDRS says.
FORBIDDEN = tuple(ipaddress.IPv4Network(n) for n in ("127.0.0.0/8", "169.254.0.0/16", "0.0.0.0/8", "224.0.0.0/4",
                                                    "255.255.255.255/32"))
TARGET = re.compile(r"^(?P<ip>[0-9]{1,3}(?:\.[0-9]{1,3}){3}):(?P<port>[0-9]{1,5})$")
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
USER_AGENT = "model-metrics-relay"


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class RelaySettings:
    target_networks: tuple[ipaddress.IPv4Network, ...]
    target_ports: frozenset[int]
    port: int = DEFAULT_PORT
    histograms: tuple[str, ...] = DEFAULT_HISTOGRAMS
    counters: tuple[str, ...] = DEFAULT_COUNTERS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECONDS
    read_timeout: float = DEFAULT_READ_TIMEOUT_SECONDS
    deadline: float = DEFAULT_DEADLINE_SECONDS
    client_timeout: float = DEFAULT_CLIENT_TIMEOUT_SECONDS
    max_probes: int = DEFAULT_MAX_PROBES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    bind: str = "0.0.0.0"
    # Never a target whatever the CIDRs say; load_settings always uses FORBIDDEN (tests on loopback pass their own).
    forbidden: tuple[ipaddress.IPv4Network, ...] = FORBIDDEN


def load_settings(env: Mapping[str, str]) -> RelaySettings:
    """From ``RELAY_*`` variables; every problem reported at once."""
    problems: list[str] = []

    def number(name: str, default: float, low: float, high: float, integer: bool = False) -> Any:
        raw = env.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw) if integer else float(raw)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not low <= value <= high:
            kind = "an integer" if integer else "a number"
            problems.append(f"{name}={raw!r}: must be {kind} from {low:g} to {high:g}")
            return default
        return value

    networks: list[ipaddress.IPv4Network] = []
    for raw in (env.get("RELAY_TARGET_CIDRS") or "").split(","):
        if not raw.strip():
            continue
        try:
            network = ipaddress.IPv4Network(raw.strip(), strict=True)
        except ValueError:
            problems.append(f"RELAY_TARGET_CIDRS: {raw!r} is not an IPv4 CIDR (a.b.c.d/n, host bits zero)")
            continue
        if network.prefixlen < 8 or any(network.overlaps(f) for f in FORBIDDEN):
            problems.append(f"RELAY_TARGET_CIDRS: {raw!r} must be /8 or narrower and hold no loopback, link-local, "
                            "multicast or unspecified address")
            continue
        networks.append(network)
    if not networks and not any("RELAY_TARGET_CIDRS" in p for p in problems):
        problems.append("RELAY_TARGET_CIDRS: required, the CIDRs the model servers' pods get their IPs from")
    ports: set[int] = set()
    for raw in (env.get("RELAY_TARGET_PORTS") or "").split(","):
        if not raw.strip():
            continue
        if not raw.strip().isdigit() or not 1 <= int(raw) <= 65535:
            problems.append(f"RELAY_TARGET_PORTS: {raw!r} is not a port 1-65535")
            continue
        ports.add(int(raw))
    if not ports and not any("RELAY_TARGET_PORTS" in p for p in problems):
        problems.append("RELAY_TARGET_PORTS: required, the model servers' metrics ports")

    def names(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        raw = env.get(name)
        if not raw:
            return default
        given = tuple(n.strip() for n in raw.split(",") if n.strip())
        bad = [n for n in given if not METRIC_NAME.fullmatch(n)]
        if bad or not given:
            problems.append(f"{name}={raw!r}: must be comma-separated metric names")
            return default
        return given

    settings = RelaySettings(
        target_networks=tuple(networks), target_ports=frozenset(ports),
        port=number("RELAY_PORT", DEFAULT_PORT, 1024, 65535, integer=True),
        histograms=names("RELAY_HISTOGRAMS", DEFAULT_HISTOGRAMS), counters=names("RELAY_COUNTERS", DEFAULT_COUNTERS),
        max_body_bytes=number("RELAY_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024, 64 * MIB, integer=True),
        connect_timeout=number("RELAY_CONNECT_TIMEOUT_SECONDS", DEFAULT_CONNECT_TIMEOUT_SECONDS, 0.05, 10),
        read_timeout=number("RELAY_READ_TIMEOUT_SECONDS", DEFAULT_READ_TIMEOUT_SECONDS, 0.05, 30),
        deadline=number("RELAY_DEADLINE_SECONDS", DEFAULT_DEADLINE_SECONDS, 0.1, 30),
        client_timeout=number("RELAY_CLIENT_TIMEOUT_SECONDS", DEFAULT_CLIENT_TIMEOUT_SECONDS, 0.05, 60),
        max_probes=number("RELAY_MAX_PROBES", DEFAULT_MAX_PROBES, 1, 64, integer=True),
        max_connections=number("RELAY_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS, 1, 1024, integer=True))
    if problems:
        raise SettingsError("invalid metrics relay settings:\n  " + "\n  ".join(problems))
    return settings


class Refused(Exception):
    """A probe that is answered with ``status`` and nothing relayed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def parse_target(raw: str, settings: RelaySettings) -> tuple[str, int]:
    """``<IPv4>:<port>`` inside the allowed CIDRs and ports, or :class:`Refused` (400 malformed, 403 not allowed)."""
    match = TARGET.fullmatch(raw)
    if match is None:
        raise Refused(400, "target must be <IPv4 address>:<port>")
    try:
        address = ipaddress.IPv4Address(match["ip"])  # refuses leading zeros (no octal reading)
    except ValueError:
        raise Refused(400, "target must be <IPv4 address>:<port>") from None
    port = int(match["port"])
    if any(address in network for network in settings.forbidden):
        raise Refused(403, "target address not allowed")
    if not any(address in network for network in settings.target_networks):
        raise Refused(403, "target address outside the allowed CIDRs")
    if port not in settings.target_ports:
        raise Refused(403, "target port not allowed")
    return str(address), port


def fetch(address: str, port: int, settings: RelaySettings) -> bytes:
    """``GET http://<address>:<port>/metrics`` within the bounds, or :class:`Refused` (502, 504)."""
    deadline = time.monotonic() + settings.deadline

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused(504, "target too slow (deadline)")
        return min(settings.read_timeout, left)

    connection = http.client.HTTPConnection(address, port, timeout=min(settings.connect_timeout, settings.deadline))
    try:
        try:
            connection.connect()
            # Kept: http.client lets go of its socket once a close-delimited answer starts (the answer reads on).
            sock = connection.sock
            assert sock is not None
            sock.settimeout(remaining())
            connection.request("GET", "/metrics", headers={
                "Accept": "text/plain; version=0.0.4", "Accept-Encoding": "identity", "User-Agent": USER_AGENT,
                "Connection": "close"})
            response = connection.getresponse()
        except TimeoutError:
            raise Refused(504, "target timed out") from None
        except (OSError, http.client.HTTPException) as error:
            raise Refused(502, f"target failed: {type(error).__name__}") from None
        if response.status != 200:
            raise Refused(502, f"target answered {response.status}")
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise Refused(502, "target answered with a content encoding")
        content_type = (response.getheader("Content-Type") or "").lower()
        charset = re.search(r"charset\s*=\s*\"?([^\s;\"]+)", content_type)
        if charset and charset[1] not in ("utf-8", "utf8", "us-ascii"):
            raise Refused(502, "target answered in a charset other than UTF-8")
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > settings.max_body_bytes:
            raise Refused(502, "target answer too large")
        body = bytearray()
        try:
            while True:
                sock.settimeout(remaining())
                chunk = response.read1(65536)
                if not chunk:
                    break
                body += chunk
                if len(body) > settings.max_body_bytes:
                    raise Refused(502, "target answer too large")
        except TimeoutError:
            raise Refused(504, "target timed out") from None
        except (OSError, http.client.HTTPException) as error:
            raise Refused(502, f"target failed: {type(error).__name__}") from None
        return bytes(body)
    finally:
        connection.close()


# -- the exposition format -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def _parse_labels(text: str, at: int) -> tuple[tuple[tuple[str, str], ...], int] | None:
    """Labels from ``text[at]`` == "{" to its "}", escapes decoded; the index after "}"; None if malformed."""
    labels: list[tuple[str, str]] = []
    i = at + 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == "}":
            return tuple(labels), i + 1
        match = LABEL_NAME.match(text, i)
        if match is None:
            return None
        name = match.group()
        i = match.end()
        while i < n and text[i] in " \t":
            i += 1
        if i + 1 >= n or text[i] != "=" or text[i + 1] != '"':
            return None
        i += 2
        value: list[str] = []
        while True:
            if i >= n:
                return None
            c = text[i]
            if c == "\\":
                if i + 1 >= n:
                    return None
                escaped = text[i + 1]
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(escaped, "\\" + escaped))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                value.append(c)
                i += 1
        if any(existing == name for existing, _ in labels) or len(labels) >= MAX_LABELS:
            return None
        labels.append((name, "".join(value)))
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == ",":
            i += 1
        elif i < n and text[i] == "}":
            continue
        else:
            return None


def parse_value(raw: str) -> float | None:
    lowered = raw.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    if lowered == "nan":
        return math.nan
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", raw):
        return None
    return float(raw)


def parse_exposition(body: bytes) -> tuple[dict[str, str], list[Sample], int]:
    """``# TYPE`` of each family, the samples, and how many lines were skipped (too long, not UTF-8, malformed)."""
    types: dict[str, str] = {}
    samples: list[Sample] = []
    skipped = 0
    for raw_line in body.split(b"\n"):
        if len(raw_line) > MAX_LINE_BYTES:
            skipped += 1
            continue
        try:
            line = raw_line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            skipped += 1
            continue
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) == 4 and parts[1] == "TYPE" and METRIC_NAME.fullmatch(parts[2]):
                types.setdefault(parts[2], parts[3].strip())
            continue
        match = METRIC_NAME.match(line)
        if match is None:
            skipped += 1
            continue
        i = match.end()
        labels: tuple[tuple[str, str], ...] = ()
        if i < len(line) and line[i] == "{":
            parsed = _parse_labels(line, i)
            if parsed is None:
                skipped += 1
                continue
            labels, i = parsed
        rest = line[i:].split()
        if not rest or len(rest) > 2 or (len(rest) == 2 and not re.fullmatch(r"-?\d+", rest[1])):
            skipped += 1
            continue
        value = parse_value(rest[0])
        if value is None:
            skipped += 1
            continue
        samples.append(Sample(match.group(), labels, value))
    return types, samples, skipped


def format_bound(bound: float) -> str:
    """A bucket bound as the relay writes ``le``: ``f"{bound:g}"`` when that is exact, else its ``repr``."""
    if bound == math.inf:
        return "+Inf"
    short = f"{bound:g}"
    return short if float(short) == bound else repr(bound)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(name: str, labels: Iterable[tuple[str, str]], value: float) -> str:
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    text = "+Inf" if value == math.inf else repr(float(value))
    return f"{name}{{{body}}} {text}" if body else f"{name} {text}"


@dataclass
class _Histogram:
    buckets: dict[float, float] = field(default_factory=dict)
    broken: bool = False
    sum: float | None = None
    count: float | None = None


def relay(body: bytes, settings: RelaySettings) -> tuple[str, int]:
    """The relayed exposition of a target's ``/metrics`` body, and the number of lines skipped."""
    types, samples, skipped = parse_exposition(body)
    histograms = set(settings.histograms)
    counters = set(settings.counters)
    series: dict[str, dict[tuple[tuple[str, str], ...], _Histogram]] = {h: {} for h in settings.histograms}
    counted: dict[str, dict[tuple[tuple[str, str], ...], float]] = {c: {} for c in settings.counters}
    for sample in samples:
        if sample.name in counters:
            # Its family is typed counter (0.0.4 names the TYPE after the sample, OpenMetrics without `_total`).
            family_type = types.get(sample.name) or types.get(sample.name.removesuffix("_total"))
            if family_type != "counter" or not math.isfinite(sample.value) or sample.value < 0:
                skipped += 1
                continue
            key = tuple(sorted(sample.labels))
            if key in counted[sample.name]:
                skipped += 1  # a repeated series: neither is trusted
                counted[sample.name][key] = math.nan
                continue
            counted[sample.name][key] = sample.value
            continue
        for suffix in ("_bucket", "_sum", "_count"):
            family = sample.name.removesuffix(suffix)
            if family != sample.name and family in histograms:
                break
        else:
            continue
        if types.get(family) != "histogram":
            skipped += 1
            continue
        labels = dict(sample.labels)
        le = labels.pop("le", None)
        key = tuple(sorted(labels.items()))
        histogram = series[family].setdefault(key, _Histogram())
        if suffix == "_bucket":
            bound = parse_value(le) if le is not None else None
            if bound is None or math.isnan(bound) or bound in histogram.buckets or not math.isfinite(sample.value) \
                    or sample.value < 0:
                histogram.broken = True
                skipped += 1
            else:
                histogram.buckets[bound] = sample.value
        elif suffix == "_sum" and le is None and math.isfinite(sample.value):
            histogram.sum = math.nan if histogram.sum is not None else sample.value
        elif suffix == "_count" and le is None and math.isfinite(sample.value) and sample.value >= 0:
            histogram.count = math.nan if histogram.count is not None else sample.value
        else:
            skipped += 1
    out: list[str] = []
    written = 0
    for name in settings.histograms:
        families: dict[str, list[str]] = {f"{name}_le_total": [], f"{name}_sum_total": [], f"{name}_count_total": []}
        for key, histogram in sorted(series[name].items()):
            bounds = sorted(histogram.buckets)
            cumulative = all(histogram.buckets[a] <= histogram.buckets[b] for a, b in itertools.pairwise(bounds))
            written_bounds = [format_bound(b) for b in bounds]
            if histogram.broken or not bounds or bounds[-1] != math.inf or not cumulative \
                    or len(set(written_bounds)) != len(written_bounds):
                if bounds:
                    log.warning("histogram %s%s not relayed: its buckets lack +Inf, repeat a bound or are not "
                                "cumulative", name, dict(key))
            else:
                for bound, written_bound in zip(bounds, written_bounds, strict=False):
                    families[f"{name}_le_total"].append(
                        _line(f"{name}_le_total", [*key, ("le", written_bound)], histogram.buckets[bound]))
            if histogram.sum is not None and not math.isnan(histogram.sum):
                families[f"{name}_sum_total"].append(_line(f"{name}_sum_total", key, histogram.sum))
            if histogram.count is not None and not math.isnan(histogram.count):
                families[f"{name}_count_total"].append(_line(f"{name}_count_total", key, histogram.count))
        for family, lines in families.items():
            if lines:
                what = {"le": "cumulative bucket counts (le)", "sum": "sum of observations",
                        "count": "count of observations"}[family.rsplit("_", 2)[-2]]
                out += [f"# HELP {family} {name} {what}, relayed as a counter.", f"# TYPE {family} counter", *lines]
                written += len(lines)
    for name in settings.counters:
        lines = [_line(name, key, value) for key, value in sorted(counted[name].items()) if not math.isnan(value)]
        if lines:
            out += [f"# HELP {name} {name}, relayed.", f"# TYPE {name} counter", *lines]
            written += len(lines)
    if written > MAX_SERIES_OUT:
        raise Refused(502, f"target exposes too many series ({written} > {MAX_SERIES_OUT})")
    return ("\n".join(out) + "\n") if out else "", skipped


# -- the server ----------------------------------------------------------------------------------------------------
class RelayServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, settings: RelaySettings, address: tuple[str, int] | None = None) -> None:
        self.settings = settings
        self.probes = threading.BoundedSemaphore(settings.max_probes)
        self.connections = threading.BoundedSemaphore(settings.max_connections)
        super().__init__(address or (settings.bind, settings.port), RelayHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.acquire(blocking=False):
            log.warning("connection from %s closed: %d connections open", client_address[0],
                        self.settings.max_connections)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()


class RelayHandler(BaseHTTPRequestHandler):
    server: RelayServer
    protocol_version = "HTTP/1.0"  # one request per connection
    server_version = "model-metrics-relay"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        settings = self.server.settings
        self.connection.settimeout(settings.client_timeout)
        # A total bound on the request head: a client sending a byte a second resets no per-read timeout forever.
        self._head_done = threading.Event()
        self._expiry = threading.Timer(settings.client_timeout, self._expire)
        self._expiry.daemon = True
        self._expiry.start()

    def _expire(self) -> None:
        if not self._head_done.is_set():
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._expiry.cancel()
        with contextlib.suppress(OSError):
            super().finish()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self._head_done.set()
        self._expiry.cancel()
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def _answer(self, status: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._answer(200, "ok\n")
            return
        if url.path != "/probe":
            self._answer(404, "not found\n")
            return
        query = parse_qs(url.query, keep_blank_values=True, max_num_fields=4)
        targets = query.get("target", [])
        settings = self.server.settings
        try:
            if len(targets) != 1 or set(query) != {"target"}:
                raise Refused(400, "exactly one target= and nothing else")
            address, port = parse_target(targets[0], settings)
        except (Refused, ValueError) as error:
            status = error.status if isinstance(error, Refused) else 400
            log.warning("probe refused (%d): %s", status, error)
            self._answer(status, f"{error}\n")
            return
        if not self.server.probes.acquire(blocking=False):
            log.warning("probe of %s:%d refused: %d probes running", address, port, settings.max_probes)
            self._answer(503, "too many probes at once\n")
            return
        try:
            body = fetch(address, port, settings)
            text, skipped = relay(body, settings)
        except Refused as refused:
            log.warning("probe of %s:%d failed (%d): %s", address, port, refused.status, refused.reason)
            self._answer(refused.status, f"{refused.reason}\n")
            return
        finally:
            self.server.probes.release()
        if skipped:
            log.info("probe of %s:%d: %d lines skipped", address, port, skipped)
        self._answer(200, text, CONTENT_TYPE)


def main() -> int:
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        settings = load_settings(os.environ)
    except SettingsError as error:
        print(error, file=sys.stderr)
        return 2
    server = RelayServer(settings)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    log.info("metrics relay on :%d for %s, ports %s", settings.port,
             ",".join(map(str, settings.target_networks)), ",".join(map(str, sorted(settings.target_ports))))
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

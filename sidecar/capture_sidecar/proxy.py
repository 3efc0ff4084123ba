"""The transparent reverse proxy in front of the model server, with capture on the side.

The data path is two `asyncio.Protocol` classes on uvloop with llhttp (httptools) as the parser,
chosen by measurement (docs/capture-sidecar.md, *Design*): aiohttp's server + client spent
~270 µs of CPU per small request in their own machinery, this path ~60 µs.

- `ClientConnection`: one per client connection. Parses requests, answers what the proxy itself
  answers (400, 413, 503, 502, `100 Continue`), and forwards each request to the model server on
  a pooled connection, one request at a time (pipelined requests wait their turn, in order).
- `UpstreamConnection`: one per model-server connection, kept alive in `UpstreamPool`. Parses
  the response and writes it to the client as it arrives: the bytes of each body chunk are
  written as soon as they are parsed, never held back; only hop-by-hop headers and the framing
  of this hop are rewritten.

Everything a data_received() call produces for the other side is written in one transport
write at its end, so a small request or response costs one syscall per hop.

Capture keeps references to body chunks already in hand (never a copy unless the payload cap
cuts one), reserves their size in the `MemoryBudget`, and hands a `CapturedExchange` to the
uploader when the response is complete; encoding happens in the upload workers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import time
from collections import deque
from collections.abc import Awaitable
from datetime import UTC, datetime
from time import perf_counter
from typing import cast
from urllib.parse import urlsplit

import httptools

from .auth import CallerId, KeySet
from .jwt_auth import JwtVerifier, Refused
from .limits import CONCURRENT_REQUESTS, TOKENS_PER_DAY, TOKENS_PER_MONTH, Limiter, Refusal, Reservation
from .metrics import (
    CONNECTION_CAP_MAX_CONNECTIONS,
    CONNECTION_CAP_MAX_UNAUTHENTICATED,
    DROP_MEMORY_FULL,
    SidecarMetrics,
)
from .records import (
    PARTIAL_CLIENT_DISCONNECTED,
    PARTIAL_UPSTREAM_BROKEN,
    CapturedExchange,
    CapturedPayload,
    request_path,
)
from .settings import DEFAULT_MODEL_NAME, ApiKey, Settings
from .stream_usage import (
    USAGE_FROM_RESPONSE,
    USAGE_NONE,
    USAGE_REQUESTED,
    SseUsage,
    TailUsage,
    estimate_tokens,
    with_stream_usage,
)
from .uploader import CaptureUploader

log = logging.getLogger("capture_sidecar.proxy")

# RFC 9110 §7.6.1 connection-specific headers, plus the legacy Proxy-Connection (lower case:
# names are compared after bytes.lower()).
HOP_BY_HOP_HEADERS = frozenset(
    (
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    )
)
# Recomputed for each hop: Host and Content-Length are set for the upstream request, and the
# sidecar answers an Expect: 100-continue itself.
REQUEST_HEADERS_NOT_FORWARDED = HOP_BY_HOP_HEADERS | {b"host", b"content-length", b"expect"}
RESPONSE_HEADERS_NOT_FORWARDED = HOP_BY_HOP_HEADERS | {b"content-length"}

# Inference calls carry a body; GET/HEAD/OPTIONS/DELETE (health checks, metrics, model lists)
# are proxied but never captured.
CAPTURED_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})
INFERENCE_ID_HEADER = b"x-amzn-sagemaker-inference-id"

UPSTREAM_WARNING_INTERVAL_SECONDS = 10.0
UPSTREAM_CONNECT_TIMEOUT_SECONDS = 10.0
# The header and idle timeouts are checked this often (at most; a tenth of the shorter timeout if less).
TIMEOUT_SWEEP_SECONDS = 0.5
# An unauthenticated connection is evicted to make room only once it was read from or is this old (by the event
# loop's clock, which uvloop advances once per iteration): a client accepted in the same burst as hundreds of others
# has sent its head but has not been read yet, and must not be the one closed.
EVICTION_GRACE_SECONDS = 0.05
# Request line plus headers; more gets 431 (nginx allows 4 x 8 KiB, aiohttp 8 KiB a line).
MAX_REQUEST_HEAD_BYTES = 64 * 1024
# Header lines of one request; more gets 431 (each costs ~130 bytes of Python objects beyond its text).
MAX_REQUEST_HEADERS = 256
# Body bytes of one request kept while its upstream connection is being opened; past this the
# client is not read from until the connection is up (back-pressure, not buffering).
MAX_PENDING_BODY_BYTES = 256 * 1024
# Transport write buffers: above HIGH the other side is paused (slow clients, slow uploads).
WRITE_BUFFER_HIGH = 256 * 1024
WRITE_BUFFER_LOW = 64 * 1024
# Idle upstream connections kept for reuse.
MAX_IDLE_UPSTREAM_CONNECTIONS = 256
# Requests whose bytes are kept for one retry if a reused upstream connection turns out closed
# (a keep-alive connection the model server closed just as the request was sent).
MAX_REPLAY_BYTES = 64 * 1024
RETRY_AFTER_SECONDS = 1
LINGER_SECONDS = 2.0
# A captured body is cut here (with the truncation marks) even without MAX_PAYLOAD_SIZE_KB:
# one record's encoding must fit the memory bound (docs/capture-sidecar.md, *Memory bounds*).
MAX_CAPTURED_BODY_BYTES = 8 * 1024 * 1024

BODY_NONE = 0
BODY_LENGTH = 1  # Content-Length: streamed through as it arrives
BODY_CHUNKED = 2  # chunked, or metered: buffered whole (bounded), then sent with a Content-Length

_CRLF = b"\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"


def _plain_response(status: int, reason: str, message: str, *, close: bool, extra: bytes = b"") -> bytes:
    body = f"capture sidecar: {message}\n".encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n".encode()
        + extra
        + (b"Connection: close\r\n" if close else b"")
        + _CRLF
        + body
    )


def refusal_response(refusal: Refusal, *, keep_alive: bool) -> bytes:
    """An OpenAI-style error (``{"error": {"message", "type", "param", "code"}}``) with Retry-After."""
    if refusal.status == 429:
        reason = "Too Many Requests"
        quota = refusal.limit in (TOKENS_PER_DAY, TOKENS_PER_MONTH)
        kind = "insufficient_quota" if quota else ("requests" if refusal.limit == CONCURRENT_REQUESTS else "tokens")
        code = "insufficient_quota" if quota else "rate_limit_exceeded"
    else:
        reason, kind, code = "Service Unavailable", "server_error", "budget_store_unavailable"
    message = f"{refusal.message}; retry after {refusal.retry_after} s"
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
    return (
        f"HTTP/1.1 {refusal.status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: {refusal.retry_after}\r\n".encode()
        + (b"" if keep_alive else b"Connection: close\r\n")
        + _CRLF
        + body
    )


# What a connection refused at MAX_CONNECTIONS gets before the close (made once).
_AT_CAPACITY = _plain_response(
    503, "Service Unavailable", "too many connections, retry later", close=True, extra=b"Retry-After: 1\r\n"
)


# A request body buffered whole is small while it stays within this: small bodies may use the budget's headroom.
SMALL_BODY_BYTES = 256 * 1024


class MemoryBudget:
    """Bytes of bodies held in memory: buffered request bodies and every captured byte, from
    the moment it is kept until its upload ends (MAX_INFLIGHT_BODY_BYTES). Event loop only.

    The last eighth of it (``headroom``) is kept for small request bodies (``try_reserve_small``: a buffered body
    while it is within SMALL_BODY_BYTES, e.g. a metered chat request): large bodies and capture copies
    (``try_reserve``) stop below it. So a flood of large bodies from one client is refused (503) or loses its
    capture, while the other clients' ordinary requests are still buffered and served, however the requests
    interleave (tests/sidecar/test_memory_bounds.py)."""

    __slots__ = ("headroom", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.headroom = limit // 8
        self.used = 0

    def try_reserve(self, size: int) -> bool:
        """A large body's bytes or a capture copy: within the budget less its headroom."""
        return self._take(size, self.limit - self.headroom)

    def try_reserve_small(self, size: int) -> bool:
        """A small request body's bytes: within the whole budget."""
        return self._take(size, self.limit)

    def _take(self, size: int, ceiling: int) -> bool:
        if self.used + size > ceiling:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size


class _Exchange:
    """One request/response on a client connection."""

    __slots__ = (
        "admitting",
        "arrival",
        "body_mode",
        "caller_id",
        "capture",
        "declared_length",
        "headers",
        "http10",
        "inference_id",
        "input_chunks",
        "input_kept",
        "input_total",
        "keep_alive",
        "metered",
        "method",
        "output_chunks",
        "output_kept",
        "output_total",
        "refusal",
        "replay",
        "replay_bytes",
        "request_done",
        "request_type",
        "reservation",
        "reserved",
        "response_started",
        "response_type",
        "retried",
        "sse_usage",
        "started",
        "status",
        "t_first_chunk",
        "t_head",
        "t_request_done",
        "tail_usage",
        "to_upstream",
        "to_upstream_bytes",
        "upstream",
        "url",
        "usage_requested",
    )

    def __init__(self, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]], t_head: float) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.body_mode = BODY_NONE
        self.declared_length = 0
        self.request_done = False
        self.keep_alive = True
        self.http10 = False
        self.to_upstream: list[bytes] = []  # bytes not yet written to the upstream connection
        self.to_upstream_bytes = 0
        self.replay: list[bytes] | None = []  # everything sent upstream, while small enough to resend
        self.replay_bytes = 0
        self.started = False
        self.upstream: UpstreamConnection | None = None
        self.capture = False
        self.reserved = 0  # bytes held in the memory budget for this exchange
        self.arrival: datetime | None = None
        self.request_type: str | None = None
        self.inference_id: str | None = None
        self.input_chunks: list[bytes] = []
        self.input_kept = 0
        self.input_total = 0
        self.output_chunks: list[bytes] = []
        self.output_kept = 0
        self.output_total = 0
        self.response_type: str | None = None
        self.response_started = False  # response headers written to the client
        self.retried = False
        self.caller_id: CallerId | None = None  # of the API key that authenticated the request (auth.authenticate)
        self.status = 0  # the final status the client got (0: none yet)
        # perf_counter() moments: the first byte of the request head, the request fully received, the first
        # response body byte from the model server (0.0: not yet).
        self.t_head = t_head
        self.t_request_done = 0.0
        self.t_first_chunk = 0.0
        # Metering (docs/usage-and-budgets.md): the body is read whole first; usage is read off the response.
        self.metered = False
        self.usage_requested = False  # the sidecar asked for stream usage: its event is removed from the response
        self.admitting = False  # waiting for the budget store
        self.reservation: Reservation | None = None
        self.refusal: Refusal | None = None
        self.sse_usage: SseUsage | None = None
        self.tail_usage: TailUsage | None = None


def _decode(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _connection_tokens(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Header names listed in Connection headers (hop-by-hop by declaration)."""
    return frozenset(
        token.strip().lower() for name, value in headers if name.lower() == b"connection" for token in value.split(b",")
    )


class CaptureProxy:
    """Shared state of the data path: settings, pool, budget, uploader, metrics, connections."""

    def __init__(
        self,
        *,
        settings: Settings,
        uploader: CaptureUploader,
        metrics: SidecarMetrics,
        budget: MemoryBudget,
        limiter: Limiter | None = None,
    ) -> None:
        parts = urlsplit(settings.upstream_url)
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        host = parts.hostname or "127.0.0.1"
        default_port = port == (443 if tls else 80)
        host_header = host if ":" not in host else f"[{host}]"
        self.host_header = (host_header if default_port else f"{host_header}:{port}").encode()
        self.pool = UpstreamPool(self, host, port, ssl.create_default_context() if tls else None)
        self.uploader = uploader
        self.metrics = metrics
        self.budget = budget
        self.sampling_fraction = settings.sampling_percentage / 100.0
        self.capture_input = settings.capture_input
        self.capture_output = settings.capture_output
        # MAX_PAYLOAD_SIZE_KB=0 ("no cap") still stops at MAX_CAPTURED_BODY_BYTES, for the memory bound.
        self.payload_limit = min(settings.max_payload_bytes or MAX_CAPTURED_BODY_BYTES, MAX_CAPTURED_BODY_BYTES)
        self.max_request_body = settings.max_request_body_bytes
        # Metering and limits (docs/usage-and-budgets.md).
        usage = settings.usage
        self.usage_paths = usage.usage_paths
        self.request_stream_usage = usage.request_stream_usage
        self.usage_records_all = usage.records_for_every_exchange
        self.bytes_per_token = usage.bytes_per_token
        self.default_output_tokens = usage.default_output_tokens
        self.limiter = limiter if limiter is not None and usage.limits else None
        self.served_model = None if settings.model_name == DEFAULT_MODEL_NAME else settings.model_name
        # With API_KEY or API_KEYS_FILE set, every request on the proxy port must carry one of the keys, whatever
        # its path (auth.KeySet). Replaced whole when API_KEYS_FILE changes (set_api_keys): each request head is
        # checked against the set in force when it is read; a set that lost every key refuses every request.
        self.api_keys = KeySet(settings.api_keys, required=bool(settings.api_keys) or bool(settings.api_keys_file))
        metrics.api_keys = lambda: len(self.api_keys)
        # JWT mode (JWT_ISSUER): every request must carry a token of the issuer; its claim is the caller (jwt_auth).
        self.jwt = JwtVerifier(settings.jwt) if settings.jwt is not None else None
        if self.jwt is not None:
            verifier = self.jwt
            metrics.jwt_keys = lambda: len(verifier.keys or ())
            metrics.jwks_fetch_failures = lambda: verifier.fetch_failures
        metrics.api_key_fingerprints = lambda: self.api_keys.fingerprints()
        self.connections: set[ClientConnection] = set()
        # Connection bounds (docs/capture-sidecar.md, *Connection bounds*). Each dict is in the order of its
        # deadlines: every entry is "now + one constant" when it is made, so the sweeper only looks at the front.
        self.header_timeout = settings.header_timeout_seconds
        self.idle_timeout = settings.idle_timeout_seconds
        self.max_connections = settings.max_connections
        self.max_unauthenticated = settings.max_unauthenticated
        self.head_deadlines: dict[ClientConnection, float] = {}  # reading a head, no exchange in flight
        self.idle_deadlines: dict[ClientConnection, float] = {}  # keep-alive, no exchange, no byte of a head
        self.unauthenticated: dict[ClientConnection, None] = {}  # no request read whole and authenticated yet
        self.lingering: dict[ClientConnection, None] = {}  # answered, closing (see ClientConnection._close)
        metrics.connections_open = lambda: len(self.connections)
        metrics.connections_unauthenticated = lambda: len(self.unauthenticated)
        self.closing = False
        self._last_upstream_warning = -UPSTREAM_WARNING_INTERVAL_SECONDS

    def set_api_keys(self, keys: tuple[ApiKey, ...]) -> None:
        """The keys accepted from now on (none left: every request is refused, authentication stays on)."""
        self.api_keys = KeySet(keys, required=self.api_keys.required or bool(keys))

    def warn_upstream(self, problem: str, error: BaseException | str) -> None:
        """Log model-server failures at most once per interval: a server that is down would
        otherwise write one line per request. The counter on /metrics has the exact numbers."""
        now = time.monotonic()
        if now - self._last_upstream_warning >= UPSTREAM_WARNING_INTERVAL_SECONDS:
            self._last_upstream_warning = now
            detail = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
            log.warning("%s: %s", problem, detail)

    def metered(self, method: bytes, url: bytes, caller_id: str | None) -> bool:
        """Whether the exchange's body is read whole first and its usage read off the response: a body-carrying
        request on USAGE_PATHS, or of a caller with limits."""
        if method not in CAPTURED_METHODS:
            return False
        if self.limiter is not None and self.limiter.applies(caller_id):
            return True
        return request_path(url) in self.usage_paths

    def settle_usage(self, exchange: _Exchange, partial: bool) -> tuple[tuple[int, int] | None, str]:
        """The exchange's exact tokens (None: unknown) and their source; its reservation settled."""
        tokens: tuple[int, int] | None = None
        if exchange.sse_usage is not None:
            tokens = exchange.sse_usage.usage
        elif exchange.tail_usage is not None:
            tokens = exchange.tail_usage.usage()
        if tokens is None:
            source = USAGE_NONE
        else:
            source = USAGE_REQUESTED if exchange.usage_requested else USAGE_FROM_RESPONSE
            self.metrics.metered_tokens[("input", source)] += tokens[0]
            self.metrics.metered_tokens[("output", source)] += tokens[1]
        reservation = exchange.reservation
        if reservation is not None and self.limiter is not None:
            exchange.reservation = None
            if tokens is not None:
                used = tokens[0] + tokens[1]
            elif partial or 200 <= exchange.status < 300:
                used = reservation.tokens  # generated, count unknown: the estimate stands
            else:
                used = 0  # refused or failed by the model server
            self.limiter.settle(reservation, used)
        return tokens, source

    def release_reservation(self, exchange: _Exchange) -> None:
        """An exchange that ends without an answer: nothing used unless it reached the model server."""
        reservation = exchange.reservation
        if reservation is not None and self.limiter is not None:
            exchange.reservation = None
            self.limiter.settle(reservation, reservation.tokens if exchange.started else 0)

    def sampled(self, method: bytes) -> bool:
        if method not in CAPTURED_METHODS:
            return False
        # random() is in [0, 1): a fraction of 1.0 always samples in, 0.0 never does.
        if random.random() < self.sampling_fraction:
            return True
        self.metrics.requests_sampled_out += 1
        return False

    def end_exchange(
        self, exchange: _Exchange, *, partial_reason: str | None = None, own_answer: bool = False
    ) -> None:
        """The exchange is over: answered, answered by the sidecar itself (``own_answer``: 401, 502, ...) or cut
        off (``partial_reason``). Metrics for every exchange with a status, the record for a sampled one."""
        duration = perf_counter() - exchange.t_head
        first_chunk = exchange.t_first_chunk
        # The model server may answer before the whole request is in: that first chunk came at once.
        time_to_first_chunk = (
            max(0.0, first_chunk - exchange.t_request_done) if first_chunk and exchange.t_request_done else None
        )
        metrics = self.metrics
        if exchange.status:
            metrics.observe_exchange(exchange.status, duration, time_to_first_chunk)
        if partial_reason is not None:
            metrics.partial_exchanges[partial_reason] += 1
        usage: tuple[tuple[int, int] | None, str] | None = None
        if exchange.metered:
            usage = self.settle_usage(exchange, partial_reason is not None)
        # A refused exchange is always recorded; with USAGE_RECORDS=all every metered one is (its usage only, when
        # it was not sampled).
        usage_only = not exchange.capture and (
            exchange.refusal is not None or (self.usage_records_all and exchange.metered and exchange.status != 0)
        )
        if exchange.capture or usage_only:
            self.finish_capture(
                exchange,
                duration_ms=round(duration * 1000, 3),
                time_to_first_chunk_ms=None if time_to_first_chunk is None else round(time_to_first_chunk * 1000, 3),
                partial_reason=partial_reason,
                with_output=not own_answer,
                usage=usage,
                usage_only=usage_only,
            )
        elif exchange.reserved:
            self.drop_capture(exchange, None)

    def finish_capture(
        self,
        exchange: _Exchange,
        *,
        duration_ms: float,
        time_to_first_chunk_ms: float | None,
        partial_reason: str | None,
        with_output: bool,
        usage: tuple[tuple[int, int] | None, str] | None = None,
        usage_only: bool = False,
    ) -> None:
        """Hand a finished sampled exchange to the uploader; its bytes stay reserved until uploaded. ``usage_only``:
        a record of its metadata and usage alone (a metered exchange that was not sampled)."""
        metrics = self.metrics
        limit = self.payload_limit
        request = response = None
        tokens, source = usage if usage is not None else (None, None)
        if usage_only:
            pass
        elif self.capture_input:
            data = b"".join(exchange.input_chunks)
            if len(data) > limit:
                data = data[:limit]
            if len(data) < exchange.input_total:
                metrics.truncated_payloads += 1
            request = CapturedPayload(exchange.request_type, data, exchange.input_total)
        if self.capture_output and with_output and not usage_only:
            data = b"".join(exchange.output_chunks)
            if len(data) < exchange.output_total:
                metrics.truncated_payloads += 1
            response = CapturedPayload(exchange.response_type, data, exchange.output_total)
        record = CapturedExchange(
            inference_time=exchange.arrival or datetime.now(UTC),
            inference_id=exchange.inference_id,
            request=request,
            response=response,
            caller_id=exchange.caller_id,
            request_path=request_path(exchange.url),
            response_status=exchange.status or None,
            duration_ms=duration_ms,
            time_to_first_chunk_ms=time_to_first_chunk_ms,
            partial_reason=partial_reason,
            input_tokens=None if tokens is None else tokens[0],
            output_tokens=None if tokens is None else tokens[1],
            usage_source=source,
            refused_by=None if exchange.refusal is None else exchange.refusal.limit,
            served_model=self.served_model if exchange.metered else None,
        )
        size = record.size_bytes
        # The uploader releases `size` when the record's upload ends (or it is dropped).
        if self.uploader.offer(record):
            self.budget.release(exchange.reserved - size)
        else:
            self.budget.release(exchange.reserved)
        exchange.reserved = 0
        exchange.capture = False

    def drop_capture(self, exchange: _Exchange, reason: str | None) -> None:
        if reason is None:
            self.release_reservation(exchange)  # the exchange is over
        if exchange.capture:
            exchange.capture = False
            if reason is not None:
                self.metrics.records_dropped[reason] += 1
        if exchange.reserved:
            self.budget.release(exchange.reserved)
            exchange.reserved = 0
        exchange.input_chunks = []
        exchange.output_chunks = []

    def admit(self, now: float) -> bool:
        """A new client connection (``now``: the loop's time): room is made for it, or it is refused (False).

        At MAX_UNAUTHENTICATED the oldest connection without an authenticated request is closed: refusing the new
        one instead would let a client that holds that many half-sent heads lock every new client out, while
        evicting makes it open connections faster than honest heads arrive and are read. The oldest is spared while
        it was never read and is younger than EVICTION_GRACE_SECONDS (then the new one is refused). At
        MAX_CONNECTIONS (the rest are authenticated or answered) one lingering after its answer, else the oldest
        unauthenticated by the same rule, is closed; with neither, the new connection is refused."""
        metrics = self.metrics
        if len(self.connections) >= self.max_connections:
            cap = CONNECTION_CAP_MAX_CONNECTIONS
            victim = next(iter(self.lingering), None) or self._evictable(now)
        elif len(self.unauthenticated) >= self.max_unauthenticated:
            cap = CONNECTION_CAP_MAX_UNAUTHENTICATED
            victim = self._evictable(now)
        else:
            return True
        if victim is None:
            metrics.connections_rejected[cap] += 1
            return False
        metrics.connections_evicted[cap] += 1
        victim.abort()
        return True

    def _evictable(self, now: float) -> ClientConnection | None:
        oldest = next(iter(self.unauthenticated), None)
        if oldest is None or not (oldest.read_from or now - oldest.accepted_at >= EVICTION_GRACE_SECONDS):
            return None
        return oldest

    def start_idle_sweeper(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._sweep_timeouts())

    async def _sweep_timeouts(self) -> None:
        interval = min(TIMEOUT_SWEEP_SECONDS, self.header_timeout / 10, self.idle_timeout / 10)
        metrics = self.metrics
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for deadlines in (self.head_deadlines, self.idle_deadlines):
                while deadlines:
                    connection, deadline = next(iter(deadlines.items()))
                    if deadline > now:
                        break
                    del deadlines[connection]
                    if connection.exchanges:
                        continue  # an exchange in flight: no timeout of these applies
                    if deadlines is self.head_deadlines:
                        metrics.header_timeouts += 1
                    else:
                        metrics.idle_timeouts += 1
                    connection.abort()

    def stop_accepting(self) -> None:
        """SIGTERM: idle connections close now, busy ones after their current response."""
        self.closing = True
        for connection in list(self.connections):
            connection.close_when_done()
        self.pool.close_idle()

    async def wait_for_connections(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.abort()
        self.pool.close_idle()


class ClientConnection(asyncio.Protocol):
    """A client connection: requests in, responses out, one exchange upstream at a time."""

    def __init__(self, proxy: CaptureProxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpRequestParser | None = None  # made once the connection is admitted
        self.exchanges: deque[_Exchange] = deque()  # [0] is the one being proxied
        self.parsing: _Exchange | None = None  # the request whose body is being read (its head was accepted)
        # The head being read: kept on the connection, not in an exchange, until it is whole and authenticated.
        self.in_head = False
        self.head_url = b""
        self.head_headers: list[tuple[bytes, bytes]] = []
        self.head_started = 0.0  # perf_counter() of its first byte (0.0: no head begun)
        self.head_bytes = 0  # url and header bytes seen by the callbacks
        self.head_received = 0  # raw bytes received while in the head (what httptools holds for a long line)
        self.messages_completed = 0
        self.authenticated = False  # a request on this connection was read whole and passed the key check
        self.accepted_at = 0.0  # the loop's time
        self.read_from = False
        self.to_client: list[bytes] = []
        self.writing_paused = False
        self.reading_paused = False
        self.upstream_full = False  # the upstream connection's write buffer is over its mark
        self.closed = False
        self.close_after_response = False
        self.discarding = False  # answered and closing: what the client still sends is dropped

    # ----- asyncio.Protocol -----

    def connection_made(self, base_transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, base_transport)  # a stream server's (uvloop's TCPTransport)
        proxy = self.proxy
        self.accepted_at = now = asyncio.get_running_loop().time()
        if proxy.closing or not proxy.admit(now):
            # Refused before anything is made for it: one small write and a close.
            self.closed = self.discarding = True
            transport.write(_AT_CAPACITY)
            transport.close()
            return
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        self.parser = httptools.HttpRequestParser(self)
        proxy.connections.add(self)
        proxy.unauthenticated[self] = None
        # The first head must be whole within the header timeout from the connection.
        proxy.head_deadlines[self] = time.monotonic() + proxy.header_timeout

    def data_received(self, data: bytes) -> None:
        if self.discarding:
            return
        assert self.parser is not None
        self.read_from = True
        in_head = self.in_head
        completed = self.messages_completed
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            # Upgrade is hop-by-hop and dropped: the request is proxied as plain HTTP/1.1, and
            # llhttp (resumed by httptools) parses what follows as the next request.
            rest = data[upgrade.args[0] :]
            if rest and not self.closed:
                self.data_received(rest)
                return
        except httptools.HttpParserCallbackError:
            if not self.closed:
                log.exception("request handling failed")
                self._reject(500, "Internal Server Error", "internal error")
            return
        except httptools.HttpParserError as error:
            if not self.closed:
                self._reject(400, "Bad Request", f"malformed request ({error})")
            return
        if self.closed:
            return
        # httptools joins the pieces of a header line before on_header: count what arrives while a head is read, so
        # one endless line is bounded like many (a head begun after a request in this same read: from the next one).
        if self.in_head and (in_head or completed == self.messages_completed):
            self.head_received += len(data)
            if self.head_received > MAX_REQUEST_HEAD_BYTES:
                try:
                    self._head_too_large()
                except _Rejected:
                    return
        self._pump()

    def eof_received(self) -> bool:
        if self.discarding:
            return False
        if self.parsing is not None or (self.in_head and not self.exchanges):
            # The client ended its side in the middle of a request, which can never be complete: close now.
            self.proxy.metrics.half_open_closed += 1
            return False
        if not self.exchanges:
            return False
        # A client that half-closes after its request still gets the response (then we close); a head it began
        # after that request is never completed.
        self.close_after_response = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        # Not closed by the sidecar: the client went away (reset or closed) with the response not yet complete.
        by_client = not self.closed
        self.closed = True
        self._forget()
        self.proxy.connections.discard(self)
        self.proxy.lingering.pop(self, None)
        for index, exchange in enumerate(self.exchanges):
            upstream = exchange.upstream
            if upstream is not None:
                upstream.abandon()  # stop reading from the model server; never reuse it
            if by_client and index == 0 and exchange.started:
                # Recorded with what was captured: a client that read the whole stream and reset before the
                # last chunk still cost a generation (pipelined requests behind it never started).
                self.proxy.end_exchange(exchange, partial_reason=PARTIAL_CLIENT_DISCONNECTED)
            else:
                self.proxy.drop_capture(exchange, None)
        self.exchanges.clear()
        if self.parsing is not None:
            self.proxy.drop_capture(self.parsing, None)
            self.parsing = None

    def pause_writing(self) -> None:
        self.writing_paused = True
        if self.exchanges and self.exchanges[0].upstream is not None:
            self.exchanges[0].upstream.pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.exchanges and self.exchanges[0].upstream is not None:
            self.exchanges[0].upstream.resume_reading()

    # ----- httptools callbacks -----

    def on_message_begin(self) -> None:
        self.in_head = True
        self.head_started = perf_counter()  # the exchange's t_head: the first byte of the request head
        self.head_url = b""
        self.head_headers = []
        self.head_bytes = self.head_received = 0
        if not self.exchanges:
            proxy = self.proxy
            # Idle keep-alive until now: the header timeout runs from this first byte (on a new connection it
            # already runs, from the connection).
            if proxy.idle_deadlines.pop(self, None) is not None:
                proxy.head_deadlines[self] = time.monotonic() + proxy.header_timeout

    def on_url(self, url: bytes) -> None:
        self.head_url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self.head_headers
        headers.append((name, value))
        self._count_head(len(name) + len(value) + 4)
        if len(headers) > MAX_REQUEST_HEADERS:
            self._head_too_large()

    def on_headers_complete(self) -> None:
        proxy = self.proxy
        parser = self.parser
        assert parser is not None
        self.in_head = False
        proxy.head_deadlines.pop(self, None)
        proxy.metrics.requests_proxied += 1
        headers = self.head_headers
        content_length = None
        authorization = request_type = inference_id = None
        chunked = expect_continue = False
        authorizations = 0
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                content_length = int(value)  # llhttp has validated it
            elif lower == b"transfer-encoding":
                chunked = True  # llhttp only accepts chunked as the final coding of a request
            elif lower == b"expect" and value.strip().lower() == b"100-continue":
                expect_continue = True
            elif lower == b"content-type":
                request_type = value
            elif lower == INFERENCE_ID_HEADER:
                inference_id = value
            elif lower == b"authorization":
                authorization = value
                authorizations += 1
        caller_id = None
        if proxy.jwt is not None:
            try:
                if authorizations > 1:  # which one the gateway reads is not ours to guess: no caller is recorded
                    raise Refused(401, "several Authorization headers")
                caller_id = proxy.jwt.caller_of(authorization)
            except Refused as refused:
                proxy.metrics.requests_unauthorized += 1
                reason = "Unauthorized" if refused.status == 401 else "Service Unavailable"
                extra = b'WWW-Authenticate: Bearer error="invalid_token"\r\n' if refused.status == 401 else b""
                self._reject(refused.status, reason, refused.reason, extra=extra)
                raise _Rejected from None
        elif proxy.api_keys.required:
            caller_id = proxy.api_keys.caller_of(authorization)
            if caller_id is None:
                # Checked first, before anything is made, forwarded or captured: an unauthenticated client learns
                # nothing and costs no exchange.
                proxy.metrics.requests_unauthorized += 1
                self._reject(401, "Unauthorized", "missing or wrong API key", extra=b"WWW-Authenticate: Bearer\r\n")
                raise _Rejected
        if not self.authenticated:
            self.authenticated = True
            proxy.unauthenticated.pop(self, None)
        exchange = _Exchange(parser.get_method(), self.head_url, headers, self.head_started)
        self.head_headers = []
        self.head_url = b""
        self.head_started = 0.0
        self.parsing = exchange
        self.exchanges.append(exchange)
        method = exchange.method
        exchange.http10 = parser.get_http_version() == "1.0"
        exchange.keep_alive = parser.should_keep_alive() and not proxy.closing
        exchange.caller_id = caller_id
        if request_type is not None:
            exchange.request_type = _decode(request_type)
        if inference_id is not None:
            exchange.inference_id = _decode(inference_id)
        if content_length is not None and content_length > proxy.max_request_body:
            self._reject(413, "Content Too Large", "request body over MAX_REQUEST_BODY_BYTES")
            raise _Rejected
        if chunked:
            exchange.body_mode = BODY_CHUNKED
        elif content_length:
            exchange.body_mode = BODY_LENGTH
            exchange.declared_length = content_length
        if proxy.metered(method, exchange.url, caller_id):
            # Read whole first (bounded like a chunked body): its usage may be asked for, its tokens reserved.
            exchange.metered = True
            exchange.body_mode = BODY_CHUNKED
        if proxy.sampled(method):
            exchange.capture = True
            exchange.arrival = datetime.now(UTC)
            if exchange.body_mode == BODY_LENGTH and proxy.capture_input:
                # Reserved up front: the body may stream through before it is all here.
                wanted = min(content_length or 0, proxy.payload_limit)
                if proxy.budget.try_reserve(wanted):
                    exchange.reserved = wanted
                else:
                    proxy.drop_capture(exchange, DROP_MEMORY_FULL)
        if exchange.body_mode != BODY_CHUNKED:
            # Content-Length bodies stream through; a body-less POST still says Content-Length: 0.
            length = content_length if content_length is not None else (0 if method in CAPTURED_METHODS else None)
            self._queue_upstream(exchange, self._upstream_head(exchange, length))
        if expect_continue and exchange.body_mode != BODY_NONE and self.exchanges[0] is exchange:
            self.write(_CONTINUE)  # the sidecar takes the body; the model server never sees Expect

    def on_body(self, body: bytes) -> None:
        exchange = self.parsing
        assert exchange is not None
        proxy = self.proxy
        if exchange.body_mode == BODY_CHUNKED:
            exchange.input_total += len(body)
            if exchange.input_total > proxy.max_request_body:
                self._reject(413, "Content Too Large", "request body over MAX_REQUEST_BODY_BYTES")
                raise _Rejected
            small = exchange.input_total <= SMALL_BODY_BYTES  # (the body so far, this piece included)
            budget = proxy.budget
            if not (budget.try_reserve_small(len(body)) if small else budget.try_reserve(len(body))):
                proxy.metrics.requests_rejected_memory += 1
                self._reject(
                    503,
                    "Service Unavailable",
                    "too many request bodies in flight, retry later",
                    extra=f"Retry-After: {RETRY_AFTER_SECONDS}\r\n".encode(),
                )
                raise _Rejected
            exchange.reserved += len(body)
            exchange.input_chunks.append(body)
            return
        if exchange.capture and proxy.capture_input:
            exchange.input_total += len(body)
            room = exchange.reserved - exchange.input_kept
            if room > 0:
                piece = body if len(body) <= room else body[:room]
                exchange.input_chunks.append(piece)
                exchange.input_kept += len(piece)
        self._queue_upstream(exchange, body)

    def on_message_complete(self) -> None:
        exchange = self.parsing
        assert exchange is not None
        self.parsing = None
        self.messages_completed += 1
        exchange.request_done = True
        exchange.t_request_done = perf_counter()
        if exchange.body_mode == BODY_CHUNKED:
            body = b"".join(exchange.input_chunks)
            exchange.input_chunks = [body] if exchange.capture and self.proxy.capture_input else []
            if not exchange.capture:
                self.proxy.budget.release(exchange.reserved)
                exchange.reserved = 0
            elif not self.proxy.capture_input:
                # Only the output is captured: the buffered body is not kept past forwarding.
                self.proxy.budget.release(exchange.reserved)
                exchange.reserved = 0
            if exchange.metered:
                self._meter(exchange, body)
            else:
                self._queue_upstream(exchange, self._upstream_head(exchange, len(body)))
                if body:
                    self._queue_upstream(exchange, body)
        if not exchange.keep_alive:
            # No request after this one on this connection; ignore anything the client still sends.
            self.close_after_response = True

    # ----- request path -----

    def _meter(self, exchange: _Exchange, body: bytes) -> None:
        """A metered request is whole: ask a stream for its usage, reserve its tokens (or refuse it), forward it."""
        proxy = self.proxy
        sent = body
        if proxy.request_stream_usage and not exchange.http10:
            changed = with_stream_usage(body)
            if changed is not None:
                sent = changed
                exchange.usage_requested = True
        limiter = proxy.limiter
        if limiter is not None and limiter.applies(exchange.caller_id):
            estimate = estimate_tokens(
                body, bytes_per_token=proxy.bytes_per_token, default_output_tokens=proxy.default_output_tokens
            )
            decision = limiter.admit(exchange.caller_id, estimate)
            if isinstance(decision, Refusal):
                exchange.refusal = decision  # answered when it is this connection's turn (_pump)
                return
            if not isinstance(decision, Reservation):
                exchange.admitting = True  # its lease is short: the store is asked first (bounded)
                asyncio.get_running_loop().create_task(self._admit_later(exchange, decision, sent))
                return
            exchange.reservation = decision
        self._forward(exchange, sent)

    def _forward(self, exchange: _Exchange, body: bytes) -> None:
        self._queue_upstream(exchange, self._upstream_head(exchange, len(body)))
        if body:
            self._queue_upstream(exchange, body)

    async def _admit_later(
        self, exchange: _Exchange, pending: Awaitable[Reservation | Refusal], body: bytes
    ) -> None:
        try:
            decision = await pending
        except Exception:  # a bug, never a hang: the request is answered
            log.exception("admission failed")
            decision = Refusal(503, "store", RETRY_AFTER_SECONDS, "the budget could not be checked")
        exchange.admitting = False
        if self.closed or exchange not in self.exchanges:
            if isinstance(decision, Reservation) and self.proxy.limiter is not None:
                self.proxy.limiter.settle(decision, 0)  # the client left meanwhile
            return
        if isinstance(decision, Refusal):
            exchange.refusal = decision
        else:
            exchange.reservation = decision
            self._forward(exchange, body)
        self._pump()

    def _answer_refusal(self, exchange: _Exchange) -> None:
        """429 over a caller's limit (503 when the budget store is unreachable and LIMITS_STORE_FAILURE=closed), in
        OpenAI's error shape, with Retry-After; recorded with refusedBy."""
        refusal = exchange.refusal
        assert refusal is not None
        exchange.status = refusal.status
        keep_alive = exchange.keep_alive and not self.close_after_response
        self.write(refusal_response(refusal, keep_alive=keep_alive))
        self.exchange_done(exchange, reusable_client=keep_alive, own_answer=True)

    def _count_head(self, size: int) -> None:
        self.head_bytes += size
        if self.head_bytes > MAX_REQUEST_HEAD_BYTES:
            self._head_too_large()

    def _head_too_large(self) -> None:
        self._reject(
            431, "Request Header Fields Too Large", f"request head over 64 KiB or {MAX_REQUEST_HEADERS} header lines"
        )
        raise _Rejected

    def _upstream_head(self, exchange: _Exchange, length: int | None) -> bytes:
        named = (
            _connection_tokens(exchange.headers)
            if any(name.lower() == b"connection" for name, _ in exchange.headers)
            else frozenset()
        )
        parts = [exchange.method, b" ", exchange.url, b" HTTP/1.1\r\nHost: ", self.proxy.host_header, _CRLF]
        for name, value in exchange.headers:
            lower = name.lower()
            if lower in REQUEST_HEADERS_NOT_FORWARDED or lower in named:
                continue
            parts += (name, b": ", value, _CRLF)
        if length is not None:
            parts += (b"Content-Length: ", str(length).encode(), _CRLF)
        parts.append(_CRLF)
        return b"".join(parts)

    def _queue_upstream(self, exchange: _Exchange, data: bytes) -> None:
        exchange.to_upstream.append(data)
        exchange.to_upstream_bytes += len(data)
        replay = exchange.replay
        if replay is not None:
            exchange.replay_bytes += len(data)
            if exchange.replay_bytes > MAX_REPLAY_BYTES:
                exchange.replay = None
            else:
                replay.append(data)

    def _pump(self) -> None:
        """After parsing: start the current exchange upstream, or send it what was parsed."""
        if not self.exchanges:
            self._update_reading()
            return
        exchange = self.exchanges[0]
        if exchange.refusal is not None and not exchange.started:
            self._answer_refusal(exchange)
            return
        if not exchange.started and (exchange.to_upstream or exchange.request_done):
            if not exchange.to_upstream:
                # A request that was rejected while parsing never reaches the model server.
                return
            exchange.started = True
            upstream = self.proxy.pool.take_idle()
            if upstream is not None:
                upstream.attach(self, exchange)
            else:
                asyncio.get_running_loop().create_task(self._connect(exchange))
        elif exchange.upstream is not None and exchange.to_upstream:
            exchange.upstream.send_pending()
        self._update_reading()

    async def _connect(self, exchange: _Exchange) -> None:
        try:
            upstream = await self.proxy.pool.connect()
        except (OSError, TimeoutError, ssl.SSLError) as error:
            self.proxy.metrics.upstream_errors += 1
            self.proxy.warn_upstream("model server unreachable", error)
            self.fail_exchange(exchange, 502, "model server unreachable")
            return
        if self.closed or not self.exchanges or self.exchanges[0] is not exchange:
            self.proxy.pool.release(upstream)
            return
        upstream.attach(self, exchange)
        self._update_reading()

    def retry_exchange(self, exchange: _Exchange) -> None:
        """The reused upstream connection closed before answering: send the request again, once."""
        assert exchange.replay is not None
        exchange.retried = True
        exchange.upstream = None
        exchange.to_upstream = list(exchange.replay)
        exchange.to_upstream_bytes = sum(map(len, exchange.to_upstream))
        asyncio.get_running_loop().create_task(self._connect(exchange))

    def _update_reading(self) -> None:
        """Read from the client only while what it sends can go somewhere without piling up."""
        transport = self.transport
        if transport is None or self.closed:
            return
        pause = False
        if len(self.exchanges) > 1:
            pause = True  # a pipelined request waits for the response before it
        elif self.exchanges:
            current = self.exchanges[0]
            if current.upstream is None and current.to_upstream_bytes > MAX_PENDING_BODY_BYTES:
                pause = True  # still connecting upstream
            elif self.upstream_full:
                pause = True  # the model server reads the body slower than the client sends it
        if pause != self.reading_paused:
            self.reading_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    # ----- response path (called by UpstreamConnection) -----

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def exchange_done(self, exchange: _Exchange, *, reusable_client: bool, own_answer: bool = False) -> None:
        """The response is complete on the client side (``own_answer``: the sidecar's, not the model server's)."""
        if self.exchanges and self.exchanges[0] is exchange:
            self.exchanges.popleft()
        self.proxy.end_exchange(exchange, own_answer=own_answer)
        if not reusable_client or not exchange.keep_alive or (self.close_after_response and not self.exchanges):
            self._close()
            return
        if not exchange.request_done:
            # The model server answered before the whole request body arrived: the rest of it
            # cannot be told apart from the next request without reading it, so close.
            self._close()
            return
        proxy = self.proxy
        if not self.exchanges:
            if proxy.closing and self.parsing is None:
                self._close()
                return
            # No exchange in flight: the idle timeout runs, or the header timeout for a head begun meanwhile.
            if self.in_head:
                proxy.head_deadlines[self] = time.monotonic() + proxy.header_timeout
            else:
                proxy.idle_deadlines[self] = time.monotonic() + proxy.idle_timeout
        self._pump()

    def fail_exchange(self, exchange: _Exchange, status: int, message: str) -> None:
        """The model server failed before any response byte reached the client: the sidecar answers (and records
        the exchange with that status, without an output)."""
        if self.closed:
            self.proxy.drop_capture(exchange, None)  # the client is gone: connection_lost ended the exchange
            return
        reason = {502: "Bad Gateway", 503: "Service Unavailable"}.get(status, "Error")
        self.write(_plain_response(status, reason, message, close=not exchange.request_done))
        exchange.upstream = None
        exchange.status = status
        if exchange.request_done:
            self.exchange_done(exchange, reusable_client=True, own_answer=True)
        else:
            self.proxy.drop_capture(exchange, None)  # half a request body is not a record
            self.proxy.end_exchange(exchange, own_answer=True)
            self._close()

    def break_response(self, exchange: _Exchange) -> None:
        """The model server broke a response whose headers are out: closing is the only signal left. Recorded
        with what was captured, as partial."""
        self.proxy.end_exchange(exchange, partial_reason=PARTIAL_UPSTREAM_BROKEN)
        self._close()

    def upstream_write_buffer(self, full: bool) -> None:
        self.upstream_full = full
        self._update_reading()

    # ----- closing -----

    def _reject(self, status: int, reason: str, message: str, extra: bytes = b"") -> None:
        """Answer this request ourselves and close the connection (its remaining bytes are unread).

        Only before the request was forwarded: a request already on its way upstream is failed
        by closing, like any broken exchange."""
        exchange = self.parsing
        if exchange is not None:
            self.proxy.drop_capture(exchange, None)
            if exchange.started:
                self._close()
                return
        if self.exchanges and self.exchanges[0] is not exchange:
            self._close()  # a response is still going out ahead of this request
            return
        self.write(_plain_response(status, reason, message, close=True, extra=extra))
        if exchange is not None:
            exchange.status = status  # counted by status class; never recorded
            self.proxy.end_exchange(exchange, own_answer=True)
        elif self.head_started:
            # Refused with its head (401, 431, 400): no exchange was made, the answer is counted all the same.
            self.proxy.metrics.observe_exchange(status, perf_counter() - self.head_started, None)
        self._close(linger=True)

    def _close(self, *, linger: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self._forget()
        transport = self.transport
        for exchange in self.exchanges:
            if exchange.upstream is not None:
                exchange.upstream.abandon()
            self.proxy.drop_capture(exchange, None)
        self.exchanges.clear()
        if self.parsing is not None:
            self.proxy.drop_capture(self.parsing, None)
            self.parsing = None
        if transport is None:
            return
        if linger and transport.can_write_eof():
            # Lingering close, like nginx's: closing with unread request bytes in the socket
            # makes the kernel send a reset, which can destroy the answer (413, 503) before the
            # client reads it. Send it and a FIN, drop what still arrives, close a bit later.
            self.discarding = True
            self.proxy.lingering[self] = None  # the first to go if MAX_CONNECTIONS are reached
            transport.write_eof()
            if self.reading_paused:
                self.reading_paused = False
                transport.resume_reading()
            asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)
            return
        transport.close()  # flushes what is buffered, then closes

    def close_when_done(self) -> None:
        if not self.exchanges and self.parsing is None:
            self._close()
        else:
            self.close_after_response = True
            for exchange in self.exchanges:
                exchange.keep_alive = False

    def _forget(self) -> None:
        """Off every timeout and cap list (closing)."""
        proxy = self.proxy
        proxy.head_deadlines.pop(self, None)
        proxy.idle_deadlines.pop(self, None)
        proxy.unauthenticated.pop(self, None)

    def abort(self) -> None:
        """Close at once, nothing flushed (a timeout, a cap, the end of the shutdown grace)."""
        self._close()
        self.proxy.connections.discard(self)
        self.proxy.lingering.pop(self, None)
        if self.transport is not None:
            self.transport.abort()


class _Rejected(Exception):
    """Stops parsing a request that was answered by the proxy (the connection is closing)."""


class UpstreamConnection(asyncio.Protocol):
    """A keep-alive connection to the model server, serving one exchange at a time."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.client: ClientConnection | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.reused = False
        self.response_bytes = 0
        self.reading_paused = False
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.informational = False
        self.no_body = False
        self.chunked_out = False  # re-framing the body as chunks for the client
        self.until_close = False  # response body delimited by the connection closing
        self.close_client_after = False
        self.message_done = False
        self.keep_alive = False  # llhttp's verdict, read while the message is current

    # ----- asyncio.Protocol -----

    def connection_made(self, base_transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, base_transport)  # a stream connection's (uvloop's)
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            self._close()  # bytes nobody asked for: this connection is not in a known state
            return
        self.response_bytes += len(data)
        client = self.client
        assert client is not None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._flush(client)
            self._broken(f"invalid response ({error})")
            return
        if self.message_done:
            # With no_body (HEAD) llhttp would wait for the body the headers announce: done anyway.
            self._complete()
        else:
            self._flush(client)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self.exchange
        if exchange is None:
            return
        client = self.client
        assert client is not None
        if self.until_close and self.status and not self.informational:
            self._complete()
            return
        if self.response_bytes == 0 and self.reused and exchange.replay is not None and not exchange.retried:
            self.exchange = self.client = None
            client.retry_exchange(exchange)
            return
        self._broken("model server closed the connection" + (f" ({exc})" if exc else ""))

    def pause_writing(self) -> None:
        if self.client is not None:
            self.client.upstream_write_buffer(True)

    def resume_writing(self) -> None:
        if self.client is not None:
            self.client.upstream_write_buffer(False)

    # ----- driven by ClientConnection -----

    def attach(self, client: ClientConnection, exchange: _Exchange) -> None:
        self.client = client
        self.exchange = exchange
        exchange.upstream = self
        self.response_bytes = 0
        self.status = 0
        self.message_done = False
        self.send_pending()
        if client.writing_paused:
            self.pause_reading()

    def send_pending(self) -> None:
        exchange = self.exchange
        if exchange is None or self.transport is None or self.closed:
            return
        pending = exchange.to_upstream
        if pending:
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
            exchange.to_upstream = []
            exchange.to_upstream_bytes = 0

    def pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None and not self.closed:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None and not self.closed:
            self.reading_paused = False
            self.transport.resume_reading()

    def abandon(self) -> None:
        """The client went away: stop reading, close, never reuse."""
        self.exchange = self.client = None
        self._close()

    # ----- httptools callbacks -----

    def on_message_begin(self) -> None:
        self.headers = []
        self.reason = b""
        self.informational = False

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            self.informational = True  # 1xx (e.g. 103 Early Hints) are not forwarded
            return
        self.status = status
        exchange = self.exchange
        client = self.client
        assert exchange is not None and client is not None
        exchange.status = status
        headers = self.headers
        named = _connection_tokens(headers)
        parts = [b"HTTP/1.1 ", str(status).encode(), b" ", self.reason, _CRLF]
        length = None
        chunked = False
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                length = value
            elif lower == b"transfer-encoding":
                chunked = True
            elif lower == b"content-type":
                exchange.response_type = _decode(value)
            if lower in RESPONSE_HEADERS_NOT_FORWARDED or lower in named:
                continue
            parts += (name, b": ", value, _CRLF)
        if exchange.metered:
            media_type = (exchange.response_type or "").partition(";")[0].strip().lower()
            if media_type == "text/event-stream":
                exchange.sse_usage = SseUsage(strip=exchange.usage_requested)
                if exchange.usage_requested and length is not None:
                    length, chunked = None, True  # an event may be removed: re-framed as chunks for the client
            else:
                exchange.tail_usage = TailUsage()
        self.no_body = exchange.method == b"HEAD" or status in (204, 304)
        self.chunked_out = self.until_close = False
        close_client = not exchange.keep_alive or (client.close_after_response and len(client.exchanges) <= 1)
        if length is not None:
            parts += (b"Content-Length: ", length, _CRLF)
        elif not self.no_body:
            self.until_close = not chunked
            if exchange.http10:
                close_client = True  # HTTP/1.0 has no chunks: the end of the body is the close
            else:
                self.chunked_out = True
                parts.append(b"Transfer-Encoding: chunked\r\n")
        if close_client:
            parts.append(b"Connection: close\r\n")
        elif exchange.http10:
            parts.append(b"Connection: keep-alive\r\n")
        parts.append(_CRLF)
        self.close_client_after = close_client
        self.keep_alive = self.parser.should_keep_alive()
        client.to_client.append(b"".join(parts))
        exchange.response_started = True
        if self.no_body:
            self.message_done = True

    def on_body(self, body: bytes) -> None:
        if self.informational:
            return
        exchange = self.exchange
        client = self.client
        assert exchange is not None and client is not None
        if self.no_body:
            return
        if not exchange.t_first_chunk:
            exchange.t_first_chunk = perf_counter()
        passed = body
        if exchange.sse_usage is not None:
            passed = exchange.sse_usage.feed(body)  # without the usage event the sidecar asked for
        elif exchange.tail_usage is not None:
            exchange.tail_usage.feed(body)
        if passed:
            out = client.to_client
            if self.chunked_out:
                out.append(b"%x\r\n" % len(passed))
                out.append(passed)
                out.append(_CRLF)
            else:
                out.append(passed)
        if exchange.capture:
            proxy = self.pool.proxy
            if proxy.capture_output:
                exchange.output_total += len(body)
                room = proxy.payload_limit - exchange.output_kept
                if room > 0:
                    piece = body if len(body) <= room else body[:room]
                    if proxy.budget.try_reserve(len(piece)):
                        exchange.reserved += len(piece)
                        exchange.output_chunks.append(piece)
                        exchange.output_kept += len(piece)
                    else:
                        proxy.drop_capture(exchange, DROP_MEMORY_FULL)

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        self.keep_alive = self.parser.should_keep_alive()  # reset once the message is over
        self.message_done = True

    # ----- internals -----

    def _flush(self, client: ClientConnection) -> None:
        out = client.to_client
        if out:
            client.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()

    def _complete(self) -> None:
        exchange = self.exchange
        client = self.client
        assert exchange is not None and client is not None
        if exchange.sse_usage is not None and not self.no_body:
            rest = exchange.sse_usage.finish()
            if rest:
                client.to_client.append(b"%x\r\n%s\r\n" % (len(rest), rest) if self.chunked_out else rest)
        if self.chunked_out:
            client.to_client.append(_LAST_CHUNK)
        self._flush(client)
        reusable = (
            not self.closed
            and not self.until_close
            and exchange.request_done
            and not exchange.to_upstream
            and self.keep_alive
        )
        no_body = self.no_body
        self.exchange = self.client = None
        self.no_body = self.message_done = False
        exchange.upstream = None
        if no_body:
            # llhttp cannot be told this response has no body (HEAD): start a fresh parser.
            self.parser = httptools.HttpResponseParser(self)
        if reusable:
            self.reused = True
            self.pool.release(self)
        else:
            self._close()
        client.exchange_done(exchange, reusable_client=not self.close_client_after)

    def _broken(self, problem: str) -> None:
        exchange = self.exchange
        client = self.client
        self.exchange = self.client = None
        self._close()
        if exchange is None or client is None:
            return
        exchange.upstream = None
        proxy = self.pool.proxy
        proxy.metrics.upstream_errors += 1
        proxy.warn_upstream("model server broke the response", problem)
        if exchange.response_started:
            client.break_response(exchange)
        else:
            client.fail_exchange(exchange, 502, "model server broke the response")

    def _close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()
        self.closed = True


class UpstreamPool:
    """Idle keep-alive connections to the model server, most recently used first."""

    def __init__(self, proxy: CaptureProxy, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        self.proxy = proxy
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.idle: list[UpstreamConnection] = []

    def take_idle(self) -> UpstreamConnection | None:
        idle = self.idle
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        return None

    async def connect(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(
            loop.create_connection(
                lambda: UpstreamConnection(self),
                self.host,
                self.port,
                ssl=self.ssl_context,
                server_hostname=self.host if self.ssl_context is not None else None,
            ),
            UPSTREAM_CONNECT_TIMEOUT_SECONDS,
        )
        return connection

    def release(self, connection: UpstreamConnection) -> None:
        if connection.closed:
            return
        connection.resume_reading()  # an idle connection must notice the server closing it
        if self.proxy.closing or len(self.idle) >= MAX_IDLE_UPSTREAM_CONNECTIONS:
            connection._close()
            return
        self.idle.append(connection)

    def close_idle(self) -> None:
        for connection in self.idle:
            connection._close()
        self.idle.clear()

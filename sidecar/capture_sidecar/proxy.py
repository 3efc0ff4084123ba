"""The transparent reverse proxy in front of the model server, with capture on the side.

Hot path per request: one sampling decision, header filtering, one upstream call on a pooled
connection, and for streamed responses a write per upstream chunk (never buffered). Capture
only keeps references to the byte chunks already in hand; encoding happens at upload time.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, istr
from yarl import URL

from .metrics import SidecarMetrics
from .records import CapturedExchange, CapturedPayload
from .settings import Settings
from .uploader import CaptureUploader

log = logging.getLogger("capture_sidecar.proxy")

# RFC 9110 §7.6.1 connection-specific headers, plus the legacy Proxy-Connection.
HOP_BY_HOP_HEADERS = frozenset(
    istr(name)
    for name in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
    )
)
# Recomputed for each hop: aiohttp sets Host and Content-Length from the URL and the body; the
# request body is read in full, so an Expect: 100-continue is answered here, not upstream.
REQUEST_HEADERS_SET_PER_HOP = frozenset(istr(name) for name in ("Host", "Content-Length", "Expect"))
RESPONSE_HEADERS_SET_PER_HOP = frozenset(istr(name) for name in ("Content-Length",))

# Inference calls carry a body; GET/HEAD/OPTIONS/DELETE (health checks, metrics, model lists)
# are proxied but never captured.
CAPTURED_METHODS = frozenset({"POST", "PUT", "PATCH"})
INFERENCE_ID_HEADER = istr("X-Amzn-SageMaker-Inference-Id")

# A fixed-length response up to this size is read whole and sent in one write: it is already
# complete upstream, and one write is cheaper than streaming it. Anything else is streamed.
SMALL_RESPONSE_BYTES = 64 * 1024
UPSTREAM_WARNING_INTERVAL_SECONDS = 10.0


def _forwardable(headers: CIMultiDictProxy[str], set_per_hop: frozenset[istr]) -> CIMultiDict[str]:
    """Headers minus hop-by-hop ones, including any the Connection header names."""
    named_by_connection = {
        istr(token.strip()) for value in headers.getall("Connection", ()) for token in value.split(",")
    }
    forwarded: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name in HOP_BY_HOP_HEADERS or name in set_per_hop or name in named_by_connection:
            continue
        forwarded.add(name, value)
    return forwarded


def _fail_body_when_connection_drops(upstream: aiohttp.ClientResponse) -> Callable[[], None]:
    """Make a streamed body fail, not hang, when the upstream connection closes mid-body.

    aiohttp 3.14 closes the connection on a framing error that arrives after the headers (e.g. an
    invalid chunk size) but leaves the body reader waiting forever. Returns the undo function,
    to call once the body is done, because the connection goes back to the pool.
    """
    connection = upstream.connection
    closed = connection.protocol.closed if connection is not None and connection.protocol is not None else None
    if closed is None or closed.done():
        return lambda: None

    def fail_body(_: asyncio.Future[None]) -> None:
        if not upstream.content.is_eof():
            upstream.content.set_exception(aiohttp.ClientPayloadError("model server closed the connection"))

    closed.add_done_callback(fail_body)
    return lambda: closed.remove_done_callback(fail_body)


class _OutputCollector:
    """Keeps the response body up to the payload cap while it streams past."""

    __slots__ = ("chunks", "kept", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.kept = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - self.kept
        if room > 0:
            piece = chunk if len(chunk) <= room else chunk[:room]
            self.chunks.append(piece)
            self.kept += len(piece)


class CaptureProxy:
    def __init__(
        self,
        *,
        settings: Settings,
        session: aiohttp.ClientSession,
        uploader: CaptureUploader,
        metrics: SidecarMetrics,
    ) -> None:
        self._upstream = settings.upstream_url
        self._session = session
        self._uploader = uploader
        self._metrics = metrics
        self._sampling_fraction = settings.sampling_percentage / 100.0
        self._capture_input = settings.capture_input
        self._capture_output = settings.capture_output
        self._payload_limit = settings.max_payload_bytes or sys.maxsize
        self._max_request_body = settings.max_request_body_bytes
        self._last_upstream_warning = -UPSTREAM_WARNING_INTERVAL_SECONDS

    def _warn_upstream(self, problem: str, error: BaseException) -> None:
        """Log model-server failures at most once per interval: a server that is down would
        otherwise write one line per request. The counter on /metrics has the exact numbers."""
        now = time.monotonic()
        if now - self._last_upstream_warning >= UPSTREAM_WARNING_INTERVAL_SECONDS:
            self._last_upstream_warning = now
            log.warning("%s: %s: %s", problem, type(error).__name__, error)

    def _sampled(self, method: str) -> bool:
        if method not in CAPTURED_METHODS:
            return False
        # random() is in [0, 1): a fraction of 1.0 always samples in, 0.0 never does.
        if random.random() < self._sampling_fraction:
            return True
        self._metrics.requests_sampled_out += 1
        return False

    def _payload(self, content_type: str | None, data: bytes, original_size: int) -> CapturedPayload:
        if len(data) < original_size:
            self._metrics.truncated_payloads += 1
        return CapturedPayload(content_type=content_type, data=data, original_size=original_size)

    async def _read_request_body(self, request: web.BaseRequest) -> bytes | None:
        """The whole request body, or None when it is over MAX_REQUEST_BODY_BYTES."""
        if request.headers.get("Expect", "").lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        declared = request.content_length
        if declared is not None:
            return None if declared > self._max_request_body else await request.content.read()
        chunks, size = [], 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > self._max_request_body:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        self._metrics.requests_proxied += 1
        arrival = datetime.now(UTC)
        method = request.method
        capture = self._sampled(method)
        body = await self._read_request_body(request)
        if body is None:
            return web.Response(status=413, text="capture sidecar: request body over MAX_REQUEST_BODY_BYTES\n")
        has_body = bool(body) or request.content_length is not None or method in CAPTURED_METHODS
        try:
            upstream = await self._session.request(
                method,
                URL(self._upstream + request.raw_path, encoded=True),
                headers=_forwardable(request.headers, REQUEST_HEADERS_SET_PER_HOP),
                data=body if has_body else None,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            self._metrics.upstream_errors += 1
            self._warn_upstream("model server unreachable", error)
            return web.Response(status=502, text="capture sidecar: model server unreachable\n")

        collector = _OutputCollector(self._payload_limit if capture and self._capture_output else 0)
        response: web.StreamResponse | None = None
        try:
            headers = _forwardable(upstream.headers, RESPONSE_HEADERS_SET_PER_HOP)
            length = upstream.content_length
            if length is not None and length <= SMALL_RESPONSE_BYTES and method != "HEAD":
                content = await upstream.read()
                collector.add(content)
                response = web.Response(status=upstream.status, reason=upstream.reason, headers=headers, body=content)
            else:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
                if length is not None:
                    response.content_length = length
                await response.prepare(request)
                forget_connection = _fail_body_when_connection_drops(upstream)
                try:
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                        collector.add(chunk)
                finally:
                    forget_connection()
                await response.write_eof()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, OSError, TimeoutError) as error:
            upstream.close()  # never reuse a connection left mid-body
            if isinstance(error, ConnectionResetError) and response is not None and response.prepared:
                return response  # the client went away mid-stream: nothing left to do or capture
            self._metrics.upstream_errors += 1
            self._warn_upstream("model server broke the response", error)
            if response is None or not response.prepared:
                return web.Response(status=502, text="capture sidecar: model server broke the response\n")
            # Headers are already out: closing the connection is the only honest signal left, so
            # the client sees a truncated body instead of a falsely complete one.
            if request.transport is not None:
                request.transport.close()
            return response
        finally:
            upstream.release()

        if capture:
            self._uploader.offer(
                CapturedExchange(
                    inference_time=arrival,
                    inference_id=request.headers.get(INFERENCE_ID_HEADER),
                    request=self._payload(request.headers.get("Content-Type"), body[: self._payload_limit], len(body))
                    if self._capture_input
                    else None,
                    response=self._payload(
                        upstream.headers.get("Content-Type"), b"".join(collector.chunks), collector.total
                    )
                    if self._capture_output
                    else None,
                )
            )
        return response

"""The bounded capture queue and the background uploads to S3.

The request path calls `offer()`, which never waits: when the queue is full the record is
dropped and counted. Batches are encoded and written in executor threads (boto3 blocks), at most
`upload_concurrency` at a time; metrics are updated back on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from itertools import groupby

from .metrics import (
    DROP_QUEUE_FULL,
    DROP_SHUTDOWN_TIMEOUT,
    DROP_SPOOL_FULL,
    DROP_UPLOAD_FAILED,
    SidecarMetrics,
)
from .records import CapturedExchange, ContentTypeEncodings, encode_record_pieces, hour_of, object_key
from .s3_writer import S3Writer, Spool
from .usage import usage_tokens

log = logging.getLogger("capture_sidecar.uploader")

# Spooled objects retried per flush tick; bounds the time one retry pass holds a worker thread.
SPOOL_RETRIES_PER_TICK = 50
FAILURE_LOG_INTERVAL_SECONDS = 10.0
# Upper bounds of one object when a backlog is coalesced (BATCH_SIZE's own maximum is 1000).
MAX_RECORDS_PER_OBJECT = 1000
MAX_OBJECT_BYTES = 16 * 1024 * 1024
# A record this large can encode to 6x its size (JSON text that is all control characters); one
# at a time across the upload workers.
LARGE_RECORD_BYTES = 2 * 1024 * 1024
_large_record = threading.Lock()
JOIN_OBJECTS_UP_TO_BYTES = 1024 * 1024


@dataclass
class BatchTokens:
    """Tokens of the usage objects found while a batch was encoded (applied to the metrics on the loop)."""

    input: int = 0
    output: int = 0

    def add(self, exchange: CapturedExchange) -> None:
        response = exchange.response
        if response is None or response.truncated:  # a cut body has lost its tail, and the usage with it
            return
        found = usage_tokens(response.data)
        if found is not None:
            self.input += found[0]
            self.output += found[1]


@dataclass(frozen=True)
class UploadOutcome:
    records: int
    bytes: int
    uploaded: bool
    spooled: bool
    error: str | None


class CaptureUploader:
    def __init__(
        self,
        *,
        writer: S3Writer,
        spool: Spool | None,
        encodings: ContentTypeEncodings,
        metrics: SidecarMetrics,
        executor: Executor,
        batch_size: int,
        flush_interval_seconds: float,
        queue_max_records: int,
        queue_max_bytes: int,
        upload_concurrency: int,
        release_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self._writer = writer
        self._spool = spool
        self._encodings = encodings
        self._metrics = metrics
        self._executor = executor
        self._batch_size = batch_size
        self._flush_interval = flush_interval_seconds
        self._queue_max_records = queue_max_records
        self._queue_max_bytes = queue_max_bytes
        # Called with a record's size once it has left memory (uploaded, spooled or dropped);
        # the proxy's MemoryBudget counts captured bytes until then.
        self._release_bytes = release_bytes or (lambda _: None)
        self._pending: deque[CapturedExchange] = deque()
        self._pending_bytes = 0
        self._batch_ready = asyncio.Event()
        self._upload_slots = asyncio.Semaphore(upload_concurrency)
        self._uploads: set[asyncio.Task[None]] = set()
        self._in_flight_records = 0
        self._spool_retry: asyncio.Task[None] | None = None
        self._last_failure_log = 0.0
        metrics.queue_depth = lambda: len(self._pending) + self._in_flight_records
        metrics.spool_bytes = lambda: spool.size_bytes if spool is not None else 0

    def offer(self, exchange: CapturedExchange) -> bool:
        """Queue one exchange for upload (True), or drop it if the queue is full. Never blocks."""
        size = exchange.size_bytes
        if len(self._pending) >= self._queue_max_records or self._pending_bytes + size > self._queue_max_bytes:
            self._metrics.records_dropped[DROP_QUEUE_FULL] += 1
            return False
        self._pending.append(exchange)
        self._pending_bytes += size
        self._metrics.records_captured += 1
        if len(self._pending) >= self._batch_size:
            self._batch_ready.set()
        return True

    async def run(self) -> None:
        """Upload full batches as soon as they form, and whatever is buffered every flush interval."""
        loop = asyncio.get_running_loop()
        next_flush = loop.time() + self._flush_interval
        self._start_spool_retry()  # objects left by an earlier run (the spool outlives restarts)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._batch_ready.wait(), timeout=max(0.0, next_flush - loop.time()))
            self._batch_ready.clear()
            if loop.time() >= next_flush:
                next_flush = loop.time() + self._flush_interval
                await self._dispatch(partial_batches=True)
                self._start_spool_retry()
            else:
                await self._dispatch(partial_batches=False)

    async def drain(self, deadline: float) -> bool:
        """Upload everything buffered before the loop-time deadline. True when nothing was lost."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._dispatch(partial_batches=True), timeout=max(0.0, deadline - loop.time()))
            tasks = set(self._uploads)
            if tasks:
                await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
        except TimeoutError:
            pass
        lost = len(self._pending) + self._in_flight_records
        if lost:
            self._metrics.records_dropped[DROP_SHUTDOWN_TIMEOUT] += lost
            log.error("shutdown: %d captured records not written before the grace period ended", lost)
        return lost == 0

    async def _dispatch(self, *, partial_batches: bool) -> None:
        while len(self._pending) >= self._batch_size or (partial_batches and self._pending):
            await self._upload_slots.acquire()
            batch = self._take_batch()
            self._in_flight_records += len(batch)
            task = asyncio.create_task(self._upload(batch))
            self._uploads.add(task)
            task.add_done_callback(self._uploads.discard)

    def _take_batch(self) -> list[CapturedExchange]:
        """BATCH_SIZE records, or more when a backlog built up while every upload slot was busy:
        fewer, larger objects then let the uploads catch up instead of records being dropped."""
        batch: list[CapturedExchange] = []
        batch_bytes = 0
        while self._pending and (
            len(batch) < self._batch_size
            or (len(batch) < MAX_RECORDS_PER_OBJECT and batch_bytes + self._pending[0].size_bytes <= MAX_OBJECT_BYTES)
        ):
            exchange = self._pending.popleft()
            batch.append(exchange)
            batch_bytes += exchange.size_bytes
        self._pending_bytes -= batch_bytes
        return batch

    async def _upload(self, batch: list[CapturedExchange]) -> None:
        loop = asyncio.get_running_loop()
        try:
            outcomes, tokens = await loop.run_in_executor(self._executor, self._write_batch, batch)
        finally:
            self._in_flight_records -= len(batch)
            self._upload_slots.release()
            self._release_bytes(sum(exchange.size_bytes for exchange in batch))
        self._metrics.input_tokens += tokens.input
        self._metrics.output_tokens += tokens.output
        for outcome in outcomes:
            self._record_outcome(outcome)

    def _write_batch(self, batch: list[CapturedExchange]) -> tuple[list[UploadOutcome], BatchTokens]:
        """Runs in a worker thread: one object per invocation hour, like SageMaker's layout.

        Memory: an object is cut once its encoded records pass MAX_OBJECT_BYTES, and a record
        over LARGE_RECORD_BYTES is encoded and written alone while holding `_large_record`, so
        at most one such record's encoding (up to 6x its size for text that is all escapes) is
        in memory at a time (docs/capture-sidecar.md, *Memory bounds*).
        """
        outcomes: list[UploadOutcome] = []
        tokens = BatchTokens()  # counted whether or not the object reaches S3: the tokens were spent
        prefix = self._writer.location.prefix
        for _, group in groupby(batch, key=hour_of):
            pieces: list[bytes] = []
            encoded = 0
            first: CapturedExchange | None = None
            count = 0
            for exchange in group:
                tokens.add(exchange)
                if exchange.size_bytes > LARGE_RECORD_BYTES:
                    with _large_record:
                        record = encode_record_pieces(exchange, self._encodings)
                        key = object_key(prefix, exchange.inference_time)
                        outcomes.append(self._put_or_spool(key, record, 1))
                    continue
                record = encode_record_pieces(exchange, self._encodings)
                size = sum(map(len, record))
                if first is not None and encoded + size > MAX_OBJECT_BYTES:
                    outcomes.append(self._put_or_spool(object_key(prefix, first.inference_time), pieces, count))
                    pieces, encoded, first, count = [], 0, None, 0
                if first is None:
                    first = exchange
                pieces += record
                encoded += size
                count += 1
            if first is not None:
                outcomes.append(self._put_or_spool(object_key(prefix, first.inference_time), pieces, count))
        return outcomes, tokens

    def _put_or_spool(self, key: str, body: list[bytes], records: int) -> UploadOutcome:
        size = sum(map(len, body))
        # Small objects (the usual batch) are joined: one send; large ones go as pieces, no copy.
        payload: bytes | list[bytes] = b"".join(body) if size <= JOIN_OBJECTS_UP_TO_BYTES else body
        try:
            self._writer.put(key, payload)
            return UploadOutcome(records, size, uploaded=True, spooled=False, error=None)
        except Exception as error:  # any S3 or connection failure means "not written"
            description = f"{type(error).__name__}: {error}"
        spooled = self._spool is not None and self._spool.store(key, payload)
        return UploadOutcome(records, size, uploaded=False, spooled=spooled, error=description)

    def _record_outcome(self, outcome: UploadOutcome) -> None:
        metrics = self._metrics
        if outcome.uploaded:
            metrics.uploads_ok += 1
            metrics.records_uploaded += outcome.records
            metrics.bytes_uploaded += outcome.bytes
            return
        metrics.uploads_failed += 1
        if outcome.spooled:
            metrics.records_spooled += outcome.records
        elif self._spool is not None:
            metrics.records_dropped[DROP_SPOOL_FULL] += outcome.records
        else:
            metrics.records_dropped[DROP_UPLOAD_FAILED] += outcome.records
        now = time.monotonic()
        if now - self._last_failure_log >= FAILURE_LOG_INTERVAL_SECONDS:
            self._last_failure_log = now
            log.warning(
                "S3 upload failed (%s); %d records %s",
                outcome.error,
                outcome.records,
                "spooled" if outcome.spooled else "dropped",
            )

    def _start_spool_retry(self) -> None:
        if self._spool is None or self._spool.size_bytes == 0:
            return
        if self._spool_retry is not None and not self._spool_retry.done():
            return
        self._spool_retry = asyncio.create_task(self._retry_spool(self._spool))

    async def _retry_spool(self, spool: Spool) -> None:
        async with self._upload_slots:
            outcomes = await asyncio.get_running_loop().run_in_executor(self._executor, self._upload_spooled, spool)
        for outcome in outcomes:
            self._record_outcome(outcome)

    def _upload_spooled(self, spool: Spool) -> list[UploadOutcome]:
        """Runs in a worker thread; stops at the first failure because S3 is probably still down."""
        outcomes = []
        for item in spool.pending()[:SPOOL_RETRIES_PER_TICK]:
            body = item.path.read_bytes()
            try:
                self._writer.put(item.key, body)
            except Exception:  # still unreachable: keep the file for the next tick
                break
            spool.remove(item)
            outcomes.append(UploadOutcome(body.count(b"\n"), len(body), uploaded=True, spooled=False, error=None))
        return outcomes

"""Upload scheduling that needs a controllable S3: a backlog is coalesced, not dropped."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from capture_sidecar.metrics import SidecarMetrics
from capture_sidecar.records import CapturedExchange, CapturedPayload, ContentTypeEncodings
from capture_sidecar.settings import S3Location
from capture_sidecar.uploader import CaptureUploader


class GatedWriter:
    """Stands in for S3Writer: each put waits until the test opens the gate, and is recorded."""

    def __init__(self) -> None:
        self.location = S3Location("bucket", "prefix/")
        self.put_started = threading.Event()
        self.gate = threading.Event()
        self.objects: list[bytes] = []

    def put(self, key: str, body: bytes) -> None:
        self.put_started.set()
        assert self.gate.wait(timeout=60)
        self.objects.append(body)


def exchange() -> CapturedExchange:
    return CapturedExchange(datetime.now(UTC), None, CapturedPayload("application/json", b"{}", 2), None)


async def wait_until(condition, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def test_backlog_is_coalesced_into_fewer_larger_objects() -> None:
    async def scenario() -> tuple[list[int], SidecarMetrics]:
        writer = GatedWriter()
        metrics = SidecarMetrics()
        with ThreadPoolExecutor(max_workers=1) as executor:
            uploader = CaptureUploader(
                writer=writer,  # type: ignore[arg-type]
                spool=None,
                encodings=ContentTypeEncodings(frozenset({"application/json"}), frozenset()),
                metrics=metrics,
                executor=executor,
                batch_size=2,
                flush_interval_seconds=300,
                queue_max_records=100,
                queue_max_bytes=1 << 20,
                upload_concurrency=1,
            )
            runner = asyncio.create_task(uploader.run())
            for _ in range(2):
                uploader.offer(exchange())
            await wait_until(writer.put_started.is_set)
            for _ in range(7):  # arrive while the only upload slot is busy
                uploader.offer(exchange())
            writer.gate.set()
            await wait_until(lambda: metrics.records_uploaded == 9)
            runner.cancel()
        return [body.count(b"\n") for body in writer.objects], metrics

    records_per_object, metrics = asyncio.run(scenario())

    assert records_per_object == [2, 7]
    assert metrics.uploads_ok == 2
    assert metrics.records_dropped.total() == 0

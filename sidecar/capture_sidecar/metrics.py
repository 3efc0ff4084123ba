"""The sidecar's own counters, rendered in the Prometheus text exposition format.

Written by hand: every update happens on the event loop thread (upload results are applied
after the executor returns), so plain integers need no locks and cost nothing on the hot path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

DROP_QUEUE_FULL = "queue_full"
DROP_UPLOAD_FAILED = "upload_failed"
DROP_SPOOL_FULL = "spool_full"
DROP_SHUTDOWN_TIMEOUT = "shutdown_timeout"
# MAX_INFLIGHT_BODY_BYTES was reached: the request is served, its capture is not kept.
DROP_MEMORY_FULL = "memory_full"
DROP_REASONS = (DROP_QUEUE_FULL, DROP_UPLOAD_FAILED, DROP_SPOOL_FULL, DROP_SHUTDOWN_TIMEOUT, DROP_MEMORY_FULL)


@dataclass
class SidecarMetrics:
    requests_proxied: int = 0
    upstream_errors: int = 0
    records_captured: int = 0
    requests_sampled_out: int = 0
    truncated_payloads: int = 0
    records_dropped: Counter[str] = field(default_factory=Counter)
    uploads_ok: int = 0
    uploads_failed: int = 0
    records_uploaded: int = 0
    bytes_uploaded: int = 0
    records_spooled: int = 0
    requests_rejected_memory: int = 0
    requests_unauthorized: int = 0
    queue_depth: Callable[[], int] = lambda: 0
    spool_bytes: Callable[[], int] = lambda: 0
    inflight_body_bytes: Callable[[], int] = lambda: 0

    def render(self) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            full_name = f"capture_sidecar_{name}"
            lines.append(f"# HELP {full_name} {help_text}")
            lines.append(f"# TYPE {full_name} {kind}")
            for labels, value in samples:
                lines.append(f"{full_name}{labels} {value:g}")

        def counter(name: str, help_text: str, value: int) -> None:
            metric(f"{name}_total", "counter", help_text, [("", value)])

        counter("requests_proxied", "Requests answered through the proxy port.", self.requests_proxied)
        counter(
            "upstream_errors",
            "Requests that failed because the model server was unreachable or broke a response.",
            self.upstream_errors,
        )
        counter("records_captured", "Exchanges sampled in and queued for upload.", self.records_captured)
        counter("requests_sampled_out", "Capturable requests skipped by sampling.", self.requests_sampled_out)
        counter("truncated_payloads", "Payloads cut at MAX_PAYLOAD_SIZE_KB.", self.truncated_payloads)
        metric(
            "records_dropped_total",
            "counter",
            "Captured records lost, by reason.",
            [(f'{{reason="{reason}"}}', self.records_dropped[reason]) for reason in DROP_REASONS],
        )
        metric(
            "uploads_total",
            "counter",
            "S3 PutObject calls, by result.",
            [('{result="ok"}', self.uploads_ok), ('{result="failed"}', self.uploads_failed)],
        )
        counter("records_uploaded", "Records written to S3.", self.records_uploaded)
        metric("uploaded_bytes_total", "counter", "Bytes written to S3.", [("", self.bytes_uploaded)])
        counter(
            "records_spooled",
            "Records written to the local spool after a failed upload.",
            self.records_spooled,
        )
        counter(
            "requests_rejected_memory",
            "Requests answered 503 because buffering their body would pass MAX_INFLIGHT_BODY_BYTES.",
            self.requests_rejected_memory,
        )
        counter(
            "requests_unauthorized",
            "Requests answered 401 because they did not carry API_KEY as a bearer token.",
            self.requests_unauthorized,
        )
        metric(
            "inflight_body_bytes",
            "gauge",
            "Body bytes held in memory (buffered, captured, queued, uploading); at most MAX_INFLIGHT_BODY_BYTES.",
            [("", self.inflight_body_bytes())],
        )
        metric("queue_depth", "gauge", "Records waiting in memory for upload.", [("", self.queue_depth())])
        metric("spool_bytes", "gauge", "Bytes waiting in the local spool.", [("", self.spool_bytes())])
        return "\n".join(lines) + "\n"

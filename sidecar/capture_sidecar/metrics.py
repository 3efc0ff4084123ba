"""The sidecar's own counters, rendered in the Prometheus text exposition format.

Written by hand: every update happens on the event loop thread (upload results are applied
after the executor returns), so plain integers need no locks and cost nothing on the hot path.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .records import PARTIAL_REASONS

DROP_QUEUE_FULL = "queue_full"
DROP_UPLOAD_FAILED = "upload_failed"
DROP_SPOOL_FULL = "spool_full"
DROP_SHUTDOWN_TIMEOUT = "shutdown_timeout"
# MAX_INFLIGHT_BODY_BYTES was reached: the request is served, its capture is not kept.
DROP_MEMORY_FULL = "memory_full"
DROP_REASONS = (DROP_QUEUE_FULL, DROP_UPLOAD_FAILED, DROP_SPOOL_FULL, DROP_SHUTDOWN_TIMEOUT, DROP_MEMORY_FULL)
# Client connections closed by a bound (docs/capture-sidecar.md, *Connection bounds*).
CONNECTION_CAP_MAX_CONNECTIONS = "max_connections"
CONNECTION_CAP_MAX_UNAUTHENTICATED = "max_unauthenticated"
CONNECTION_CAPS = (CONNECTION_CAP_MAX_CONNECTIONS, CONNECTION_CAP_MAX_UNAUTHENTICATED)
API_KEYS_RELOAD_RESULTS = ("ok", "partial", "failed")

# Upper bounds (seconds) of the latency histograms, fixed for LLM traffic: a first token comes in tens of
# milliseconds when idle and in seconds when requests queue; a whole generation takes up to minutes.
# constructs_lib/observability/sidecar_metrics.py alarms on one of the first-chunk bounds (kept in step by a test).
TIME_TO_FIRST_CHUNK_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0)
REQUEST_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Final statuses by class; index status // 100 - 2. 1xx are never final here (interim responses are dropped).
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")


def status_class_index(status: int) -> int | None:
    index = status // 100 - 2
    return index if 0 <= index < len(STATUS_CLASSES) else None


class Histogram:
    """Observations counted per bucket (not cumulative; the last is +Inf) and summed. Event loop only."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le is inclusive: value == bound is in that bucket
        self.total += value

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count of observations <= le) for every bound and +Inf, as rendered."""
        result = []
        running = 0
        for bound, count in zip((*self.bounds, None), self.counts, strict=True):
            running += count
            result.append(("+Inf" if bound is None else format_bound(bound), running))
        return result


def format_bound(bound: float) -> str:
    """An `le` label value: "0.025", "1", "60" (CloudWatch alarms select a bucket by this exact text)."""
    return f"{bound:g}"


def _format_value(value: float) -> str:
    # Integers exactly (`:g` would round counters past a million), floats in full.
    return str(value) if isinstance(value, int) else repr(float(value))


# The usage sources whose tokens are known (stream_usage: response, requested).
USAGE_SOURCES_COUNTED = ("response", "requested")


class CrossingSnapshot(Protocol):
    @property
    def caller(self) -> str: ...

    @property
    def limit(self) -> str: ...

    @property
    def window(self) -> str: ...

    @property
    def percent(self) -> int: ...


class LimitsSnapshot(Protocol):
    refused: dict[str, int]
    store_errors: int
    admitted_store_down: int
    waits: int

    @property
    def alerts(self) -> Mapping[tuple[str, int], int]: ...

    def recent_crossings(self) -> Sequence[CrossingSnapshot]: ...


def label_value(value: str) -> str:
    """A label value escaped as the exposition format wants (a caller id from a JWT may hold anything)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


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
    # Re-reads of API_KEYS_FILE: "ok" (the new keys are in force), "partial" (a version with refused lines: its
    # valid lines and the keys in force it still holds are in force), "failed" (cannot be opened: keys kept).
    api_keys_reloads: Counter[str] = field(default_factory=Counter)
    api_keys_lines_refused: int = 0
    api_keys: Callable[[], int] = lambda: 0
    # Each accepted key's short fingerprint (auth.key_label) and its caller id.
    api_key_fingerprints: Callable[[], Mapping[str, str]] = lambda: {}
    # JWT mode: the issuer's signing keys in force (0: every request is refused) and the JWKS fetches that failed.
    jwt_keys: Callable[[], int] = lambda: 0
    jwks_fetch_failures: Callable[[], int] = lambda: 0
    # New connections refused at MAX_CONNECTIONS; open ones closed to make room, by the cap that was reached.
    connections_rejected: Counter[str] = field(default_factory=Counter)
    connections_evicted: Counter[str] = field(default_factory=Counter)
    header_timeouts: int = 0
    idle_timeouts: int = 0
    half_open_closed: int = 0
    connections_open: Callable[[], int] = lambda: 0
    connections_unauthenticated: Callable[[], int] = lambda: 0
    queue_depth: Callable[[], int] = lambda: 0
    spool_bytes: Callable[[], int] = lambda: 0
    inflight_body_bytes: Callable[[], int] = lambda: 0
    # The `model` label of the per-model series (MODEL_NAME); validated to need no escaping.
    model_name: str = "unknown"
    requests_by_class: list[int] = field(default_factory=lambda: [0] * len(STATUS_CLASSES))
    request_duration: list[Histogram] = field(
        default_factory=lambda: [Histogram(REQUEST_DURATION_BUCKETS) for _ in STATUS_CLASSES]
    )
    time_to_first_chunk: list[Histogram] = field(
        default_factory=lambda: [Histogram(TIME_TO_FIRST_CHUNK_BUCKETS) for _ in STATUS_CLASSES]
    )
    partial_exchanges: Counter[str] = field(default_factory=Counter)
    input_tokens: int = 0
    output_tokens: int = 0
    # Metered exchanges (docs/usage-and-budgets.md): exact tokens by source, refusals by limit, the budget store.
    metered_tokens: Counter[tuple[str, str]] = field(default_factory=Counter)  # (type, usage source)
    limits: Callable[[], LimitsSnapshot | None] = lambda: None

    def observe_exchange(self, status: int, duration: float, time_to_first_chunk: float | None) -> None:
        """One answered request (seconds); a status outside 2xx-5xx is not counted."""
        index = status_class_index(status)
        if index is None:
            return
        self.requests_by_class[index] += 1
        self.request_duration[index].observe(duration)
        if time_to_first_chunk is not None:
            self.time_to_first_chunk[index].observe(time_to_first_chunk)

    def render(self) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            full_name = f"capture_sidecar_{name}"
            lines.append(f"# HELP {full_name} {help_text}")
            lines.append(f"# TYPE {full_name} {kind}")
            for labels, value in samples:  # labels: "{...}", or a suffix and its labels ("_bucket{...}")
                lines.append(f"{full_name}{labels} {_format_value(value)}")

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
            "Requests answered 401 because they carried none of the keys (API_KEY, API_KEYS_FILE) as a bearer token.",
            self.requests_unauthorized,
        )
        metric(
            "api_keys_reloads_total",
            "counter",
            "Re-reads of a changed API_KEYS_FILE, by result: ok (the new keys are in force), partial (some lines "
            "refused: the valid lines and the keys in force those lines hold are in force, removed keys are refused) "
            "or failed (cannot be opened; the keys in force stay).",
            [(f'{{result="{result}"}}', self.api_keys_reloads[result]) for result in API_KEYS_RELOAD_RESULTS],
        )
        counter("api_keys_lines_refused", "Lines of API_KEYS_FILE refused on a re-read (logged by line number).",
                self.api_keys_lines_refused)
        metric("api_keys", "gauge", "Keys accepted on the proxy port now (API_KEY and API_KEYS_FILE's).",
               [("", self.api_keys())])
        metric("jwt_keys", "gauge", "JWT mode: the issuer's signing keys in force (0 while none was fetched: every "
               "request is answered 503).", [("", self.jwt_keys())])
        counter("jwks_fetch_failures", "JWT mode: fetches of JWT_JWKS_URI that failed (the last good keys stay).",
                self.jwks_fetch_failures())
        metric("api_key_accepted", "gauge",
               "1 for each key accepted on the proxy port now, by a short fingerprint of the key (not reversible for a "
               "generated key) and its caller id; the API key rotation waits until every sidecar shows the pending "
               "key's.",
               [(f'{{fingerprint="{fingerprint}",caller_id="{caller}"}}', 1)
                for fingerprint, caller in sorted(self.api_key_fingerprints().items())])
        metric(
            "connections_rejected_total",
            "counter",
            "New client connections refused (503, closed at once), by the cap reached (with no connection to evict).",
            [(f'{{reason="{reason}"}}', self.connections_rejected[reason]) for reason in CONNECTION_CAPS],
        )
        metric(
            "connections_evicted_total",
            "counter",
            "Open client connections closed to make room for a new one, by the cap reached (the oldest without an "
            "authenticated request, or at MAX_CONNECTIONS first one lingering after its answer).",
            [(f'{{reason="{reason}"}}', self.connections_evicted[reason]) for reason in CONNECTION_CAPS],
        )
        counter(
            "header_timeouts",
            "Client connections closed because a request head did not arrive whole within HEADER_TIMEOUT_SECONDS.",
            self.header_timeouts,
        )
        counter(
            "idle_timeouts",
            "Keep-alive client connections closed after IDLE_TIMEOUT_SECONDS without a request.",
            self.idle_timeouts,
        )
        counter(
            "half_open_closed",
            "Client connections closed because the client ended its side (EOF) in the middle of a request.",
            self.half_open_closed,
        )
        metric(
            "connections_open", "gauge", "Client connections open on the proxy port.", [("", self.connections_open())]
        )
        metric(
            "connections_unauthenticated",
            "gauge",
            "Client connections open whose first request is not yet read whole and authenticated.",
            [("", self.connections_unauthenticated())],
        )
        metric(
            "inflight_body_bytes",
            "gauge",
            "Body bytes held in memory (buffered, captured, queued, uploading); at most MAX_INFLIGHT_BODY_BYTES.",
            [("", self.inflight_body_bytes())],
        )
        metric("queue_depth", "gauge", "Records waiting in memory for upload.", [("", self.queue_depth())])
        metric("spool_bytes", "gauge", "Bytes waiting in the local spool.", [("", self.spool_bytes())])

        model = f'model="{self.model_name}"'
        metric(
            "partial_exchanges_total",
            "counter",
            "Exchanges whose response was cut off, sampled or not, by reason.",
            [(f'{{{model},reason="{reason}"}}', self.partial_exchanges[reason]) for reason in PARTIAL_REASONS],
        )
        metric(
            "requests_total",
            "counter",
            "Requests answered, by the status class the client got (the sidecar's own 401, 413, 502, ... included).",
            [
                (f'{{{model},status_class="{status_class}"}}', count)
                for status_class, count in zip(STATUS_CLASSES, self.requests_by_class, strict=True)
            ],
        )

        def histogram(name: str, help_text: str, histograms: list[Histogram]) -> None:
            samples: list[tuple[str, float]] = []
            for status_class, observed in zip(STATUS_CLASSES, histograms, strict=True):
                labels = f'{model},status_class="{status_class}"'
                buckets = observed.cumulative()
                samples += [(f'_bucket{{{labels},le="{le}"}}', count) for le, count in buckets]
                samples += [(f"_sum{{{labels}}}", observed.total), (f"_count{{{labels}}}", buckets[-1][1])]
            metric(name, "histogram", help_text, samples)

        histogram(
            "request_duration_seconds",
            "From the first byte of the request head to the last byte of the response written (or the exchange's end).",
            self.request_duration,
        )
        histogram(
            "time_to_first_chunk_seconds",
            "From the request fully received to the first response body byte from the model server.",
            self.time_to_first_chunk,
        )
        # The CloudWatch agent drops histograms (it keeps counters, gauges and summaries): the 2xx buckets of
        # time_to_first_chunk_seconds again, as a counter, for the p99 alarm (docs/alarms.md).
        metric(
            "first_chunks_total",
            "counter",
            "2xx responses whose first body byte came within le seconds (cumulative; le=\"+Inf\": all of them).",
            [(f'{{{model},le="{le}"}}', count) for le, count in self.time_to_first_chunk[0].cumulative()],
        )
        metric(
            "tokens_total",
            "counter",
            "Tokens in the OpenAI usage object of captured responses (sampled in, not truncated), by type.",
            [(f'{{{model},type="input"}}', self.input_tokens), (f'{{{model},type="output"}}', self.output_tokens)],
        )
        metric(
            "metered_tokens_total",
            "counter",
            "Tokens of every metered exchange (USAGE_PATHS, or a caller with limits), by type and usage source.",
            [
                (f'{{{model},type="{kind}",source="{source}"}}', self.metered_tokens[(kind, source)])
                for kind in ("input", "output")
                for source in USAGE_SOURCES_COUNTED
            ],
        )
        limits = self.limits()
        if limits is not None:
            metric(
                "requests_refused_total",
                "counter",
                "Requests refused by a caller limit (429) or, failing closed, because the budget store was unreachable "
                "(503), by limit.",
                [(f'{{limit="{limit}"}}', count) for limit, count in limits.refused.items()],
            )
            counter("limits_store_errors", "Budget store calls that failed or timed out.", limits.store_errors)
            counter(
                "limits_admitted_store_down",
                "Requests admitted without the budget store (unreachable, LIMITS_STORE_FAILURE=open).",
                limits.admitted_store_down,
            )
            counter("limits_store_waits", "Requests that waited for the budget store (their lease was short).",
                    limits.waits)
            # Budget alerts (docs/usage-and-budgets.md): every level's series from the start (the CloudWatch agent
            # sends increases, so a series must exist before its first crossing), no caller label on the counter.
            metric(
                "budget_alerts_total",
                "counter",
                "Crossings of a percent of a caller's day or month budget (tokens handed out) that this replica "
                "reported; each crossing is reported by one replica only.",
                [
                    (f'{{limit="{limit}",percent="{percent}"}}', count)
                    for (limit, percent), count in limits.alerts.items()
                ],
            )
            metric(
                "budget_threshold_crossed",
                "gauge",
                "1 for each crossing this replica reported in the last 15 minutes: who crossed which level of which "
                "budget (read from the metrics agent's log events, not made a metric).",
                [
                    (
                        f'{{caller_id="{label_value(crossing.caller)}",limit="{crossing.limit}",'
                        f'percent="{crossing.percent}",window="{crossing.window}"}}',
                        1,
                    )
                    for crossing in limits.recent_crossings()
                ],
            )
        return "\n".join(lines) + "\n"

"""Token counts from a response's tail (off the event loop) and the hand-written histograms."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from capture_sidecar import usage
from capture_sidecar.metrics import TIME_TO_FIRST_CHUNK_BUCKETS, Histogram, SidecarMetrics


def test_usage_is_read_from_the_last_usage_object_in_the_tail() -> None:
    completion = json.dumps(
        {
            "choices": [{"text": 'say "usage": 99'}],
            "usage": {
                "prompt_tokens": 12,
                "total_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens": 8,
            },
        }
    )
    assert usage.usage_tokens(completion.encode()) == (12, 8)
    stream = (
        b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\ndata: [DONE]\n\n'
    )
    assert usage.usage_tokens(stream) == (7, 3)


def test_no_usage_no_count() -> None:
    assert usage.usage_tokens(b'data: {"choices":[]}\n\ndata: [DONE]\n\n') is None
    assert usage.usage_tokens(b'{"usage": null}') is None
    far = b'{"usage":{"prompt_tokens":1,"completion_tokens":1},"logprobs":"' + b"x" * usage.USAGE_TAIL_BYTES + b'"}'
    assert usage.usage_tokens(far) is None  # beyond the bounded scan: not counted


def test_histogram_buckets_are_inclusive_upper_bounds() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):
        histogram.observe(value)
    assert histogram.cumulative() == [("0.1", 2), ("1", 4), ("+Inf", 5)]
    assert histogram.total == 8.65


def test_rendered_metrics_parse_and_counters_past_a_million_stay_exact() -> None:
    metrics = SidecarMetrics(model_name="m")
    metrics.output_tokens = 12_345_678
    metrics.observe_exchange(200, 1.5, 0.2)
    metrics.observe_exchange(503, 0.01, None)
    metrics.observe_exchange(101, 0.01, None)  # never final: not counted
    text = metrics.render()
    assert 'capture_sidecar_tokens_total{model="m",type="output"} 12345678\n' in text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    requests = {s.labels["status_class"]: s.value for s in families["capture_sidecar_requests"].samples}
    assert requests == {"2xx": 1, "3xx": 0, "4xx": 0, "5xx": 1}
    within = [s for s in families["capture_sidecar_first_chunks"].samples]
    assert [s.labels["le"] for s in within] == [f"{b:g}" for b in TIME_TO_FIRST_CHUNK_BUCKETS] + ["+Inf"]
    assert [s.value for s in within][:4] == [0, 0, 0, 1]  # 0.2 s is within 0.25 s

"""Exact tokens on every exchange (docs/usage-and-budgets.md): the sidecar asks a stream for its usage and removes
it for a client that did not ask (byte-exact otherwise), reads the usage of non-streamed responses, records it,
and its totals reconcile with the model server's own token counters (the stand-in counts like vLLM)."""

from __future__ import annotations

import json
import random
import re

import pytest

from capture_sidecar.stream_usage import SseUsage, TailUsage, estimate_tokens, with_stream_usage

from .conftest import Sidecar, http_call, read_records

JSON = {"Content-Type": "application/json"}
CHAT = "/vllm/v1/chat/completions"
COMPLETIONS = "/vllm/v1/completions"
METERED = {"USAGE_PATHS": f"{CHAT},{COMPLETIONS}"}


def chat(words: int, max_tokens: int, *, stream: bool, include_usage: bool | None = None) -> bytes:
    request: dict[str, object] = {
        "model": "standin",
        "messages": [{"role": "user", "content": " ".join(f"w{index}" for index in range(words))}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if include_usage is not None:
        request["stream_options"] = {"include_usage": include_usage}
    return json.dumps(request).encode()


def vllm_counters(port: int) -> dict[str, float]:
    text = http_call(port, "GET", "/vllm/metrics").body.decode()
    return {match[1]: float(match[2]) for match in re.finditer(r"^vllm:(\w+)\{[^}]*\} (\S+)$", text, re.MULTILINE)}


# ----- the pieces, in process -----


def test_a_stream_without_stream_options_gets_include_usage_inserted_and_nothing_else_changed() -> None:
    body = b' {"model":"m","stream": true,"messages":[{"role":"user","content":"say \\"stream\\": true"}]}'
    changed = with_stream_usage(body)
    assert changed == body.replace(b"{", b'{"stream_options":{"include_usage":true},', 1)
    assert json.loads(changed)["messages"] == json.loads(body)["messages"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"continuous_usage_stats": False}, {"continuous_usage_stats": False, "include_usage": True}),
        ({"include_usage": False}, {"include_usage": True}),
        (None, {"include_usage": True}),
    ],
)
def test_stream_options_without_include_usage_are_completed(options, expected) -> None:
    body = json.dumps({"stream": True, "stream_options": options, "prompt": "x"}).encode()
    changed = with_stream_usage(body)
    assert changed is not None and json.loads(changed) == {"stream": True, "stream_options": expected, "prompt": "x"}


@pytest.mark.parametrize(
    "body",
    [
        b'{"stream": false, "prompt": "x"}',
        b'{"prompt": "\\"stream\\": true"}',  # inside a string: not the request's stream
        b'{"stream": true, "stream_options": {"include_usage": true}}',  # the client asked itself
        b'{"stream": true, "stream_options": "bad"}',  # the model server answers that itself
        b'{"stream": true,',  # malformed
        b'[{"stream": true}]',
        b"",
    ],
)
def test_requests_that_need_no_usage_or_cannot_take_it_are_sent_unchanged(body: bytes) -> None:
    assert with_stream_usage(body) is None


USAGE_EVENT = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":11,"total_tokens":16,"completion_tokens":5}}\n\n'
STREAM = (
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"a \\"usage\\" b"}}]}\n\n'
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"c"},"finish_reason":"length"}]}\n\n'
)


@pytest.mark.parametrize("size", [1, 2, 7, 64, 100_000])
def test_the_usage_event_is_read_and_removed_wherever_the_reads_split_the_stream(size: int) -> None:
    wire = STREAM + USAGE_EVENT + b"data: [DONE]\n\n"
    stripping, reading = SseUsage(strip=True), SseUsage(strip=False)
    passed, seen = b"", b""
    for start in range(0, len(wire), size):
        piece = wire[start : start + size]
        passed += stripping.feed(piece)
        seen += reading.feed(piece)
    passed += stripping.finish()
    seen += reading.finish()
    assert passed == STREAM + b"data: [DONE]\n\n"
    assert seen == wire  # a client that asked gets every byte
    assert stripping.usage == reading.usage == (11, 5)


@pytest.mark.parametrize("size", [1, 3, 50])
def test_crlf_framed_events_are_read_and_removed_too(size: int) -> None:
    crlf = STREAM.replace(b"\n\n", b"\r\n\r\n")
    wire = crlf + USAGE_EVENT.replace(b"\n\n", b"\r\n\r\n") + b"data: [DONE]\r\n\r\n"
    scanner = SseUsage(strip=True)
    passed = b"".join(scanner.feed(wire[start : start + size]) for start in range(0, len(wire), size))
    assert passed + scanner.finish() == crlf + b"data: [DONE]\r\n\r\n"
    assert scanner.usage == (11, 5)


def test_continuous_usage_keeps_the_last_and_removes_only_the_usage_only_event() -> None:
    event = b'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    scanner = SseUsage(strip=True)
    assert scanner.feed(event + USAGE_EVENT) == event
    assert scanner.usage == (11, 5)


def test_a_non_streamed_response_has_its_usage_read_off_its_tail() -> None:
    tail = TailUsage()
    body = b'{"choices":[{"text":"' + b"x" * 20_000 + b'"}],"usage":{"prompt_tokens":7,"completion_tokens":9}}'
    for start in range(0, len(body), 1000):
        tail.feed(body[start : start + 1000])
    assert tail.usage() == (7, 9)


def test_the_estimate_covers_the_prompt_bytes_and_the_largest_max_tokens() -> None:
    body = b'{"prompt": "' + b"a " * 100 + b'", "max_tokens": 50, "n": {"max_completion_tokens": 70}}'
    assert estimate_tokens(body, bytes_per_token=2, default_output_tokens=1024) == len(body) // 2 + 1 + 70
    assert estimate_tokens(b"{}", bytes_per_token=2, default_output_tokens=1024) == 2 + 1024


# ----- end to end: stand-in (vLLM-like), sidecar, moto -----


@pytest.fixture(scope="module")
def metered(start_module_sidecar) -> Sidecar:
    return start_module_sidecar(**METERED, USAGE_RECORDS="all", SAMPLING_PERCENTAGE="0")


def test_a_client_that_did_not_ask_gets_the_stream_byte_for_byte_without_the_usage_event(
    start_sidecar, s3, standin_port: int
) -> None:
    sidecar = start_sidecar(**METERED)
    request = chat(12, 9, stream=True)
    direct = http_call(standin_port, "POST", CHAT, request, JSON)
    through = sidecar.call("POST", CHAT, request, JSON)
    assert through.status == 200
    assert through.body == direct.body  # what the model server sends without include_usage
    assert b'"usage"' not in through.body

    asked = sidecar.call("POST", CHAT, chat(12, 9, stream=True, include_usage=True), JSON)
    assert b'"choices":[],"usage":{"prompt_tokens":15' in asked.body  # 12 words + 3 for the message

    records = sorted(read_records(s3, sidecar.prefix, expected=2), key=lambda r: r["eventMetadata"]["inferenceTime"])
    metadata = [record["eventMetadata"] for record in records]
    assert [(m["inputTokens"], m["outputTokens"], m["usageSource"]) for m in metadata] == [
        (15, 9, "requested"),
        (15, 9, "response"),
    ]
    # The capture keeps what the model server answered (the usage event included), the record says who asked.
    assert '"usage"' in records[0]["captureData"]["endpointOutput"]["data"]


def test_a_stream_with_a_content_length_is_reframed_as_chunks_without_the_usage_event(
    start_sidecar, standin_port: int
) -> None:
    sidecar = start_sidecar(**METERED)
    request = chat(4, 6, stream=True)
    direct = http_call(standin_port, "POST", CHAT + "?framing=length", request, JSON)
    through = sidecar.call("POST", CHAT + "?framing=length", request, JSON)
    assert direct.header("Content-Length") is not None
    assert (through.status, through.header("Content-Length"), through.header("Transfer-Encoding")) == (
        200,
        None,
        "chunked",
    )
    assert through.body == direct.body


def test_every_exchange_is_counted_without_sampling_and_reconciles_with_the_servers_counters(
    metered: Sidecar, s3, standin_port: int
) -> None:
    before = vllm_counters(standin_port)
    chooser = random.Random(29)
    expected_records = 60
    for index in range(expected_records):
        words, max_tokens = chooser.randrange(1, 400), chooser.randrange(1, 64)
        path = CHAT if index % 2 else COMPLETIONS
        stream = index % 3 != 0
        include = None if index % 5 else True
        if path == CHAT:
            body = chat(words, max_tokens, stream=stream, include_usage=include if stream else None)
        else:
            request = {"prompt": " ".join(["p"] * words), "max_tokens": max_tokens, "stream": stream}
            body = json.dumps(request).encode()
        assert metered.call("POST", path, body, JSON).status == 200
    after = vllm_counters(standin_port)

    records = read_records(s3, metered.prefix, expected=expected_records)
    assert len(records) == expected_records
    assert all("endpointInput" not in record["captureData"] for record in records)  # sampling 0: usage only
    recorded_input = sum(record["eventMetadata"]["inputTokens"] for record in records)
    recorded_output = sum(record["eventMetadata"]["outputTokens"] for record in records)
    server_input = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    server_output = after["generation_tokens_total"] - before["generation_tokens_total"]
    assert abs(recorded_input - server_input) <= 0.005 * server_input
    assert abs(recorded_output - server_output) <= 0.005 * server_output
    metrics = metered.metrics()
    metered_input = sum(
        value
        for name, value in metrics.items()
        if name.startswith("capture_sidecar_metered_tokens_total") and 'type="input"' in name
    )
    assert metered_input == recorded_input


def test_a_server_without_stream_options_support_is_left_alone_and_marked(start_sidecar, s3) -> None:
    sidecar = start_sidecar(**METERED, STREAM_USAGE="off", USAGE_RECORDS="all", SAMPLING_PERCENTAGE="0")
    response = sidecar.call("POST", CHAT, chat(3, 4, stream=True), JSON)
    assert response.status == 200 and b'"usage"' not in response.body
    (record,) = read_records(s3, sidecar.prefix, expected=1)
    assert record["eventMetadata"]["usageSource"] == "none"
    assert "inputTokens" not in record["eventMetadata"]

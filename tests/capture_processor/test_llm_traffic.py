"""Real LLM traffic through the real handler against moto: chats with line breaks, token streams of
vLLM, SGLang and TGI, tool calls, other charsets, and hostile lines between good ones.

The invariant every test here checks: no planted secret (nor the middle of one) appears in any
curated column, read as stored and read again after JSON-decoding the column.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
from typing import Any

import pytest

from tests.capture_processor import transcripts
from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.transcripts import FRAGMENTS, SECRETS, split

KEY = "h/pod/2026/11/30/10/00-00-000-x.jsonl"
EVENT_TIME = "2026-11-30T10:15:00.000000Z"


def side(data: str, content_type: str = "application/json", encoding: str = "JSON", **extra: Any) -> dict:
    return {"observedContentType": content_type, "mode": "INPUT", "data": data, "encoding": encoding} | extra


def record(event_id: str, request: dict | None, response: dict | None, **metadata: Any) -> str:
    capture = {}
    if request is not None:
        capture["endpointInput"] = request
    if response is not None:
        capture["endpointOutput"] = response | {"mode": "OUTPUT"}
    meta = {"eventId": event_id, "inferenceTime": EVENT_TIME} | metadata
    return json.dumps({"captureData": capture, "eventMetadata": meta, "eventVersion": "0"})


def run(pipeline: Pipeline, *lines: str, key: str = KEY, gzipped: bool = False) -> dict[str, dict]:
    body = ("\n".join(lines) + "\n").encode()
    pipeline.put(key, gzip.compress(body, mtime=0) if gzipped else body)
    assert pipeline.run(key) == {"batchItemFailures": []}
    return {row["event_id"]: row for row in pipeline.rows()}


def all_strings(value: Any, depth: int = 0) -> list[str]:
    """Every string in a value, and in the JSON a string holds, a few levels down."""
    if isinstance(value, str):
        found = [value]
        if depth < 4 and value[:1] in "{[":
            with contextlib.suppress(ValueError, RecursionError):
                found += all_strings(json.loads(value), depth + 1)
        return found
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in all_strings(key, depth) + all_strings(item, depth)]
    if isinstance(value, list):
        return [text for item in value for text in all_strings(item, depth)]
    return []


def assert_no_secret(rows: dict[str, dict] | list[dict], *, also: tuple[str, ...] = ()) -> None:
    values = rows.values() if isinstance(rows, dict) else rows
    texts = [text for row in values for text in all_strings(row)]
    for name, secret in {**SECRETS, **FRAGMENTS, **{value: value for value in also}}.items():
        leaked = [text for text in texts if secret in text]
        assert not leaked, f"{name} leaked: {leaked[0][:200]!r}"


# -- chats: secrets after line breaks, tabs, escapes ------------------------------------------------


@pytest.mark.parametrize("separator", ["\n", "\t", "\r\n", "\n\n- ", "\\n"])
def test_secrets_at_the_start_of_a_line_are_redacted_and_the_text_stays_json(
    pipeline: Pipeline, separator: str
) -> None:
    content = "Here is my .env:" + "".join(separator + value for value in SECRETS.values()) + separator + "thanks"
    request = side(transcripts.chat_request(content, stream=False))
    response = side(
        json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Noted:" + separator + SECRETS["email"]},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59},
            }
        )
    )

    rows = run(pipeline, record("chat", request, response))

    assert_no_secret(rows)
    row = rows["chat"]
    messages = json.loads(row["input_text"])["messages"]  # still valid JSON
    assert "[REDACTED:email]" in messages[1]["content"] and messages[1]["content"].endswith("thanks")
    assert json.loads(row["output_text"])["choices"][0]["message"]["content"].endswith("[REDACTED:email]")
    assert set(row["redaction_rules"]) >= {
        "email",
        "phone",
        "access_token",
        "aws_secret_key",
        "private_key",
        "payment_card",
        "us_ssn",
        "iban",
    }


def test_escaped_and_upper_case_forms_are_found(pipeline: Pipeline) -> None:
    data = (
        '{"prompt": "mail alice.smith\\u0040example.com, auth BEARER abcdefgh12345678ijklmnop, '
        '\\u0041KIAIOSFODNN7EXAMPLE"}'
    )
    rows = run(pipeline, record("escaped", side(data), side('{"choices": []}')))

    assert_no_secret(rows, also=("alice.smith\\u0040example.com", "\\u0041KIAIOSFODNN7EXAMPLE"))
    assert json.loads(rows["escaped"]["input_text"])["prompt"].startswith("mail [REDACTED:email], auth [REDACTED")


def test_secrets_inside_tool_call_arguments_are_redacted(pipeline: Pipeline) -> None:
    arguments = json.dumps(
        {"to": SECRETS["email"], "note": "key:\n" + SECRETS["access_token"], "card": SECRETS["payment_card"]}
    )
    request = side(transcripts.chat_request("send it", stream=False, tool_arguments=arguments))

    rows = run(pipeline, record("tools", request, side('{"choices": []}')))

    assert_no_secret(rows)
    tool_call = json.loads(rows["tools"]["input_text"])["messages"][2]["tool_calls"][0]
    assert json.loads(tool_call["function"]["arguments"]) == {
        "to": "[REDACTED:email]",
        "note": "key:\n[REDACTED:access_token]",
        "card": "[REDACTED:payment_card]",
    }


def test_a_document_cut_at_the_capture_limit_is_still_redacted(pipeline: Pipeline) -> None:
    content = "line one\n" + SECRETS["email"] + "\nand then\n" + SECRETS["access_token"] + "\tand more words"
    whole = transcripts.chat_request(content)
    cut = whole[: whole.index("and more") + 5]  # inside an open string, the document unbalanced
    rows = run(pipeline, record("cut", side(cut, truncated=True), side('{"choices": []}')))

    assert_no_secret(rows)
    assert rows["cut"]["input_text"].endswith("[REDACTED:access_token]\\tand m")
    assert rows["cut"]["input_truncated"] is True


def test_deeply_nested_payloads_are_redacted_without_recursion(pipeline: Pipeline) -> None:
    nested = "[" * 5000 + json.dumps("deep\n" + SECRETS["email"]) + "]" * 5000
    rows = run(pipeline, record("deep", side(nested), side('{"choices": []}')), record("ok", side("{}"), side("{}")))

    assert_no_secret(rows)
    assert rows["deep"]["input_text"].count("[REDACTED:email]") == 1
    assert set(rows) == {"deep", "ok"}


# -- streams: vLLM, SGLang, TGI ---------------------------------------------------------------------

ANSWER = (
    "Sure. Contact "
    + SECRETS["email"]
    + " or call "
    + SECRETS["phone"]
    + ".\nThe key is\n"
    + SECRETS["access_token"]
    + " and\t"
    + SECRETS["aws_secret_key"]
    + "\nDone."
)
EXPECTED_ANSWER = (
    "Sure. Contact [REDACTED:email] or call [REDACTED:phone].\nThe key is\n[REDACTED:access_token] and\t"
    "[REDACTED:aws_secret_key]\nDone."
)


def stream_side(body: str, content_type: str = "text/event-stream", encoding: str = "BASE64") -> dict:
    data = base64.b64encode(body.encode()).decode() if encoding == "BASE64" else body
    return side(data, content_type, encoding)


@pytest.mark.parametrize("pieces", [2, 3, 5, 14, len(ANSWER)])
@pytest.mark.parametrize("server", ["vllm", "sglang", "tgi"])
def test_token_streams_are_reassembled_then_redacted(pipeline: Pipeline, server: str, pieces: int) -> None:
    deltas = split(ANSWER, pieces)
    body = {"vllm": transcripts.vllm_chat, "sglang": transcripts.sglang_chat, "tgi": transcripts.tgi_chat}[server](
        deltas
    )
    request = side(transcripts.chat_request("hi", model="served-model"))

    rows = run(pipeline, record("s", request, stream_side(body), callerId="team-a", responseStatus=200))

    assert_no_secret(rows)
    row = rows["s"]
    response = json.loads(row["output_text"])
    assert response["object"] == "chat.completion"
    assert response["choices"][0]["message"]["content"] == EXPECTED_ANSWER
    assert (row["streamed"], row["gen_ai_operation_name"], row["gen_ai_request_model"]) == (
        True,
        "chat",
        "served-model",
    )
    assert row["gen_ai_response_finish_reasons"] == ["stop"]
    assert row["gen_ai_usage_output_tokens"] is not None and row["gen_ai_usage_input_tokens"] > 0
    assert (row["caller_id"], row["http_response_status_code"]) == ("team-a", 200)
    assert set(row["redaction_rules"]) == {"email", "phone", "access_token", "aws_secret_key"}


@pytest.mark.parametrize("server", ["vllm", "tgi"])
def test_streamed_tool_call_arguments_are_merged_then_redacted(pipeline: Pipeline, server: str) -> None:
    arguments = json.dumps({"to": SECRETS["email"], "body": "card\n" + SECRETS["payment_card"]})
    build = transcripts.vllm_chat if server == "vllm" else transcripts.tgi_chat
    body = build([], tool_args=split(arguments, 5))

    rows = run(pipeline, record("t", side(transcripts.chat_request("mail it")), stream_side(body)))

    assert_no_secret(rows)
    [call] = json.loads(rows["t"]["output_text"])["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "send_email"
    assert json.loads(call["function"]["arguments"]) == {
        "to": "[REDACTED:email]",
        "body": "card\n[REDACTED:payment_card]",
    }


def test_vllm_completion_and_sglang_reasoning_streams(pipeline: Pipeline) -> None:
    completion = transcripts.vllm_completion(split("mail " + SECRETS["email"] + " now", 4))
    reasoning = transcripts.sglang_chat(["ok"], reasoning=split("the user is " + SECRETS["email"], 3))
    lines = [
        record(
            "completion",
            side(json.dumps({"model": "Qwen/Qwen2.5-7B", "prompt": "x", "stream": True})),
            stream_side(completion, "text/event-stream; charset=utf-8", "JSON"),
        ),
        record("reasoning", side(transcripts.chat_request("x")), stream_side(reasoning)),
    ]

    rows = run(pipeline, *lines)

    assert_no_secret(rows)
    completion_row = rows["completion"]
    assert json.loads(completion_row["output_text"])["choices"][0]["text"] == "mail [REDACTED:email] now"
    assert completion_row["gen_ai_operation_name"] == "text_completion"
    assert completion_row["gen_ai_response_finish_reasons"] == ["length"]
    assert completion_row["gen_ai_usage_output_tokens"] == 4
    message = json.loads(rows["reasoning"]["output_text"])["choices"][0]["message"]
    assert message["reasoning_content"] == "the user is [REDACTED:email]" and message["content"] == "ok"


def test_tgi_generate_stream_becomes_its_generate_response(pipeline: Pipeline) -> None:
    body = transcripts.tgi_generate_stream(split("write to " + SECRETS["email"], 5))
    request = side(json.dumps({"inputs": "who?", "parameters": {"max_new_tokens": 20}}))

    rows = run(pipeline, record("g", request, stream_side(body)))

    assert_no_secret(rows)
    response = json.loads(rows["g"]["output_text"])
    assert response["generated_text"] == "write to [REDACTED:email]"
    assert rows["g"]["gen_ai_usage_output_tokens"] == 5 and rows["g"]["gen_ai_response_finish_reasons"] == ["eos_token"]


def test_a_stream_of_unknown_shape_is_redacted_event_by_event(pipeline: Pipeline) -> None:
    body = transcripts.sse([{"kind": "note", "text": "mail\n" + SECRETS["email"]}, {"kind": "end"}], done=False)

    rows = run(pipeline, record("u", side("{}"), stream_side(body)))

    assert_no_secret(rows)
    assert rows["u"]["streamed"] is True and rows["u"]["output_text"].startswith("data: {")


def test_a_stream_cut_at_the_capture_limit_is_reassembled_up_to_the_cut(pipeline: Pipeline) -> None:
    body = transcripts.vllm_chat(split(ANSWER, 14))
    cut = body[: body.index(SECRETS["aws_secret_key"][:6]) + 3]
    response = stream_side(cut) | {"truncated": True}

    rows = run(pipeline, record("c", side(transcripts.chat_request("x")), response))

    assert_no_secret(rows)
    assert rows["c"]["output_truncated"] is True
    assert "stream cut at the capture size limit" in rows["c"]["decode_error"]


def test_embeddings_and_non_streamed_chat_facts(pipeline: Pipeline) -> None:
    embeddings = json.dumps(
        {
            "object": "list",
            "model": "bge-m3",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
            "usage": {"prompt_tokens": 8, "total_tokens": 8},
        }
    )
    chat = json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "model": "llama-served",
            "choices": [
                {"index": 1, "message": {"role": "assistant", "content": "b"}, "finish_reason": "length"},
                {"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"},
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    )
    lines = [
        record(
            "emb",
            side(json.dumps({"model": "bge-m3", "input": ["hello"]})),
            side(embeddings),
            requestPath="/v1/embeddings",
            durationMs=12.5,
            timeToFirstChunkMs=11.0,
        ),
        record("chat", side(transcripts.chat_request("x", model="llama", stream=False)), side(chat)),
        record("plain", side("1,2,3", "text/csv", "CSV"), side("0.5", "text/csv", "CSV")),
    ]

    rows = run(pipeline, *lines)

    emb, chat_row, plain = rows["emb"], rows["chat"], rows["plain"]
    assert (emb["gen_ai_operation_name"], emb["gen_ai_usage_input_tokens"], emb["gen_ai_usage_output_tokens"]) == (
        "embeddings",
        8,
        None,
    )
    assert (emb["request_path"], emb["request_duration_ms"], emb["time_to_first_chunk_ms"]) == (
        "/v1/embeddings",
        12.5,
        11.0,
    )
    assert (chat_row["gen_ai_request_model"], chat_row["gen_ai_response_model"]) == ("llama", "llama-served")
    assert chat_row["gen_ai_response_finish_reasons"] == ["stop", "length"]  # one per choice, by index
    assert (chat_row["gen_ai_usage_input_tokens"], chat_row["gen_ai_usage_output_tokens"], chat_row["streamed"]) == (
        3,
        2,
        False,
    )
    assert plain["gen_ai_operation_name"] is None and plain["caller_id"] is None and plain["partial"] is False


# -- other charsets and encodings -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "content_type", "note"),
    [
        ("café: écrivez à alice.smith@example.com".encode("latin-1"), "text/plain", "windows-1252 (detected)"),
        (("café\n" + SECRETS["email"]).encode("iso-8859-1"), "text/plain; charset=ISO-8859-1", "iso8859-1 (declared)"),
        (("Grüße " + SECRETS["email"]).encode("utf-16"), "text/plain", "utf-16 (byte order mark)"),
        (
            gzip.compress(json.dumps({"prompt": "x\n" + SECRETS["email"]}).encode(), mtime=0),
            "application/json",
            "gzip body inflated",
        ),
    ],
)
def test_other_charsets_and_gzip_bodies_are_decoded_then_redacted(
    pipeline: Pipeline, payload: bytes, content_type: str, note: str
) -> None:
    request = side(base64.b64encode(payload).decode(), content_type, "BASE64")

    rows = run(pipeline, record("b", request, side("{}")))

    assert_no_secret(rows)
    assert "[REDACTED:email]" in rows["b"]["input_text"]
    assert note in rows["b"]["decode_error"]


def test_binary_payloads_never_reach_curated_and_go_to_the_quarantine(pipeline: Pipeline) -> None:
    binary = base64.b64encode(b"\x00\x01\x02PNG\x89" + SECRETS["email"].encode() + b"\xff\x00").decode()

    rows = run(pipeline, record("bin", side(binary, "application/octet-stream", "BASE64"), side("{}")))

    assert rows["bin"]["input_text"] is None and rows["bin"]["output_text"] == "{}"
    assert rows["bin"]["decode_error"].startswith("input: BASE64 payload is not text")
    [entry] = pipeline.quarantine()
    assert entry["reason"].startswith("payload not decodable (input)") and binary in entry["raw"]


# -- hostile lines between good ones ----------------------------------------------------------------


def test_no_single_line_fails_the_object(pipeline: Pipeline) -> None:
    good = record("good-1", side('{"prompt": "hi"}'), side("{}"))
    lone_surrogate = (
        r'{"captureData": {"endpointInput": {"data": "hi \ud800", "encoding": "JSON"}}, "eventMetadata": {}}'
    )
    hostile = [
        lone_surrogate,  # UTF-8 cannot hold it: the stdlib reads it, Arrow cannot write it
        record("far-future", side("{}"), side("{}")).replace(EVENT_TIME, "9999-12-31T23:59:59-01:00"),
        record("epoch", side("{}"), side("{}")).replace(EVENT_TIME, "1970-01-01T00:00:00Z"),
        '{"captureData": ' + "[" * 5000 + "]" * 5000 + "}",  # nesting too deep for the stdlib
        record(
            "types",
            side("{}"),
            side("{}"),
            responseStatus="200",
            durationMs=-5,
            partial="yes",
            timeToFirstChunkMs="NaN",
        ),
        record(
            "huge-usage", side("{}"), side(json.dumps({"usage": {"prompt_tokens": 10**30, "completion_tokens": -1}}))
        ),
        "not json " + SECRETS["email"],
    ]
    rows = run(pipeline, good, *hostile, record("good-2", side("{}"), side("{}")))

    assert {"good-1", "good-2", "far-future", "epoch", "types", "huge-usage"} <= set(rows)
    assert rows["far-future"]["time_source"] == "object_key" and rows["epoch"]["time_source"] == "object_key"
    assert str(rows["far-future"]["inference_time"]).startswith("2026-11-30 10:00")
    assert (rows["types"]["http_response_status_code"], rows["types"]["request_duration_ms"]) == (None, None)
    assert (rows["huge-usage"]["gen_ai_usage_input_tokens"], rows["huge-usage"]["gen_ai_usage_output_tokens"]) == (
        None,
        None,
    )
    reasons = {entry["line_number"]: entry["reason"] for entry in pipeline.quarantine()}
    assert reasons[2].startswith("a lone surrogate")
    assert reasons[5] == "JSON nested too deeply to read"
    assert reasons[8].startswith("invalid JSON")
    assert all(key.startswith("curated/tier=pod/dt=2026-11-30/") for key in pipeline.keys("curated/"))
    assert_no_secret(pipeline.quarantine())


def test_the_quarantine_cut_never_splits_a_secret_out_of_reach(pipeline: Pipeline) -> None:
    from capture_core.outputs import QUARANTINE_RAW_LIMIT

    line = "{not json " + "x" * (QUARANTINE_RAW_LIMIT - 10 - 10) + " " + SECRETS["email"] + " tail"
    assert line.index(SECRETS["email"]) < QUARANTINE_RAW_LIMIT < line.index(SECRETS["email"]) + len(SECRETS["email"])

    run(pipeline, line, record("ok", side("{}"), side("{}")))

    [entry] = pipeline.quarantine()
    assert entry["raw_truncated"] is True
    assert not entry["raw"].rstrip().endswith(SECRETS["email"][:8]) and "alice.smi" not in entry["raw"]


def test_an_object_over_the_size_limit_is_processed_up_to_it(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_OBJECT_BYTES", str(1 << 20))
    lines = [record(f"r{index:04d}", side('{"prompt": "' + "y" * 1000 + '"}'), side("{}")) for index in range(3000)]

    rows = run(pipeline, *lines, gzipped=True)  # 4 MB of lines, 30 KB as gzip

    assert len(rows) == (1 << 20) // (len(lines[0]) + 1)  # every whole line up to the limit, none after
    [entry] = pipeline.quarantine()
    assert entry["reason"].startswith("object decodes to more than MAX_OBJECT_BYTES (1048576 bytes)")


# -- the load balancer tier -------------------------------------------------------------------------

ALB_KEY = (
    "data-capture/a1b2c3d4/alb/AWSLogs/123456789012/elasticloadbalancing/us-east-2/2026/11/30/"
    "123456789012_elasticloadbalancing_us-east-2_app.my-lb.50dc6c495c0c9188_20261130T1005Z_10.0.0.1_x.log"
)


def alb_line(
    request: str = "GET https://api.example.com:443/v1/models HTTP/1.1",
    user_agent: str = "curl/8.5.0",
    *,
    client: str = "192.0.2.10:50599",
    status: str = "200",
    received: str = "120",
    time: str = "2026-11-30T10:04:59.186641Z",
) -> str:
    return (
        f"h2 {time} app/my-lb/50dc6c495c0c9188 {client} 10.0.1.5:8443 0.001 0.250 0.000 {status} {status} "
        f'{received} 900 "{request}" "{user_agent}" ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 '
        'arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/tg/73e2d6bc24d8a067 "Root=1-5" '
        '"api.example.com" "arn:aws:acm:us-east-2:123456789012:certificate/12345678" 0 '
        '2026-11-30T10:04:58.936000Z "forward" "-" "-" "10.0.1.5:8443" "200" "-" "-"'
    )


def test_alb_url_encoded_values_and_the_user_agent_are_redacted(pipeline: Pipeline) -> None:
    lines = [
        alb_line("GET https://api.example.com:443/v1/chat?user=alice.smith%40example.com&x=1 HTTP/1.1"),
        alb_line("GET https://api.example.com:443/v1/chat?auth=Bearer%20abcdefgh12345678ijklmnop HTTP/1.1"),
        alb_line("GET https://api.example.com:443/v1/chat?phone=%2B44%2020%207946%200958 HTTP/1.1"),
        alb_line("GET https://api.example.com:443/u/alice.smith%2540example.com/x HTTP/1.1"),  # encoded twice
        alb_line(
            user_agent="python-requests/2.32 (contact alice.smith@example.com) "
            "token=hf_abcdefghijklmnopqrstuvwxyz0123456789"
        ),
    ]
    pipeline.put(ALB_KEY, ("\n".join(lines) + "\n").encode())

    assert pipeline.run(ALB_KEY) == {"batchItemFailures": []}

    rows = pipeline.rows()
    assert len(rows) == 5
    assert_no_secret(rows, also=("alice.smith%40example.com", "abcdefgh12345678", "%2B44%2020", "%2540example"))
    assert rows[0]["request_query"] == "user=[REDACTED:email]&x=1"
    assert rows[0]["request_url"] == "https://api.example.com:443/v1/chat?user=[REDACTED:email]&x=1"
    assert rows[4]["user_agent"].startswith("python-requests/2.32 (contact [REDACTED:email]) token=[REDACTED")


def test_alb_hostile_lines_are_quarantined_and_the_others_land(pipeline: Pipeline) -> None:
    lines = [
        alb_line(),
        alb_line("GET https://[api.example.com:443/v1/models HTTP/1.1"),  # '[' in the host: kept, not split
        alb_line(client="192.0.2.10:5²"),  # a superscript digit in the port
        alb_line(status="99999999999"),  # past int32
        alb_line(received="99999999999999999999999"),  # past int64
        alb_line(time="9999-12-31T23:59:59.000000Z"),
        alb_line(time="1970-01-01T00:00:00.000000Z"),
        alb_line(client="192.0.2.10:99999"),  # not a port
    ]
    pipeline.put(ALB_KEY, ("\n".join(lines) + "\n").encode())

    assert pipeline.run(ALB_KEY) == {"batchItemFailures": []}

    rows = pipeline.rows()
    assert len(rows) == 4
    assert rows[1]["request_url"] == "https://[api.example.com:443/v1/models" and rows[1]["request_host"] is None
    assert [row["time_source"] for row in rows[2:]] == ["object_key", "object_key"]
    assert all(key.startswith("curated/tier=alb/dt=2026-11-30/hour=10/") for key in pipeline.keys("curated/"))
    reasons = {entry["line_number"]: entry["reason"] for entry in pipeline.quarantine()}
    assert sorted(reasons) == [3, 4, 5, 8]
    assert reasons[3].startswith("client:port must be ip:port (port 0-65535)")
    assert reasons[4].startswith("elb_status_code is out of range")
    assert reasons[5].startswith("received_bytes is out of range")


def test_a_row_arrow_refuses_is_quarantined_and_the_others_land(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The net under the checks: should a value ever pass them that Arrow cannot hold (here a token
    count past int64, forced past the check), only its row is lost to the quarantine."""
    from capture_core import capture_format, openai_format

    real = openai_format.exchange_facts

    def facts_with_an_overflow(request, response, **options):
        facts = real(request, response, **options)
        if isinstance(request, dict) and request.get("prompt") == "overflow":
            return openai_format.ExchangeFacts(input_tokens=1 << 70)
        return facts

    monkeypatch.setattr(capture_format.openai_format, "exchange_facts", facts_with_an_overflow)
    lines = [record(name, side(json.dumps({"prompt": name})), side("{}")) for name in ("a", "overflow", "b")]

    rows = run(pipeline, *lines)

    assert set(rows) == {"a", "b"}
    [entry] = pipeline.quarantine()
    assert entry["line_number"] == 2 and entry["reason"].startswith("could not convert to the curated schema")

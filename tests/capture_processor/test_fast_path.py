"""The speed work changes no output (issue 27): the same objects through the fast path (orjson, the collector paused
during the conversion) and the plain one (the stdlib's `json`, the collector as Python runs it) give the same
Parquet rows and the same quarantine, byte for byte. The records plant secrets after escapes, across stream deltas
and in other charsets, and carry what orjson and `json` read differently (NaN, huge numbers, lone surrogates, a
byte order mark, deep nesting, UTF-16 lines). The pre-filter of lines that cannot be capture records (issue 27's
200,000 lines of `{}`) is part of the fast path: lines that look like capture lines and are not, and lines that are
(a key with an escape, a usage record), go through both paths too."""

from __future__ import annotations

import base64
import gc
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from capture_core import capture_format, documents, fast_json, openai_format, payloads, processor, redaction
from capture_core.erasure import quarantine_entry_line_numbers, quarantine_entry_lines
from capture_core.outputs import QuarantineSource
from capture_core.processor import convert_stream
from capture_core.records import ChunkContext
from capture_core.redaction import DEFAULT_RULES, Redactor
from capture_core.routing import Tier
from tests.capture_processor import transcripts
from tests.capture_processor.test_llm_traffic import record, side
from tests.capture_processor.transcripts import SECRETS, split


def b64(text: str, charset: str = "utf-8") -> str:
    return base64.b64encode(text.encode(charset)).decode()


def hostile_object() -> bytes:
    chat = "Here is my .env:" + "".join("\\n" + value for value in SECRETS.values()) + "\nthanks"
    lines = [
        record("escapes", side(transcripts.chat_request(chat, stream=False)), side('{"choices": []}')),
        record(
            "unicode-escapes",
            side('{"prompt": "mail alice.smith\\u0040example.com \\u0041KIAIOSFODNN7EXAMPLE \\ud83d\\ude00"}'),
            side('{"a": "\\ud800 lone", "b": NaN, "c": 1e400, "d": 123456789012345678901234567890}'),
        ),
    ]
    for pieces in (2, 5, 14):
        answer = "Sure: " + " ".join(SECRETS.values())
        stream = transcripts.vllm_chat(split(answer, pieces), tool_args=split(json.dumps({"to": SECRETS["email"]}), 3))
        lines.append(record(f"vllm-{pieces}", side(transcripts.chat_request("go")), side(stream, "text/event-stream")))
        sglang = transcripts.sglang_chat(split(answer, pieces))
        lines.append(record(f"sglang-{pieces}", None, side(b64(sglang), "text/event-stream", "BASE64")))
        escaped = 'say "' + SECRETS["email"] + '" \\ été\n' + " ".join(SECRETS.values())  # \", \\, \n, \u00e9
        compact = transcripts.vllm_chat(split(escaped, pieces * 3)).replace("é", "\\u00e9")
        lines.append(record(f"vllm-escaped-{pieces}", None, side(b64(compact), "text/event-stream", "BASE64")))
        completion = transcripts.vllm_completion(split(answer, pieces * 2))
        lines.append(record(f"completion-{pieces}", None, side(completion, "text/event-stream")))
    # Long streams whose middle the split merge decodes in one call (escapes, quotes, a secret across 60 deltas), and
    # one whose middle holds a \u escape and a tool call (event by event there).
    long_answer = 'He said "' + SECRETS["email"] + '"\n\tthen \\ ' + " ".join(SECRETS.values()) + " end"
    lines.append(record("split-long", None, side(b64(transcripts.vllm_chat(split(long_answer * 2, 60))),
                                                 "text/event-stream", "BASE64")))
    mixed = transcripts.vllm_chat(split("café " + long_answer, 40), tool_args=split(json.dumps({"to": "x@y.org"}), 3))
    lines.append(record("split-mixed", None, side(mixed.replace("é", "\\u00e9"), "text/event-stream")))
    lines += [
        record("tgi", None, side(transcripts.tgi_chat(split("call " + SECRETS["phone"], 4)), "text/event-stream")),
        record("latin1", side(b64("carte 4111 1111 1111 1111, é", "iso-8859-1"), "text/plain; charset=ISO-8859-1",
                              "BASE64"), None),
        record("cp1252", side(b64("“quote” a@example.com", "cp1252"), "text/plain", "BASE64"), None),
        record("utf16", side(b64("\ufeffIBAN GB82 WEST 1234 5698 7654 32", "utf-16-le"), "text/plain", "BASE64"), None),
        record("bom-json", side("\ufeff" + json.dumps({"k": SECRETS["us_ssn"]})), None),
        # Integers outside orjson's range where the facts read numbers: the order of the finish reasons, token counts.
        record("big-index", side(transcripts.chat_request("hi", stream=False)), side(
            '{"object": "chat.completion", "choices": [{"index": 18446744073709551616, "finish_reason": "length"}, '
            '{"index": 1, "finish_reason": "stop"}, {"index": -9223372036854775809, "finish_reason": "tool_calls"}], '
            '"usage": {"prompt_tokens": 99999999999999999999, "completion_tokens": -9223372036854775809}}')),
        record("deep", side("[" * 3000 + '"a@example.com"' + "]" * 3000), None),
        record("unknown-stream", None, side('data: {"x": "alice.smith@exa"}\n\ndata: {"x": "mple.com"}\n\n',
                                            "text/event-stream")),
        "{not json, mail a@example.com",
        '{"captureData": {"endpointInput": {"data": "x", "encoding": "JSON"}}, "n": NaN}',
        json.dumps({"captureData": {"endpointInput": {"data": "\ud800", "encoding": "JSON"}}}),
        "{}",
    ]
    body = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    return body + '{"captureData": {"endpointInput": {"data": "é", "encoding": "JSON"}}}\n'.encode("utf-16")


def convert(data: bytes, directory: Path) -> tuple[list[dict[str, Any]], str]:
    context = ChunkContext("h/pod/2026/11/30/10/x.jsonl", "h", None, datetime(2026, 11, 30, 10, tzinfo=UTC))
    conversion = convert_stream(
        io.BytesIO(data), Tier.POD, context, Redactor(DEFAULT_RULES), directory, QuarantineSource("b", "k", "v")
    )
    rows = [row for file in conversion.partition_files for row in pq.read_table(file.path).to_pylist()]
    quarantine = conversion.quarantine.path.read_text() if conversion.quarantine.entries else ""
    return rows, quarantine


def plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every speed switch off: the stdlib's `json`, the collector as Python runs it, every line to Arrow's reader."""
    monkeypatch.setattr(fast_json, "FAST", False)
    monkeypatch.setattr(gc, "disable", lambda: None)
    monkeypatch.setattr(capture_format, "PREFILTER", False)
    monkeypatch.setattr(openai_format, "TEMPLATE_MERGE", False)  # and with it the split merge (STREAM_SPLIT)
    monkeypatch.setattr(openai_format, "STREAM_SPLIT", False)
    monkeypatch.setattr(redaction, "BUDGET_BY_LENGTH", False)
    monkeypatch.setattr(documents, "SHARED_SCAN", False)
    monkeypatch.setattr(redaction, "COMPILED_RULES", False)
    monkeypatch.setattr(redaction, "REQUIRED_TEXTS", False)
    monkeypatch.setattr(payloads, "FAST_BASE64", False)
    monkeypatch.setattr(payloads, "FACTS_UNCHECKED", False)
    monkeypatch.setattr(redaction, "SHARED_JOIN", False)
    monkeypatch.setattr(redaction, "BUDGET_BY_ARROW", False)
    monkeypatch.setattr(redaction, "BUDGET_BY_TOTAL", False)
    monkeypatch.setattr(documents, "UNICODE_BY_RE2", False)
    monkeypatch.setattr(documents, "UNICODE_IN_SCAN", False)
    monkeypatch.setattr(fast_json, "DUMPS_BY_ORJSON", False)
    monkeypatch.setattr(documents, "MATCHLESS", False)
    monkeypatch.setattr(openai_format, "SIMPLE_BY_PARTS", False)
    monkeypatch.setattr(documents, "SPLICED", False)


def test_the_fast_path_gives_the_plain_paths_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert fast_json.FAST, "orjson is a dependency of the processor (pyproject dev extra, the Lambda's lock)"
    data = hostile_object()
    (tmp_path / "fast").mkdir()
    (tmp_path / "plain").mkdir()

    fast_rows, fast_quarantine = convert(data, tmp_path / "fast")
    plain_path(monkeypatch)
    plain_rows, plain_quarantine = convert(data, tmp_path / "plain")

    assert fast_rows == plain_rows
    assert fast_quarantine == plain_quarantine
    assert len(fast_rows) >= 15 and fast_quarantine.count("\n") >= 4
    assert all(secret not in json.dumps(fast_rows, default=str) for secret in SECRETS.values())
    assert gc.isenabled()  # resumed after the object


@pytest.mark.parametrize(
    "text",
    ['{"a":1,"a":2}', "\ufeff{}", "1e400", "NaN", "[1.5e-7,-0,-0.0,0.1]", '"\\ud800"', '"\\ud83d\\ude00"',
     "123456789012345678901234567890", "-9223372036854775809", "[-9223372036854775808, 18446744073709551615]",
     "[" * 2000 + "]" * 2000, '{"a": "\\u0000\\t"}', "1,2", ""],
)
def test_fast_json_reads_what_json_reads_and_fails_where_it_fails(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def outcome() -> Any:
        try:
            return ("value", repr(fast_json.loads(text)))
        except RecursionError:
            return ("error", "RecursionError")
        except ValueError as error:
            return ("error", type(error).__name__, str(error))

    fast = outcome()
    monkeypatch.setattr(fast_json, "FAST", False)

    assert fast == outcome()


def prefilter_object() -> bytes:
    """Lines the pre-filter takes out (JSON objects naming neither `captureData` nor `usageSource`, without a
    backslash) between lines that look like them and are capture records, or look like capture lines and are not."""
    good = [record(f"good-{n}", side(transcripts.chat_request(f"mail a{n}@example.com")), side('{"choices": []}'))
            for n in range(4)]
    escaped_key = record("escaped-key", side('{"prompt": "hi"}'), None).replace('"captureData"', '"captureD\\u0061ta"')
    lines = [
        good[0], "{}", "{}", '{"a": 1}', '{"a":1,"a":2}', "[]", "1", "null", '"text"', "   ", "{}\r",
        '{"eventMetadata": {"eventId": "x", "inferenceTime": "2026-11-30T10:00:00Z"}}',
        '{"eventVersion": 1}',  # a type Arrow's reader refuses: without the filter, the chunk is read line by line
        '{"eventMetadata": 5}', '{"x": NaN}', '{"x": 1e400}', '{"x": ' + "[" * 1500 + "]" * 1500 + "}",
        good[1],
        '{"note": "captureData is where the payload goes"}', '{"usageSource": "response"}',
        '{"eventMetadata": {"usageSource": 5}}', '{"eventMetadata": {"usageSource": "response", "callerId": "t"}}',
        '{"captureData": {}}', '{"captureData": {"endpointInput": "x"}}', '{"mail": "b@example.com"}',
        '{"mail": "b@example.com"}', '{"a": "\\u0041"}', escaped_key, "{not json",
        good[2], *["{}"] * 300, good[3], *["{}"] * 5,
    ]
    body = ("\n".join(lines) + "\n").encode()
    return body + b'{"x": "\xff"}\n{}\n' + good[0].encode() + b"\n{}"  # invalid UTF-8; no newline at the end


@pytest.mark.parametrize("chunk_bytes", [None, 700, 4096])
def test_the_prefilter_gives_the_plain_paths_output(
    chunk_bytes: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunk_bytes is not None:  # chunks of every mix: only filtered lines, filtered and kept, a line forcing the
        monkeypatch.setattr(processor, "CHUNK_BYTES", chunk_bytes)  # careful path beside filtered ones
    data = prefilter_object()
    (tmp_path / "fast").mkdir()
    (tmp_path / "plain").mkdir()

    fast_rows, fast_quarantine = convert(data, tmp_path / "fast")
    plain_path(monkeypatch)
    plain_rows, plain_quarantine = convert(data, tmp_path / "plain")

    assert fast_rows == plain_rows
    assert fast_quarantine == plain_quarantine
    events = sorted(str(row["event_id"]) for row in fast_rows)
    assert events == ["None", "escaped-key", "good-0", "good-0", "good-1", "good-2", "good-3"], events
    quarantined = [json.loads(line) for line in fast_quarantine.splitlines()]
    named = [number for entry in quarantined for number in quarantine_entry_line_numbers(entry)]
    assert len(named) == len(set(named)) == data.count(b"\n") + 1 - len(events) - 1  # every other line but the blank
    assert sum(map(quarantine_entry_lines, quarantined)) == len(named)
    assert any(entry["raw"] == "{}" and entry["count"] > 300 for entry in quarantined)  # the `{}` lines as runs
    assert "b@example.com" not in fast_quarantine and "@example.com" not in json.dumps(fast_rows, default=str)

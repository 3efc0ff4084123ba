"""The template merge of streams (issue 27, `openai_format.TEMPLATE_MERGE`) gives the plain merge's result, or fails
where it fails: the common events (one piece of `content` or `text`, every other byte the same) contribute their piece
without becoming objects; escapes, quotes that change the event's structure, other charsets and every uncommon shape
take the plain path. Each stream goes through both paths; `reassemble` must give equal results (same keys in the same
order) or raise NotReassembled in both."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from capture_core import openai_format
from capture_core.openai_format import NotReassembled, reassemble, reassemble_stream, sse_events
from tests.capture_processor import transcripts
from tests.capture_processor.transcripts import SECRETS, split

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1764497700, "model": "m"}
SECRET_TEXT = "Sure: " + " ".join(SECRETS.values())


def chat(piece: Any, **extra: Any) -> dict[str, Any]:
    entry = {"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": None}
    return HEAD | {"choices": [entry]} | extra


def sse(events: list[Any], *, compact: bool = True, ascii_only: bool = False) -> str:
    def text(event: Any) -> str:
        if isinstance(event, str):
            return event
        return json.dumps(event, ensure_ascii=ascii_only, separators=(",", ":") if compact else None)

    return "".join(f"data: {text(event)}\n\n" for event in events) + "data: [DONE]\n\n"


def common(pieces: list[str], **kwargs: Any) -> str:
    head = HEAD | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    last = HEAD | {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}
    usage = HEAD | {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(pieces)}}
    return sse([head, *[chat(piece) for piece in pieces], last, usage], **kwargs)


def raw_piece(literal: str) -> str:
    """A chat chunk whose content is `literal` exactly as written between the quotes (escapes or not, valid or not)."""
    return json.dumps(chat("\x00MARK"), separators=(",", ":")).replace("\\u0000MARK", literal)


def many(literal: str, count: int = 6) -> list[str]:
    """`literal` second among common chunks (not the middle one, which the template is taken from)."""
    return [raw_piece("p"), literal] + [raw_piece(f"q{n}") for n in range(count)]


PLAIN = [f"piece {n} " for n in range(8)]
STREAMS: dict[str, str] = {
    "common": common(PLAIN),
    "common, spaces after separators": common(PLAIN, compact=False),
    "common, ascii escapes": common(["é", "日本", "😀", " \u2028 ", "\u200d", "\x7f", "x"], ascii_only=True),
    "common, raw other charsets": common(["é", "日本語", "😀", " \u2028 ", "\u200d", "\x7f", "\u00a0", "x"]),
    "secret across deltas": common(split(SECRET_TEXT, 14)),
    "secret after escapes": common(['say \\"', "\n\t", SECRETS["email"][:5], SECRETS["email"][5:], '"\\', "end"]),
    "escapes as written": sse(many(raw_piece('\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\ud83d\\ude00'))),
    "lone surrogate escape": sse(many(raw_piece("a\\ud800b"))),
    "lone surrogate raw": sse([chat("a"), chat("\ud800"), chat("b"), chat("c")], ascii_only=False),
    "a quote that adds a key": sse(many(raw_piece('a","content":"b'))),
    "a quote that adds a field": sse(many(raw_piece('a"},"finish_reason":"stop","x":{"y":"'))),
    "a piece ending in a backslash": sse(many(raw_piece("abc\\"))),
    "a bad escape": sse(many(raw_piece("\\x41"))),
    "a raw control character": sse(many(raw_piece("a\tb"))),
    "a raw newline in the last event": sse([raw_piece("a"), raw_piece("b"), raw_piece("c"), raw_piece("d\re")]),
    "the last event cut": sse([raw_piece("a"), raw_piece("b"), raw_piece("c")]).replace("data: [DONE]\n\n", "")
    + 'data: {"id":"chatcmpl-1","obj\n\n',
    "a middle event not json": sse([raw_piece("a"), raw_piece("b"), "{nope", raw_piece("c"), raw_piece("d")]),
    "a middle event not an object": sse([raw_piece("a"), raw_piece("b"), "[1]", raw_piece("c"), raw_piece("d")]),
    "an event of two values": sse([raw_piece("a"), raw_piece("b"), "1,2", raw_piece("c"), raw_piece("d")]),
    "done in the middle": sse([raw_piece("a"), raw_piece("b"), raw_piece("c"), "[DONE]", raw_piece("d")]),
    "tool calls": transcripts.vllm_chat(split(SECRET_TEXT, 5), tool_args=split('{"to": "a@example.com"}', 6)),
    "tool calls in the middle": sse(
        [chat("a"), chat("b"), HEAD | {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function":
         {"name": "f", "arguments": "{}"}}]}}]}, chat("c"), chat("d")]
    ),
    "completion": transcripts.vllm_completion(split(SECRET_TEXT, 9)),
    "completion, chat object": sse([{**chat("x"), "choices": [{"index": 0, "text": t}]} for t in "abcde"]),
    "chat and completion mixed": sse([chat("a"), chat("b"), chat("c"), HEAD | {"object": "text_completion",
                                      "choices": [{"index": 0, "text": "t"}]}, chat("d")]),
    "sglang with reasoning": transcripts.sglang_chat(split(SECRET_TEXT, 6), reasoning=split("thinking hard", 4)),
    "tgi": transcripts.tgi_chat(split("call " + SECRETS["phone"], 4)),
    "tgi tokens between common chunks": sse([chat("a"), chat("b"), {"token": {"text": "t", "special": False}},
                                             chat("c"), chat("d")]),
    "two choices interleaved": sse([{**chat(f"{n}"), "choices": [{"index": n % 2, "delta": {"content": f"{n}"},
                                     "finish_reason": None}]} for n in range(8)]),
    "logprobs": sse([{**chat(f"{n}"), "choices": [{"index": 0, "delta": {"content": f"{n}"}, "logprobs":
                     {"content": [{"token": f"{n}", "logprob": -0.5}]}, "finish_reason": None}]} for n in range(6)]),
    "usage in every chunk": sse([chat(f"{n}", usage={"completion_tokens": n}) for n in range(6)]),
    "usage null in every chunk": sse([chat(f"{n}", usage=None) for n in range(6)]),
    "error between chunks": sse([chat("a"), chat("b"), {"error": {"message": "boom"}}, chat("c"), chat("d")]),
    "error key in the common chunk": sse([chat(f"{n}", error="e") for n in range(5)]),
    "a different id per chunk": sse([{**chat(f"{n}"), "id": f"c{n}"} for n in range(6)]),
    "duplicate keys": sse(many('{"id":"a","id":"b","object":"chat.completion.chunk","choices":[{"index":0,'
                               '"delta":{"content":"x","content":"y"}}]}')),
    "duplicate content keys": sse(['{"choices":[{"index":0,"delta":{"content":"' + t + '","content":"y"}}]}'
                                   for t in "abcde"]),
    "duplicate choices": sse(['{"choices":[{"index":0,"delta":{"content":"' + t + '"}}],"choices":[{"index":0,'
                              '"delta":{"content":""}}]}' for t in "abcde"]),
    "the content in another field": sse(['{"id":"\\"delta\\":{\\"content\\":\\"' + t + '\\"}","choices":[{"index":0,'
                                         '"delta":{"content":""}}]}' for t in "abcde"]),
    "index not a small integer": sse([{**chat(t), "choices": [{"index": i, "delta": {"content": t}}]}
                                      for t, i in zip("abcde", [True, True, 5000, 5000, 1], strict=True)]),
    "a twenty-digit number in the head": sse([chat(t, created=123456789012345678901234) for t in "abcde"]),
    "NaN in the head": sse([raw_piece(t).replace('"created":1764497700', '"created":NaN') for t in "abcde"]),
    "a bom before an event": sse(["\ufeff" + raw_piece(t) for t in "abcde"]),
    "whitespace around events": sse([" " + raw_piece(t) + " " for t in "abcde"]),
    "crlf and comments": common(PLAIN).replace("\n", "\r\n").replace("data: [DONE]", ": keepalive\r\ndata: [DONE]"),
    "no events": "",
    "short": sse([chat("a"), chat("b")]),
    "only content": sse([chat(t) for t in "abcdef"]),
    # The split merge (openai_format.STREAM_SPLIT) cuts the stream's text at the separator between common events:
    # what it must not join, decode or drop differently.
    "split: a long common run": common([f"p{n} " for n in range(200)]),
    "split: escapes in every piece": common([f"a\n{n}\t\"q\" \\ " for n in range(60)]),
    "split: a \\u escape across two pieces": sse([raw_piece("a"), raw_piece("b\\u00"), raw_piece("e9c"),
                                                  *[raw_piece(f"x{n}") for n in range(8)], raw_piece("z")]),
    "split: a surrogate pair across two pieces": sse([raw_piece("a"), raw_piece("\\ud83d"), raw_piece("\\ude00"),
                                                    *[raw_piece(f"x{n}") for n in range(8)], raw_piece("z")]),
    "split: a backslash escape across two pieces": sse([raw_piece("a"), raw_piece("b\\"), raw_piece("nc"),
                                                      *[raw_piece(f"x{n}") for n in range(8)], raw_piece("z")]),
    "split: an escaped backslash at a piece's end": sse([raw_piece("a"), raw_piece("b\\\\"), raw_piece("nc"),
                                                       *[raw_piece(f"x{n}") for n in range(8)], raw_piece("z")]),
    "split: a raw control character mid-run": sse([raw_piece(f"x{n}") for n in range(6)] + [raw_piece("a\x01b")]
                                                 + [raw_piece(f"y{n}") for n in range(6)]),
    "split: a quote that adds a key mid-run": sse([raw_piece(f"x{n}") for n in range(6)]
                                                 + [raw_piece('a","content":"b')]
                                                 + [raw_piece(f"y{n}") for n in range(6)]),
    "split: done mid-run": sse([raw_piece(f"x{n}") for n in range(6)] + ["[DONE]"]
                               + [raw_piece(f"y{n}") for n in range(6)]),
    "split: done with spaces mid-run": sse([raw_piece(f"x{n}") for n in range(6)] + ["  [DONE] "]
                                           + [raw_piece(f"y{n}") for n in range(6)]),
    "split: done early": sse([raw_piece("a"), "[DONE]"] + [raw_piece(f"y{n}") for n in range(9)]),
    "split: [DONE] as a piece": common(["[DONE]", " [DONE]", "x"] * 4),
    "split: a role chunk mid-run": sse([raw_piece(f"x{n}") for n in range(6)]
                                       + [HEAD | {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
                                       + [raw_piece(f"y{n}") for n in range(6)]),
    "split: an event without the space after data:": sse([raw_piece(f"x{n}") for n in range(12)]).replace(
        "data: " + raw_piece("x4"), "data:" + raw_piece("x4")),
    "split: an event with two spaces after data:": sse([raw_piece(f"x{n}") for n in range(12)]).replace(
        "data: " + raw_piece("x4"), "data:  " + raw_piece("x4")),
    "split: empty pieces": common(["", "a", "", "", "b", ""] * 5),
    "split: pieces that hold the template's text": common(['"},"logprobs":null', "delta", '{"content":"', "x"] * 4),
    "split: no trailing blank line": common(PLAIN).removesuffix("\n\n"),
    "split: one trailing newline": common(PLAIN).removesuffix("\n"),
    "split: three newlines": common(PLAIN).replace("\n\n", "\n\n\n", 3),
    "split: a line break inside an event": common(PLAIN).replace("piece 3", "piece\n3"),
    "split: the last event cut": common(PLAIN).removesuffix("data: [DONE]\n\n")[:-30],
    "split: two common events, then others": sse([raw_piece("a"), raw_piece("b"), chat("c", usage={"x": 1}),
                                                  chat("d", usage={"x": 2}), chat("e", usage={"x": 3})]),
    "split: short events between": sse([raw_piece("a"), raw_piece("b"), "{}", raw_piece("c"), "{}", raw_piece("d"),
                                        raw_piece("e")]),
}


def outcome(stream: str) -> Any:
    """What the processor does with a stream's text (`reassemble_stream`: the split merge, else the per-event
    template merge, else the plain merge, as the switches say)."""
    try:
        result = reassemble_stream(stream)
    except NotReassembled:
        return "NotReassembled"
    return json.dumps(result, ensure_ascii=False)  # the text the processor writes: values and key order


def plain(stream: str) -> Any:
    try:
        result = reassemble(sse_events(stream))
    except NotReassembled:
        return "NotReassembled"
    return json.dumps(result, ensure_ascii=False)


@pytest.mark.parametrize("split_merge", [True, False])
@pytest.mark.parametrize("name", list(STREAMS))
def test_the_template_merge_gives_the_plain_merges_result(
    name: str, split_merge: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = STREAMS[name]
    assert openai_format.TEMPLATE_MERGE and openai_format.STREAM_SPLIT
    monkeypatch.setattr(openai_format, "STREAM_SPLIT", split_merge)
    fast = outcome(stream)
    monkeypatch.setattr(openai_format, "TEMPLATE_MERGE", False)
    assert fast == outcome(stream) == plain(stream)


def test_the_split_merge_takes_the_common_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: the common streams take the split merge, with their middle decoded in one piece or event by
    event where it must be."""
    taken: list[bool] = []
    bulk: list[bool] = []
    split_merged: Callable[[str], dict[str, Any] | None] = openai_format._split_merged
    middle_pieces: Callable[[str, str], list[str] | None] = openai_format._middle_pieces

    def spy(text: str) -> dict[str, Any] | None:
        result = split_merged(text)
        taken.append(result is not None)
        return result

    def spy_middle(middle: str, separator: str) -> list[str] | None:
        result = middle_pieces(middle, separator)
        bulk.append(result is not None)
        return result

    monkeypatch.setattr(openai_format, "_split_merged", spy)
    monkeypatch.setattr(openai_format, "_middle_pieces", spy_middle)
    for name, in_one in (("common", True), ("secret across deltas", True), ("split: a long common run", True),
                         ("split: escapes in every piece", True), ("common, raw other charsets", True),
                         ("completion", True), ("split: empty pieces", True), ("common, ascii escapes", False),
                         ("split: a role chunk mid-run", False), ("split: an event without the space after data:",
                         False), ("split: pieces that hold the template's text", True)):
        taken.clear()
        bulk.clear()
        outcome(STREAMS[name])
        assert taken == [True] and bulk == [in_one], name
    for name in ("split: done early", "split: done mid-run", "split: a line break inside an event",
                 "split: three newlines", "no events", "crlf and comments", "tgi"):
        taken.clear()
        outcome(STREAMS[name])
        assert taken in ([False], []), name


def test_the_template_merge_takes_the_common_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: the common shapes do take the template merge (and the uncommon ones the plain path)."""
    taken: list[bool] = []
    original: Callable[[list[str]], dict[str, Any] | None] = openai_format._template_merged

    def spy(events: list[str]) -> dict[str, Any] | None:
        result = original(events)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(openai_format, "_template_merged", spy)
    monkeypatch.setattr(openai_format, "STREAM_SPLIT", False)  # the per-event path (the split merge: the next test)
    for name in ("common", "common, spaces after separators", "secret across deltas", "secret after escapes",
                 "escapes as written", "a quote that adds a key", "completion", "sglang with reasoning",
                 "common, ascii escapes", "common, raw other charsets", "two choices interleaved"):
        taken.clear()
        outcome(STREAMS[name])
        assert taken == [True], name
    for name in ("tgi", "logprobs", "usage in every chunk",
                 "duplicate choices", "error key in the common chunk", "duplicate content keys"):
        taken.clear()
        outcome(STREAMS[name])
        assert taken in ([False], []), name


def test_random_pieces_as_written_give_the_plain_merges_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces written from fragments of escapes, quotes, control and other characters (valid or not), seeded."""
    fragments = ["a", " ", "\\", '"', "\\n", "\\u00e9", "\\ud83d", "\\ude00", "\\u12", "\t", "\x00", "é", "日", "😀",
                 "\u2028", "\x7f", "}", "]", ",", ":", '","content":"', '"},"x":{"y":"', "@example.com"]
    rng = random.Random(27)
    streams = []
    for _ in range(300):
        literals = ["".join(rng.choices(fragments, k=rng.randint(0, 4))) for _ in range(rng.randint(1, 9))]
        events = [raw_piece(literal) for literal in literals]
        streams.append(sse([raw_piece("head"), *events, raw_piece("tail")]))
    fast = [outcome(stream) for stream in streams]
    monkeypatch.setattr(openai_format, "TEMPLATE_MERGE", False)
    assert fast == [outcome(stream) for stream in streams]
    assert 50 < sum(result != "NotReassembled" for result in fast) < 300  # both outcomes are exercised


def test_random_long_runs_give_the_plain_merges_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long runs of common events (the split merge's middle), now and then one piece that is not plain text, one
    event of another shape, or a `[DONE]`, seeded."""
    fragments = ["a", " ", "b c", "\\n", "\\t", '\\"', "\\\\", "é", "日", "😀", "\u2028", "\\u00e9", "@example.com"]
    rare = ["\\", '"', "\\ud83d", "\x01", '","content":"', "\\u12"]
    others = ['{"choices":[{"index":0,"delta":{"role":"assistant"}}]}', "[DONE]", "{}", '{"usage":{"x":1}}']
    rng = random.Random(2707)
    streams = []
    for _ in range(150):
        events: list[str] = []
        for _ in range(rng.randint(3, 40)):
            roll = rng.random()
            if roll < 0.03:
                events.append(rng.choice(others))
            else:
                pool = fragments + rare if roll < 0.08 else fragments
                events.append(raw_piece("".join(rng.choices(pool, k=rng.randint(0, 3)))))
        streams.append(sse([raw_piece("head"), *events, raw_piece("tail")]))
    fast = [outcome(stream) for stream in streams]
    monkeypatch.setattr(openai_format, "TEMPLATE_MERGE", False)
    assert fast == [outcome(stream) for stream in streams] == [plain(stream) for stream in streams]
    assert 20 < sum(result != "NotReassembled" for result in fast) < 150  # both outcomes are exercised

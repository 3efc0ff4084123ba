"""OpenAI-compatible exchanges (vLLM, SGLang and TGI serve this API): streams reassembled, facts read.

A streamed response (`text/event-stream`) is turned into the response the same request would have
got without `stream: true`: one JSON object whose `choices[i].message.content` (chat) or
`choices[i].text` (completions) is the concatenation of the deltas, other string delta fields
(`reasoning_content`, `refusal`) likewise, tool-call deltas merged by index (TGI's older single
object form too), `finish_reason` and `usage` taken from the chunks (the last one that carries
them), `logprobs` lists concatenated. TGI's native `generate_stream` events become its `/generate`
response (`generated_text`, `details`). A stream of any other shape is not reassembled: it is
redacted event by event as it was captured (see docs/capture-processor.md, "Streams").

The facts (operation, models, token usage, finish reasons) follow the OpenTelemetry GenAI
semantic conventions named in SEMCONV_VERSION.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from capture_core import fast_json

# gen_ai.* attribute names and values as of this release of the semantic conventions (Development
# status; recorded in the Glue table's properties as `gen_ai_semconv_version`).
SEMCONV_VERSION = "1.36.0"
OPERATION_CHAT = "chat"
OPERATION_TEXT_COMPLETION = "text_completion"
OPERATION_EMBEDDINGS = "embeddings"

INT64_MAX = (1 << 63) - 1
MAX_CHOICES = 1024  # `n` beyond this is not an LLM response; the stream is left as captured

_PATH_OPERATIONS = (
    ("/chat/completions", OPERATION_CHAT),
    ("/completions", OPERATION_TEXT_COMPLETION),
    ("/embeddings", OPERATION_EMBEDDINGS),
    ("/generate_stream", OPERATION_TEXT_COMPLETION),
    ("/generate", OPERATION_TEXT_COMPLETION),
)
_OBJECT_OPERATIONS = {
    "chat.completion": OPERATION_CHAT,
    "chat.completion.chunk": OPERATION_CHAT,
    "text_completion": OPERATION_TEXT_COMPLETION,
    "embedding": OPERATION_EMBEDDINGS,
}


class NotReassembled(ValueError):
    """The stream is not one this module knows; it is kept as captured."""


# The shape every server here writes: each event one `data:` line and a blank line. Checked in one
# pass, then split in another (both in C); anything else takes the line-by-line reader.
_SIMPLE_STREAM = re.compile(r"(?:data:[^\n]*\n\n)*(?:data:[^\n]*\n?)?")
_DATA = re.compile(r"^data: ?([^\n]*)", re.M)


def sse_events(text: str) -> list[str]:
    """The `data` of each server-sent event (its data lines joined by newlines), in order.
    Comments, `event:`, `id:` and `retry:` lines are dropped; CRLF and LF both end lines."""
    if _SIMPLE_STREAM.fullmatch(text):
        return _DATA.findall(text)
    events: list[str] = []
    data: list[str] | None = None
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if data is not None:
                events.append("\n".join(data))
                data = None
            continue
        if line.startswith("data:"):
            value = line[5:]
            (data := data if data is not None else []).append(value[1:] if value.startswith(" ") else value)
    if data is not None:  # the stream was cut, or its last event had no blank line after it
        events.append("\n".join(data))
    return events


def reassemble(events: list[str]) -> dict[str, Any]:
    """The non-streamed equivalent of an OpenAI-compatible or TGI stream; NotReassembled otherwise."""
    if TEMPLATE_MERGE and (merged := _template_merged(events)) is not None:
        return merged
    chunks = _parsed_events(events)
    if not chunks:
        raise NotReassembled("no events")
    if any(isinstance(chunk.get("token"), dict) for chunk in chunks):
        return _tgi_generate(chunks)
    return _openai(chunks)


# The speed switch of the template merge (off in the differential test's plain path).
TEMPLATE_MERGE = True
# Where one piece of text sits in the common event: a chat delta of `content` alone, or a completion's `text`.
_PIECE = re.compile(r'"(?:content|text)":\s*"((?:[^"\\\x00-\x1f]|\\.)*)"')
_PLAIN_PIECE_FIELDS = frozenset(("index", "delta", "text", "logprobs", "finish_reason", "stop_reason", "matched_stop"))


class _Run:
    """Consecutive events that are the template's bytes but for their piece of text: the pieces, in order."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces


def _template_merge_parts(events: list[str]) -> tuple[str, str, dict[str, Any]] | None:
    """The common event of the stream as the text before its piece, the text after it, and its object with an
    empty piece; None when the stream's middle event is not one (another shape: the plain merge does it)."""
    return _template_of(events[len(events) // 2])


def _template_of(sample: str) -> tuple[str, str, dict[str, Any]] | None:
    """`sample` as a template (see _template_merge_parts); None when it is not the common event."""
    match = _PIECE.search(sample)
    if match is None:
        return None
    before, after = sample[: match.start(1)], sample[match.end(1) :]
    try:  # fast_json: the stdlib's values at orjson's speed (a third of this function's time went to `json`)
        template = fast_json.loads(before + after)
        marked = fast_json.loads(before + "q" + after)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(template, dict) and isinstance(marked, dict)):
        return None
    if "error" in template or "token" in template or template.get("usage") is not None:
        return None
    entries = template.get("choices")
    if not (isinstance(entries, list) and len(entries) == 1 and isinstance(entries[0], dict)):
        return None
    entry = entries[0]
    index = entry.get("index", 0)
    if not (entry.keys() <= _PLAIN_PIECE_FIELDS and type(index) is int and 0 <= index < MAX_CHOICES):
        return None
    if any(entry.get(name) is not None for name in ("logprobs", "finish_reason", "stop_reason", "matched_stop")):
        return None
    if "delta" in entry:  # a chat chunk: the delta's content (its other fields null), which the marker shows sits there
        delta = entry["delta"]
        if not (type(delta) is dict and delta.get("content") == "" and "text" not in entry):
            return None
        if any(value is not None for name, value in delta.items() if name != "content"):
            return None
        if marked != _with_piece(template, "content", "q"):
            return None
    elif (
        template.get("object") == "chat.completion.chunk"
        or entry.get("text") != ""
        or marked != _with_piece(template, "text", "q")
    ):
        return None
    return before, after, template


def _with_piece(template: dict[str, Any], name: str, piece: str) -> dict[str, Any]:
    entry = dict(template["choices"][0])
    if name == "content":
        entry["delta"] = {**entry["delta"], "content": piece}
    else:
        entry["text"] = piece
    return {**template, "choices": [entry]}


def _template_merged(events: list[str]) -> dict[str, Any] | None:
    """The plain merge's result without an object per event for the stream's common events: those that are the
    template's bytes but for their piece contribute the piece alone (decoded by `json` only when it has an escape);
    the other events are parsed and merged as the plain path does. None where this does not apply."""
    until = next((index for index, data in enumerate(events) if data.strip() == "[DONE]"), len(events))
    events = events[:until]
    if len(events) < 3:
        return None
    parts = _template_merge_parts(events)
    if parts is None:
        return None
    merge = _TemplateMerge(*parts)
    last = len(events) - 1
    for position, data in enumerate(events):
        if not merge.add(data, position == last):
            break
    return merge.result()


class _TemplateMerge:
    """The chunks of a template merge, event by event (`add`) or a run of pieces at once (`add_run`)."""

    def __init__(self, before: str, after: str, template: dict[str, Any]) -> None:
        self.before, self.after, self.template = before, after, template
        self.chunks: list[dict[str, Any] | _Run] = []
        self.run: list[str] | None = None

    def add(self, data: str, last: bool) -> bool:
        """One event's data; False when it was the last one and unparsable (cut: the merge ends there)."""
        before, after = self.before, self.after
        if len(data) >= len(before) + len(after) and data.startswith(before) and data.endswith(after):
            piece: Any = data[len(before) : len(data) - len(after)]
            if "\\" in piece or '"' in piece or not piece.isprintable():  # escapes, or what JSON refuses raw
                try:
                    piece = json.loads('"' + piece + '"')
                except ValueError:
                    piece = None  # not one string: the event is parsed (and refused or merged) as the plain path does
            if type(piece) is str:
                if self.run is None:
                    self.run = []
                    self.chunks.append(_Run(self.run))
                self.run.append(piece)
                return True
        self.run = None
        try:
            chunk = fast_json.loads(data)
        except (ValueError, RecursionError):
            if last:
                return False
            raise NotReassembled("an event's data is not JSON") from None
        if not isinstance(chunk, dict):
            raise NotReassembled("an event's data is not a JSON object")
        self.chunks.append(chunk)
        return True

    def add_run(self, pieces: list[str]) -> None:
        """Pieces of consecutive common events, decoded."""
        if self.run is None:
            self.run = []
            self.chunks.append(_Run(self.run))
        self.run.extend(pieces)

    def result(self) -> dict[str, Any] | None:
        if any(type(chunk) is dict and isinstance(chunk.get("token"), dict) for chunk in self.chunks):
            return None  # a TGI stream after all: the plain path
        return _openai(self.chunks, self.template)


def reassemble_stream(text: str) -> dict[str, Any]:
    """`reassemble(sse_events(text))`: the response of a stream's text, or NotReassembled."""
    if TEMPLATE_MERGE and STREAM_SPLIT and (merged := _split_merged(text)) is not None:
        return merged
    return reassemble(sse_events(text))


# The speed switch of the split merge (off in the differential tests' plain path, with TEMPLATE_MERGE).
STREAM_SPLIT = True



def _split_merged(text: str) -> dict[str, Any] | None:
    """The template merge on the stream's text, without a string per event: in the common shape (each event one
    `data:` line and a blank line, no line break inside an event) the text between the pieces of two consecutive
    common events is the same separator (the template's end, a blank line, `data: ` and the template's start), so
    the stream's middle gives its pieces joined by removing the separators in C, and when no piece ends with a
    backslash and none holds a `\\u` escape (which might pair with the next piece's), they are decoded in one
    `json.loads` call: a JSON string's escapes decode alike whole or cut between escapes. The events before the first
    separator and after the last are merged one by one, as `_template_merged` does; None (the per-event path) when
    anything is not so."""
    if not (text.startswith("data:") if SIMPLE_BY_PARTS else _simple_stream(text)):
        return None
    middle_at = text.find("\n\ndata:", len(text) // 2)  # an event near the middle: any common event gives the result
    if middle_at < 0:
        return None
    start = middle_at + len("\n\ndata:")
    end = text.find("\n", start)
    sample = text[start : end if end >= 0 else len(text)]
    parts = _template_of(sample[1:] if sample.startswith(" ") else sample)
    if parts is None:
        return None
    before, after, _ = parts
    separator = after + "\n\ndata: " + before
    first = text.find(separator)
    last = text.rfind(separator)
    if first < 0 or first < last < first + len(separator):  # none, or two that overlap (a short event)
        return None
    middle = text[first + len(separator) : last]  # empty when last == first: no middle
    pieces = _middle_pieces(middle, separator) if SIMPLE_BY_PARTS and last > first else None
    if SIMPLE_BY_PARTS and not (  # the counts of _simple_stream, on the head and the tail when the middle was cut
        _simple_part(text[:first]) and _simple_part(text[last + len(separator) : _without_final_breaks(text)])
        if last == first or pieces is not None
        else _simple_stream(text)
    ):
        return None
    head = _DATA.findall(text[:first] + after)
    tail = _DATA.findall("data: " + before + text[last + len(separator) :])  # its first event is a common one
    if _has_done(head) or (last == first and len(head) + len(tail) < 3):  # [DONE] early, or too short: per event
        return None
    tail = tail[: next((index for index, data in enumerate(tail) if data.strip() == "[DONE]"), len(tail))]
    merge = _TemplateMerge(*parts)
    for data in head:  # never the stream's last event: a separator follows
        merge.add(data, False)
    if last > first:
        if not SIMPLE_BY_PARTS:
            pieces = _middle_pieces(middle, separator)
        if pieces is not None:
            merge.add_run(pieces)
        else:
            for segment in middle.split(separator):
                if "\n" not in segment:
                    merge.add(before + segment + after, False)
                    continue
                events = _DATA.findall("data: " + before + segment + after)  # several events, not all common
                if _has_done(events):
                    return None
                for data in events:
                    merge.add(data, False)
    for position, data in enumerate(tail):
        if not merge.add(data, position == len(tail) - 1):
            break
    return merge.result()


def _simple_stream(text: str) -> bool:
    """`_SIMPLE_STREAM.fullmatch(text)` for a text that starts with `data:`, by counting in C (a third of the time):
    every line break but the last one or two is one of the two of a blank line before `data:`."""
    if not text.startswith("data:"):
        return False
    end = _without_final_breaks(text)
    return text.count("\n", 0, end) == 2 * text.count("\n\ndata:", 0, end)


def _without_final_breaks(text: str) -> int:
    return len(text) - (2 if text.endswith("\n\n") else 1 if text.endswith("\n") else 0)


def _simple_part(part: str) -> bool:
    """`_simple_stream`'s count on a part of the stream cut at separators (SIMPLE_BY_PARTS)."""
    return part.count("\n") == 2 * part.count("\n\ndata:")


# The speed switch of `_simple_stream`'s counts taken on the head and the tail of a split merge only (off in the plain
# path: counted over the whole stream). The middle between the first separator and the last is the pieces and the
# separators between them when `_middle_pieces` cuts it (each separator holds two line breaks, both in its one
# `\n\ndata:`, the pieces none, and no `\n\ndata:` spans a separator's ends, which are JSON); when it does not, the
# whole stream is counted before the middle is merged event by event.
SIMPLE_BY_PARTS = True


def _has_done(events: list[str]) -> bool:
    return any(data.strip() == "[DONE]" for data in events)


def _middle_pieces(middle: str, separator: str) -> list[str] | None:
    """The decoded pieces of the common events between two separators, as one string; None when an event there is
    not a common one or a piece is not decoded alike whole and cut (see _split_merged)."""
    # The events are cut at their blank lines with a short needle (str.replace and str.split restart their search for
    # a long needle, the separator, at every occurrence: three times the time). When the middle is the pieces joined by
    # the separator, every cut is between the template's `after` and `before` (the middle holds no other
    # `\n\ndata: `: the split found them all), unless a piece holds a line break (an event `data:` without the space,
    # not cut there), which the check on `joined` sends back.
    after, before = separator.split("\n\ndata: ", 1)
    events = (before + middle + after).split("\n\ndata: ")
    # Each event is `before` + piece + `after` when the pieces joined by the separator give the middle back (one join
    # and one comparison in C, cheaper than counting the separators: the middle then holds exactly as many cuts as
    # separators, every cut in one). One slice object cuts every event alike, mapped in C.
    pieces = list(map(itemgetter(slice(len(before), -len(after) if after else None)), events))
    if separator.join(pieces) != middle:  # an event that is not the template's: one by one
        return None
    joined = "".join(pieces)
    if "\n" in joined:
        return None
    if "\\" not in joined and '"' not in joined and joined.isprintable():
        return [joined]
    # A piece that ends with a backslash (`after` and a blank line follow it: they stand only between events) would
    # join an escape with the next piece.
    if "\\u" in joined or ("\\" + after + "\n\n") in middle or middle.endswith("\\"):
        return None
    try:
        decoded = json.loads('"' + joined + '"')
    except ValueError:
        return None  # a piece that is not one string: the events one by one, as the plain path refuses or merges them
    return [decoded] if type(decoded) is str else None


def _parsed_events(events: list[str]) -> list[dict[str, Any]]:
    """Each event's JSON object, up to `[DONE]`; an unparsable last event (cut mid-event by the size
    cap or a client gone) is left out. All events are parsed in one call when they can be: a stream
    is hundreds of small objects, and one json.loads per event costs more than the parsing."""
    until = next((index for index, data in enumerate(events) if data.strip() == "[DONE]"), len(events))
    events = events[:until]
    try:
        parsed: list[Any] = fast_json.loads("[" + ",".join(events) + "]")
        if len(parsed) != len(events):  # an event holding "1,2" would read as two
            raise ValueError("event count")
    except (ValueError, RecursionError):
        parsed = []
        for position, data in enumerate(events):
            try:
                parsed.append(fast_json.loads(data))
            except (ValueError, RecursionError):
                if position == len(events) - 1:
                    break
                raise NotReassembled("an event's data is not JSON") from None
    if not all(isinstance(chunk, dict) for chunk in parsed):
        raise NotReassembled("an event's data is not a JSON object")
    return parsed


class _Choice:
    """One choice being reassembled: string fields as lists of pieces, joined once at the end."""

    __slots__ = ("chat", "fields", "index", "message", "rest")

    def __init__(self, index: int, chat: bool) -> None:
        self.index, self.chat = index, chat
        self.fields: dict[str, list[str]] = {}  # content, reasoning_content, refusal, or text
        self.message: dict[str, Any] = {"role": "assistant"}  # tool calls, function_call, role
        self.rest: dict[str, Any] = {"finish_reason": None}  # finish_reason, stop_reason, logprobs

    def finished(self) -> dict[str, Any]:
        joined = {name: "".join(pieces) for name, pieces in self.fields.items()}
        if not self.chat:
            return {"index": self.index, "text": joined.get("text", ""), **self.rest}
        message = dict(self.message)
        message["content"] = joined.pop("content", None)
        message.update(joined)
        if "_tool_calls" in message:
            calls = message.pop("_tool_calls")
            message["tool_calls"] = [calls[index] for index in sorted(calls)]
        return {"index": self.index, "message": message, **self.rest}


def _openai(chunks: Sequence[dict[str, Any] | _Run], template: dict[str, Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {}
    choices: dict[int, _Choice] = {}
    chat = None
    heads = ["id", "created", "model", "system_fingerprint"]  # those not taken yet, each from its first chunk
    for item in chunks:
        # A run of the template merge: the template once (what every event of the run does but for the piece,
        # and doing it again changes nothing), its pieces where its one piece would go.
        pieces = item.pieces if type(item) is _Run else None
        chunk: dict[str, Any] = template if pieces is not None and template is not None else item  # type: ignore[assignment]
        if "error" in chunk and "choices" not in chunk:
            result["error"] = chunk["error"]  # vLLM reports a failure mid-stream as an event
            continue
        if len(result) < 4 and heads and not chunk.keys().isdisjoint(heads):  # one test in C for most chunks
            for name in [name for name in heads if name in chunk]:
                result[name] = chunk[name]
                heads.remove(name)
        usage = chunk.get("usage")
        if usage is not None:
            result["usage"] = usage
        entries = chunk.get("choices")
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise NotReassembled("choices is not a list")
        for entry in entries:
            if not isinstance(entry, dict):
                raise NotReassembled("a choice is not an object")
            delta = entry.get("delta")
            is_chat = delta is not None or chunk.get("object") == "chat.completion.chunk"
            if chat is None:
                chat = is_chat
            elif chat != is_chat:
                raise NotReassembled("chat and completion chunks mixed")
            index = entry.get("index", 0)
            choice = choices.get(index) if isinstance(index, int) else None
            if choice is None:
                if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < MAX_CHOICES:
                    raise NotReassembled("a choice index is not a small integer")
                choice = choices[index] = _Choice(index, is_chat)
            if pieces is not None:  # a run: the template's delta is its content, its other fields null
                choice.fields.setdefault("text" if not is_chat else "content", []).extend(pieces)
            elif is_chat:
                if type(delta) is dict and len(delta) == 1 and type(content := delta.get("content")) is str:
                    fields = choice.fields  # the common delta, one piece of content: _merge_delta's result, inline
                    if "content" in fields:
                        fields["content"].append(content)
                    else:
                        fields["content"] = [content]
                else:
                    _merge_delta(choice, delta or {})
            else:
                text = entry.get("text")
                if isinstance(text, str):
                    choice.fields.setdefault("text", []).append(text)
            rest = choice.rest  # finish_reason, stop_reason, matched_stop: the last one given, in this order
            if (value := entry.get("finish_reason")) is not None:
                rest["finish_reason"] = value
            if (value := entry.get("stop_reason")) is not None:
                rest["stop_reason"] = value
            if (value := entry.get("matched_stop")) is not None:
                rest["matched_stop"] = value
            logprobs = entry.get("logprobs")
            if isinstance(logprobs, dict):
                rest["logprobs"] = _merged_logprobs(rest.get("logprobs"), logprobs)
    if chat is None and "error" not in result:
        raise NotReassembled("no choices in any chunk")
    result["object"] = "chat.completion" if chat else "text_completion"
    result["choices"] = [choices[index].finished() for index in sorted(choices)]
    return result


def _merge_delta(choice: _Choice, delta: Any) -> None:
    if not isinstance(delta, dict):
        raise NotReassembled("a delta is not an object")
    for name, value in delta.items():
        if isinstance(value, str):
            if name == "role":
                choice.message["role"] = value
            else:
                choice.fields.setdefault(name, []).append(value)
        elif name == "tool_calls":
            _merge_tool_calls(choice.message, value)
        elif name == "function_call" and isinstance(value, dict):  # the legacy single-function form
            call = choice.message.setdefault("function_call", {"name": "", "arguments": ""})
            _merge_function(call, value)


def _merge_tool_calls(message: dict[str, Any], value: Any) -> None:
    if value is None:
        return
    deltas = value if isinstance(value, list) else [value]  # TGI 2.x sends one object, not a list
    calls: dict[int, dict[str, Any]] = message.setdefault("_tool_calls", {})
    for position, delta in enumerate(deltas):
        if not isinstance(delta, dict):
            raise NotReassembled("a tool-call delta is not an object")
        index = delta.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < MAX_CHOICES:
            raise NotReassembled("a tool-call index is not a small integer")
        call = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if isinstance(delta.get("id"), str) and delta["id"]:
            call["id"] = delta["id"]
        if isinstance(delta.get("type"), str) and delta["type"]:
            call["type"] = delta["type"]
        if isinstance(delta.get("function"), dict):
            _merge_function(call["function"], delta["function"])


def _merge_function(call: dict[str, Any], delta: dict[str, Any]) -> None:
    name = delta.get("name")
    if isinstance(name, str) and name:
        call["name"] = name if not call["name"] or call["name"] == name else call["name"] + name
    arguments = delta.get("arguments")
    if isinstance(arguments, str):
        call["arguments"] += arguments
    elif isinstance(arguments, dict | list):  # some servers send parsed arguments
        call["arguments"] += json.dumps(arguments, ensure_ascii=False)


def _merged_logprobs(current: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    merged = dict(current or {})
    for name, value in new.items():
        if isinstance(value, list) and isinstance(merged.get(name), list):
            merged[name] = merged[name] + value
        else:
            merged[name] = value
    return merged


def _tgi_generate(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    pieces: list[str] = []
    result: dict[str, Any] = {"generated_text": None}
    for chunk in chunks:
        if "error" in chunk and "token" not in chunk:
            result["error"] = chunk["error"]
            continue
        token = chunk.get("token")
        if isinstance(token, dict) and isinstance(token.get("text"), str) and not token.get("special"):
            pieces.append(token["text"])
        if isinstance(chunk.get("generated_text"), str):
            result["generated_text"] = chunk["generated_text"]
        if chunk.get("details") is not None:
            result["details"] = chunk["details"]
    if result["generated_text"] is None:
        result["generated_text"] = "".join(pieces)
    return result


@dataclass(slots=True)  # not frozen, for the speed of its __init__ (one per record); nothing assigns to it once built
class ExchangeFacts:
    operation_name: str | None = None
    request_model: str | None = None
    response_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reasons: list[str | None] | None = None
    streamed: bool = False


def exchange_facts(request: Any, response: Any, *, streamed: bool, path: str | None) -> ExchangeFacts:
    """What the request and the (reassembled) response say about the exchange; None where silent."""
    request = request if isinstance(request, dict) else {}
    response = response if isinstance(response, dict) else {}
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    details = response.get("details") if isinstance(response.get("details"), dict) else {}
    input_tokens = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    output_tokens = _count(usage.get("completion_tokens", usage.get("output_tokens")))
    if output_tokens is None:
        output_tokens = _count(details.get("generated_tokens"))  # TGI's /generate
    return ExchangeFacts(
        operation_name=_operation(request, response, path),
        request_model=_text(request.get("model")),
        response_model=_text(response.get("model")),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reasons=_finish_reasons(response, details),
        streamed=streamed or request.get("stream") is True,
    )


def _operation(request: dict[str, Any], response: dict[str, Any], path: str | None) -> str | None:
    if path:
        for suffix, operation in _PATH_OPERATIONS:
            if path.rstrip("/").endswith(suffix):
                return operation
    kind = response.get("object")
    if isinstance(kind, str) and kind in _OBJECT_OPERATIONS:
        return _OBJECT_OPERATIONS[kind]
    data = response.get("data")
    if (
        kind == "list"
        and isinstance(data, list)
        and data
        and isinstance(data[0], dict)
        and data[0].get("object") == "embedding"
    ):
        return OPERATION_EMBEDDINGS
    if isinstance(request.get("messages"), list):
        return OPERATION_CHAT
    if "prompt" in request:
        return OPERATION_TEXT_COMPLETION
    if "input" in request and "model" in request:
        return OPERATION_EMBEDDINGS
    if "inputs" in request and "generated_text" in response:  # TGI's native API
        return OPERATION_TEXT_COMPLETION
    return None


def _finish_reasons(response: dict[str, Any], details: dict[str, Any]) -> list[str | None] | None:
    choices = response.get("choices")
    if isinstance(choices, list) and choices:
        ordered = sorted(
            (choice for choice in choices if isinstance(choice, dict)),
            key=lambda choice: index if isinstance(index := choice.get("index"), int) else 0,
        )
        return [_text(choice.get("finish_reason")) for choice in ordered] or None
    if details.get("finish_reason") is not None:
        return [_text(details.get("finish_reason"))]
    return None


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX:
        return value
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None

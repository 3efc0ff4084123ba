"""Exact token usage on every OpenAI-style exchange, streamed or not (docs/usage-and-budgets.md).

- The request side: a streamed request that did not ask for usage is sent to the model server with
  ``"stream_options": {"include_usage": true}`` (``with_stream_usage``), so the server ends the stream with one
  usage event; the response side removes that event before the client sees it (``SseUsage``), so the client gets
  the bytes it would have got without the sidecar.
- The response side: the usage of a non-streamed response is read off the tail of its body (``usage.py``), the
  usage of a stream off its usage event.
- Budgets reserve an estimate of a request's tokens before it is forwarded (``estimate_tokens``) and settle the
  exact count when it ends.

Everything here runs on the event loop, once per request or per body chunk: substring searches, and a JSON parse
only of a request that says ``"stream": true`` and of the (small) events that carry ``"usage"``.
"""

from __future__ import annotations

import json
import re

from .usage import USAGE_TAIL_BYTES, usage_tokens

# Where the usage values in a record come from (eventMetadata.usageSource, the usage_source column).
USAGE_FROM_RESPONSE = "response"  # the server's usage object, as the client got it (non-streamed, or asked for)
USAGE_REQUESTED = "requested"  # the sidecar asked the server for it and removed it from the client's stream
USAGE_NONE = "none"  # no usage came (a server without stream_options, an error, a cut stream)

_STREAM_TRUE = re.compile(rb'"stream"\s*:\s*true')
_INCLUDE_USAGE = b'"stream_options":{"include_usage":true},'
_MAX_TOKENS = re.compile(rb'"(?:max_tokens|max_completion_tokens|max_new_tokens)"\s*:\s*(\d{1,9})')
_USAGE_KEY = b'"usage"'
# An event ends with a blank line: LF LF (vLLM, SGLang, TGI) or CRLF CRLF (mixed endings too).
_EVENT_SEPARATOR = re.compile(rb"\r?\n\r?\n")
_DATA = b"data:"
# An event still arriving is held (stripping) or kept for the scan up to this size; past it, it is let through and
# no longer scanned (a usage event is a few hundred bytes).
MAX_PENDING_EVENT_BYTES = 64 * 1024


def with_stream_usage(body: bytes) -> bytes | None:
    """The body to send instead, asking for usage, or None to send it unchanged.

    Only a JSON object with ``"stream": true`` whose ``stream_options.include_usage`` is not already true. Without
    ``stream_options`` the key is inserted after the opening brace (the rest of the bytes unchanged); with one that
    lacks ``include_usage`` (or sets it false) the object is written again."""
    if _STREAM_TRUE.search(body) is None:
        return None  # not a stream (a quoted "stream" inside a string has escaped quotes)
    try:
        request = json.loads(body)
    except ValueError:
        return None  # the model server answers a malformed body itself
    if not isinstance(request, dict) or request.get("stream") is not True:
        return None
    if "stream_options" not in request:
        brace = body.index(b"{")
        return body[: brace + 1] + _INCLUDE_USAGE + body[brace + 1 :]
    options = request["stream_options"]
    if options is None:
        options = {}
    if not isinstance(options, dict) or options.get("include_usage") is True:
        return None
    request["stream_options"] = {**options, "include_usage": True}
    return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def estimate_tokens(body: bytes, *, bytes_per_token: float, default_output_tokens: int) -> int:
    """Tokens reserved for a request before it is forwarded: the body's size over ``bytes_per_token`` (an upper
    bound of the prompt for the usual tokenizers at 2 bytes a token, JSON framing included) plus its largest
    ``max_tokens`` / ``max_completion_tokens`` / ``max_new_tokens``, or ``default_output_tokens`` without one."""
    prompt = int(len(body) / bytes_per_token) + 1
    limits = [int(match) for match in _MAX_TOKENS.findall(body)]
    return prompt + (max(limits) if limits else default_output_tokens)


def _event_usage(event: bytes) -> tuple[tuple[int, int] | None, bool]:
    """(usage, usage only) of one server-sent event: its usage object's (prompt, completion) tokens, and whether it
    is the usage-only event of include_usage (``"choices": []``)."""
    for line in event.split(b"\n"):
        line = line.rstrip(b"\r")
        if not line.startswith(_DATA):
            continue
        try:
            payload = json.loads(line[len(_DATA) :])
        except ValueError:
            return None, False
        if not isinstance(payload, dict):
            return None, False
        usage = payload.get("usage")
        if not isinstance(usage, dict):
            return None, False
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        tokens = (
            prompt if isinstance(prompt, int) else 0,
            completion if isinstance(completion, int) else 0,
        )
        return tokens, payload.get("choices") == []
    return None, False


def _last_event_end(buffer: bytes) -> int:
    """The index just after the last blank line in ``buffer`` (-1: none)."""
    lf = buffer.rfind(b"\n\n")
    crlf = buffer.rfind(b"\n\r\n")
    return max(lf + 2 if lf >= 0 else -1, crlf + 3 if crlf >= 0 else -1)


class SseUsage:
    """Reads the usage of a ``text/event-stream`` response as it passes, and (``strip``) removes the usage-only
    event that the sidecar asked for. Events end with a blank line (``\\n\\n`` as vLLM, SGLang and TGI write
    them, or ``\\r\\n\\r\\n``); when stripping, an event is passed on once it is complete (the model servers write
    whole events)."""

    __slots__ = ("pending", "strip", "usage")

    def __init__(self, *, strip: bool) -> None:
        self.strip = strip
        self.pending = b""
        self.usage: tuple[int, int] | None = None

    def feed(self, data: bytes) -> bytes:
        """The bytes to pass on for ``data`` (all of it unless stripping)."""
        buffer = self.pending + data if self.pending else data
        cut = _last_event_end(buffer)
        if cut < 0:
            if len(buffer) > MAX_PENDING_EVENT_BYTES:
                self.pending = b""
                return buffer if self.strip else data
            self.pending = buffer
            return b"" if self.strip else data
        complete, self.pending = buffer[:cut], buffer[cut:]
        if len(self.pending) > MAX_PENDING_EVENT_BYTES:
            complete, self.pending = buffer, b""
        if _USAGE_KEY in complete:
            complete = self._scan(complete)
        return complete if self.strip else data

    def finish(self) -> bytes:
        """The end of the body: whatever is still held (an event without its blank line)."""
        rest, self.pending = self.pending, b""
        if rest and _USAGE_KEY in rest:
            rest = self._scan(rest)
        return rest if self.strip else b""

    def _scan(self, complete: bytes) -> bytes:
        """Reads the usage of every event that has one; without the usage-only event when stripping (its bytes and
        its blank line, every other byte kept)."""
        kept: list[bytes] = []
        start = 0
        dropped = False
        for separator in _EVENT_SEPARATOR.finditer(complete):
            event = complete[start : separator.start()]
            if _USAGE_KEY in event:
                tokens, usage_only = _event_usage(event)
                if tokens is not None:
                    self.usage = tokens
                    if usage_only and self.strip:
                        dropped = True
                        start = separator.end()
                        continue
            kept.append(complete[start : separator.end()])
            start = separator.end()
        kept.append(complete[start:])
        return b"".join(kept) if dropped else complete


class TailUsage:
    """The usage of a non-streamed response: the last USAGE_TAIL_BYTES of its body, read at the end."""

    __slots__ = ("tail",)

    def __init__(self) -> None:
        self.tail = b""

    def feed(self, data: bytes) -> None:
        if len(data) >= USAGE_TAIL_BYTES:
            self.tail = data[-USAGE_TAIL_BYTES:]
        else:
            self.tail = (self.tail + data)[-USAGE_TAIL_BYTES:]

    def usage(self) -> tuple[int, int] | None:
        return usage_tokens(self.tail)

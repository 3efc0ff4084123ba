"""Token counts from the OpenAI-style ``usage`` object at the end of a captured response.

Runs in the upload workers when a batch is encoded, never on the event loop: a bounded scan of the tail of
the response body (the non-streamed JSON ends with it; a stream sends it in its last event when the client
asks for it, e.g. ``stream_options: {"include_usage": true}``). No JSON is parsed: the last ``"usage"`` key
in the tail and the two numbers after it are read with a pattern.
"""

from __future__ import annotations

import re

# vLLM writes usage before prompt_logprobs/kv_transfer_params, which are short when not asked for.
USAGE_TAIL_BYTES = 8 * 1024
# The usage object itself (with prompt_tokens_details and the like) is well under this.
USAGE_OBJECT_BYTES = 1024
_USAGE_KEY = b'"usage"'
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d{1,12})')
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d{1,12})')


def usage_tokens(body: bytes) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of the last usage object in the body's tail, or None without one.

    Generated text cannot fake it: inside a JSON string the quotes are escaped (``\\"usage\\"``)."""
    tail = body[-USAGE_TAIL_BYTES:]
    start = tail.rfind(_USAGE_KEY)
    if start < 0:
        return None
    window = tail[start : start + USAGE_OBJECT_BYTES]
    prompt = _PROMPT_TOKENS.search(window)
    completion = _COMPLETION_TOKENS.search(window)
    if prompt is None and completion is None:
        return None  # "usage": null, or a key of that name holding something else
    return (int(prompt.group(1)) if prompt else 0, int(completion.group(1)) if completion else 0)

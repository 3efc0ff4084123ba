"""JSON parsing at orjson's speed with the stdlib's results.

orjson parses stream events and payloads about 3x faster than `json` (docs/capture-processor.md, "Performance").
Where the two differ, orjson refuses what `json` accepts (NaN and Infinity, numbers that overflow a double, lone
surrogate escapes, bytes that are not UTF-8, nesting past 1,024 levels): anything orjson refuses is parsed again by
`json`, so every value, and every error, is the stdlib's. One difference orjson does not refuse: an integer past 64
bits becomes a float there (an int in `json`; the differential test in tests/capture_processor/test_fast_path.py
found it), and so does a negative integer below -2**63 (19 digits: orjson reads signed and unsigned 64-bit integers), so
a text with a run of 19 digits or more (any integer outside orjson's range has one) is parsed by `json`.
Without orjson installed (`FAST = False`) the stdlib does all of it.

`loads_unchecked` skips that check (a third of a payload's parse): for callers that read no number where the two
differ (see `payloads._parsed`).

`dumps_compact` writes what `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` writes, by orjson (about
ten times faster) when the value holds no float (orjson writes 1.5e-05 as 0.000015 and NaN as null) and nothing else
that orjson writes differently or refuses (an integer past 64 bits, a key that is not a string, a lone surrogate,
nesting past 255 levels: refused, so written by `json`).
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson

    FAST = True
except ImportError:  # pragma: no cover - the layer carries it; the fallback keeps the function working without
    FAST = False
# Integers outside [-2**63, 2**64 - 1] have 19 digits or more (-2**63 - 1 is -9223372036854775809): a text with a run of
# 19 digits goes to `json`. Found with C loops (encode, translate every digit to "0" and everything else to " ", find
# 19 zeros), several times faster than a regex or a walk over the parsed values.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGIT_RUN = b"0" * 19


def loads(text: str | bytes) -> Any:
    if FAST and not _has_long_digit_run(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def loads_unchecked(text: str | bytes) -> Any:
    """`loads` without the digit-run check: the stdlib's value but that an integer outside [-2**63, 2**64 - 1] may be
    a float (orjson's reading of it)."""
    if FAST:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def _has_long_digit_run(text: str | bytes) -> bool:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return _LONG_DIGIT_RUN in data.translate(_DIGITS_AS_ZEROS)


# The speed switch of dumps_compact's orjson path (off in the differential test's plain path: `json.dumps` always).
DUMPS_BY_ORJSON = True
_PLAIN_SCALARS = (str, int, bool, type(None))


def dumps_compact(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, separators=(",", ":"))`, by orjson where it writes the same text."""
    if FAST and DUMPS_BY_ORJSON and not _holds_other_than_plain(value):
        try:
            return orjson.dumps(value).decode()
        except TypeError:  # orjson.JSONEncodeError: what it refuses (see above) is written by `json`
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _holds_other_than_plain(value: Any) -> bool:
    """True when `value` holds anything but dicts, lists, strings, ints, booleans and None (of those exact types): a
    float, above all, which orjson writes in its own way."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind not in _PLAIN_SCALARS:
            return True
    return False

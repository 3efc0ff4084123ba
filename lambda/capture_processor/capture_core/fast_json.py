"""JSON parsing at orjson's speed with the stdlib's results.

orjson parses stream events and payloads about 3x faster than `json` (docs/capture-processor.md, "Performance").
Where the two differ, orjson refuses what `json` accepts (NaN and Infinity, numbers that overflow a double, lone
surrogate escapes, bytes that are not UTF-8, nesting past 1,024 levels): anything orjson refuses is parsed again by
`json`, so every value, and every error, is the stdlib's. One difference orjson does not refuse: an integer past 64
bits becomes a float there (an int in `json`), so a text with a run of 20 digits or more goes to `json` directly
(the differential test in tests/capture_processor/test_fast_path.py found it). Without orjson installed
(`FAST = False`) the stdlib does all of it.
"""

from __future__ import annotations

import json
import re
from typing import Any

try:
    import orjson

    FAST = True
except ImportError:  # pragma: no cover - the layer carries it; the fallback keeps the function working without
    FAST = False
_LONG_DIGITS = re.compile(r"[0-9]{20}")
_LONG_DIGITS_BYTES = re.compile(rb"[0-9]{20}")


def loads(text: str | bytes) -> Any:
    if FAST and (_LONG_DIGITS.search(text) if isinstance(text, str) else _LONG_DIGITS_BYTES.search(text)) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)

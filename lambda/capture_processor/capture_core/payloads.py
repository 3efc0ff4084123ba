"""One side of a captured exchange decoded to text that redaction can judge.

- `JSON`/`CSV` payloads are text already (the envelope's JSON string, unescaped by the reader).
- `BASE64` payloads are decoded; a gzip body (magic bytes) is inflated, up to MAX_INFLATED_BYTES;
  the bytes are read with the charset the content type declares, else UTF-8 (with or without a
  BOM), else UTF-16/32 with a BOM, else Windows-1252 when the bytes look like text in it (no C0
  controls but tab and line breaks, none of its five unassigned bytes). A payload cut at the
  sidecar's cap is decoded up to the cut.
- A server-sent-event stream is reassembled into its non-streamed response (openai_format).

What cannot be decoded gives no text at all: `text` is None, `error` says why, and the caller
sends the raw line to the quarantine, which only raw readers can read. Nothing undecoded, and so
unredacted, reaches the curated tables as text.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import zlib
from dataclasses import dataclass
from typing import Any

from capture_core import fast_json, openai_format
from capture_core.documents import looks_like_json, string_values

# The speed switch of pybase64, SIMD BASE64 (~40x binascii here; "Issue 27, fifth step" in docs/capture-processor.md),
# off in the differential test's plain path: binascii only. Only its strict decode is used, and only what it accepts:
# strict BASE64 decodes to the same bytes in every decoder (test_compiled_rules fuzzes it against binascii's strict
# and lenient modes); anything it refuses takes binascii's path and its errors.
try:
    import pybase64

    FAST_BASE64 = True
except ImportError:  # pragma: no cover - the layer ships it; without it binascii decodes every payload
    FAST_BASE64 = False
# The speed switch of parsing payloads for their facts without fast_json's digit-run check (a third of the parse), off
# in the differential test's plain path. The facts (openai_format.exchange_facts) read numbers in two places: token
# counts, which take only ints in [0, 2**63 - 1], so an integer outside orjson's range is None either way (json: an
# int past the bound; orjson: a float); and each choice's `index`, the order of the finish reasons, which is read
# again by fast_json.loads when any index came out a float (`_float_index`).
FACTS_UNCHECKED = True

ENCODING_BASE64 = "BASE64"
ENCODING_JSON = "JSON"
GZIP_MAGIC = b"\x1f\x8b"
# A gzip payload (a request body sent with Content-Encoding: gzip) is inflated up to the sidecar's own bound on
# what it lets through and captures (MAX_REQUEST_BODY_BYTES and MAX_CAPTURED_BODY_BYTES, 8 MiB): no uncompressed
# body it captures is larger. Past it the record is over its budget: no text, and the line to the quarantine
# (119 KiB of gzip inflating to 60 MiB of e-mail addresses used to cost 2.4 GiB).
MAX_INFLATED_BYTES = 8 << 20
MAX_PARSED_CHARS = 32 << 20  # JSON parsed for its facts; longer documents are redacted, not parsed
# Bytes that text in Windows-1252 does not contain: C0 controls but tab, line breaks and form feed,
# DEL, and the five bytes the code page leaves unassigned.
_NOT_CP1252_TEXT = bytes(
    byte for byte in range(256) if (byte < 0x20 and byte not in b"\t\n\r\x0c") or byte in b"\x7f\x81\x8d\x8f\x90\x9d"
)
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


class UndecodablePayload(ValueError):
    """The payload cannot be turned into text; the message says why."""


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, and two sides are built per
# record (2.5% of a chunk's time without streams). Nothing assigns to a side once built.
@dataclass(slots=True)
class DecodedSide:
    text: str | None  # None: absent, or undecodable (then `error` is set)
    as_json: bool = False  # redact string by string
    parsed: Any = None  # the JSON value, when it parsed (for the exchange's facts)
    streamed: bool = False
    note: str | None = None  # how it was decoded, when that is worth a line in decode_error
    error: str | None = None  # why there is no text
    # A stream not reassembled: its string values joined across events. Redacted beside the text; a
    # value found only here was split across events, so the text is withheld (see capture_format).
    probe: str | None = None


ABSENT = DecodedSide(None)


def decode_side(data: str | None, encoding: str | None, content_type: str | None, truncated: bool) -> DecodedSide:
    if data is None:
        return ABSENT
    note = None
    if encoding == ENCODING_BASE64:
        try:
            text, note = _decoded_base64(data, content_type, truncated)
        except UndecodablePayload as error:
            return DecodedSide(None, error=str(error))
    else:
        text = data
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if media_type == "text/event-stream" or (not media_type and text.startswith("data:")):
        return _stream(text, truncated, note)
    as_json = encoding == ENCODING_JSON or "json" in media_type or looks_like_json(text)
    return DecodedSide(text, as_json=as_json, parsed=_parsed(text) if as_json else None, note=note)


def _stream(text: str, truncated: bool, note: str | None) -> DecodedSide:
    try:
        response = openai_format.reassemble_stream(text)
    except openai_format.NotReassembled:
        # Kept as captured and redacted event by event (the data of each event is JSON text).
        return DecodedSide(text, as_json=True, streamed=True, note=note, probe="".join(string_values(text)))
    reassembled = fast_json.dumps_compact(response)  # json.dumps(response, ensure_ascii=False, separators=(",", ":"))
    cut = "stream cut at the capture size limit; reassembled up to the cut" if truncated else None
    return DecodedSide(reassembled, as_json=True, parsed=response, streamed=True, note=_joined(note, cut))


def _parsed(text: str) -> Any:
    if len(text) > MAX_PARSED_CHARS:
        return None
    try:
        if FACTS_UNCHECKED:
            value = fast_json.loads_unchecked(text)
            return fast_json.loads(text) if _float_index(value) else value
        return fast_json.loads(text)
    except (ValueError, RecursionError):  # not JSON after all, cut at the cap, or nested too deep
        return None


def _float_index(value: Any) -> bool:
    """True when a choice of the response has a float `index` (where orjson and json may differ)."""
    choices = value.get("choices") if type(value) is dict else None  # parsed JSON: plain dicts and lists
    if type(choices) is list:
        for choice in choices:  # a loop, not a generator: this runs for every payload
            if type(choice) is dict and type(choice.get("index")) is float:
                return True
    return False


def _decoded_base64(data: str, content_type: str | None, truncated: bool) -> tuple[str, str | None]:
    payload = _strict_base64(data) if FAST_BASE64 else None
    try:
        if payload is None:
            payload = base64.b64decode(data, validate=not truncated)
    except (binascii.Error, ValueError):
        if not truncated:
            raise UndecodablePayload("invalid BASE64") from None
        try:  # cut at the sidecar's cap: decode the complete 4-character groups
            payload = base64.b64decode(data[: len(data) // 4 * 4])
        except (binascii.Error, ValueError):
            raise UndecodablePayload("invalid BASE64") from None
    note = None
    if payload.startswith(GZIP_MAGIC):
        payload = _inflated(payload, truncated)
        note = "gzip body inflated"
    text, how = _text_of(payload, _declared_charset(content_type), truncated)
    return text, _joined(note, how)


def _strict_base64(data: str) -> bytes | None:
    """The bytes of strict BASE64 (the alphabet, groups of four, padding only at the end), else None."""
    try:
        payload: bytes = pybase64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return payload


def _inflated(payload: bytes, truncated: bool) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(payload, MAX_INFLATED_BYTES + 1)
    except zlib.error as error:
        raise UndecodablePayload(f"gzip body is corrupt: {error}") from None
    if len(out) > MAX_INFLATED_BYTES:
        raise UndecodablePayload(f"gzip body inflates to more than {MAX_INFLATED_BYTES} bytes")
    if not inflater.eof and not truncated:
        raise UndecodablePayload("gzip body ends early")
    return out


def _declared_charset(content_type: str | None) -> str | None:
    for parameter in (content_type or "").split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
            try:
                return codecs.lookup(charset).name
            except LookupError:
                return None
    return None


def _text_of(payload: bytes, charset: str | None, truncated: bool) -> tuple[str, str | None]:
    if charset is not None and charset != "utf-8":
        try:
            return payload.decode(charset), f"decoded as {charset} (declared)"
        except UnicodeDecodeError:
            pass
    try:
        return payload.decode("utf-8"), None
    except UnicodeDecodeError as error:
        if truncated and error.start >= len(payload) - 3:  # the cut split a multi-byte character
            return payload[: error.start].decode("utf-8"), None
    for bom, codec in _BOMS:
        if payload.startswith(bom):
            try:
                return payload.decode(codec), f"decoded as {codec} (byte order mark)"
            except UnicodeDecodeError:
                break
    if _looks_like_cp1252_text(payload):
        return payload.decode("cp1252"), "decoded as windows-1252 (detected)"
    raise UndecodablePayload("BASE64 payload is not text in its declared charset, UTF-8 or Windows-1252")


def _looks_like_cp1252_text(payload: bytes) -> bool:
    return len(payload.translate(None, _NOT_CP1252_TEXT)) == len(payload)


def _joined(*notes: str | None) -> str | None:
    present = [note for note in notes if note]
    return "; ".join(present) if present else None

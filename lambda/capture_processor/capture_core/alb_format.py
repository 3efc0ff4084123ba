"""Application Load Balancer access logs (tier 2 `alb/`).

Fields are space-separated, some quoted; AWS appends new fields at the end and says to ignore
the ones a reader does not know, so fields are mapped by position and extras are only counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pyarrow as pa

from capture_core.records import (
    ChunkContext,
    ParsedChunk,
    RejectedLine,
    constant_column,
    fill_missing_times,
    parse_iso_time,
)
from capture_core.redaction import NAMED_SECRET_KEY, NAMED_SECRET_PREFIX, Redactor

TIMESTAMP = pa.timestamp("us", tz="UTC")

# Documented fields in log order (1-29 from the ALB guide, 30 from the Athena DDL, 31-33 from
# the 2025 request transforms); the first 29 are required, later ones are null when absent.
ALB_FIELDS = (
    "type", "time", "elb", "client:port", "target:port",
    "request_processing_time", "target_processing_time", "response_processing_time",
    "elb_status_code", "target_status_code", "received_bytes", "sent_bytes",
    "request", "user_agent", "ssl_cipher", "ssl_protocol", "target_group_arn", "trace_id",
    "domain_name", "chosen_cert_arn", "matched_rule_priority", "request_creation_time",
    "actions_executed", "redirect_url", "error_reason", "target:port_list", "target_status_code_list",
    "classification", "classification_reason",
    "conn_trace_id", "transformed_host", "transformed_uri", "request_transform_status",
)  # fmt: skip
REQUIRED_FIELD_COUNT = 29

CURATED_SCHEMA = pa.schema(
    [
        ("type", pa.string()),
        ("time", TIMESTAMP),
        ("time_source", pa.string()),
        ("elb", pa.string()),
        ("client_ip", pa.string()),
        ("client_port", pa.int32()),
        ("target_ip", pa.string()),
        ("target_port", pa.int32()),
        ("request_processing_time", pa.float64()),
        ("target_processing_time", pa.float64()),
        ("response_processing_time", pa.float64()),
        ("elb_status_code", pa.int32()),
        ("target_status_code", pa.int32()),
        ("received_bytes", pa.int64()),
        ("sent_bytes", pa.int64()),
        ("request_verb", pa.string()),
        ("request_url", pa.string()),
        ("request_proto", pa.string()),
        ("request_host", pa.string()),
        ("request_port", pa.int32()),
        ("request_path", pa.string()),
        ("request_query", pa.string()),
        ("user_agent", pa.string()),
        ("ssl_cipher", pa.string()),
        ("ssl_protocol", pa.string()),
        ("target_group_arn", pa.string()),
        ("trace_id", pa.string()),
        ("domain_name", pa.string()),
        ("chosen_cert_arn", pa.string()),
        ("matched_rule_priority", pa.int32()),
        ("request_creation_time", TIMESTAMP),
        ("actions_executed", pa.string()),
        ("redirect_url", pa.string()),
        ("error_reason", pa.string()),
        ("target_port_list", pa.string()),
        ("target_status_code_list", pa.string()),
        ("classification", pa.string()),
        ("classification_reason", pa.string()),
        ("conn_trace_id", pa.string()),
        ("transformed_host", pa.string()),
        ("transformed_uri", pa.string()),
        ("request_transform_status", pa.string()),
        ("source_key", pa.string()),
        ("deployment_hash", pa.string()),
    ]
)

# Columns that can carry user input (query strings, paths, the user agent); see the brief: "query
# strings land in logs". URL columns are redacted component by component after percent-decoding.
URL_COLUMNS = ("request_url", "request_path", "request_query", "redirect_url", "transformed_uri")
REDACTED_COLUMNS = (*URL_COLUMNS, "user_agent")
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
# A URL is redacted component by component, cut at the query's structure (`&`, `=`) and where the query and the
# fragment start; not at `/`, which a query value may hold unencoded (RFC 3986, section 3.4: a Slack webhook, a
# `Bearer` token) and a path segment holds in an encoded one: a secret cut there was missed whenever anything else in
# the URL was encoded. A URL with none of these and nothing encoded is its own only component.
_URL_DELIMITERS = re.compile(r"([&=?;#])")
_URL_SAFE = "[]:@!$'()*,~/"

_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|(\S+)')


class MalformedAlbLineError(ValueError):
    pass


@dataclass(frozen=True)
class RequestLine:
    verb: str | None
    url: str | None
    proto: str | None
    host: str | None
    port: int | None
    path: str | None
    query: str | None


def parse_alb_chunk(data: bytes, first_line: int, context: ChunkContext, redactor: Redactor) -> ParsedChunk:
    rows: list[dict[str, Any]] = []
    rejected: list[RejectedLine] = []
    lines_with_extra_fields = 0
    for offset, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        try:
            row, extra_fields = parse_alb_line(line.decode("utf-8").rstrip("\r"))
        except (MalformedAlbLineError, UnicodeDecodeError) as error:
            rejected.append(RejectedLine(first_line + offset, str(error), line))
            continue
        except Exception as error:  # any other failure of one line is that line's, not the chunk's
            rejected.append(
                RejectedLine(first_line + offset, f"could not parse: {type(error).__name__}: {error}", line)
            )
            continue
        rows.append(row)
        lines_with_extra_fields += extra_fields > 0
    times, sources = fill_missing_times([row["time"] for row in rows], context)
    for row, time, source in zip(rows, times, sources, strict=True):
        row["time"], row["time_source"] = time, source
    table = pa.Table.from_pylist(rows, schema=CURATED_SCHEMA)
    table = table.set_column(
        table.schema.get_field_index("source_key"),
        "source_key",
        constant_column(context.source_key, len(rows)),
    ).set_column(
        table.schema.get_field_index("deployment_hash"),
        "deployment_hash",
        constant_column(context.deployment_hash, len(rows)),
    )
    for name in REDACTED_COLUMNS:
        index = table.schema.get_field_index(name)
        values = table.column(index).combine_chunks()
        if name in URL_COLUMNS:
            redacted = redact_urls(redactor, values, is_query=name == "request_query")
        else:
            redacted = redact_free_text(redactor, values)
        table = table.set_column(index, name, redacted)
    return ParsedChunk(table, tuple(rejected), {"alb_lines_with_extra_fields": lines_with_extra_fields})


def redact_urls(redactor: Redactor, values: pa.Array, *, is_query: bool = False) -> pa.Array:
    """URLs redacted on their decoded components: `a%40b.com`, `Bearer%20…` and `%2B44…` are found
    like their plain forms; only components that changed are re-encoded. `+` is a space in a query
    (after `?`, or everywhere in a query column) and itself in a path."""
    if not redactor.rules:
        return values
    urls = values.to_pylist()
    pieces: list[str] = []
    plans: list[list[str | tuple[int, str]] | None] = []
    # A parameter that names a secret access key (`aws_secret_access_key=...`): its value is redacted after
    # NAMED_SECRET_PREFIX (the `=` cuts the name from it), taken off after.
    names_secrets = any(rule.name == "aws_secret_key" for rule in redactor.rules)
    prefixed: set[int] = set()
    for url in urls:
        if url is None:
            plans.append(None)
        elif "%" not in url and "+" not in url and _URL_DELIMITERS.search(url) is None:  # one component, as written
            plans.append([(len(pieces), url)])
            pieces.append(url)
        else:
            plan: list[str | tuple[int, str]] = []
            in_query = is_query
            named = False  # the component before the last `=` names a secret access key
            decoded = ""
            for part in _URL_DELIMITERS.split(url):
                if _URL_DELIMITERS.fullmatch(part):
                    in_query = in_query or part == "?"
                    named = part == "=" and names_secrets and NAMED_SECRET_KEY.search(decoded) is not None
                    decoded = ""
                    plan.append(part)
                elif part:
                    plan.append((len(pieces), part))
                    decoded = _decoded_component(part, plus_is_space=in_query)
                    if named:
                        prefixed.add(len(pieces))
                        pieces.append(NAMED_SECRET_PREFIX + decoded)
                    else:
                        pieces.append(decoded)
            plans.append(plan)
    redacted, _ = redactor.redact_texts(pieces)
    if redacted is pieces:
        return values
    out: list[str | None] = []
    for url, url_plan in zip(urls, plans, strict=True):
        if url is None or url_plan is None:
            out.append(None)
            continue
        encoded = "%" in url or "+" in url
        parts = []
        for part in url_plan:
            if isinstance(part, str):
                parts.append(part)
                continue
            index, original = part
            if redacted[index] == pieces[index]:
                parts.append(original)
                continue
            text = redacted[index]
            if index in prefixed:  # the prefix is a boundary no rule changes: it is there, as it was
                text = text.removeprefix(NAMED_SECRET_PREFIX)
            parts.append(quote(text, safe=_URL_SAFE) if encoded else text)
        out.append("".join(parts))
    return pa.array(out, pa.string())


def redact_free_text(redactor: Redactor, values: pa.Array) -> pa.Array:
    """A free-text field (the user agent): redacted on its percent-decoded text, stored decoded
    where anything was redacted."""
    texts = values.to_pylist()
    decoded = [None if text is None else _decoded_component(text, plus_is_space=False) for text in texts]
    redacted, _ = redactor.redact_texts([text or "" for text in decoded])
    return pa.array(
        [
            None if text is None else (new if new != (plain or "") else text)
            for text, plain, new in zip(texts, decoded, redacted, strict=True)
        ],
        pa.string(),
    )


def _decoded_component(part: str, *, plus_is_space: bool) -> str:
    """Percent-decoded, twice (a value encoded twice, `%2540`, hides as well as once)."""
    decoded = part.replace("+", " ") if plus_is_space else part
    for _ in range(2):
        if "%" not in decoded:
            break
        decoded = unquote(decoded, errors="replace")
    return decoded


def parse_alb_line(line: str) -> tuple[dict[str, Any], int]:
    """One log entry as a row of CURATED_SCHEMA (time may be None) and the number of
    trailing fields newer than this parser."""
    # lastindex tells which alternative matched: a quoted field may be empty ("").
    tokens = [match[1] if match.lastindex == 1 else match[2] for match in _TOKEN.finditer(line)]
    if len(tokens) < REQUIRED_FIELD_COUNT:
        raise MalformedAlbLineError(f"expected at least {REQUIRED_FIELD_COUNT} fields, got {len(tokens)}")
    fields = dict(zip(ALB_FIELDS, tokens, strict=False))
    client_ip, client_port = _address(fields["client:port"], "client:port")
    target_ip, target_port = _address(fields["target:port"], "target:port")
    request = parse_request_line(fields["request"])
    row = {
        "type": _text(fields["type"]),
        "time": parse_iso_time(fields["time"]),
        "elb": _text(fields["elb"]),
        "client_ip": client_ip,
        "client_port": client_port,
        "target_ip": target_ip,
        "target_port": target_port,
        "request_verb": request.verb,
        "request_url": request.url,
        "request_proto": request.proto,
        "request_host": request.host,
        "request_port": request.port,
        "request_path": request.path,
        "request_query": request.query,
        "request_creation_time": parse_iso_time(fields["request_creation_time"]),
        "target_port_list": _text(fields["target:port_list"]),
    }
    for name, convert in _TYPED_FIELDS.items():
        row[name] = _converted(fields, name, convert)
    for name in _TEXT_FIELDS:
        row[name] = _text(fields.get(name))
    return row, max(0, len(tokens) - len(ALB_FIELDS))


def parse_request_line(request: str) -> RequestLine:
    """`GET http://host:80/path?q HTTP/1.1`; malformed requests are logged as `- http://host:80- -`."""
    parts = request.split(" ")
    if len(parts) != 3:
        return RequestLine(None, _text(request), None, None, None, None, None)
    verb, url, proto = (_text(part) for part in parts)
    host = port = path = query = None
    if url is not None:
        try:
            split = urlsplit(url)
            host, path, query = split.hostname, split.path or None, split.query or None
        except ValueError:  # e.g. an unbalanced "[" in the host: the URL is kept, its parts are not
            return RequestLine(verb, url, proto, None, None, None, None)
        try:
            port = split.port
        except ValueError:  # e.g. "http://host:80-" from a malformed request, or a port past 65535
            port = None
    return RequestLine(verb, url, proto, host, port, path, query)


def _text(value: str | None) -> str | None:
    return None if value in (None, "-", "") else value


def _address(value: str, name: str) -> tuple[str | None, int | None]:
    if value == "-":
        return None, None
    host, separator, port = value.rpartition(":")  # rpartition: IPv6 addresses contain ':'
    # isascii: str.isdigit admits superscripts ("²"), which int() refuses.
    if not separator or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise MalformedAlbLineError(f"{name} must be ip:port (port 0-65535) or '-', got {value[:100]!r}")
    return host, int(port)


def _converted(fields: dict[str, str], name: str, convert: Callable[[str], Any]) -> Any:
    value = fields.get(name)
    if value is None or value == "-":
        return None
    try:
        number = convert(value)
    except ValueError:
        raise MalformedAlbLineError(f"{name} must be a number ({convert.__name__}), got {value[:100]!r}") from None
    limit = _INT_LIMITS.get(name)
    if limit is not None and not -limit - 1 <= number <= limit:
        raise MalformedAlbLineError(f"{name} is out of range for its column (at most {limit}), got {value[:100]!r}")
    return number


_TYPED_FIELDS: dict[str, Callable[[str], Any]] = {
    "request_processing_time": float,  # -1 (not dispatched, timeout) is kept as -1
    "target_processing_time": float,
    "response_processing_time": float,
    "elb_status_code": int,
    "target_status_code": int,
    "received_bytes": int,
    "sent_bytes": int,
    "matched_rule_priority": int,
}
_INT_LIMITS = {
    "elb_status_code": INT32_MAX,
    "target_status_code": INT32_MAX,
    "matched_rule_priority": INT32_MAX,
    "received_bytes": INT64_MAX,
    "sent_bytes": INT64_MAX,
}
_TEXT_FIELDS = (
    "user_agent", "ssl_cipher", "ssl_protocol", "target_group_arn", "trace_id", "domain_name",
    "chosen_cert_arn", "actions_executed", "redirect_url", "error_reason", "target_status_code_list",
    "classification", "classification_reason", "conn_trace_id", "transformed_host", "transformed_uri",
    "request_transform_status",
)  # fmt: skip

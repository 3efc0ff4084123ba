"""Settings from environment variables, validated once at start-up.

Every bad variable is reported together (name, value, what is allowed), so one failed pod
start shows everything to fix instead of one problem per restart.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from .jwt_settings import JwtSettings, read_jwt_settings
from .limits import DEFAULT_ALERT_PERCENTS, FAIL_CLOSED, FAIL_OPEN, LIMIT_KEYS, MAX_ALERT_PERCENTS, CallerLimits

CAPTURE_MODE_INPUT = "Input"
CAPTURE_MODE_OUTPUT = "Output"

DEFAULT_JSON_CONTENT_TYPES = (
    "application/json",
    "application/jsonlines",
    "application/x-ndjson",
    "text/event-stream",
)
DEFAULT_CSV_CONTENT_TYPES = ("text/csv",)
MIB = 1024 * 1024
GIB = 1024 * MIB
# Sizing (docs/capture-sidecar.md, *Memory bounds*): a 128k-token prompt is ~0.5 MiB of text at
# ~4 bytes a token, ~1.2 MiB with worst-case JSON escaping (non-ASCII written as \uXXXX), which
# leaves ~6.8 MiB for base64 images (4/3 of ~5 MiB of image files, a few per request).
DEFAULT_MAX_REQUEST_BODY_BYTES = 8 * MIB
# Every body byte held in memory at once (buffered chunked bodies, capture copies, the queue,
# raw bytes being uploaded); with the upload bound it keeps the worst case under 512 MiB.
DEFAULT_MAX_INFLIGHT_BODY_BYTES = 96 * MIB
# Kubelet probes time out after a few seconds; the upstream check must answer before they do.
DEFAULT_UPSTREAM_HEALTH_TIMEOUT_SECONDS = 2.0
# A bearer key shorter than this is guessable; the chart's generated keys are 48 characters.
MIN_API_KEY_LENGTH = 16
# A caller id names a team in records and is safe to print: letters, digits, '.', '_', '-'.
CALLER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The `model` label of the sidecar's metrics (a served model name such as meta-llama/Llama-3.1-8B-Instruct).
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")
DEFAULT_MODEL_NAME = "unknown"
MAX_API_KEYS = 1000
# Client connection bounds (docs/capture-sidecar.md, *Connection bounds*). A connection costs ~3 KiB of the
# sidecar's memory when idle and ~105 KiB while it holds a head near the 64 KiB cap (measured); 1024 connections
# (at most 256 before their first request is authenticated: ~27 MiB) fit the ~80 MiB the body and upload bounds
# leave of 512 MiB.
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0
# Longer than the idle timeouts of the pools in front (ALB 60 s): the side in front closes first, so a request
# never meets a connection the sidecar is closing.
DEFAULT_IDLE_TIMEOUT_SECONDS = 75.0
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_MAX_UNAUTHENTICATED = 256
MAX_API_KEYS_FILE_BYTES = 1024 * 1024
# How often API_KEYS_FILE is checked for a new version (the kubelet rewrites a mounted Secret in place): a rotated
# key is accepted, and a dropped one refused, this long after the file changed at the latest.
DEFAULT_API_KEYS_RELOAD_SECONDS = 5.0
# Usage and budgets (docs/usage-and-budgets.md).
DEFAULT_USAGE_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
# A request that finds its lease empty waits this long for the store at most (ElastiCache answers in ~1 ms in the
# VPC); then the failure mode decides.
DEFAULT_STORE_TIMEOUT_SECONDS = 0.1
MAX_STORE_TIMEOUT_SECONDS = 5.0  # LIMITS_STORE_TIMEOUT_SECONDS at most (a request waits on the store no longer)
DEFAULT_LIMITS_KEY_PREFIX = "budget:"
# The reservation's prompt estimate: body bytes over this (an upper bound of the tokens for the usual tokenizers).
DEFAULT_BYTES_PER_TOKEN = 2.0
# Reserved for the output of a request without max_tokens (settled to the exact count when it ends).
DEFAULT_OUTPUT_TOKENS = 1024
MAX_LIMIT_VALUE = 10**15


def key_fingerprint(key: str) -> str:
    """The caller id of API_KEY without API_KEY_ID: names the key in records without revealing it."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ApiKey:
    """One accepted bearer key and the caller id recorded for the requests that carry it."""

    caller_id: str
    key: str = field(repr=False)  # never in a repr or a log line


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # empty, or ends with "/"


@dataclass(frozen=True)
class Settings:
    upstream_url: str
    listen_host: str
    listen_port: int
    metrics_port: int
    capture_location: S3Location
    sampling_percentage: float
    capture_input: bool
    capture_output: bool
    batch_size: int
    flush_interval_seconds: float
    max_payload_bytes: int  # 0 = no cap
    kms_key_id: str | None
    json_content_types: frozenset[str]
    csv_content_types: frozenset[str]
    queue_max_records: int
    queue_max_bytes: int
    spool_dir: str | None
    spool_max_bytes: int
    shutdown_grace_seconds: float
    max_request_body_bytes: int
    max_inflight_body_bytes: int
    upload_concurrency: int
    upstream_health_path: str = "/health"
    upstream_health_timeout_seconds: float = DEFAULT_UPSTREAM_HEALTH_TIMEOUT_SECONDS
    # Never in a repr or a log line: the dataclass leaves it out of both.
    api_key: str | None = field(default=None, repr=False)
    # Every accepted key: API_KEY (if set) first, then API_KEYS_FILE's; empty: no authentication.
    api_keys: tuple[ApiKey, ...] = field(default=(), repr=False)
    # The file the keys after API_KEY's came from, re-read when it changes (0: never).
    api_keys_file: str | None = None
    api_keys_reload_seconds: float = DEFAULT_API_KEYS_RELOAD_SECONDS
    model_name: str = DEFAULT_MODEL_NAME
    header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS
    idle_timeout_seconds: float = DEFAULT_IDLE_TIMEOUT_SECONDS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_unauthenticated: int = DEFAULT_MAX_UNAUTHENTICATED
    # Usage and budgets (docs/usage-and-budgets.md).
    usage: UsageSettings = field(default_factory=lambda: UsageSettings())
    # JWT mode (JWT_ISSUER set): the caller is a verified token's claim, not an API key's (jwt_auth).
    jwt: JwtSettings | None = None


@dataclass(frozen=True)
class UsageSettings:
    """Token accounting and per-caller limits."""

    # Paths whose POST/PUT/PATCH exchanges are metered: body read whole, usage read off the response.
    usage_paths: frozenset[str] = DEFAULT_USAGE_PATHS
    # Ask streams for usage (stream_options.include_usage) and remove it for clients that did not ask.
    request_stream_usage: bool = True
    # "all": a record (metadata only when not sampled) for every metered exchange; "sampled": sampled ones only.
    records_for_every_exchange: bool = False
    limits: Mapping[str, CallerLimits] = field(default_factory=dict)
    store_url: str | None = field(default=None, repr=False)  # may hold a password
    # IAM authentication to the store (ElastiCache): the user the sidecar's role signs a token for, and the cache.
    store_iam_user: str | None = None
    store_iam_cache: str | None = None
    store_failure: str = FAIL_OPEN
    store_timeout_seconds: float = DEFAULT_STORE_TIMEOUT_SECONDS
    key_prefix: str = DEFAULT_LIMITS_KEY_PREFIX
    bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN
    default_output_tokens: int = DEFAULT_OUTPUT_TOKENS
    # Percents of a day or month budget handed out at which a caller's crossing is reported once (budget alerts).
    alert_percents: tuple[int, ...] = DEFAULT_ALERT_PERCENTS


class SettingsError(Exception):
    """Raised with every problem found; str() is the message printed at start-up."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"capture sidecar: invalid settings ({len(problems)}):\n{lines}")


class _Reader:
    """Reads variables, records a problem for each bad one and returns a placeholder for it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[str] = []

    def _raw(self, name: str, default: str | None) -> str | None:
        value = self.env.get(name)
        if value is None or value.strip() == "":
            return default
        return value.strip()

    def fail(self, name: str, value: str, allowed: str) -> None:
        self.problems.append(f"{name}={value!r}: {allowed}")

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self._raw(name, str(default))
        assert raw is not None
        try:
            value = int(raw)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            self.fail(name, raw, f"must be an integer from {low} to {high}")
            return default
        return value

    def number(self, name: str, default: float, low: float, high: float) -> float:
        raw = self._raw(name, str(default))
        assert raw is not None
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # also rejects NaN
            self.fail(name, raw, f"must be a number from {low:g} to {high:g}")
            return default
        return value

    def text(self, name: str, default: str | None, check: Callable[[str], str | None]) -> str | None:
        raw = self._raw(name, default)
        if raw is None:
            return None
        problem = check(raw)
        if problem is not None:
            self.fail(name, raw, problem)
            return None
        return raw

    def required_text(self, name: str, example: str, check: Callable[[str], str | None]) -> str | None:
        if self._raw(name, None) is None:
            self.problems.append(f"{name} is required, e.g. {example}")
            return None
        return self.text(name, None, check)

    def content_types(self, name: str, default: tuple[str, ...]) -> frozenset[str]:
        if name in self.env and self.env[name].strip() == "":
            return frozenset()  # set but empty: deliberately no type of this kind
        raw = self._raw(name, ",".join(default))
        assert raw is not None
        types = [part.strip().lower() for part in raw.split(",") if part.strip()]
        bad = [media_type for media_type in types if media_type.count("/") != 1 or ";" in media_type]
        if bad:
            self.fail(name, raw, "must be a comma-separated list of media types like application/json")
        return frozenset(types)


def _check_upstream_url(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must have no path, query or fragment (requests keep their own path)"
    try:
        _ = parts.port
    except ValueError:
        return "has an invalid port"
    return None


def _parse_s3_uri(uri: str) -> S3Location | None:
    if not uri.startswith("s3://"):
        return None
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket or not all(c.islower() or c.isdigit() or c in ".-" for c in bucket):
        return None
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return S3Location(bucket=bucket, prefix=prefix)


def _check_s3_uri(uri: str) -> str | None:
    if _parse_s3_uri(uri) is None:
        return "must be s3://bucket/prefix/ with a valid bucket name (lower case, digits, '.', '-')"
    return None


def _check_health_path(path: str) -> str | None:
    if not path.startswith("/") or any(c.isspace() for c in path):
        return "must be a path starting with / and without spaces, e.g. /health"
    return None


def _key_problem(key: str) -> str | None:
    if len(key) < MIN_API_KEY_LENGTH or any(c.isspace() or not c.isprintable() for c in key):
        return f"must be at least {MIN_API_KEY_LENGTH} printable characters without spaces"
    return None


def _read_api_key(reader: _Reader) -> str | None:
    """API_KEY, checked without ever echoing the value (a problem line names the variable only)."""
    raw = reader.env.get("API_KEY")
    if raw is None or raw == "":
        return None
    problem = _key_problem(raw)
    if problem is not None:
        reader.problems.append(f"API_KEY (value not shown): {problem}")
        return None
    return raw


@dataclass(frozen=True)
class ApiKeysFile:
    """One reading of API_KEYS_FILE: the keys of its valid lines, the problems found (never a key), and the text of
    every line that was refused (``refused``: a key in force found there stays in force, under its caller id, so a
    line broken by mistake locks nobody out; kept in memory only). ``readable``: False when the file could not be
    opened at all (then nothing is known of it)."""

    keys: list[ApiKey]
    problems: list[str]
    refused: list[str] = field(default_factory=list, repr=False)
    readable: bool = True


def read_api_keys_file(path: str) -> tuple[list[ApiKey], list[str]]:
    """API_KEYS_FILE: one ``caller_id:key`` a line; blank lines and lines starting with # are skipped. Returns the
    keys and the problems found (at start-up, the sidecar refuses to start when there is one).

    A problem names the file and the line number, and the caller id when it is not the problem; never a key
    (nor a line, which may hold one). :func:`parse_api_keys_file` is the reading the reloader uses."""
    parsed = parse_api_keys_file(path)
    return parsed.keys, parsed.problems


def parse_api_keys_file(path: str) -> ApiKeysFile:
    """API_KEYS_FILE line by line (:func:`read_api_keys_file`). A problem of the whole file (over 1 MiB, not UTF-8,
    over :data:`MAX_API_KEYS` keys) accepts no line: every line is then refused, and the file's valid keys are
    none."""
    where = f"API_KEYS_FILE={path!r}"
    try:
        with open(path, "rb") as file:
            content = file.read(MAX_API_KEYS_FILE_BYTES + 1)
    except OSError as error:
        return ApiKeysFile([], [f"{where}: cannot be read ({error.strerror or type(error).__name__})"],
                           readable=False)
    whole: list[str] = []
    if len(content) > MAX_API_KEYS_FILE_BYTES:
        whole.append(f"{where}: is over {MAX_API_KEYS_FILE_BYTES // 1024} KiB")
        content = content[:MAX_API_KEYS_FILE_BYTES]
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        whole.append(f"{where}: is not UTF-8 text")
        text = content.decode("utf-8", "replace")
    keys: list[ApiKey] = []
    problems: list[str] = []
    refused: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        caller_id, colon, key = line.partition(":")
        caller_id = caller_id.strip()
        if not colon:
            problems.append(f"{where} line {number} (not shown): must be caller_id:key")
        elif not CALLER_ID.match(caller_id):
            problems.append(
                f"{where} line {number} (not shown): the part before ':' must be a caller id, 1-64 letters, "
                "digits, '.', '_' or '-', starting with a letter or digit"
            )
        elif (problem := _key_problem(key.strip())) is not None:
            problems.append(f"{where} line {number}, caller {caller_id!r} (key not shown): the key {problem}")
        else:
            keys.append(ApiKey(caller_id, key.strip()))
            continue
        refused.append(line)
    if not keys and not problems and not whole:
        problems.append(f"{where}: holds no caller_id:key line")
    if len(keys) > MAX_API_KEYS:
        whole.append(f"{where}: holds {len(keys)} keys, at most {MAX_API_KEYS} are allowed")
    if whole:
        refused += [f"{entry.caller_id}:{entry.key}" for entry in keys]
        keys = []
    return ApiKeysFile(keys, whole + problems, refused)


def unique_api_keys(keys: list[ApiKey]) -> tuple[tuple[ApiKey, ...], list[str]]:
    """Every key belongs to one caller. A caller may hold several keys: during a rotation the old and the new key
    are both accepted under the caller's one id (records name the caller the same way before, during and after).
    The same ``caller_id:key`` twice counts once (a key that is current and still pending for a moment)."""
    unique: dict[str, ApiKey] = {}
    problems: list[str] = []
    for entry in keys:
        seen = unique.get(entry.key)
        if seen is None:
            unique[entry.key] = entry
        elif seen.caller_id != entry.caller_id:
            problems.append(f"caller {entry.caller_id!r}: its key (not shown) is also the key of {seen.caller_id!r}")
    return tuple(unique.values()), problems


def _read_api_keys(reader: _Reader, api_key: str | None) -> tuple[tuple[ApiKey, ...], str | None]:
    """API_KEY (caller id API_KEY_ID, else its fingerprint) and API_KEYS_FILE's keys (and the file's path): every
    key belongs to one caller."""
    keys: list[ApiKey] = []
    key_id = reader.text(
        "API_KEY_ID", None,
        lambda value: None if CALLER_ID.match(value) else "must be 1-64 letters, digits, '.', '_' or '-'",
    )
    if key_id is not None and api_key is None and reader.env.get("API_KEY") in (None, ""):
        reader.fail("API_KEY_ID", key_id, "names the caller of API_KEY, which is not set")
    if api_key is not None:
        keys.append(ApiKey(key_id or key_fingerprint(api_key), api_key))
    path = reader.text("API_KEYS_FILE", None, lambda value: None if value.startswith("/") else "must be absolute")
    if path is not None:
        file_keys, problems = read_api_keys_file(path)
        reader.problems += problems
        keys += file_keys
    unique, problems = unique_api_keys(keys)
    reader.problems += problems
    return unique, path


def _parse_capture_modes(reader: _Reader) -> tuple[bool, bool]:
    raw = reader.env.get("CAPTURE_MODES", "Input,Output")
    modes = [part.strip() for part in raw.split(",") if part.strip()]
    allowed = {CAPTURE_MODE_INPUT, CAPTURE_MODE_OUTPUT}
    if not modes or any(mode not in allowed for mode in modes):
        reader.fail("CAPTURE_MODES", raw, "must be a non-empty comma list of Input and/or Output")
        return True, True
    return CAPTURE_MODE_INPUT in modes, CAPTURE_MODE_OUTPUT in modes


def load_settings(env: Mapping[str, str]) -> Settings:
    """Build Settings from the environment or raise SettingsError listing every problem."""
    reader = _Reader(env)
    upstream_url = reader.required_text("UPSTREAM_URL", "http://127.0.0.1:8000", _check_upstream_url)
    capture_uri = reader.required_text("CAPTURE_S3_URI", "s3://my-bucket/captures/pod/", _check_s3_uri)
    listen_port = reader.integer("LISTEN_PORT", 8080, 1, 65535)
    metrics_port = reader.integer("METRICS_PORT", 9090, 1, 65535)
    if listen_port == metrics_port:
        reader.fail("METRICS_PORT", str(metrics_port), "must differ from LISTEN_PORT")
    capture_input, capture_output = _parse_capture_modes(reader)
    max_payload_kb = reader.integer("MAX_PAYLOAD_SIZE_KB", 0, 0, 10240)
    api_key = _read_api_key(reader)
    api_keys, api_keys_file = _read_api_keys(reader, api_key)
    jwt_settings = read_jwt_settings(env, reader.problems)
    if jwt_settings is not None and (api_keys or api_keys_file):
        reader.problems.append("JWT_ISSUER and API_KEY/API_KEYS_FILE are both set: a sidecar authenticates callers "
                               "one way (JWT in front of a gateway, API keys in front of a model server)")
    spool_dir = reader.text("SPOOL_DIR", None, lambda path: None if path.startswith("/") else "must be absolute")
    max_connections = reader.integer("MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS, 16, 1_000_000)
    max_unauthenticated = reader.integer("MAX_UNAUTHENTICATED", DEFAULT_MAX_UNAUTHENTICATED, 1, 1_000_000)
    if max_unauthenticated > max_connections:
        reader.fail(
            "MAX_UNAUTHENTICATED", str(max_unauthenticated), f"must not exceed MAX_CONNECTIONS ({max_connections})"
        )
    settings = Settings(
        upstream_url=(upstream_url or "").rstrip("/"),
        listen_host=reader.text("LISTEN_HOST", "0.0.0.0", lambda _: None) or "0.0.0.0",
        listen_port=listen_port,
        metrics_port=metrics_port,
        capture_location=_parse_s3_uri(capture_uri or "") or S3Location("", ""),
        sampling_percentage=reader.number("SAMPLING_PERCENTAGE", 100, 0, 100),
        capture_input=capture_input,
        capture_output=capture_output,
        batch_size=reader.integer("BATCH_SIZE", 10, 1, 1000),
        flush_interval_seconds=reader.integer("FLUSH_INTERVAL_SECONDS", 60, 10, 300),
        max_payload_bytes=max_payload_kb * 1024,
        kms_key_id=reader.text("KMS_KEY_ID", None, lambda _: None),
        json_content_types=reader.content_types("JSON_CONTENT_TYPES", DEFAULT_JSON_CONTENT_TYPES),
        csv_content_types=reader.content_types("CSV_CONTENT_TYPES", DEFAULT_CSV_CONTENT_TYPES),
        queue_max_records=reader.integer("QUEUE_MAX_RECORDS", 10_000, 1, 1_000_000),
        # With 4 uploads of at most 16 MiB in flight, the worst case stays under a 512 MiB limit.
        queue_max_bytes=reader.integer("QUEUE_MAX_BYTES", 128 * MIB, MIB, 64 * GIB),
        spool_dir=spool_dir,
        spool_max_bytes=reader.integer("SPOOL_MAX_BYTES", 512 * MIB, MIB, 1024 * GIB),
        shutdown_grace_seconds=reader.number("SHUTDOWN_GRACE_SECONDS", 25, 1, 3600),
        max_request_body_bytes=reader.integer("MAX_REQUEST_BODY_BYTES", DEFAULT_MAX_REQUEST_BODY_BYTES, 1024, 4 * GIB),
        max_inflight_body_bytes=reader.integer(
            "MAX_INFLIGHT_BODY_BYTES", DEFAULT_MAX_INFLIGHT_BODY_BYTES, MIB, 64 * GIB
        ),
        upload_concurrency=reader.integer("UPLOAD_CONCURRENCY", 4, 1, 64),
        upstream_health_path=reader.text("UPSTREAM_HEALTH_PATH", "/health", _check_health_path) or "/health",
        upstream_health_timeout_seconds=reader.number(
            "UPSTREAM_HEALTH_TIMEOUT_SECONDS", DEFAULT_UPSTREAM_HEALTH_TIMEOUT_SECONDS, 0.1, 30
        ),
        api_key=api_key,
        api_keys=api_keys,
        api_keys_file=api_keys_file,
        api_keys_reload_seconds=reader.number(
            "API_KEYS_RELOAD_SECONDS", DEFAULT_API_KEYS_RELOAD_SECONDS, 0, 3600
        ),
        model_name=reader.text(
            "MODEL_NAME",
            DEFAULT_MODEL_NAME,
            lambda value: None if MODEL_NAME.match(value) else "must be 1-128 letters, digits and '._:/@+-'",
        )
        or DEFAULT_MODEL_NAME,
        header_timeout_seconds=reader.number("HEADER_TIMEOUT_SECONDS", DEFAULT_HEADER_TIMEOUT_SECONDS, 0.1, 300),
        idle_timeout_seconds=reader.number("IDLE_TIMEOUT_SECONDS", DEFAULT_IDLE_TIMEOUT_SECONDS, 0.1, 3600),
        max_connections=max_connections,
        max_unauthenticated=max_unauthenticated,
        jwt=jwt_settings,
    )
    settings = replace(settings, usage=_read_usage(reader))
    if reader.problems:
        raise SettingsError(reader.problems)
    return settings


def _check_elasticache_id(value: str) -> str | None:
    """An ElastiCache user id or serverless cache name as ElastiCache stores them."""
    if re.fullmatch(r"[a-z][a-z0-9-]{0,39}", value):
        return None
    return "must be an ElastiCache id: 1-40 of a-z, 0-9 and -, a letter first"


def _read_usage(reader: _Reader) -> UsageSettings:
    raw_paths = reader.text("USAGE_PATHS", ",".join(sorted(DEFAULT_USAGE_PATHS)), _check_paths) or ""
    stream_usage = reader.text(
        "STREAM_USAGE", "request", lambda v: None if v in ("request", "off") else "must be request or off"
    )
    records = reader.text(
        "USAGE_RECORDS", "sampled", lambda v: None if v in ("sampled", "all") else "must be sampled or all"
    )
    failure = reader.text(
        "LIMITS_STORE_FAILURE", FAIL_OPEN, lambda v: None if v in (FAIL_OPEN, FAIL_CLOSED) else "must be open or closed"
    )
    store_url = reader.text(
        "LIMITS_STORE_URL",
        None,
        lambda v: (
            None
            if urlsplit(v).scheme in ("redis", "rediss") and urlsplit(v).hostname
            else (
                "must be a redis:// or rediss:// URL with a host, e.g. rediss://budgets.example.cache.amazonaws.com:6379"
            )
        ),
    )
    iam_user = reader.text("LIMITS_STORE_IAM_USER", None, _check_elasticache_id)
    iam_cache = reader.text("LIMITS_STORE_IAM_CACHE", None, _check_elasticache_id)
    if (iam_user is None) != (iam_cache is None):
        reader.problems.append(
            "LIMITS_STORE_IAM_USER and LIMITS_STORE_IAM_CACHE: give both (IAM authentication) or neither"
        )
    if iam_user is not None and not (store_url or "").startswith("rediss://"):
        reader.problems.append(
            "LIMITS_STORE_IAM_USER: IAM authentication needs LIMITS_STORE_URL=rediss://... (the token is a "
            "credential: never sent without TLS)"
        )
    return UsageSettings(
        store_iam_user=iam_user,
        store_iam_cache=iam_cache,
        usage_paths=frozenset(path.strip() for path in raw_paths.split(",") if path.strip()) or DEFAULT_USAGE_PATHS,
        request_stream_usage=stream_usage != "off",
        records_for_every_exchange=records == "all",
        limits=_read_caller_limits(reader),
        store_url=store_url,
        store_failure=failure or FAIL_OPEN,
        store_timeout_seconds=reader.number("LIMITS_STORE_TIMEOUT_SECONDS", DEFAULT_STORE_TIMEOUT_SECONDS, 0.005,
                                            MAX_STORE_TIMEOUT_SECONDS),
        key_prefix=reader.text(
            "LIMITS_KEY_PREFIX",
            DEFAULT_LIMITS_KEY_PREFIX,
            lambda v: (
                None if re.fullmatch(r"[A-Za-z0-9._:/-]{1,128}", v) else "must be 1-128 of letters, digits, ._:/-"
            ),
        )
        or DEFAULT_LIMITS_KEY_PREFIX,
        bytes_per_token=reader.number("TOKEN_ESTIMATE_BYTES_PER_TOKEN", DEFAULT_BYTES_PER_TOKEN, 0.5, 16),
        default_output_tokens=reader.integer("TOKEN_ESTIMATE_OUTPUT_TOKENS", DEFAULT_OUTPUT_TOKENS, 1, 10_000_000),
        alert_percents=_read_alert_percents(reader),
    )


def _read_alert_percents(reader: _Reader) -> tuple[int, ...]:
    """BUDGET_ALERT_PERCENTS: comma-separated whole percents of a budget, 1 to 100, each once (empty: none)."""
    raw = reader.env.get("BUDGET_ALERT_PERCENTS")
    if raw is None:
        return DEFAULT_ALERT_PERCENTS
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    if (
        len(parts) > MAX_ALERT_PERCENTS
        or not all(re.fullmatch(r"[0-9]{1,3}", part) and 1 <= int(part) <= 100 for part in parts)
        or len({int(part) for part in parts}) != len(parts)
    ):
        reader.fail(
            "BUDGET_ALERT_PERCENTS",
            raw,
            f"must be up to {MAX_ALERT_PERCENTS} different whole percents from 1 to 100, comma-separated (e.g. 80,100)",
        )
        return DEFAULT_ALERT_PERCENTS
    return tuple(sorted(int(part) for part in parts))


def _check_paths(value: str) -> str | None:
    paths = [path.strip() for path in value.split(",") if path.strip()]
    if not paths or any(not path.startswith("/") for path in paths):
        return "must be a comma-separated list of paths starting with /"
    return None


def _read_caller_limits(reader: _Reader) -> dict[str, CallerLimits]:
    """CALLER_LIMITS: a JSON object, caller id (or "*" for every caller not named) -> its limits."""
    raw = reader.env.get("CALLER_LIMITS", "").strip()
    if not raw:
        return {}
    shown = raw if len(raw) <= 200 else raw[:200] + "..."
    try:
        document = json.loads(raw)
    except ValueError as error:
        reader.fail("CALLER_LIMITS", shown, f"must be a JSON object ({error})")
        return {}
    if not isinstance(document, dict):
        reader.fail("CALLER_LIMITS", shown, "must be a JSON object of caller id -> limits")
        return {}
    limits: dict[str, CallerLimits] = {}
    for caller, entry in document.items():
        if caller not in ("*", "-") and not CALLER_ID.match(caller):
            reader.fail("CALLER_LIMITS", shown, f"caller id {caller!r} must be a caller id like team-a, or *")
            continue
        if not isinstance(entry, dict) or not entry or set(entry) - set(LIMIT_KEYS):
            reader.fail("CALLER_LIMITS", shown, f"{caller}: must be an object with some of {', '.join(LIMIT_KEYS)}")
            continue
        values = {}
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT_VALUE:
                reader.fail(
                    "CALLER_LIMITS", shown, f"{caller}.{key} must be a whole number from 1 to {MAX_LIMIT_VALUE}"
                )
            values[key] = value
        limits[caller] = CallerLimits(
            tokens_per_minute=values.get("tokensPerMinute"),
            tokens_per_day=values.get("tokensPerDay"),
            tokens_per_month=values.get("tokensPerMonth"),
            concurrent_requests=values.get("concurrentRequestsPerReplica"),
        )
    return limits

"""S3 PutObject without boto3's per-call machinery, and the optional local spool.

Everything here runs in the upload worker threads. boto3's `put_object` cost 3.2 ms of CPU per
call here (its event hooks, parameter validation, serialisers and a urllib3 round trip), most of
it holding the interpreter lock the event loop needs; at BATCH_SIZE=10 that was ~320 µs per
captured request, more than the whole proxy. This writer signs with AWS Signature V4 itself
(hmac/hashlib, checked against botocore's signer in tests/sidecar/test_s3_writer.py) and sends
with `http.client` on one keep-alive connection per worker thread: ~150 µs per call.

botocore still does what is hard to get right: the credential chain (environment, IRSA web
identity, EKS Pod Identity, instance metadata) with refresh before expiry, and the region from
the environment or config. Endpoint: `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` when set
(path-style addressing, as for moto or MinIO), else `https://{bucket}.s3.{region}.amazonaws.com`.
A bucket in another region is followed once by its `x-amz-bucket-region` answer.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.client
import os
import random
import re
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from .settings import S3Location

CONNECT_TIMEOUT_SECONDS = 2.0
READ_TIMEOUT_SECONDS = 15.0
MAX_ATTEMPTS = 3  # like boto3's standard retry mode
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")


class S3Error(Exception):
    """PutObject failed: an HTTP error status from S3 (after retries) or no answer at all."""


@dataclass(frozen=True)
class _Endpoint:
    scheme: str
    host: str  # host[:port] for the Host header and the connection
    path_style: bool


def _sign(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def signature_v4_headers(
    *,
    method: str,
    host: str,
    path: str,
    headers: dict[str, str],
    payload_sha256: str,
    region: str,
    access_key: str,
    secret_key: str,
    token: str | None,
    now: dt.datetime,
) -> dict[str, str]:
    """The headers to send, Authorization included (AWS Signature Version 4, service s3).

    `path` is already URI-encoded; there is no query string. Every header given is signed.
    """
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date = amz_date[:8]
    signed = {name.lower(): value.strip() for name, value in headers.items()}
    signed["host"] = host
    signed["x-amz-content-sha256"] = payload_sha256
    signed["x-amz-date"] = amz_date
    if token:
        signed["x-amz-security-token"] = token
    names = sorted(signed)
    canonical_request = "\n".join(
        (
            method,
            path,
            "",
            "".join(f"{name}:{signed[name]}\n" for name in names),
            ";".join(names),
            payload_sha256,
        )
    )
    scope = f"{date}/{region}/s3/aws4_request"
    string_to_sign = "\n".join(
        ("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest())
    )
    key = _sign(_sign(_sign(_sign(("AWS4" + secret_key).encode(), date), region), "s3"), "aws4_request")
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    signed["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return signed


class S3Writer:
    """PutObject with the capture bucket's encryption settings.

    Short timeouts and few retries (3 attempts, 2 s to connect, 15 s to answer): a record that
    cannot be written soon is spooled or dropped, because waiting longer only fills the queue.
    """

    def __init__(self, location: S3Location, kms_key_id: str | None, max_connections: int) -> None:
        import botocore.session  # the credential chain and region resolution only; no client

        self.location = location
        self._encryption: dict[str, str] = (
            {"x-amz-server-side-encryption": "aws:kms", "x-amz-server-side-encryption-aws-kms-key-id": kms_key_id}
            if kms_key_id
            else {}
        )
        self._session = botocore.session.get_session()
        self._credentials = self._session.get_credentials()
        self._region = self._session.get_config_variable("region") or "us-east-1"
        endpoint_url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        self._custom_endpoint = endpoint_url.rstrip("/") if endpoint_url else None
        self._endpoint = self._endpoint_for(self._region)
        self._ssl_context: ssl.SSLContext | None = None
        self._local = threading.local()
        self._lock = threading.Lock()

    def _endpoint_for(self, region: str) -> _Endpoint:
        if self._custom_endpoint:
            parts = urlsplit(self._custom_endpoint)
            return _Endpoint(parts.scheme or "https", parts.netloc, path_style=True)
        suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
        bucket = self.location.bucket
        if "." in bucket:  # a dotted name breaks the wildcard certificate of virtual hosts
            return _Endpoint("https", f"s3.{region}.{suffix}", path_style=True)
        return _Endpoint("https", f"{bucket}.s3.{region}.{suffix}", path_style=False)

    def _connection(self, endpoint: _Endpoint) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None and self._local.endpoint == endpoint:
            return connection
        if connection is not None:
            connection.close()
        if endpoint.scheme == "https":
            if self._ssl_context is None:
                from botocore.httpsession import get_cert_path

                cafile = os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True)
                self._ssl_context = ssl.create_default_context(cafile=cafile)
            connection = http.client.HTTPSConnection(
                endpoint.host, timeout=CONNECT_TIMEOUT_SECONDS, context=self._ssl_context
            )
        else:
            connection = http.client.HTTPConnection(endpoint.host, timeout=CONNECT_TIMEOUT_SECONDS)
        self._local.connection = connection
        self._local.endpoint = endpoint
        return connection

    def _drop_connection(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
        self._local.connection = None

    def put(self, key: str, body: bytes | Sequence[bytes]) -> None:
        """Write one object; `body` may be a list of pieces (sent without joining them)."""
        pieces = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
        digest = hashlib.sha256()
        for piece in pieces:
            digest.update(piece)
        payload_sha256 = digest.hexdigest()
        length = sum(len(piece) for piece in pieces)
        redirected = False
        attempt = 0
        while True:
            attempt += 1
            endpoint, region = self._endpoint, self._region
            try:
                status, headers, answer = self._send(endpoint, region, key, pieces, length, payload_sha256)
            except (OSError, http.client.HTTPException) as error:
                self._drop_connection()
                if attempt >= MAX_ATTEMPTS:
                    raise S3Error(f"no answer from {endpoint.host}: {type(error).__name__}: {error}") from error
                self._back_off(attempt)
                continue
            if 200 <= status < 300:
                return
            bucket_region = headers.get("x-amz-bucket-region")
            if (
                not redirected
                and not self._custom_endpoint
                and bucket_region
                and bucket_region != region
                and status in (301, 307, 400)
            ):
                redirected = True
                with self._lock:
                    self._region = bucket_region
                    self._endpoint = self._endpoint_for(bucket_region)
                continue
            if status in RETRYABLE_STATUSES and attempt < MAX_ATTEMPTS:
                self._back_off(attempt)
                continue
            code = _CODE.search(answer)
            message = _MESSAGE.search(answer)
            raise S3Error(
                f"HTTP {status} {code.group(1).decode(errors='replace') if code else ''}: "
                f"{message.group(1).decode(errors='replace') if message else answer[:200]!r}"
            )

    def _send(
        self, endpoint: _Endpoint, region: str, key: str, pieces: Sequence[bytes | memoryview], length: int,
        payload_sha256: str,
    ) -> tuple[int, dict[str, str], bytes]:
        credentials = self._credentials.get_frozen_credentials() if self._credentials is not None else None
        if credentials is None or not credentials.access_key:
            raise S3Error("no AWS credentials found (environment, IRSA, Pod Identity or instance metadata)")
        quoted_key = quote(key, safe="/~")
        path = f"/{self.location.bucket}/{quoted_key}" if endpoint.path_style else f"/{quoted_key}"
        headers = signature_v4_headers(
            method="PUT",
            host=endpoint.host,
            path=path,
            headers={"content-type": "application/jsonlines", **self._encryption},
            payload_sha256=payload_sha256,
            region=region,
            access_key=credentials.access_key,
            secret_key=credentials.secret_key,
            token=credentials.token,
            now=dt.datetime.now(dt.UTC),
        )
        headers["content-length"] = str(length)
        connection = self._connection(endpoint)
        if connection.sock is None:
            _connect(connection)
        connection.putrequest("PUT", path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        for piece in pieces:
            connection.send(piece)
        response = connection.getresponse()
        answer = response.read()
        if response.will_close:
            self._drop_connection()
        return response.status, {name.lower(): value for name, value in response.getheaders()}, answer

    @staticmethod
    def _back_off(attempt: int) -> None:
        time.sleep(random.uniform(0, min(2.0, 0.1 * 2**attempt)))


def _connect(connection: http.client.HTTPConnection) -> None:
    """Connect (within the connection's own timeout), then wait at most READ_TIMEOUT_SECONDS for each read."""
    connection.connect()
    connection.sock.settimeout(READ_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class SpooledObject:
    path: Path
    key: str
    size: int


class Spool:
    """A bounded directory of S3 objects whose upload failed, retried later under the same key.

    Files are written under a temporary name and renamed, so a crash never leaves a partial
    object to upload. An emptyDir volume keeps the spool across container restarts.
    """

    _SUFFIX = ".jsonl"
    _PARTIAL_SUFFIX = ".partial"

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        for leftover in self.directory.glob(f"*{self._PARTIAL_SUFFIX}"):
            leftover.unlink(missing_ok=True)
        self._bytes = sum(item.size for item in self.pending())

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def store(self, key: str, body: bytes | Sequence[bytes]) -> bool:
        """Keep the object for a later retry; False when the spool has no room for it."""
        pieces = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
        size = sum(len(piece) for piece in pieces)
        with self._lock:
            if self._bytes + size > self.max_bytes:
                return False
            self._bytes += size
        final_path = self.directory / (quote(key, safe="") + self._SUFFIX)
        partial_path = final_path.with_name(final_path.name + self._PARTIAL_SUFFIX)
        try:
            with partial_path.open("wb") as file:
                file.writelines(pieces)
            os.replace(partial_path, final_path)
        except OSError:
            with self._lock:
                self._bytes -= size
            return False
        return True

    def pending(self) -> list[SpooledObject]:
        """Spooled objects, oldest first."""
        found = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(self._SUFFIX):
                stat = entry.stat()
                key = unquote(entry.name[: -len(self._SUFFIX)])
                found.append((stat.st_mtime_ns, SpooledObject(Path(entry.path), key, stat.st_size)))
        return [item for _, item in sorted(found, key=lambda pair: pair[0])]

    def remove(self, item: SpooledObject) -> None:
        item.path.unlink(missing_ok=True)
        with self._lock:
            self._bytes -= item.size

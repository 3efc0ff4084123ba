"""Blocking S3 writes and the optional local spool. Everything here runs in executor threads."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

import boto3
from botocore.config import Config

from .settings import S3Location


class S3Writer:
    """PutObject with the capture bucket's encryption settings.

    boto3 reads AWS_ENDPOINT_URL, credentials and region from the environment as usual. Short
    timeouts and few retries: a record that cannot be written soon is spooled or dropped, because
    waiting longer only fills the queue.
    """

    def __init__(self, location: S3Location, kms_key_id: str | None, max_connections: int) -> None:
        self.location = location
        self._encryption: dict[str, str] = (
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key_id} if kms_key_id else {}
        )
        config = Config(
            connect_timeout=2,
            read_timeout=15,
            retries={"max_attempts": 3, "mode": "standard"},
            max_pool_connections=max_connections,
        )
        self._client = boto3.client("s3", config=config)

    def put(self, key: str, body: bytes) -> None:
        self._client.put_object(
            Bucket=self.location.bucket,
            Key=key,
            Body=body,
            ContentType="application/jsonlines",
            **self._encryption,
        )


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

    def store(self, key: str, body: bytes) -> bool:
        """Keep the object for a later retry; False when the spool has no room for it."""
        with self._lock:
            if self._bytes + len(body) > self.max_bytes:
                return False
            self._bytes += len(body)
        final_path = self.directory / (quote(key, safe="") + self._SUFFIX)
        partial_path = final_path.with_name(final_path.name + self._PARTIAL_SUFFIX)
        try:
            partial_path.write_bytes(body)
            os.replace(partial_path, final_path)
        except OSError:
            with self._lock:
                self._bytes -= len(body)
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

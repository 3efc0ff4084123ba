"""Fixtures for the capture processor: its runtime folder on sys.path, a fresh bucket per
test on the shared moto server, and helpers that build SQS-shaped S3 notifications."""

from __future__ import annotations

import gzip
import io
import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIME_DIR = REPO_ROOT / "lambda" / "capture_processor"
FIXTURES = Path(__file__).parent / "fixtures"

# Lambda puts the function's folder on sys.path; the tests do the same ("lambda" is a keyword,
# so the folder cannot be imported as a package).
if str(RUNTIME_DIR) not in sys.path:
    sys.path.insert(0, str(RUNTIME_DIR))


@pytest.fixture
def s3(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A client of the moto server; the handler builds its clients normally, and boto3 honours AWS_ENDPOINT_URL."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    return boto3.client("s3", endpoint_url=moto_endpoint)


@pytest.fixture(autouse=True)
def lambda_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the handler's settings from another test (tests without the ``s3`` fixture start no server)."""
    for name in ("OUTPUT_BUCKET", "OUTPUT_PREFIX", "QUARANTINE_PREFIX", "REDACT", "OUTPUT_KMS_KEY_ID", "CURATED_OUTPUT",
                 "ICEBERG_DATABASE", "ICEBERG_CAPTURE_TABLE", "ICEBERG_ALB_TABLE", "ICEBERG_CATALOG_ID",
                 "ICEBERG_COMMIT_RETRIES", "ICEBERG_RETRY_BASE_MS", "ICEBERG_RETRY_MAX_MS", "ICEBERG_MAX_COMMIT_BYTES"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def erasure_storage_policies() -> dict[str, Any]:
    """tests/capture_processor/test_audit_encryption.py's synthesized policies, once per worker: read only."""
    from tests.capture_processor.test_audit_encryption import synthesized_policies

    return synthesized_policies()


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"capture-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def s3_notification(bucket: str, key: str, size: int = 0, etag: str = "0") -> str:
    """A message body as S3 sends it to SQS (keys URL-encoded, spaces as '+')."""
    record = {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "eventName": "ObjectCreated:Put",
        "s3": {
            "bucket": {"name": bucket},
            "object": {"key": quote_plus(key, safe="/"), "size": size, "eTag": etag},
        },
    }
    return json.dumps({"Records": [record]})


def sqs_event(*bodies: str) -> dict[str, Any]:
    return {"Records": [{"messageId": f"msg-{index}", "body": body} for index, body in enumerate(bodies)]}


@dataclass
class Pipeline:
    """Puts objects, runs the real handler on their notifications, reads the outputs back."""

    s3: Any
    bucket: str

    def put(self, key: str, body: bytes) -> str:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
        return key

    def run(self, *keys: str) -> dict[str, Any]:
        from handler import handler

        return handler(sqs_event(*(s3_notification(self.bucket, key) for key in keys)), None)

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def table(self, key: str) -> pa.Table:
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return pq.read_table(io.BytesIO(body))

    def rows(self, prefix: str = "curated/") -> list[dict[str, Any]]:
        return [row for key in self.keys(prefix) for row in self.table(key).to_pylist()]

    def quarantine(self) -> list[dict[str, Any]]:
        entries = []
        for key in self.keys("quarantine/"):
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            entries += [json.loads(line) for line in body.splitlines()]
        return entries


@pytest.fixture
def pipeline(s3: Any, bucket: str) -> Pipeline:
    return Pipeline(s3, bucket)


@pytest.fixture
def fixture_bytes() -> Callable[[str], bytes]:
    return lambda name: (FIXTURES / name).read_bytes()


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)

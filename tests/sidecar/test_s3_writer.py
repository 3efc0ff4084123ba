"""The hand-written S3 client: its Signature V4 matches botocore's, and objects land in S3 (moto)."""

from __future__ import annotations

import datetime as dt
import hashlib
from unittest import mock

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from capture_sidecar.s3_writer import S3Writer, signature_v4_headers
from capture_sidecar.settings import S3Location

from .conftest import BUCKET

NOW = dt.datetime(2026, 11, 30, 14, 5, 9, tzinfo=dt.UTC)


def botocore_authorization(url: str, headers: dict[str, str], body: bytes, token: str | None) -> str:
    request = AWSRequest(method="PUT", url=url, data=body, headers=headers)
    signer = botocore.auth.S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret/key+example", token), "s3", "eu-west-1")
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=NOW.replace(tzinfo=None)):
        signer.add_auth(request)
    return request.headers["Authorization"]


def test_signature_matches_botocore_for_virtual_hosted_and_path_style_keys() -> None:
    body = b'{"captureData": {}}\n'
    digest = hashlib.sha256(body).hexdigest()
    key_path = "captures/pod/2026/11/30/14/05-09-123-a b+c%25~.jsonl"
    for host, path, token in (
        ("bucket.s3.eu-west-1.amazonaws.com", "/captures/pod/2026/11/30/14/05-09-123-a%20b%2Bc%2525~.jsonl", None),
        ("127.0.0.1:9000", "/bucket/captures/pod/2026/11/30/14/05-09-123-a%20b%2Bc%2525~.jsonl", "session-token"),
    ):
        extra = {"content-type": "application/jsonlines", "x-amz-server-side-encryption": "aws:kms"}
        ours = signature_v4_headers(
            method="PUT",
            host=host,
            path=path,
            headers=extra,
            payload_sha256=digest,
            region="eu-west-1",
            access_key="AKIDEXAMPLE",
            secret_key="secret/key+example",
            token=token,
            now=NOW,
        )
        assert key_path  # the path above is this key, encoded as the writer encodes it
        theirs = botocore_authorization(
            f"http://{host}{path}",
            {"Content-Type": extra["content-type"], "x-amz-server-side-encryption": "aws:kms"},
            body,
            token,
        )
        assert ours["authorization"] == theirs


def test_objects_land_with_the_key_and_encryption_asked_for(moto_endpoint: str, s3, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    writer = S3Writer(S3Location(BUCKET, "writer-test/"), None, 1)
    key = "writer-test/2026/11/30/14/05-09-123-a b+c.jsonl"

    writer.put(key, [b'{"a": 1}\n', b'{"b": 2}\n'])  # pieces are sent without being joined

    stored = s3.get_object(Bucket=BUCKET, Key=key)
    assert stored["Body"].read() == b'{"a": 1}\n{"b": 2}\n'
    assert stored["ContentType"] == "application/jsonlines"

"""The Iceberg tables' writes name the capture key, whatever the capture bucket's default encryption.

With ALB access logs accepted (``load_balancer_logs``) the capture bucket's default is SSE-S3 and its policy refuses
every write that does not name the capture key (``WritesNameTheKey``). pyarrow's S3 file system cannot send SSE-KMS
headers, so the tables write through :mod:`capture_core.sse_kms_io`. Every object the processor's append and the
erasure's copy-on-write rewrite put under ``curated-iceberg/`` (data files, manifests, manifest lists, table
metadata) is recorded as boto3 sends it and judged against the synthesized bucket policy: allowed, and stored
under the key; the same put without the key, or under SSE-S3, is refused.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.test_audit_encryption import (  # noqa: F401 (fixtures)
    ERASER,
    judged,
    moto_key,
    policies,
    recording,
    unencrypted,
)
from tests.capture_processor.test_erasure import RAW, both, capture_lines  # noqa: F401 (fixtures)
from tests.capture_processor.test_iceberg_tables import catalog, database  # noqa: F401 (fixtures)

TABLES = "curated-iceberg/"
WRITES = ("PutObject", "CreateMultipartUpload")


def recording_writes(puts: list[dict[str, Any]]) -> Any:
    """boto3.client, with every PutObject's and CreateMultipartUpload's parameters recorded as boto3 sends them."""
    make = boto3.client  # the real one, also when boto3.client is this

    def client(service: str, *args: Any, **kwargs: Any) -> Any:
        made = make(service, *args, **kwargs)
        if service == "s3":
            for operation in WRITES:
                made.meta.events.register(f"provide-client-params.s3.{operation}",
                                          lambda params, **_: puts.append(dict(params)))
        return made
    return client


def assert_under_the_key(policies: dict[str, Any], pipeline: Pipeline, principal: str,  # noqa: F811
                         puts: list[dict[str, Any]], moto_key: str) -> None:  # noqa: F811
    kinds = {put["Key"].rsplit(".", 1)[-1] for put in puts}
    assert {"parquet", "avro", "json"} <= kinds, sorted(put["Key"] for put in puts)
    for put in puts:
        assert (put["ServerSideEncryption"], put["SSEKMSKeyId"]) == ("aws:kms", moto_key), put["Key"]
        assert judged(policies, principal, put, moto_key) != "deny", put["Key"]
        # The control: the same write under the bucket's default (SSE-S3) or S3's own key is refused.
        assert judged(policies, principal, unencrypted(put), moto_key) == "deny", put["Key"]
        assert judged(policies, principal, {**unencrypted(put), "ServerSideEncryption": "AES256"}, moto_key) == "deny"
        head = pipeline.s3.head_object(Bucket=pipeline.bucket, Key=put["Key"])
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", moto_key), put["Key"]


def test_the_processors_appends_name_the_capture_key(
    policies: dict[str, Any], both: Pipeline, catalog: Any, moto_key: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = both
    puts: list[dict[str, Any]] = []
    monkeypatch.setenv("OUTPUT_KMS_KEY_ID", moto_key)
    monkeypatch.setattr(boto3, "client", recording_writes(puts))
    result = pipeline.run(pipeline.put(f"{RAW}a.jsonl", capture_lines("a", ["team-a", "team-b"])))
    assert result == {"batchItemFailures": []}
    tables = [put for put in puts if put["Key"].startswith(TABLES)]
    assert tables, puts
    assert_under_the_key(policies, pipeline, policies["processor"], tables, moto_key)
    # The Parquet layout, the processor's other output, names it too (the same OUTPUT_KMS_KEY_ID).
    assert all(put.get("SSEKMSKeyId") == moto_key for put in puts if put["Key"].startswith("curated/"))


def test_the_erasures_rewrites_name_the_capture_key(
    policies: dict[str, Any], both: Pipeline, catalog: Any, database: str, moto_key: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from capture_core import capture_tables

    pipeline = both
    pipeline.run(pipeline.put(f"{RAW}a.jsonl", capture_lines("a", ["team-a", "team-b"])))
    puts: list[dict[str, Any]] = []
    monkeypatch.setattr(boto3, "client", recording_writes(puts))
    monkeypatch.setattr("builtins.print", lambda *a, **k: None)
    # The command's own catalog (no factory): the one a deployed eraser builds from its arguments.
    status = capture_tables.main(["delete", "--database", database, "--bucket", pipeline.bucket, "--caller-id",
                                  "team-a", "--no-trail", "--kms-key-id", moto_key], clients=recording_writes(puts))
    assert status == 0
    rewrites = [put for put in puts if put["Key"].startswith(TABLES)]
    assert any(put["Key"].endswith(".parquet") for put in rewrites), rewrites  # team-b's rows, rewritten
    assert_under_the_key(policies, pipeline, ERASER, rewrites, moto_key)


def test_a_write_that_fails_uploads_nothing(both: Pipeline, moto_key: str) -> None:  # noqa: F811
    from capture_core.sse_kms_io import SseKmsFileIO

    io = SseKmsFileIO({"s3.sse-kms-key-id": moto_key, "s3.endpoint": both.s3.meta.endpoint_url,
                       "s3.region": "us-east-1"})
    location = f"s3://{both.bucket}/{TABLES}t/data/half.parquet"
    with pytest.raises(RuntimeError), io.new_output(location).create() as stream:
        stream.write(b"PAR1")
        raise RuntimeError("the writer failed")
    assert both.keys(f"{TABLES}t/") == []
    with io.new_output(location).create() as stream:
        stream.write(b"PAR1" * 10)
    assert io.new_input(location).open().read() == b"PAR1" * 10
    with pytest.raises(FileExistsError):
        io.new_output(location).create()


def test_a_pipeline_without_the_key_on_a_bucket_accepting_alb_logs_is_refused() -> None:
    """Its outputs and the tables' files would carry no key, and the bucket refuses them all: one error, at synth."""
    from aws_cdk import App, Environment, Stack

    from hyperpod_inference_iac import CapturePipeline, CaptureStorage
    from hyperpod_inference_iac.foundation.validation import ConfigError
    from tests.unit.test_data_perimeter import ACCOUNT, REGION

    for load_balancer_logs in (True, False):
        stack = Stack(App(), "Storage", env=Environment(account=ACCOUNT, region=REGION))
        storage = CaptureStorage(stack, "Storage", capture_bucket_name="captures-key-required",
                                 load_balancer_logs=load_balancer_logs)

        def pipeline() -> CapturePipeline:
            return CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=None,  # noqa: B023
                                   capture_prefixes=[storage.capture_prefix],  # noqa: B023
                                   pandas_layer_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:pandas:1")
        if load_balancer_logs:
            with pytest.raises(ConfigError, match=r"\[CapturePipeline.KeyRequired\] encryption_key: must be the "):
                pipeline()
        else:  # the bucket's default is the key: writes without headers land under it
            pipeline()


def test_a_file_past_the_spool_goes_up_in_parts_under_the_key(
    both: Pipeline, moto_key: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    from capture_core.sse_kms_io import SPOOL_BYTES, SseKmsFileIO

    puts: list[dict[str, Any]] = []
    monkeypatch.setattr(boto3, "client", recording_writes(puts))
    io = SseKmsFileIO({"s3.sse-kms-key-id": moto_key, "s3.endpoint": both.s3.meta.endpoint_url,
                       "s3.region": "us-east-1"})
    location = f"s3://{both.bucket}/{TABLES}t/data/large.parquet"
    body = bytes(range(256)) * (SPOOL_BYTES // 256 + 4096)  # past the spool and the transfer threshold
    with io.new_output(location).create() as stream:
        for start in range(0, len(body), 1 << 20):
            stream.write(body[start:start + (1 << 20)])
    [created] = puts
    assert (created["ServerSideEncryption"], created["SSEKMSKeyId"]) == ("aws:kms", moto_key)
    assert "UploadId" not in created and "Body" not in created  # CreateMultipartUpload: the parts follow
    head = both.s3.head_object(Bucket=both.bucket, Key=f"{TABLES}t/data/large.parquet")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"], head["ContentLength"]) == ("aws:kms", moto_key,
                                                                                         len(body))

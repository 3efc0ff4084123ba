"""What lands in S3: the SageMaker capture envelope, its encodings, sampling and the payload cap."""

from __future__ import annotations

import base64
import json
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from .conftest import Sidecar, object_keys, read_records

KEY_PATTERN = re.compile(r"^\d{4}/\d{2}/\d{2}/\d{2}/\d{2}-\d{2}-\d{3}-[0-9a-f-]{36}\.jsonl$")


@pytest.fixture(scope="module")
def sidecar(start_module_sidecar) -> Sidecar:
    return start_module_sidecar()


def test_json_exchange_is_captured_in_the_sagemaker_envelope(sidecar: Sidecar, s3) -> None:
    request_body = b'{"prompt": "What is the capital of France?", "max_tokens": 8}'
    before = datetime.now(UTC)

    response = sidecar.call(
        "POST",
        "/v1/completions",
        request_body,
        {"Content-Type": "application/json", "X-Amzn-SageMaker-Inference-Id": "inference-42"},
    )

    [record] = read_records(s3, sidecar.prefix, expected=1)
    assert set(record) == {"captureData", "eventMetadata", "eventVersion"}
    assert record["eventVersion"] == "0"
    assert record["captureData"]["endpointInput"] == {
        "observedContentType": "application/json",
        "mode": "INPUT",
        "data": request_body.decode(),
        "encoding": "JSON",
    }
    assert record["captureData"]["endpointOutput"] == {
        "observedContentType": response.header("Content-Type"),
        "mode": "OUTPUT",
        "data": response.body.decode(),
        "encoding": "JSON",
    }
    metadata = record["eventMetadata"]
    assert uuid.UUID(metadata["eventId"]).version == 4
    assert metadata["inferenceId"] == "inference-42"
    inference_time = datetime.strptime(metadata["inferenceTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert before - timedelta(seconds=1) <= inference_time <= datetime.now(UTC)

    [key] = object_keys(s3, sidecar.prefix)
    assert KEY_PATTERN.match(key.removeprefix(sidecar.prefix)), key
    assert key.removeprefix(sidecar.prefix).startswith(f"{inference_time:%Y/%m/%d/%H}/")


def test_other_content_types_are_base64_and_no_inference_id_means_none(start_sidecar, s3) -> None:
    sidecar = start_sidecar()
    payload = bytes(range(256))

    sidecar.call("PUT", "/echo", payload, {"Content-Type": "application/octet-stream"})

    [record] = read_records(s3, sidecar.prefix, expected=1)
    for side in ("endpointInput", "endpointOutput"):
        entry = record["captureData"][side]
        assert entry["encoding"] == "BASE64"
        assert entry["observedContentType"] == "application/octet-stream"
        assert base64.b64decode(entry["data"]) == payload
    assert "inferenceId" not in record["eventMetadata"]


def test_requests_without_a_body_method_are_not_captured(start_sidecar, s3) -> None:
    sidecar = start_sidecar()

    for method in ("GET", "HEAD", "DELETE", "OPTIONS"):
        assert sidecar.call(method, "/health").status == 200
    sidecar.call("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"})

    records = read_records(s3, sidecar.prefix, expected=1)
    assert [record["captureData"]["endpointInput"]["data"] for record in records] == ["{}"]
    assert sidecar.metrics()["capture_sidecar_records_captured_total"] == 1


@pytest.mark.parametrize(("modes", "expected_sides"), [("Input", {"endpointInput"}), ("Output", {"endpointOutput"})])
def test_only_the_configured_capture_mode_is_written(start_sidecar, s3, modes: str, expected_sides: set) -> None:
    sidecar = start_sidecar(CAPTURE_MODES=modes)

    sidecar.call("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"})

    [record] = read_records(s3, sidecar.prefix, expected=1)
    assert set(record["captureData"]) == expected_sides


def test_payloads_over_the_cap_are_truncated_and_marked(start_sidecar, s3) -> None:
    sidecar = start_sidecar(MAX_PAYLOAD_SIZE_KB="1")
    request_body = json.dumps({"prompt": "é" * 3000}).encode()  # multi-byte characters across the cut

    response = sidecar.call("POST", "/large?bytes=5000", request_body, {"Content-Type": "application/json"})

    assert response.body == b"x" * 5000  # the client still gets everything
    [record] = read_records(s3, sidecar.prefix, expected=1)
    captured_input = record["captureData"]["endpointInput"]
    assert captured_input["truncated"] is True
    assert captured_input["originalSizeBytes"] == len(request_body)
    assert captured_input["encoding"] == "JSON"
    assert request_body.decode().startswith(captured_input["data"])
    assert 1021 <= len(captured_input["data"].encode()) <= 1024  # a split character is dropped, no more
    captured_output = record["captureData"]["endpointOutput"]
    assert captured_output["truncated"] is True
    assert captured_output["originalSizeBytes"] == 5000
    assert captured_output["data"] == "x" * 1024
    assert sidecar.metrics()["capture_sidecar_truncated_payloads_total"] == 2


def test_payloads_under_the_cap_are_not_marked(start_sidecar, s3) -> None:
    sidecar = start_sidecar(MAX_PAYLOAD_SIZE_KB="1")

    sidecar.call("POST", "/large?bytes=1024", b"{}", {"Content-Type": "application/json"})

    [record] = read_records(s3, sidecar.prefix, expected=1)
    for entry in record["captureData"].values():
        assert "truncated" not in entry
        assert "originalSizeBytes" not in entry


def test_zero_percent_sampling_captures_nothing(start_sidecar, s3) -> None:
    sidecar = start_sidecar(SAMPLING_PERCENTAGE="0")

    for _ in range(20):
        assert sidecar.call("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"}).status == 200

    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_requests_sampled_out_total"] == 20
    assert metrics["capture_sidecar_records_captured_total"] == 0
    assert sidecar.terminate() == 0  # a clean stop flushes everything: still nothing to write
    assert object_keys(s3, sidecar.prefix) == []


def test_full_sampling_captures_every_request(start_sidecar, s3) -> None:
    sidecar = start_sidecar(SAMPLING_PERCENTAGE="100")

    for index in range(20):
        sidecar.call("POST", "/echo", f'{{"n": {index}}}'.encode(), {"Content-Type": "application/json"})

    records = read_records(s3, sidecar.prefix, expected=20)
    assert sorted(json.loads(r["captureData"]["endpointInput"]["data"])["n"] for r in records) == list(range(20))


def test_partial_sampling_captures_about_that_share(start_sidecar) -> None:
    # Counted on /metrics, not in S3: at 30 %, 400 requests give 120 expected; 80..160 is > 6 sigma.
    sidecar = start_sidecar(SAMPLING_PERCENTAGE="30", BATCH_SIZE="50")

    for _ in range(400):
        sidecar.call("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"})

    metrics = sidecar.metrics()
    captured = metrics["capture_sidecar_records_captured_total"]
    assert captured + metrics["capture_sidecar_requests_sampled_out_total"] == 400
    assert 80 <= captured <= 160


def test_objects_hold_batch_size_records_while_uploads_keep_up(start_sidecar, s3) -> None:
    sidecar = start_sidecar(BATCH_SIZE="3")

    for _ in range(7):
        sidecar.call("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"})

    assert len(read_records(s3, sidecar.prefix, expected=6)) == 6  # the 7th waits for a batch or the flush
    assert len(object_keys(s3, sidecar.prefix)) == 2
    assert sidecar.metrics()["capture_sidecar_queue_depth"] == 1


def test_kms_key_is_used_for_every_object(start_sidecar, s3, moto_endpoint: str) -> None:
    import boto3

    key_id = boto3.client("kms", endpoint_url=moto_endpoint).create_key()["KeyMetadata"]["KeyId"]
    sidecar = start_sidecar(KMS_KEY_ID=key_id)

    sidecar.call("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"})

    read_records(s3, sidecar.prefix, expected=1)
    [key] = object_keys(s3, sidecar.prefix)
    head = s3.head_object(Bucket="capture-sidecar-tests", Key=key)
    assert head["ServerSideEncryption"] == "aws:kms"
    assert key_id in head["SSEKMSKeyId"]

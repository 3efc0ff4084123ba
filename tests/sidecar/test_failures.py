"""Capture never fails inference: S3 outages, a full queue and a broken model server."""

from __future__ import annotations

import http.client
import os

import pytest

from tests.support.s3server import free_loopback_port

from .conftest import Sidecar, read_records

COMPLETION = ("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"})
DROPPED_UPLOAD_FAILED = 'capture_sidecar_records_dropped_total{reason="upload_failed"}'


def closed_s3_endpoint() -> str:
    return f"http://127.0.0.1:{free_loopback_port()}"  # nothing listens there


def test_s3_outage_drops_records_but_requests_succeed(start_sidecar) -> None:
    sidecar: Sidecar = start_sidecar(AWS_ENDPOINT_URL=closed_s3_endpoint())

    for _ in range(5):
        assert sidecar.call(*COMPLETION).status == 200

    assert sidecar.wait_for_metric(DROPPED_UPLOAD_FAILED, at_least=5) == 5
    metrics = sidecar.metrics()
    assert metrics['capture_sidecar_uploads_total{result="failed"}'] == 5
    assert metrics['capture_sidecar_uploads_total{result="ok"}'] == 0
    assert "S3 upload failed" in sidecar.log()


def test_records_spooled_during_an_outage_are_uploaded_by_the_next_run(start_sidecar, s3, tmp_path) -> None:
    spool_dir = tmp_path / "spool"
    during_outage = start_sidecar(AWS_ENDPOINT_URL=closed_s3_endpoint(), SPOOL_DIR=str(spool_dir))
    for _ in range(3):
        assert during_outage.call(*COMPLETION).status == 200
    assert during_outage.wait_for_metric("capture_sidecar_records_spooled_total", at_least=3) == 3
    assert during_outage.metrics()["capture_sidecar_spool_bytes"] > 0
    assert during_outage.terminate() == 0
    assert len(os.listdir(spool_dir)) == 3

    # Same prefix, S3 back: the spool is emptied under the keys chosen at capture time.
    recovered = start_sidecar(
        SPOOL_DIR=str(spool_dir), CAPTURE_S3_URI=f"s3://capture-sidecar-tests/{during_outage.prefix}"
    )
    assert len(read_records(s3, during_outage.prefix, expected=3)) == 3
    assert recovered.wait_for_metric("capture_sidecar_records_uploaded_total", at_least=3) == 3
    assert os.listdir(spool_dir) == []


def test_full_queue_drops_and_counts_without_blocking(start_sidecar) -> None:
    # Batches of 1000 never fill and the first flush is 10 s away: records stay queued.
    sidecar = start_sidecar(QUEUE_MAX_RECORDS="2", BATCH_SIZE="1000")

    for _ in range(5):
        assert sidecar.call(*COMPLETION).status == 200

    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_records_captured_total"] == 2
    assert metrics['capture_sidecar_records_dropped_total{reason="queue_full"}'] == 3
    assert metrics["capture_sidecar_queue_depth"] == 2


@pytest.fixture(scope="module")
def sidecar(start_module_sidecar) -> Sidecar:
    return start_module_sidecar()


@pytest.mark.parametrize("path", ["/broken/midstream", "/broken/length", "/broken/chunking"])
def test_broken_upstream_response_reaches_the_client_as_incomplete(sidecar: Sidecar, path: str) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.port, timeout=60)
    connection.request("POST", path, b"{}", {"Content-Type": "application/json"})
    response = connection.getresponse()

    assert response.status == 200  # the headers were already on their way
    with pytest.raises(http.client.IncompleteRead):
        response.read()
    connection.close()

    assert sidecar.call(*COMPLETION).status == 200  # still serving
    assert sidecar.metrics()["capture_sidecar_upstream_errors_total"] >= 1


def test_broken_responses_are_recorded_as_partial(start_sidecar, s3) -> None:
    sidecar = start_sidecar()
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.port, timeout=60)
    connection.request("POST", "/broken/midstream", b"{}", {"Content-Type": "application/json"})
    with pytest.raises(http.client.IncompleteRead):
        connection.getresponse().read()
    connection.close()

    sidecar.call(*COMPLETION)

    records = read_records(s3, sidecar.prefix, expected=2)
    broken = [record for record in records if record["eventMetadata"].get("partial")]
    assert len(records) == 2 and len(broken) == 1
    assert broken[0]["eventMetadata"]["partialReason"] == "upstream_broken"
    assert broken[0]["eventMetadata"]["responseStatus"] == 200  # what the client got before the break
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_records_captured_total"] == 2
    assert metrics['capture_sidecar_partial_exchanges_total{model="unknown",reason="upstream_broken"}'] == 1


def test_unreachable_model_server_gives_502_and_the_sidecar_keeps_running(start_sidecar, s3) -> None:
    sidecar = start_sidecar(UPSTREAM_URL=f"http://127.0.0.1:{free_loopback_port()}")

    first = sidecar.call(*COMPLETION)
    second = sidecar.call(*COMPLETION)

    assert (first.status, second.status) == (502, 502)
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_upstream_errors_total"] == 2
    assert metrics['capture_sidecar_requests_total{model="unknown",status_class="5xx"}'] == 2
    assert sidecar.process.poll() is None
    # Recorded with the status the client got; the sidecar's own answer is not the model's output.
    records = read_records(s3, sidecar.prefix, expected=2)
    assert [record["eventMetadata"]["responseStatus"] for record in records] == [502, 502]
    assert all("endpointOutput" not in record["captureData"] for record in records)
    assert all("partial" not in record["eventMetadata"] for record in records)

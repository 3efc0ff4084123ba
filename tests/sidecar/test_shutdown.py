"""SIGTERM: stop accepting, finish in-flight requests, flush every buffered record, exit 0."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
import time

import pytest

from .conftest import SIDECAR_DIR, Sidecar, read_records

COMPLETION = ("POST", "/v1/completions", b"{}", {"Content-Type": "application/json"})


def test_sigterm_flushes_buffered_records_and_exits_zero(start_sidecar, s3) -> None:
    # Neither trigger would fire during the test: batches of 100, first flush in 300 s.
    sidecar: Sidecar = start_sidecar(BATCH_SIZE="100", FLUSH_INTERVAL_SECONDS="300")
    for _ in range(7):
        assert sidecar.call(*COMPLETION).status == 200
    assert sidecar.metrics()["capture_sidecar_queue_depth"] == 7

    # Neither trigger fires before terminate()'s safety timeout (60 s) either: that the seven records are there once
    # the process has exited is what shows the shutdown flushed them (no duration is asserted: issue 30).
    assert sidecar.terminate() == 0
    assert len(read_records(s3, sidecar.prefix, expected=7, timeout=1)) == 7


def test_in_flight_stream_finishes_and_new_connections_are_refused(start_sidecar, s3) -> None:
    sidecar: Sidecar = start_sidecar(BATCH_SIZE="100", FLUSH_INTERVAL_SECONDS="300")
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.port, timeout=60)
    connection.request("POST", "/v1/stream?events=5&delay_ms=200", b"{}", {"Content-Type": "application/json"})
    response = connection.getresponse()
    first_line = response.readline()

    sidecar.process.send_signal(signal.SIGTERM)
    sidecar.stopped = True
    time.sleep(0.2)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", sidecar.port)) != 0  # the listener is closed
    rest = response.read()

    assert first_line.startswith(b"data: ")
    assert rest.count(b"data: ") == 5  # four more events and [DONE]
    assert sidecar.process.wait(timeout=60) == 0
    [record] = read_records(s3, sidecar.prefix, expected=1, timeout=1)
    assert record["captureData"]["endpointOutput"]["data"].endswith("data: [DONE]\n\n")


def test_records_that_cannot_be_flushed_in_the_grace_period_are_reported(start_sidecar) -> None:
    # An "S3" that accepts connections and never answers: uploads hang past the grace period.
    with socket.socket() as silent_s3:
        silent_s3.bind(("127.0.0.1", 0))
        silent_s3.listen(16)
        sidecar: Sidecar = start_sidecar(
            BATCH_SIZE="100",
            FLUSH_INTERVAL_SECONDS="300",
            SHUTDOWN_GRACE_SECONDS="1",
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{silent_s3.getsockname()[1]}",
        )
        for _ in range(3):
            sidecar.call(*COMPLETION)

        # The silent S3 never answers and botocore's own timeouts (60 s, retried) outlast terminate()'s safety
        # timeout: an exit at all, with the log line below, is the grace period ending it.
        assert sidecar.terminate() == 0

    assert "3 captured records not written before the grace period ended" in sidecar.log()


@pytest.mark.slow  # the sidecar, a process of its own
def test_bad_settings_exit_non_zero_listing_every_problem() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "UPSTREAM_URL": "localhost:8000",
        "CAPTURE_S3_URI": "https://bucket/prefix",
        "SAMPLING_PERCENTAGE": "101",
        "CAPTURE_MODES": "",
        "BATCH_SIZE": "5000",
        "FLUSH_INTERVAL_SECONDS": "9",
        "MAX_PAYLOAD_SIZE_KB": "-1",
        "LISTEN_PORT": "http",
        "JSON_CONTENT_TYPES": "json",
    }

    result = subprocess.run(
        [sys.executable, "-m", "capture_sidecar"], cwd=SIDECAR_DIR, env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    for name, value in env.items():
        if name != "PATH":
            assert f"{name}={value!r}" in result.stderr, name
    assert "invalid settings (9)" in result.stderr
    assert "must be an integer from 1 to 1000" in result.stderr


@pytest.mark.slow  # the sidecar, a process of its own
def test_missing_required_settings_are_named() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "capture_sidecar"],
        cwd=SIDECAR_DIR,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2
    assert "UPSTREAM_URL is required" in result.stderr
    assert "CAPTURE_S3_URI is required" in result.stderr

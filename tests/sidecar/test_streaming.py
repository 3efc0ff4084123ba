"""Server-sent events reach the client as the model produces them; the capture holds the whole stream."""

from __future__ import annotations

import http.client
import time
from itertools import pairwise

from .conftest import Sidecar, read_records

EVENTS = 4
DELAY_MS = 300


def read_events_with_arrival_times(port: int, path: str, body: bytes) -> tuple[float, list[tuple[float, bytes]]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    started = time.monotonic()
    connection.request("POST", path, body, {"Content-Type": "application/json", "Accept": "text/event-stream"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/event-stream"
    arrivals = []
    while line := response.readline():
        if line.startswith(b"data: "):
            arrivals.append((time.monotonic() - started, line))
    connection.close()
    return started, arrivals


def test_events_arrive_one_by_one_and_the_capture_holds_the_whole_stream(start_sidecar, s3) -> None:
    sidecar: Sidecar = start_sidecar()
    body = b'{"prompt": "count", "stream": true}'

    _, arrivals = read_events_with_arrival_times(sidecar.port, f"/v1/stream?events={EVENTS}&delay_ms={DELAY_MS}", body)

    assert len(arrivals) == EVENTS + 1  # the events plus [DONE]
    first_event_at = arrivals[0][0]
    last_event_at = arrivals[-1][0]
    # The stand-in needs (EVENTS - 1) * DELAY_MS to finish; the first event must not wait for that.
    assert first_event_at < DELAY_MS / 1000 / 2
    assert last_event_at >= (EVENTS - 1) * DELAY_MS / 1000 * 0.9
    gaps = [later[0] - earlier[0] for earlier, later in pairwise(arrivals[:-1])]  # [DONE] follows at once
    assert all(gap > DELAY_MS / 1000 / 2 for gap in gaps)

    [record] = read_records(s3, sidecar.prefix, expected=1)
    output = record["captureData"]["endpointOutput"]
    assert output["observedContentType"] == "text/event-stream"
    assert output["encoding"] == "JSON"
    assert [line.encode() for line in output["data"].splitlines() if line] == [
        line.rstrip(b"\n") for _, line in arrivals
    ]
    assert output["data"].endswith("data: [DONE]\n\n")

"""Server-sent events reach the client as the model produces them; the capture holds the whole stream."""

from __future__ import annotations

import http.client
import uuid

from .conftest import Sidecar, http_call, read_records

EVENTS = 4
# A safety bound only: a sidecar that held events back never delivers the first one, and the read ends here.
SAFETY_TIMEOUT_S = 60


def test_events_arrive_one_by_one_and_the_capture_holds_the_whole_stream(start_sidecar, s3, standin_port) -> None:
    """Each event after the first leaves the stand-in only once the client has received the one before through the
    sidecar (a gated stream): the order of events proves streaming, whatever the machine's load; no stopwatch."""
    sidecar: Sidecar = start_sidecar()
    gate = uuid.uuid4().hex
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.port, timeout=SAFETY_TIMEOUT_S)
    connection.request(
        "POST", f"/v1/gated-stream?events={EVENTS}&gate={gate}", b'{"prompt": "count", "stream": true}',
        {"Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    response = connection.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/event-stream"
    arrivals: list[bytes] = []
    while line := response.readline():
        if line.startswith(b"data: "):
            arrivals.append(line)
            if len(arrivals) < EVENTS:  # received through the sidecar: let the stand-in send the next one
                assert http_call(standin_port, "GET", f"/gate/{gate}").status == 200
    connection.close()
    assert len(arrivals) == EVENTS + 1  # the events plus [DONE]

    [record] = read_records(s3, sidecar.prefix, expected=1)
    output = record["captureData"]["endpointOutput"]
    assert output["observedContentType"] == "text/event-stream"
    assert output["encoding"] == "JSON"
    assert [line.encode() for line in output["data"].splitlines() if line] == [
        line.rstrip(b"\n") for line in arrivals
    ]
    assert output["data"].endswith("data: [DONE]\n\n")

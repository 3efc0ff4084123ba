"""End to end: real objects in a moto S3 server, the real handler, Parquet read back with pyarrow."""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
from datetime import UTC, datetime

import pytest

from tests.capture_processor.conftest import Pipeline, gzipped, s3_notification, sqs_event

SME = "data-capture/a1b2c3d4/sme/my-endpoint/AllTraffic/2019/11/24/07/30-50-000-uuid.jsonl"
ALB = (
    "data-capture/a1b2c3d4/alb/AWSLogs/123456789012/elasticloadbalancing/us-east-2/2018/07/02/"
    "123456789012_elasticloadbalancing_us-east-2_app.my-loadbalancer.50dc6c495c0c9188_20180702T2225Z_10.0.0.1_x.log.gz"
)


def capture_line(
    event_id: str,
    time: str | None = "2026-11-30T10:15:00Z",
    input_text: str = '{"inputs": "hello"}',
    output: dict | None = None,
) -> str:
    return json.dumps(
        {
            "captureData": {
                "endpointInput": {
                    "observedContentType": "application/json",
                    "mode": "INPUT",
                    "data": input_text,
                    "encoding": "JSON",
                },
                "endpointOutput": output
                or {
                    "observedContentType": "application/json",
                    "mode": "OUTPUT",
                    "data": '{"ok": 1}',
                    "encoding": "JSON",
                },
            },
            "eventMetadata": {"eventId": event_id, "inferenceTime": time},
            "eventVersion": "0",
        }
    )


def base64_output(payload: bytes, **extra: object) -> dict:
    side = {"observedContentType": "text/plain", "mode": "OUTPUT", "data": base64.b64encode(payload).decode()}
    return side | {"encoding": "BASE64"} | extra


def test_public_sme_sample_lands_in_its_hour_with_decoded_json(pipeline: Pipeline, fixture_bytes) -> None:
    pipeline.put(SME, fixture_bytes("captured-data.jsonl"))

    assert pipeline.run(SME) == {"batchItemFailures": []}

    [key] = pipeline.keys("curated/")
    assert key.startswith("curated/tier=sme/dt=2019-11-24/hour=07/part-") and key.endswith(".parquet")
    rows = pipeline.rows()
    assert [row["event_id"] for row in rows] == [
        "12b73486-e916-45de-9d82-7fa23d4a39a6",
        "f9305ead-ba10-401d-953c-8bfb981da274",
    ]
    first = rows[0]
    assert first["inference_time"] == datetime(2019, 11, 24, 7, 30, 50, tzinfo=UTC)
    assert first["time_source"] == "record"
    assert first["input_text"] == '{"instances": [1.0, 2.0, 5.0]}'
    assert first["output_text"] == '{\n    "predictions": [3.5, 4.0, 5.5\n    ]\n}'
    assert (first["input_content_type"], first["input_encoding"]) == ("application/json", "JSON")
    assert (first["input_truncated"], first["output_truncated"], first["decode_error"]) == (
        False,
        False,
        None,
    )
    assert (first["source_key"], first["deployment_hash"]) == (SME, "a1b2c3d4")


def test_placeholder_times_fall_back_to_the_hour_in_the_key(pipeline: Pipeline, fixture_bytes) -> None:
    key = "data-capture/h/sme/ep/AllTraffic/2026/03/01/05/00-00-000-x.jsonl"
    pipeline.put(key, fixture_bytes("capture.jsonl"))  # inferenceTime "{%s}", no trailing newline

    assert pipeline.run(key) == {"batchItemFailures": []}

    [output] = pipeline.keys("curated/")
    assert "/dt=2026-03-01/hour=05/" in output
    rows = pipeline.rows()
    assert len(rows) == 44
    assert {row["time_source"] for row in rows} == {"object_key"}
    assert rows[0]["input_text"] == "9,45,45,42,7,5,0"  # CSV feature rows are not mistaken for phones
    assert rows[-1]["event_id"] is not None


def test_times_without_key_hour_fall_back_to_last_modified(pipeline: Pipeline) -> None:
    before = datetime.now(UTC).replace(microsecond=0)  # (S3 dates objects to the second)
    key = pipeline.put("h/pod/batch-1.jsonl", (capture_line("e1", time=None) + "\n").encode())

    pipeline.run(key)

    [row] = pipeline.rows()
    assert row["time_source"] == "last_modified"
    assert before <= row["inference_time"] <= datetime.now(UTC)  # the object's own date: written in between


def test_alb_documentation_entries_are_typed_by_name(pipeline: Pipeline, fixture_bytes) -> None:
    pipeline.put(ALB, gzipped(fixture_bytes("aws-docs-example-entries.log")))

    assert pipeline.run(ALB) == {"batchItemFailures": []}

    assert [key.split("/part-")[0] for key in pipeline.keys("curated/")] == [
        "curated/tier=alb/dt=2018-07-02/hour=22",
        "curated/tier=alb/dt=2018-11-30/hour=22",
    ]
    rows = pipeline.rows()
    assert [row["type"] for row in rows] == ["http", "https", "h2", "ws", "wss", "http", "http"]
    http = rows[0]
    assert http["time"] == datetime(2018, 7, 2, 22, 23, 0, 186641, tzinfo=UTC)
    assert (http["client_ip"], http["client_port"], http["target_ip"], http["target_port"]) == (
        "192.168.131.39",
        2817,
        "10.0.0.1",
        80,
    )
    assert (http["request_processing_time"], http["target_processing_time"]) == (0.0, 0.001)
    assert (
        http["elb_status_code"],
        http["target_status_code"],
        http["received_bytes"],
        http["sent_bytes"],
    ) == (
        200,
        200,
        34,
        366,
    )
    assert (http["request_verb"], http["request_url"], http["request_proto"]) == (
        "GET",
        "http://www.example.com:80/",
        "HTTP/1.1",
    )
    assert (http["request_host"], http["request_port"], http["request_path"], http["request_query"]) == (
        "www.example.com",
        80,
        "/",
        None,
    )
    assert http["user_agent"] == "curl/7.46.0"
    assert (http["ssl_cipher"], http["domain_name"], http["matched_rule_priority"]) == (None, None, 0)
    assert http["request_creation_time"] == datetime(2018, 7, 2, 22, 22, 48, 364000, tzinfo=UTC)
    assert (http["target_port_list"], http["target_status_code_list"]) == ("10.0.0.1:80", "200")
    assert (http["conn_trace_id"], http["transformed_host"], http["request_transform_status"]) == (
        None,
        None,
        None,
    )
    assert rows[1]["actions_executed"] == "authenticate,forward"
    assert rows[1]["ssl_protocol"] == "TLSv1.2"
    assert rows[2]["redirect_url"] == "https://example.com:80/"
    lambda_failure = rows[6]
    assert (lambda_failure["target_ip"], lambda_failure["target_status_code"]) == (None, None)
    assert (lambda_failure["elb_status_code"], lambda_failure["error_reason"]) == (
        502,
        "LambdaInvalidResponse",
    )
    assert {row["deployment_hash"] for row in rows} == {"a1b2c3d4"}


def test_alb_newer_trailing_fields_are_kept_by_name_or_ignored(pipeline: Pipeline, fixture_bytes) -> None:
    entry = fixture_bytes("aws-docs-example-entries.log").splitlines()[0]
    newer = entry + b' TID_1234abcd "rewritten.example.com" "/v2/" "OriginalRetrieved" 10.0.0.9 future'
    timed_out = entry.replace(b"0.000 0.001 0.000", b"-1 -1 -1")
    pipeline.put(ALB, gzipped(b"\n".join([newer, timed_out]) + b"\n"))

    assert pipeline.run(ALB) == {"batchItemFailures": []}

    newest, old = pipeline.rows()
    assert (newest["conn_trace_id"], newest["transformed_host"], newest["transformed_uri"]) == (
        "TID_1234abcd",
        "rewritten.example.com",
        "/v2/",
    )
    assert newest["request_transform_status"] == "OriginalRetrieved"
    assert (old["request_processing_time"], old["target_processing_time"]) == (-1.0, -1.0)
    assert pipeline.quarantine() == []


def test_alb_malformed_request_and_bad_lines(pipeline: Pipeline, fixture_bytes) -> None:
    entry = fixture_bytes("aws-docs-example-entries.log").splitlines()[0]
    malformed_request = entry.replace(b'"GET http://www.example.com:80/ HTTP/1.1"', b'"- http://www.example.com:80- -"')
    bad_number = entry.replace(b" 34 366 ", b" lots 366 ")
    key = ALB.replace(".log.gz", ".log")
    pipeline.put(key, b"\n".join([malformed_request, b"garbage line", bad_number]))

    assert pipeline.run(key) == {"batchItemFailures": []}

    [row] = pipeline.rows()
    assert (row["request_verb"], row["request_url"], row["request_proto"]) == (
        None,
        "http://www.example.com:80-",
        None,
    )
    assert (row["request_host"], row["request_port"]) == ("www.example.com", None)
    reasons = {entry["line_number"]: entry["reason"] for entry in pipeline.quarantine()}
    assert reasons == {
        2: "expected at least 29 fields, got 2",
        3: "received_bytes must be a number (int), got 'lots'",
    }


def test_gzip_is_detected_by_magic_bytes_not_the_name(pipeline: Pipeline) -> None:
    lines = "\n".join(capture_line(f"e{i}") for i in range(3)) + "\n"
    key = pipeline.put("h/pod/2026/11/30/10/no-extension", gzipped(lines.encode()))

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert [row["event_id"] for row in pipeline.rows()] == ["e0", "e1", "e2"]


def test_base64_payloads_are_decoded_and_undecodable_ones_never_reach_curated_as_text(pipeline: Pipeline) -> None:
    lines = [
        capture_line("text", output=base64_output("réponse: write to bob@example.com".encode())),
        capture_line("binary", output=base64_output(b"\xff\xfe\x00binary")),
        capture_line("broken", output={"mode": "OUTPUT", "data": "not*base64!", "encoding": "BASE64"}),
    ]
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", ("\n".join(lines) + "\n").encode())

    pipeline.run(key)

    rows = {row["event_id"]: row for row in pipeline.rows()}
    assert rows["text"]["output_text"] == "réponse: write to [REDACTED:email]"
    assert rows["text"]["decode_error"] is None
    # No text at all for what cannot be decoded (and so redacted); the raw line goes to the quarantine.
    assert rows["binary"]["output_text"] is None
    assert rows["binary"]["decode_error"].startswith("output: BASE64 payload is not text")
    assert rows["broken"]["output_text"] is None
    assert rows["broken"]["decode_error"] == "output: invalid BASE64"
    reasons = {entry["line_number"]: entry["reason"] for entry in pipeline.quarantine()}
    assert reasons == {
        2: "payload not decodable (output); its text is left out of the curated table",
        3: "payload not decodable (output); its text is left out of the curated table",
    }


def test_sidecar_truncation_flag_and_cut_base64_are_supported(pipeline: Pipeline) -> None:
    cut = base64.b64encode(b"complete words and a cut wo")[:-3].decode()
    output = {"mode": "OUTPUT", "data": cut, "encoding": "BASE64", "truncated": True}
    key = pipeline.put("h/pod/2026/11/30/10/x.jsonl", capture_line("cut", output=output).encode())

    pipeline.run(key)

    [row] = pipeline.rows()
    assert (row["input_truncated"], row["output_truncated"]) == (False, True)
    assert row["output_text"] == "complete words and a cut"
    assert row["decode_error"] is None


def test_huge_lines_of_several_megabytes(pipeline: Pipeline) -> None:
    payload = ("word " * 1_400_000).encode()  # 7 MB of text, 9.3 MB as BASE64
    lines = [
        capture_line("small-1"),
        capture_line("huge", output=base64_output(payload)),
        capture_line("small-2"),
    ]
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", ("\n".join(lines) + "\n").encode())

    assert pipeline.run(key) == {"batchItemFailures": []}

    rows = {row["event_id"]: row for row in pipeline.rows()}
    assert set(rows) == {"small-1", "huge", "small-2"}
    assert rows["huge"]["output_text"] == payload.decode()


def test_a_truncated_last_line_is_quarantined_and_the_rest_lands(pipeline: Pipeline) -> None:
    text = "\n".join(capture_line(f"e{i}") for i in range(3))
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", text[:-20].encode())

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert [row["event_id"] for row in pipeline.rows()] == ["e0", "e1"]
    [entry] = pipeline.quarantine()
    assert entry["line_number"] == 3
    assert entry["reason"].startswith("invalid JSON")
    assert entry["raw"] == text.splitlines()[2][:-20]


def test_a_gzip_object_cut_short_keeps_its_complete_lines(pipeline: Pipeline) -> None:
    text = "\n".join(capture_line(f"e{i}", input_text="x" * 5000) for i in range(200)) + "\n"
    compressed = gzipped(text.encode())
    key = pipeline.put("h/pod/2026/11/30/10/x.jsonl.gz", compressed[: len(compressed) // 2])

    assert pipeline.run(key) == {"batchItemFailures": []}

    landed = len(pipeline.rows())
    assert 0 < landed < 200
    reasons = [entry["reason"] for entry in pipeline.quarantine()]
    assert reasons[-1].startswith("gzip stream ends early")


def test_good_and_bad_lines_mixed(pipeline: Pipeline) -> None:
    lines = [
        capture_line("good-1"),
        "{not json at all, mail eve@example.com",
        "",
        '["an", "array"]',
        json.dumps({"eventMetadata": {"eventId": "no-capture-data"}}),
        capture_line("good-2"),
        json.dumps({"captureData": {"endpointInput": {"data": {"inline": "object"}, "encoding": "JSON"}}}),
    ]
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", "\n".join(lines).encode())

    assert pipeline.run(key) == {"batchItemFailures": []}

    rows = pipeline.rows()
    assert [row["event_id"] for row in rows] == ["good-1", "good-2", None]
    assert rows[2]["input_text"] == '{"inline": "object"}'
    quarantine = pipeline.quarantine()
    assert [(entry["line_number"], entry["reason"].split(":")[0]) for entry in quarantine] == [
        (2, "invalid JSON"),
        (4, "a capture line must be a JSON object, got list"),
        (5, "not a capture record"),
    ]
    assert quarantine[0]["raw"] == "{not json at all, mail [REDACTED:email]"
    assert {entry["source_key"] for entry in quarantine} == {key}
    assert [key.split("/")[:2] for key in pipeline.keys("quarantine/")] == [["quarantine", "tier=sme"]]


def test_a_line_that_is_not_utf8_is_quarantined(pipeline: Pipeline) -> None:
    bad = capture_line("bad", input_text="caf\u00e9").encode().replace(b"\\u00e9", b"\xe9")
    lines = [capture_line("good-1").encode(), bad, capture_line("good-2").encode()]
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", b"\n".join(lines))

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert [row["event_id"] for row in pipeline.rows()] == ["good-1", "good-2"]
    [entry] = pipeline.quarantine()
    assert entry["line_number"] == 2 and entry["reason"].startswith("not UTF-8 text")
    assert "caf\ufffd" in entry["raw"]


def test_empty_object_writes_nothing_and_succeeds(pipeline: Pipeline) -> None:
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/empty.jsonl", b"")

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert pipeline.keys("curated/") == [] and pipeline.keys("quarantine/") == []


@pytest.mark.parametrize(
    "key",
    [
        "unrelated/readme.txt",
        "h/alb/AWSLogs/123456789012/ELBAccessLogTestFile",
        "curated/tier=sme/dt=2026-11-30/hour=10/part-0.parquet",
        "quarantine/h/sme/x.jsonl",
    ],
)
def test_unknown_and_own_output_keys_are_acknowledged_without_output(
    pipeline: Pipeline, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline.put(key, capture_line("e").encode())

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert pipeline.keys() == [key]  # nothing written
    logs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert any(log.get("message") == "object skipped" and log["key"] == key for log in logs)
    assert any(log.get("SkippedObjects") == 1 for log in logs)


def test_s3_test_event_is_acknowledged(pipeline: Pipeline) -> None:
    from handler import handler

    body = json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": pipeline.bucket})

    assert handler(sqs_event(body), None) == {"batchItemFailures": []}


def test_url_encoded_keys_with_spaces_and_plus(pipeline: Pipeline) -> None:
    key = pipeline.put("h/sme/my endpoint/a+b/2026/11/30/10/x y.jsonl", capture_line("e").encode())

    assert pipeline.run(key) == {"batchItemFailures": []}

    [row] = pipeline.rows()
    assert row["source_key"] == key


def test_reprocessing_replaces_instead_of_duplicating(pipeline: Pipeline) -> None:
    lines = [capture_line("a", time="2026-11-30T10:59:59Z"), capture_line("b", time="2026-11-30T11:00:00Z")]
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", ("\n".join(lines) + "\n").encode())

    pipeline.run(key)
    first = pipeline.keys("curated/")
    pipeline.run(key)

    assert pipeline.keys("curated/") == first
    assert len(first) == 2  # records spanning two hours: one file per hour
    assert [key.split("/part-")[0] for key in first] == [
        "curated/tier=sme/dt=2026-11-30/hour=10",
        "curated/tier=sme/dt=2026-11-30/hour=11",
    ]
    assert len({key.split("/part-")[1] for key in first}) == 1  # same name: derived from the source
    assert sorted(row["event_id"] for row in pipeline.rows()) == ["a", "b"]


def test_a_missing_object_fails_only_its_message(pipeline: Pipeline) -> None:
    from handler import handler

    good = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", capture_line("e").encode())
    event = sqs_event(
        s3_notification(pipeline.bucket, good),
        s3_notification(pipeline.bucket, "h/sme/ep/v/2026/11/30/10/gone.jsonl"),
        "not an S3 notification",
    )

    assert handler(event, None) == {"batchItemFailures": [{"itemIdentifier": "msg-1"}, {"itemIdentifier": "msg-2"}]}
    assert [row["event_id"] for row in pipeline.rows()] == ["e"]


def test_a_write_failure_fails_the_message_and_leaves_no_temp_files(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", capture_line("e").encode())
    monkeypatch.setenv("OUTPUT_BUCKET", "bucket-that-does-not-exist")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    assert pipeline.run(key) == {"batchItemFailures": [{"itemIdentifier": "msg-0"}]}
    assert list(tmp_path.iterdir()) == []


def test_many_chunks_keep_their_order_and_line_numbers(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    from capture_core import outputs, processor

    # Tiny chunks and row groups: the parallel parsers and the row-group buffer both get work.
    monkeypatch.setattr(processor, "CHUNK_BYTES", 2_000)
    monkeypatch.setattr(outputs, "ROW_GROUP_ROWS", 7)
    lines = [capture_line(f"e{i:03d}") for i in range(120)]
    lines[77] = "broken {"
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", "\n".join(lines).encode())

    assert pipeline.run(key) == {"batchItemFailures": []}

    [output] = pipeline.keys("curated/")
    assert pipeline.table(output).num_rows == 119
    assert [row["event_id"] for row in pipeline.rows()] == [f"e{i:03d}" for i in range(120) if i != 77]
    assert [entry["line_number"] for entry in pipeline.quarantine()] == [78]


def test_a_line_over_the_size_limit_is_quarantined_by_its_prefix(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    from capture_core import outputs, processor

    monkeypatch.setattr(processor, "CHUNK_BYTES", 1_000)
    monkeypatch.setattr(processor, "MAX_LINE_BYTES", 5_000)
    monkeypatch.setattr(outputs, "QUARANTINE_RAW_LIMIT", 100)
    # Longer than one 1 MiB read: the limit is enforced on what is buffered without a newline.
    lines = [capture_line("before"), capture_line("huge", input_text="x" * 3_000_000), capture_line("after")]
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", "\n".join(lines).encode())

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert [row["event_id"] for row in pipeline.rows()] == ["before", "after"]
    [entry] = pipeline.quarantine()
    assert (entry["line_number"], entry["reason"]) == (2, "line longer than 5000 bytes; skipped")
    assert entry["raw_truncated"] is True and entry["raw"] == lines[1][:100]


def test_concatenated_gzip_members_are_one_object(pipeline: Pipeline) -> None:
    first, second = (gzipped((capture_line(name) + "\n").encode()) for name in ("m1", "m2"))
    key = pipeline.put("h/pod/2026/11/30/10/x.jsonl.gz", first + second)

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert [row["event_id"] for row in pipeline.rows()] == ["m1", "m2"]


def test_output_bucket_and_prefixes_are_configurable(pipeline: Pipeline, s3, monkeypatch: pytest.MonkeyPatch) -> None:
    s3.create_bucket(Bucket=f"{pipeline.bucket}-out")
    monkeypatch.setenv("OUTPUT_BUCKET", f"{pipeline.bucket}-out")
    monkeypatch.setenv("OUTPUT_PREFIX", "parquet/")
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", capture_line("e").encode())

    pipeline.run(key)

    [output] = Pipeline(s3, f"{pipeline.bucket}-out").keys()
    assert output.startswith("parquet/tier=sme/dt=2026-11-30/hour=10/")


def test_outputs_are_written_under_the_named_key(
    pipeline: Pipeline, s3, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture bucket's default may be SSE-S3 (ALB access logs): curated data and the quarantine still go
    under the capture key, named in each upload (what the bucket policy insists on)."""
    import boto3

    key_arn = boto3.client("kms", endpoint_url=moto_endpoint).create_key()["KeyMetadata"]["Arn"]
    monkeypatch.setenv("OUTPUT_KMS_KEY_ID", key_arn)
    source = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", (capture_line("e") + "\nnot json\n").encode())

    pipeline.run(source)

    outputs = pipeline.keys("curated/") + pipeline.keys("quarantine/")
    assert len(outputs) == 2
    for key in outputs:
        head = s3.head_object(Bucket=pipeline.bucket, Key=key)
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", key_arn), key


def test_redaction_counts_are_logged_and_emitted_as_emf(pipeline: Pipeline, capsys) -> None:
    prompt = "mail ann@example.org, call 415-555-0100, key AKIAIOSFODNN7EXAMPLE"
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", capture_line("e", input_text=prompt).encode())

    pipeline.run(key)

    [row] = pipeline.rows()
    assert row["input_text"] == ("mail [REDACTED:email], call [REDACTED:phone], key [REDACTED:access_token]")
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    [emf] = [doc for doc in documents if "_aws" in doc]
    assert emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Pipeline", "Tier"]]
    assert emf["Pipeline"] == os.environ.get("METRICS_PIPELINE", "capture-processor")
    assert (emf["Tier"], emf["Records"], emf["FilesWritten"], emf["QuarantinedLines"]) == ("sme", 1, 1, 0)
    assert (emf["Redactions_email"], emf["Redactions_phone"], emf["Redactions_access_token"]) == (1, 1, 1)
    assert "ann@example.org" not in json.dumps(documents)


def test_redaction_can_be_narrowed_or_switched_off(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = "mail ann@example.org, call 415-555-0100"
    key = pipeline.put("h/sme/ep/v/2026/11/30/10/x.jsonl", capture_line("e", input_text=prompt).encode())

    monkeypatch.setenv("REDACT", "phone")
    pipeline.run(key)
    assert pipeline.rows()[0]["input_text"] == "mail ann@example.org, call [REDACTED:phone]"

    monkeypatch.setenv("REDACT", "none")
    pipeline.run(key)
    assert pipeline.rows()[0]["input_text"] == prompt


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("REDACT", "email,ssn", "REDACT has unknown rule(s) ssn"),
        ("REDACT", "", "REDACT is empty"),
        ("OUTPUT_PREFIX", "curated", "OUTPUT_PREFIX must be a non-empty key prefix ending in '/'"),
        ("QUARANTINE_PREFIX", "curated/bad/", "must not contain each other"),
        ("OUTPUT_BUCKET", "Not_A_Bucket", "OUTPUT_BUCKET must be an S3 bucket name"),
        ("OUTPUT_KMS_KEY_ID", "alias/capture", "OUTPUT_KMS_KEY_ID must be a KMS key ARN or alias ARN"),
    ],
)
def test_bad_settings_fail_the_invocation_with_a_clear_error(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    from capture_core.settings import ConfigurationError

    monkeypatch.setenv(name, value)

    with pytest.raises(ConfigurationError, match=re.escape(message)):
        pipeline.run("h/sme/x.jsonl")

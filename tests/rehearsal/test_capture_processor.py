"""Rehearsal of the capture processor Lambda, fed the way the templates wire it: the sidecar's objects and a
seeded one raise S3 notifications (the templates' `Custom::S3BucketNotifications`, installed in moto) into the
queue; the event source mapping's part (ReceiveMessage, DeleteMessage of what succeeded) runs under the
function's role, and so does the handler: the staged asset of cdk.out (exactly the code the template deploys) as
a process of its own, with the function's environment from the template.

Proves: the function's role allows what the handler really does (GetObject of captures, PutObject of curated and
quarantine objects through boto3's transfer manager) and the queue calls of its event source; a handler pointed
at another prefix is refused and reports the message as failed. Cannot prove (docs/rehearsal.md): the
kms:Decrypt/GenerateDataKey S3 makes for it (moto's evaluator on the key's ARN instead) and their conditions,
the CloudWatch Logs calls (moto checks logs actions only against ``*``), the queue policy, the Lambda service's
own use of the role (trust)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.rehearsal.conftest import SidecarBatch, base_environment, record_timing
from tests.support.rehearsal import FunctionRuntime, Rehearsal, function_runtimes
from tests.support.synth import Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

BAD_LINE = b"{not json at all, write to jane.doe@example.com"


@pytest.fixture(scope="module")
def processor(rehearsal: Rehearsal) -> FunctionRuntime:
    """The function fed from a queue by an event source mapping (the capture processor)."""
    [function] = [f for f in function_runtimes(rehearsal.resolver) if f.queue_arns]
    return function


def invoke(rehearsal: Rehearsal, function: FunctionRuntime, assembly: Assembly, event: dict[str, Any],
           workdir: Path, **overrides: str) -> tuple[dict[str, Any], str]:
    """One invocation as Lambda makes it: the function's folder as the working directory and on sys.path, its
    environment, its role's credentials. The handler's answer and what it logged."""
    workdir.mkdir(parents=True, exist_ok=True)
    module, _, name = function.handler.rpartition(".")
    answer = workdir / "answer.json"
    program = (f"import json, sys\nfrom {module} import {name}\n"
               f"open(sys.argv[1], 'w').write(json.dumps({name}(json.load(sys.stdin), None)))\n")
    env = base_environment(workdir)
    env.update(function.environment)
    env.update(overrides)
    env.update(rehearsal.environment(rehearsal.credentials(function.role_arn)))
    env["AWS_LAMBDA_FUNCTION_NAME"] = function.logical_id
    result = subprocess.run([sys.executable, "-c", program, str(answer)], input=json.dumps(event), text=True,
                            cwd=function.code_folder(assembly.directory), env=env, capture_output=True, timeout=120,
                            check=False)
    assert result.returncode == 0, f"the handler crashed:\n{result.stdout}\n{result.stderr}"
    return json.loads(answer.read_text()), result.stdout + result.stderr


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    return {"Records": [{"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
                         "attributes": m.get("Attributes", {}), "messageAttributes": {}, "md5OfBody": m["MD5OfBody"],
                         "eventSource": "aws:sqs", "eventSourceARN": queue_arn, "awsRegion": region}
                        for m in messages]}


def announced_keys(message: dict[str, Any]) -> set[str]:
    from urllib.parse import unquote_plus

    body = json.loads(message["Body"])
    return {unquote_plus(record["s3"]["object"]["key"]) for record in body.get("Records", [])}


@pytest.fixture(scope="module")
def processed(rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, sidecar_batch: SidecarBatch,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    started = time.monotonic()
    s3 = rehearsal.client("s3")
    first_record = s3.get_object(Bucket=sidecar_batch.bucket, Key=sidecar_batch.keys[0])["Body"].read().splitlines()[0]
    seeded = sidecar_batch.keys[0].rsplit("/", 1)[0] + "/seeded-with-a-bad-line.jsonl"
    s3.put_object(Bucket=sidecar_batch.bucket, Key=seeded, Body=first_record + b"\n" + BAD_LINE + b"\n")
    expected = {*sidecar_batch.keys, seeded}

    credentials = rehearsal.credentials(processor.role_arn)
    sqs = rehearsal.client("sqs", credentials)
    [queue_arn] = processor.queue_arns
    # Lambda's event source mapping knows the queue by its ARN and never calls GetQueueUrl (which moto would check
    # against resource "*": moto/sqs/responses.py, _determine_resource reads a QueueUrl the call does not have).
    queue_url = rehearsal.created.queues[queue_arn]
    answers, logs, seen = [], [], set()
    deadline = time.monotonic() + 60  # a safety timeout, not an expectation
    while not expected <= seen and time.monotonic() < deadline:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                       AttributeNames=["All"]).get("Messages", [])
        if not messages:
            continue
        # The per-object Parquet path under the role, with moto enforcing it; the Iceberg path (whose Glue calls moto
        # can only check against resource "*") is rehearsed by test_the_iceberg_tables_*, below.
        answer, log = invoke(rehearsal, processor, assembly, sqs_event(messages, queue_arn, rehearsal.region),
                             tmp_path_factory.mktemp("lambda"), CURATED_OUTPUT="parquet")
        answers.append(answer)
        logs.append(log)
        failed = {item["itemIdentifier"] for item in answer["batchItemFailures"]}
        for message in messages:
            seen |= announced_keys(message)
            if message["MessageId"] not in failed:  # ReportBatchItemFailures: only the successes are deleted
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    record_timing("capture processor: notifications, invocations", time.monotonic() - started)
    return {"expected": expected, "seen": seen, "answers": answers, "logs": "\n".join(logs), "seeded": seeded}


def keys(rehearsal: Rehearsal, bucket: str, prefix: str) -> list[str]:
    pages = rehearsal.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def test_every_capture_object_is_announced_and_processed(processed: dict[str, Any]) -> None:
    assert processed["expected"] <= processed["seen"], "S3 notifications did not reach the processor's queue"
    assert all(answer == {"batchItemFailures": []} for answer in processed["answers"]), processed["logs"]


def test_curated_rows_are_written_under_its_role_and_redacted(
    rehearsal: Rehearsal, processor: FunctionRuntime, sidecar_batch: SidecarBatch, processed: dict[str, Any]
) -> None:
    bucket = sidecar_batch.bucket
    curated = keys(rehearsal, bucket, processor.environment["OUTPUT_PREFIX"])
    assert curated and all(key.endswith(".parquet") for key in curated)
    s3 = rehearsal.client("s3")
    # The portable sidecar's rows (the seeded object is in its prefix): the gateway entry's objects announce
    # themselves to the same queue and are curated too when test_gateway_entry.py ran first.
    rows = [row for key in curated
            for row in pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read())).to_pylist()
            if row["source_key"].startswith(sidecar_batch.prefix)]
    assert len(rows) == sidecar_batch.records + 1  # the sidecar's records and the seeded object's good line
    assert {row["source_key"] for row in rows} == processed["expected"]
    assert all("jane.doe@example.com" not in (row["input_text"] or "") for row in rows)
    assert all("[REDACTED:email]" in row["input_text"] for row in rows)


def test_the_bad_line_is_quarantined_under_its_role(
    rehearsal: Rehearsal, processor: FunctionRuntime, sidecar_batch: SidecarBatch, processed: dict[str, Any]
) -> None:
    s3 = rehearsal.client("s3")
    # (the seeded object's entry: test_tables_retention.py quarantines a line of its own in the same prefix)
    [entry] = [entry for key in keys(rehearsal, sidecar_batch.bucket, processor.environment["QUARANTINE_PREFIX"])
               for line in s3.get_object(Bucket=sidecar_batch.bucket, Key=key)["Body"].iter_lines()
               for entry in [json.loads(line)] if entry["source_key"] == processed["seeded"]]
    assert entry["line_number"] == 2
    assert "jane.doe@example.com" not in entry["raw"]


def test_its_outputs_are_encrypted_and_its_role_allows_the_kms_calls_s3_makes(
    rehearsal: Rehearsal, processor: FunctionRuntime, sidecar_batch: SidecarBatch, processed: dict[str, Any]
) -> None:
    s3 = rehearsal.client("s3")
    outputs = [*keys(rehearsal, sidecar_batch.bucket, processor.environment["OUTPUT_PREFIX"]),
               *keys(rehearsal, sidecar_batch.bucket, processor.environment["QUARANTINE_PREFIX"])]
    key_ids = {s3.head_object(Bucket=sidecar_batch.bucket, Key=key).get("SSEKMSKeyId") for key in outputs}
    [key_arn] = key_ids  # the bucket's default key: moto applied it, without calling KMS
    assert key_arn in rehearsal.created.keys
    # Reading the sidecar's SSE-KMS objects and writing new ones: the calls S3 makes to KMS for the function.
    assert rehearsal.identity_allows(processor.role_arn, "kms:Decrypt", key_arn)
    assert rehearsal.identity_allows(processor.role_arn, "kms:GenerateDataKey", key_arn)


def test_a_processor_writing_elsewhere_is_refused_and_reports_the_message(
    rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, sidecar_batch: SidecarBatch,
    processed: dict[str, Any], tmp_path: Path
) -> None:
    """The negative rehearsal: OUTPUT_PREFIX rewritten to a prefix the function's role does not grant."""
    record = {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
              "s3": {"bucket": {"name": sidecar_batch.bucket}, "object": {"key": processed["seeded"]}}}
    message = {"MessageId": "refused-1", "ReceiptHandle": "none", "Body": json.dumps({"Records": [record]}),
               "MD5OfBody": ""}
    answer, log = invoke(rehearsal, processor, assembly, sqs_event([message], processor.queue_arns[0],
                                                                   rehearsal.region), tmp_path,
                         OUTPUT_PREFIX="published/", CURATED_OUTPUT="parquet")
    assert answer == {"batchItemFailures": [{"itemIdentifier": "refused-1"}]}, log
    assert "AccessDenied" in log
    assert keys(rehearsal, sidecar_batch.bucket, "published/") == []


def test_an_event_of_a_versioned_bucket_is_read_by_version_under_its_role(
    rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, sidecar_batch: SidecarBatch,
    processed: dict[str, Any], tmp_path: Path
) -> None:
    """S3's notifications for a versioned bucket carry the object's versionId (moto's do not): the handler then
    reads that version, s3:GetObjectVersion in IAM, which its role must allow as well."""
    version = rehearsal.client("s3").head_object(Bucket=sidecar_batch.bucket, Key=processed["seeded"])["VersionId"]
    record = {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
              "s3": {"bucket": {"name": sidecar_batch.bucket},
                     "object": {"key": processed["seeded"], "versionId": version}}}
    message = {"MessageId": "versioned-1", "ReceiptHandle": "none", "Body": json.dumps({"Records": [record]}),
               "MD5OfBody": ""}
    offset = rehearsal.server.log_offset()
    answer, log = invoke(rehearsal, processor, assembly, sqs_event([message], processor.queue_arns[0],
                                                                   rehearsal.region), tmp_path,
                         CURATED_OUTPUT="parquet")
    assert answer == {"batchItemFailures": []}, log
    reads = [(target, status) for method, target, status in rehearsal.server.requests_since(offset)
             if method == "GET" and f"versionId={version}" in target]
    assert reads and all(status == 200 for _, status in reads), reads


# -- the Iceberg tables: the processor's appends, and the grants moto cannot check itself ---------------------------
def test_the_iceberg_tables_get_the_rows_and_the_role_allows_every_catalog_and_object_call(
    rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, sidecar_batch: SidecarBatch,
    processed: dict[str, Any], tmp_path: Path
) -> None:
    """The template's settings (CURATED_OUTPUT=both, the table names) drive a real append through pyiceberg's Glue
    catalog. moto checks Glue calls against resource "*" only (tests/support/rehearsal.py), so the invocation runs
    with enforcement paused and the grants are checked in moto's place with its own evaluator: every Glue action the
    sink calls on the catalog, the database and each table, and every object the append wrote."""
    env = processor.environment
    assert env["CURATED_OUTPUT"] == "both"
    database, records = env["ICEBERG_DATABASE"], env["ICEBERG_CAPTURE_TABLE"]
    glue = rehearsal.client("glue")
    if database not in {db["Name"] for db in glue.get_databases()["DatabaseList"]}:  # (test_tables_retention.py's)
        glue.create_database(DatabaseInput={"Name": database})
    admin = {**base_environment(tmp_path), **rehearsal.environment(rehearsal.admin)}
    created = subprocess.run(
        [sys.executable, "-m", "hyperpod_inference_iac.capture_table_ops", "create", "--database", database,
         "--bucket", sidecar_batch.bucket], env=admin, capture_output=True, text=True, timeout=120, check=False)
    assert created.returncode == 0, created.stderr
    record = {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
              "s3": {"bucket": {"name": sidecar_batch.bucket}, "object": {"key": sidecar_batch.keys[0]}}}
    message = {"MessageId": "iceberg-1", "ReceiptHandle": "none", "Body": json.dumps({"Records": [record]}),
               "MD5OfBody": ""}
    with rehearsal.server.enforcement_paused():
        answer, log = invoke(rehearsal, processor, assembly, sqs_event([message], processor.queue_arns[0],
                                                                       rehearsal.region), tmp_path / "lambda")
    assert answer == {"batchItemFailures": []}, log
    assert '"IcebergRowsAppended": 0' not in log and '"IcebergCommits": 1' in log, log
    arn = f"arn:aws:glue:{rehearsal.region}:{rehearsal.account}"
    for action in ("glue:GetTable", "glue:UpdateTable"):
        for resource in (f"{arn}:catalog", f"{arn}:database/{database}", f"{arn}:table/{database}/{records}"):
            assert rehearsal.identity_allows(processor.role_arn, action, resource), (action, resource)
    written = keys(rehearsal, sidecar_batch.bucket, "curated-iceberg/")
    assert any(key.endswith(".parquet") for key in written) and any("/metadata/" in key for key in written), written
    for key in written:
        assert rehearsal.identity_allows(processor.role_arn, "s3:PutObject",
                                         f"arn:aws:s3:::{sidecar_batch.bucket}/{key}"), key
    # ... and nothing of another table or database.
    assert not rehearsal.identity_allows(processor.role_arn, "glue:UpdateTable", f"{arn}:table/{database}/other")
    assert not rehearsal.identity_allows(processor.role_arn, "glue:UpdateTable", f"{arn}:table/other/{records}")

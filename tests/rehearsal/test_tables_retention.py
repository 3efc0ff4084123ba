"""Rehearsal of the capture tables' daily retention run: the capture processor's function (the staged asset in
cdk.out) invoked with CaptureTables' EventBridge rule's own ``Input`` (``captureTablesRetention``), under the
function's synthesized role, with its environment from the template (the tables, ``OUTPUT_KMS_KEY_ID``,
``AUDIT_TRAIL_BUCKET``): each table's retention delete (pyiceberg through Glue), its audit record, and the audit
trail's links and daily manifest.

moto authorizes Glue against resource ``*`` only, so every boto3 call of the run is decided in its own process by
`CallGate` (S3 and Glue on the resources each call names), enforcement paused for the run; the S3 requests moto
logged are judged against the role once more. Proves: the role allows what a retention run really calls, in the
capture bucket and the trail bucket; pointed at another bucket it fails naming the call. Cannot prove: the trail
bucket's Object Lock and bucket policy (moto grants nothing through a bucket policy), the conditions of the grants,
EventBridge's invocation (trust).

Rows older than the retention are seeded as the platform makes them: raw capture objects (SageMaker's key layout
under the portable sidecar's ``CAPTURE_S3_URI``, a deployment folder of their own) with ``inferenceTime``s older
than the rule's ``olderThanDays`` and younger ones, curated by the processor's own handler under its role into both
layouts and the quarantine. The run then deletes the old rows from the tables (current snapshot and every
retained snapshot: the snapshots that held them are expired), keeps the young ones, lists in its audit record every
table file it left unreferenced, and chains its records and the manifest into a trail that ``verify-trail`` finds
intact. The object places (``curated/``, ``quarantine/``, raw ``data-capture/``) are expired by the capture bucket's
lifecycle, which S3 runs under no role and moto does not run: the old copies there are asserted to be still present
after the run and covered by a lifecycle rule of the template (the run does not touch them). Negative: the role
without ``glue:UpdateTable`` (the delete's commit): the run fails naming it, no row is deleted and the trail is
unchanged and intact."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.capture_processor.transcripts import sidecar_record
from tests.rehearsal.conftest import (
    base_environment,
    capture_sidecars,
    invoke_gated,
    record_timing,
    s3_requests_refused,
)
from tests.rehearsal.test_capture_processor import invoke, sqs_event
from tests.support.rehearsal import (
    CallGate,
    FunctionRuntime,
    Rehearsal,
    function_runtimes,
    split_s3_uri,
    without_action,
)
from tests.support.synth import Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]


@pytest.fixture(scope="module")
def processor(rehearsal: Rehearsal) -> FunctionRuntime:
    [function] = [f for f in function_runtimes(rehearsal.resolver) if f.queue_arns]
    return function


@pytest.fixture(scope="module")
def retention_event(rehearsal: Rehearsal, processor: FunctionRuntime) -> dict[str, Any]:
    """The Input of the rule that targets the function with ``captureTablesRetention``."""
    resolver = rehearsal.resolver
    arn = resolver.get_att(processor.stack, processor.logical_id, "Arn")
    [event] = [json.loads(resolver.resolve(stack, target["Input"]))
               for stack, _, rule in resolver.resources("AWS::Events::Rule")
               for target in rule["Properties"].get("Targets", [])
               if resolver.resolve(stack, target["Arn"]) == arn
               and "captureTablesRetention" in str(target.get("Input"))]
    return event


@pytest.fixture(scope="module")
def tables(rehearsal: Rehearsal, processor: FunctionRuntime, retention_event: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tables as `capture_table_ops create` makes them (left alone when another test made them)."""
    database = processor.environment["ICEBERG_DATABASE"]
    glue = rehearsal.client("glue")
    if database not in {db["Name"] for db in glue.get_databases()["DatabaseList"]}:
        glue.create_database(DatabaseInput={"Name": database})
    admin = {**base_environment(tmp_path_factory.mktemp("tables")), **rehearsal.environment(rehearsal.admin)}
    created = subprocess.run(
        [sys.executable, "-m", "hyperpod_inference_iac.capture_table_ops", "create", "--database", database,
         "--bucket", retention_event["captureTablesRetention"]["bucket"]], env=admin, capture_output=True,
        text=True, timeout=120, check=False)
    assert created.returncode == 0, created.stderr
    return database


def gate(rehearsal: Rehearsal, processor: FunctionRuntime, record: Path, *, without: str | None = None) -> CallGate:
    """The role's policies as moto holds them; ``without``: one action taken out of every statement."""
    identity = rehearsal.role_policies(processor.role_arn.rsplit("/", 1)[-1])
    if without:
        identity = without_action(identity, without)
    return CallGate(principal_arn=processor.role_arn, account=rehearsal.account, region=rehearsal.region,
                    identity=identity, record=str(record))


AGED, YOUNG = "retention-aged", "retention-young"  # the callers of the seeded rows (older / younger than the period)


def capture_lines(name: str, caller: str, at: datetime, count: int) -> bytes:
    return "".join(sidecar_record(f"{name}-{index}", (at + timedelta(minutes=index)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                  caller, f"question {index}", ["An ", "answer."]) + "\n"
                   for index in range(count)).encode()


def table_ops(rehearsal: Rehearsal, workdir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m hyperpod_inference_iac.capture_table_ops`` as the admin (what the test reads, not the runtime)."""
    env = {**base_environment(workdir), **rehearsal.environment(rehearsal.admin)}
    return subprocess.run([sys.executable, "-m", "hyperpod_inference_iac.capture_table_ops", *argv], env=env,
                          capture_output=True, text=True, timeout=300, check=False, cwd=workdir)


def verify_caller(rehearsal: Rehearsal, workdir: Path, database: str, bucket: str, caller: str) -> dict[str, Any]:
    result = table_ops(rehearsal, workdir, "verify", "--database", database, "--bucket", bucket, "--caller-id", caller)
    assert result.returncode in (0, 1) and result.stdout.strip(), result.stdout + result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def trail_report(rehearsal: Rehearsal, workdir: Path, trail: str) -> dict[str, Any]:
    result = table_ops(rehearsal, workdir, "verify-trail", "--trail-bucket", trail)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


@pytest.fixture(scope="module")
def seeded(rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, tables: str,
           retention_event: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Rows older than the rule's period (and younger ones) as the platform makes them: raw objects in the portable
    sidecar's layout, curated by the processor's handler under its own role (CURATED_OUTPUT=both, the template's),
    one line of the aged object quarantined."""
    started = time.monotonic()
    days = retention_event["captureTablesRetention"]["olderThanDays"]
    bucket, prefix = split_s3_uri(capture_sidecars(assembly)[0].env["CAPTURE_S3_URI"])
    now = datetime.now(UTC)
    aged, young = now - timedelta(days=days + 3), now - timedelta(days=1)
    quarantined = json.dumps({"eventMetadata": {"callerId": AGED, "eventId": "aged-q"}, "note": "not a capture"})
    # The sidecar's layout under a deployment folder of its own (<capture prefix><hash>/pod/...): the portable
    # sidecar's rows, which test_capture_processor.py counts, stay its own whichever module runs first.
    segments = prefix.strip("/").split("/")
    segments[segments.index("pod") - 1] = "retention-rehearsal"
    folder = "/".join(segments)
    objects = {f"{folder}/{aged:%Y/%m/%d/%H}/retention-aged.jsonl":
               capture_lines("aged", AGED, aged, 3) + quarantined.encode() + b"\n",
               f"{folder}/{young:%Y/%m/%d/%H}/retention-young.jsonl": capture_lines("young", YOUNG, young, 2)}
    s3 = rehearsal.client("s3")
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    messages = [{"MessageId": f"seed-{index}", "ReceiptHandle": "none", "MD5OfBody": "", "Body": json.dumps(
        {"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
                      "s3": {"bucket": {"name": bucket}, "object": {"key": key}}}]})}
                for index, key in enumerate(objects)]
    workdir = tmp_path_factory.mktemp("retention-seed")
    with rehearsal.server.enforcement_paused():  # (Glue: moto checks "*" only; test_capture_processor.py says why)
        answer, log = invoke(rehearsal, processor, assembly, sqs_event(messages, processor.queue_arns[0],
                                                                       rehearsal.region), workdir / "lambda")
    assert answer == {"batchItemFailures": []}, log
    before = verify_caller(rehearsal, workdir, tables, bucket, AGED)
    record_timing("capture tables: seeding aged rows through the processor", time.monotonic() - started)
    return {"bucket": bucket, "objects": objects, "aged": aged, "young": young, "before": before, "workdir": workdir,
            "trail_before": trail_report(rehearsal, workdir, processor.environment["AUDIT_TRAIL_BUCKET"])
            if processor.environment.get("AUDIT_TRAIL_BUCKET") else None}


@pytest.fixture(scope="module")
def refused(rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, seeded: dict[str, Any],
            retention_event: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The negative, before the real run (which leaves nothing to delete): the role without ``glue:UpdateTable``."""
    workdir = tmp_path_factory.mktemp("retention-refused")
    code, log, calls = invoke_gated(rehearsal, processor, assembly,
                                    gate(rehearsal, processor, workdir / "calls", without="glue:UpdateTable"),
                                    retention_event, workdir)
    trail = processor.environment.get("AUDIT_TRAIL_BUCKET")
    return {"code": code, "log": log, "calls": calls,
            "after": verify_caller(rehearsal, workdir, processor.environment["ICEBERG_DATABASE"], seeded["bucket"],
                                   AGED),
            "trail": trail_report(rehearsal, workdir, trail) if trail else None}


@pytest.fixture(scope="module")
def retained(rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, tables: str,
             retention_event: dict[str, Any], seeded: dict[str, Any], refused: dict[str, Any],
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    started = time.monotonic()
    workdir = tmp_path_factory.mktemp("retention")
    offset = rehearsal.server.log_offset()
    code, log, calls = invoke_gated(rehearsal, processor, assembly, gate(rehearsal, processor, workdir / "calls"),
                                    retention_event, workdir)
    record_timing("capture tables: one retention run", time.monotonic() - started)
    return {"code": code, "log": log, "calls": calls, "requests": rehearsal.server.requests_since(offset),
            "workdir": workdir}


def test_a_retention_run_under_its_role_writes_each_tables_audit_and_the_trail(
    retained: dict[str, Any], processor: FunctionRuntime
) -> None:
    assert retained["code"] == 0, retained["log"]
    assert all(call["refused"] is None for call in retained["calls"]), [c for c in retained["calls"] if c["refused"]]
    logged = retained["log"]
    assert logged.count("retention applied") >= 2, logged  # capture_records and alb_access_logs
    trail = processor.environment.get("AUDIT_TRAIL_BUCKET")
    written = {call["resource"] for call in retained["calls"] if call["action"] == "s3:PutObject"}
    assert any("/audit/" in resource for resource in written), written
    if trail:
        assert any(resource.startswith(f"arn:aws:s3:::{trail}/") for resource in written), written


def applied(log: str) -> list[dict[str, Any]]:
    """The run's "retention applied" log lines (one per table, then the manifest's)."""
    return [entry for line in log.splitlines() if line.startswith("{")
            for entry in [json.loads(line)] if entry.get("message") == "retention applied"]


def table_place(report: dict[str, Any], name: str) -> dict[str, int]:
    places: dict[str, Any] = report["places"]
    return dict(places[f"table {name}"])


def table_files(report: dict[str, Any]) -> dict[str, int]:
    """The table data files (every version) holding the caller's rows, as verify lists them."""
    return {key: count for place, found in report["places"].items() if "/data/" in place and isinstance(found, dict)
            for key, count in found.items()}


def test_the_aged_rows_were_seeded_into_every_place(processor: FunctionRuntime, seeded: dict[str, Any]) -> None:
    before = seeded["before"]
    places = before["places"]
    table = processor.environment["ICEBERG_CAPTURE_TABLE"]
    assert sum(table_place(before, table).values()) >= 3, places  # (time travel: each snapshot counts them)
    assert sum(places[processor.environment["OUTPUT_PREFIX"]].values()) == 3, places
    assert sum(places[processor.environment["QUARANTINE_PREFIX"]].values()) == 1, places
    assert sum(places["data-capture/"].values()) == 4, places  # 3 captures and the quarantined line
    assert table_files(before), places


def test_retention_deletes_the_aged_rows_from_every_snapshot_and_keeps_the_young(
    rehearsal: Rehearsal, processor: FunctionRuntime, seeded: dict[str, Any], retained: dict[str, Any]
) -> None:
    assert retained["code"] == 0, retained["log"]
    database, table = processor.environment["ICEBERG_DATABASE"], processor.environment["ICEBERG_CAPTURE_TABLE"]
    after = verify_caller(rehearsal, retained["workdir"], database, seeded["bucket"], AGED)
    assert table_place(after, table) == {}, after  # no retained snapshot holds them: time travel finds nothing
    young = verify_caller(rehearsal, retained["workdir"], database, seeded["bucket"], YOUNG)
    assert sum(table_place(young, table).values()) >= 2, young
    [capture] = [entry for entry in applied(retained["log"]) if entry.get("table") == table]
    assert capture["rows_deleted"] == 3 and capture["expired_snapshots"] >= 1, capture


def test_its_audit_record_lists_every_table_file_it_left(
    rehearsal: Rehearsal, processor: FunctionRuntime, seeded: dict[str, Any], retained: dict[str, Any]
) -> None:
    """The run deletes no file (the orphan file optimizer does, docs/capture-processor.md): every data file version
    that held an aged row is in the record's ``unreferenced_files``, and no retained snapshot references it."""
    table = processor.environment["ICEBERG_CAPTURE_TABLE"]
    [capture] = [entry for entry in applied(retained["log"]) if entry.get("table") == table]
    bucket, key = split_s3_uri(capture["audit"])
    record = json.loads(rehearsal.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    assert record["rows_deleted"] == 3 and record["expired_snapshot_ids"], record
    listed = {path.removeprefix("s3://").split("/", 1)[1] for path in record["unreferenced_files"]}
    held = {name.rsplit("@", 1)[0] for name in table_files(seeded["before"])}
    assert held and held <= listed, (held, listed)


def test_its_records_and_the_manifest_chain_into_an_intact_trail(
    rehearsal: Rehearsal, processor: FunctionRuntime, seeded: dict[str, Any], retained: dict[str, Any]
) -> None:
    trail = processor.environment.get("AUDIT_TRAIL_BUCKET")
    assert trail, "the template gives the function no AUDIT_TRAIL_BUCKET"
    report = trail_report(rehearsal, retained["workdir"], trail)
    assert report["intact"], report
    # a link per table and the manifest
    assert report["links"] == seeded["trail_before"]["links"] + 3, (seeded["trail_before"], report)


def test_the_object_places_are_the_lifecycles_and_left_to_it(
    rehearsal: Rehearsal, processor: FunctionRuntime, retention_event: dict[str, Any], seeded: dict[str, Any],
    retained: dict[str, Any]
) -> None:
    """S3's lifecycle (no role: moto does not run it) expires curated/, quarantine/ and the raw captures after the
    same period: the run leaves them as they were, and the template has a rule expiring each seeded copy."""
    database = processor.environment["ICEBERG_DATABASE"]
    after = verify_caller(rehearsal, retained["workdir"], database, seeded["bucket"], AGED)
    places = [processor.environment["OUTPUT_PREFIX"], processor.environment["QUARANTINE_PREFIX"], "data-capture/"]
    for place in places:
        assert after["places"][place] == seeded["before"]["places"][place], place
    days = retention_event["captureTablesRetention"]["olderThanDays"]
    resolver = rehearsal.resolver
    [rules] = [resolver.resolve(stack, resource["Properties"]["LifecycleConfiguration"]["Rules"])
               for stack, logical_id, resource in resolver.resources("AWS::S3::Bucket")
               if resolver.name(stack, logical_id) == seeded["bucket"]]
    expiring = [rule.get("Prefix", rule.get("Filter", {}).get("Prefix", "")) for rule in rules
                if rule.get("Status") == "Enabled" and rule.get("ExpirationInDays") == days]
    for place in places:
        for key in after["places"][place] or seeded["before"]["places"][place]:
            assert any(key.startswith(prefix) for prefix in expiring), (key, expiring)


def test_without_glue_update_table_the_run_fails_naming_it_and_leaves_rows_and_trail_as_they_were(
    processor: FunctionRuntime, seeded: dict[str, Any], refused: dict[str, Any]
) -> None:
    assert refused["code"] != 0 and "glue:UpdateTable" in refused["log"], refused["log"]
    denied = [call for call in refused["calls"] if call["refused"]]
    assert denied and denied[0]["action"] == "glue:UpdateTable", denied
    table = processor.environment["ICEBERG_CAPTURE_TABLE"]
    assert table_place(refused["after"], table) == table_place(seeded["before"], table)
    if refused["trail"] is not None:
        assert refused["trail"]["intact"] and refused["trail"]["links"] == seeded["trail_before"]["links"], (
            refused["trail"], seeded["trail_before"])


def test_what_moto_logged_of_s3_was_allowed(rehearsal: Rehearsal, processor: FunctionRuntime,
                                            retained: dict[str, Any]) -> None:
    assert retained["requests"]
    refused = s3_requests_refused(rehearsal, processor.role_arn, retained["requests"])
    assert not refused, refused


def test_pointed_at_another_bucket_it_fails_naming_the_call(
    rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, retention_event: dict[str, Any],
    retained: dict[str, Any], tmp_path: Path
) -> None:
    """The negative: the rule's bucket rewritten to another bucket of the templates (its audit record is refused)."""
    bucket = retention_event["captureTablesRetention"]["bucket"]
    other = next(name for name in rehearsal.created.buckets
                 if name != bucket and name != processor.environment.get("AUDIT_TRAIL_BUCKET"))
    event = {"captureTablesRetention": {**retention_event["captureTablesRetention"], "bucket": other}}
    code, log, calls = invoke_gated(rehearsal, processor, assembly, gate(rehearsal, processor, tmp_path / "calls"),
                                    event, tmp_path / "run")
    refused = [call for call in calls if call["refused"]]
    assert code != 0 and "AccessDeniedException" in log, log
    assert refused and refused[0]["action"] == "s3:PutObject" and f":::{other}/" in refused[0]["resource"], refused

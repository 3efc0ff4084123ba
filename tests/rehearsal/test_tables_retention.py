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
EventBridge's invocation (trust). The tables hold no row older than the retention here, so no row is deleted:
the delete and snapshot expiry of old rows run against moto in tests/capture_processor, not under the role."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.rehearsal.conftest import base_environment, invoke_gated, record_timing
from tests.support.rehearsal import CallGate, FunctionRuntime, Rehearsal, function_runtimes
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


def gate(rehearsal: Rehearsal, processor: FunctionRuntime, record: Path) -> CallGate:
    return CallGate(principal_arn=processor.role_arn, account=rehearsal.account, region=rehearsal.region,
                    identity=rehearsal.role_policies(processor.role_arn.rsplit("/", 1)[-1]), record=str(record))


@pytest.fixture(scope="module")
def retained(rehearsal: Rehearsal, assembly: Assembly, processor: FunctionRuntime, tables: str,
             retention_event: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    started = time.monotonic()
    workdir = tmp_path_factory.mktemp("retention")
    offset = rehearsal.server.log_offset()
    code, log, calls = invoke_gated(rehearsal, processor, assembly, gate(rehearsal, processor, workdir / "calls"),
                                    retention_event, workdir)
    record_timing("capture tables: one retention run", time.monotonic() - started)
    return {"code": code, "log": log, "calls": calls, "requests": rehearsal.server.requests_since(offset)}


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


def test_what_moto_logged_of_s3_was_allowed(rehearsal: Rehearsal, processor: FunctionRuntime,
                                            retained: dict[str, Any]) -> None:
    method_action = {"PUT": "s3:PutObject", "GET": "s3:GetObject", "HEAD": "s3:GetObject",
                     "DELETE": "s3:DeleteObject", "POST": "s3:PutObject"}
    buckets = set(rehearsal.created.buckets)
    objects = [(method, path.split("?")[0]) for method, path, _ in retained["requests"]
               if path.split("/")[1] in buckets and path.count("/") >= 2 and path.split("?")[0].split("/", 2)[2]]
    assert objects
    for method, path in objects:
        assert rehearsal.identity_allows(processor.role_arn, method_action[method], f"arn:aws:s3:::{path[1:]}"), (
            method, path)


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

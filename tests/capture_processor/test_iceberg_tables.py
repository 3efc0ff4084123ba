"""The curated Iceberg tables through the real pyiceberg against moto's Glue and S3 on loopback: the handler appends
a batch in one commit, a redelivery or a retry after a lost commit response adds no rows, a conflicting writer is
retried then failed back to SQS, a new column evolves the table without rewriting data, and a deletion by caller
leaves no snapshot that still holds the rows, with its audit record."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pyarrow as pa
import pytest

from tests.capture_processor.conftest import Pipeline, s3_notification, sqs_event
from tests.capture_processor.transcripts import sidecar_record

DAY = "2026/11/30"


@pytest.fixture
def database(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, bucket: str) -> str:
    name = f"captures_{uuid.uuid4().hex[:8]}"
    boto3.client("glue", endpoint_url=moto_endpoint).create_database(DatabaseInput={"Name": name})
    monkeypatch.setenv("CURATED_OUTPUT", "iceberg")
    monkeypatch.setenv("ICEBERG_DATABASE", name)
    monkeypatch.setenv("ICEBERG_RETRY_BASE_MS", "1")
    monkeypatch.setenv("ICEBERG_RETRY_MAX_MS", "2")
    return name


@pytest.fixture
def catalog(database: str, moto_endpoint: str, bucket: str) -> Any:
    from capture_core.capture_tables import SPECS, create_table
    from capture_core.iceberg_sink import catalog_for
    from capture_core.settings import IcebergSettings

    catalog = catalog_for(IcebergSettings(database, commit_retries=2, retry_base_ms=1, retry_max_ms=2),
                          moto_endpoint, "us-east-1")
    create_table(catalog, database, "capture_records", SPECS["capture"], bucket)
    create_table(catalog, database, "alb_access_logs", SPECS["alb"], bucket)
    return catalog


def handler_catalog(database: str, moto_endpoint: str) -> Any:
    """The catalog the handler uses (the same cached object: its boto3 client can be instrumented)."""
    from capture_core.iceberg_sink import catalog_for
    from capture_core.settings import IcebergSettings

    return catalog_for(IcebergSettings(database, retry_base_ms=1, retry_max_ms=2), moto_endpoint, "us-east-1")


def put_capture(pipeline: Pipeline, name: str, callers: list[str], hour: str = "10") -> str:
    lines = [
        sidecar_record(f"{name}-{index}", f"2026-11-30T{hour}:{index:02d}:00Z", caller, f"question {index}",
                       ["An ", "answer."], usage=(20 + index, 30 + index))
        for index, caller in enumerate(callers)
    ]
    return pipeline.put(f"h/pod/{DAY}/{hour}/{name}.jsonl", ("\n".join(lines) + "\n").encode())


def rows(catalog: Any, database: str, table: str = "capture_records", snapshot_id: int | None = None) -> pa.Table:
    loaded = catalog.load_table((database, table))
    return loaded.scan(snapshot_id=snapshot_id).to_arrow()


def test_a_batch_is_one_commit_and_lands_only_in_the_table(
    pipeline: Pipeline, catalog: Any, database: str
) -> None:
    keys = [put_capture(pipeline, f"obj{n}", ["team-a", "team-b"]) for n in range(3)]

    assert pipeline.run(*keys) == {"batchItemFailures": []}

    table = catalog.load_table((database, "capture_records"))
    appends = [s for s in table.snapshots() if s.summary["capture.source-objects"]]
    assert len(appends) == 1  # three objects, one commit
    assert len(appends[0].summary["capture.source-objects"].split(",")) == 3
    data = table.scan().to_arrow()
    assert data.num_rows == 6
    assert sorted(set(data.column("source_key").to_pylist())) == sorted(keys)
    assert pipeline.keys("curated/") == []  # CURATED_OUTPUT=iceberg: no per-object files
    # Hidden partitioning by day: the files sit under the day's partition folder.
    files = table.inspect.files().column("file_path").to_pylist()
    assert files and all("/curated-iceberg/capture_records/data/inference_time_day=2026-11-30/" in f for f in files)


def test_both_writes_parquet_files_too(
    pipeline: Pipeline, catalog: Any, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CURATED_OUTPUT", "both")
    key = put_capture(pipeline, "dual", ["team-a"])

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert len(pipeline.rows()) == 1
    assert rows(catalog, database).num_rows == 1


def test_the_same_object_twice_adds_no_rows(pipeline: Pipeline, catalog: Any, database: str) -> None:
    first, second = put_capture(pipeline, "a", ["team-a"] * 3), put_capture(pipeline, "b", ["team-b"])

    assert pipeline.run(first) == {"batchItemFailures": []}
    # Redelivered alone, then again in a batch with a new object, then twice in one batch.
    assert pipeline.run(first) == {"batchItemFailures": []}
    assert pipeline.run(first, second) == {"batchItemFailures": []}
    assert pipeline.run(second, second) == {"batchItemFailures": []}

    data = rows(catalog, database)
    assert sorted(data.column("event_id").to_pylist()) == ["a-0", "a-1", "a-2", "b-0"]
    table = catalog.load_table((database, "capture_records"))
    assert [s.summary["capture.source-objects"] is not None for s in table.snapshots()].count(True) == 2


def test_a_retry_after_a_commit_whose_response_was_lost_adds_no_rows(
    pipeline: Pipeline, catalog: Any, database: str, moto_endpoint: str
) -> None:
    glue = handler_catalog(database, moto_endpoint).glue
    lost = {"count": 0}

    def lose_the_response(**kwargs: Any) -> None:
        if lost["count"] == 0:
            lost["count"] += 1
            raise ConnectionResetError("the response of a commit that succeeded")

    glue.meta.events.register("after-call.glue.UpdateTable", lose_the_response)
    try:
        key = put_capture(pipeline, "lost", ["team-a", "team-b"])
        # In the same invocation: the retry finds the commit in the table and appends nothing more.
        assert pipeline.run(key) == {"batchItemFailures": []}
        # And when the whole invocation is retried (SQS redelivers): nothing more either.
        assert pipeline.run(key) == {"batchItemFailures": []}
    finally:
        glue.meta.events.unregister("after-call.glue.UpdateTable", lose_the_response)

    assert lost["count"] == 1
    assert rows(catalog, database).num_rows == 2


def test_a_redelivery_older_than_the_retained_snapshots_is_found_in_the_rows(
    pipeline: Pipeline, catalog: Any, database: str
) -> None:
    key = put_capture(pipeline, "old", ["team-a"])
    assert pipeline.run(key) == {"batchItemFailures": []}
    other = put_capture(pipeline, "later", ["team-b"])
    assert pipeline.run(other) == {"batchItemFailures": []}
    table = catalog.load_table((database, "capture_records"))
    current = table.current_snapshot().snapshot_id
    table.maintenance.expire_snapshots().by_ids(
        [s.snapshot_id for s in table.snapshots() if s.snapshot_id != current]).commit()

    assert pipeline.run(key) == {"batchItemFailures": []}

    assert sorted(rows(catalog, database).column("event_id").to_pylist()) == ["later-0", "old-0"]


def test_conflicting_commits_are_retried_with_backoff(catalog: Any, database: str) -> None:
    from pyiceberg.exceptions import CommitFailedException

    from capture_core.iceberg_sink import IcebergSink, PendingObject
    from capture_core.settings import IcebergSettings

    table = catalog.load_table((database, "capture_records"))
    empty = pa.Table.from_pylist([], schema=table.schema().as_arrow())
    sleeps: list[float] = []
    settings = IcebergSettings(database, commit_retries=3, retry_base_ms=100, retry_max_ms=1000)
    sink = IcebergSink(catalog, settings, sleep=sleeps.append, jitter=lambda: 1.0)
    original, failures = type(table).append, {"left": 2}

    def append_losing_the_race(self: Any, *args: Any, **kwargs: Any) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise CommitFailedException("Requirement failed: branch main has changed")
        original(self, *args, **kwargs)

    row = {"event_id": "r", "inference_time": datetime(2026, 11, 30, tzinfo=UTC), "source_key": "k"}
    item = PendingObject("m1", "id-r", "k", datetime(2026, 11, 30, tzinfo=UTC),
                         pa.Table.from_pylist([row], schema=empty.schema))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(table), "append", append_losing_the_race)
        sink.add("capture_records", item)
        outcome = sink.commit()

    assert (outcome.commits, outcome.conflicts, outcome.failed_messages) == (1, 2, set())
    assert sleeps == [0.1, 0.2]  # exponential, capped, with "equal jitter" (here its top)
    assert rows(catalog, database).num_rows == 1


def test_commits_that_keep_conflicting_fail_the_messages_back_to_sqs(
    pipeline: Pipeline, catalog: Any, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table import Table

    monkeypatch.setenv("ICEBERG_COMMIT_RETRIES", "2")
    attempts = {"count": 0}

    def always_conflicts(self: Any, *args: Any, **kwargs: Any) -> None:
        attempts["count"] += 1
        raise CommitFailedException("Requirement failed: branch main has changed")

    monkeypatch.setattr(Table, "append", always_conflicts)
    keys = [put_capture(pipeline, "x", ["team-a"]), put_capture(pipeline, "y", ["team-b"])]

    result = pipeline.run(*keys)

    assert result == {"batchItemFailures": [{"itemIdentifier": "msg-0"}, {"itemIdentifier": "msg-1"}]}
    assert attempts["count"] == 3  # the first try and two retries
    monkeypatch.undo()
    assert rows(catalog, database).num_rows == 0


def test_a_failed_message_in_the_batch_does_not_hold_back_the_others(
    pipeline: Pipeline, catalog: Any, database: str
) -> None:
    good = put_capture(pipeline, "good", ["team-a"])
    event = sqs_event(s3_notification(pipeline.bucket, good), "not json")
    from handler import handler

    assert handler(event, None) == {"batchItemFailures": [{"itemIdentifier": "msg-1"}]}
    assert rows(catalog, database).num_rows == 1


def test_a_new_column_evolves_the_table_without_rewriting_data(pipeline: Pipeline, catalog: Any, database: str) -> None:
    from capture_core import capture_format, processor

    first = put_capture(pipeline, "before", ["team-a"])
    assert pipeline.run(first) == {"batchItemFailures": []}
    table = catalog.load_table((database, "capture_records"))
    files_before = set(table.inspect.files().column("file_path").to_pylist())

    # A newer processor with one more column (its parser fills it).
    wider = capture_format.CURATED_SCHEMA.append(pa.field("gen_ai_request_temperature", pa.float64()))
    parse = capture_format.parse_capture_chunk

    def parse_wider(*args: Any) -> Any:
        parsed = parse(*args)
        table = parsed.table.append_column("gen_ai_request_temperature",
                                           pa.array([0.7] * parsed.table.num_rows, pa.float64()))
        return type(parsed)(table, parsed.rejected, parsed.counters)

    capture = processor.TierFormat(parse_wider, wider, "inference_time", ("input_text", "output_text"))
    with pytest.MonkeyPatch.context() as newer:
        newer.setattr(processor, "_FORMATS", {tier: capture if fmt.time_column == "inference_time" else fmt
                                              for tier, fmt in processor._FORMATS.items()})
        second = put_capture(pipeline, "after", ["team-b"])
        assert pipeline.run(second) == {"batchItemFailures": []}

    table = catalog.load_table((database, "capture_records"))
    assert "gen_ai_request_temperature" in table.schema().column_names
    assert files_before <= set(table.inspect.files().column("file_path").to_pylist())  # old files untouched
    by_event = {row["event_id"]: row for row in table.scan().to_arrow().to_pylist()}
    assert by_event["before-0"]["gen_ai_request_temperature"] is None
    assert by_event["after-0"]["gen_ai_request_temperature"] == 0.7

    # And the older processor still appends to the wider table (the column is optional).
    third = put_capture(pipeline, "older", ["team-c"])
    assert pipeline.run(third) == {"batchItemFailures": []}
    assert rows(catalog, database).num_rows == 3


def test_alb_logs_land_in_their_own_table(pipeline: Pipeline, catalog: Any, database: str) -> None:
    from tests.capture_processor.test_llm_traffic import alb_line

    key = pipeline.put("alb/AWSLogs/111122223333/elasticloadbalancing/us-east-1/2026/11/30/x.log",
                       (alb_line() + "\n").encode())
    assert pipeline.run(key) == {"batchItemFailures": []}

    assert rows(catalog, database, "alb_access_logs").num_rows == 1
    assert rows(catalog, database).num_rows == 0


def run_cli(catalog: Any, *argv: str) -> list[dict[str, Any]]:
    from capture_core import capture_tables

    if argv[0] in ("delete", "expire") and "--trail-bucket" not in argv:
        argv = (*argv, "--no-trail")  # (the trail: test_trail.py)
    printed: list[dict[str, Any]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("builtins.print", lambda text, **kw: printed.append(json.loads(text)))
        assert capture_tables.main(list(argv), catalog_factory=lambda args: catalog) == 0
    return printed


def test_a_deletion_by_caller_leaves_no_snapshot_holding_the_rows(
    pipeline: Pipeline, catalog: Any, database: str, s3: Any
) -> None:
    for n in range(3):  # three commits: three snapshots that each hold some of team-a's rows
        assert pipeline.run(put_capture(pipeline, f"o{n}", ["team-a", "team-b", "team-a"])) == {
            "batchItemFailures": []}
    table = catalog.load_table((database, "capture_records"))
    history = [s.snapshot_id for s in table.snapshots()]

    [report, _everywhere] = run_cli(catalog, "delete", "--database", database, "--bucket", pipeline.bucket,
                                    "--caller-id", "team-a", "--reason", "DSR-42")

    table = catalog.load_table((database, "capture_records"))
    assert report["rows_deleted"] == 6
    assert set(table.scan().to_arrow().column("caller_id").to_pylist()) == {"team-b"}
    # Every snapshot that could hold the rows is gone: time travel finds none of them.
    assert {s.snapshot_id for s in table.snapshots()} == {report["deletion_snapshot_id"]}
    for snapshot_id in history:
        assert table.metadata.snapshot_by_id(snapshot_id) is None
    for snapshot in table.snapshots():
        assert "team-a" not in table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().column("caller_id").to_pylist()
    # The files that held them are named for the orphan file optimizer, and none is still referenced.
    live = set(table.inspect.files().column("file_path").to_pylist())
    assert report["unreferenced_files"] and not live & set(report["unreferenced_files"])
    # The audit record: who, when, what, how many, which snapshots.
    audit_key = report["audit"].removeprefix(f"s3://{pipeline.bucket}/")
    assert audit_key.startswith("audit/erasures/")
    erasure = json.loads(s3.get_object(Bucket=pipeline.bucket, Key=audit_key)["Body"].read())
    assert erasure["requested_by"].startswith("arn:aws:sts::") or erasure["requested_by"].startswith("arn:aws:iam::")
    assert erasure["predicate"] == "caller_id = 'team-a'" and erasure["reason"] == "DSR-42"
    audit = next(t for t in erasure["tables"] if t.get("table") == "capture_records")
    assert audit["rows_deleted"] == 6
    assert sorted(audit["expired_snapshot_ids"]) == sorted(history)
    assert {"table": "alb_access_logs", "applies": False} in erasure["tables"]  # no caller column there
    # A redelivery of an object whose rows were deleted is recognised as committed (its key is gone from the rows,
    # but the deletion's snapshot ancestry was expired: the processor looks at the rows, finds team-b's row).
    assert pipeline.run(f"h/pod/{DAY}/10/o0.jsonl") == {"batchItemFailures": []}
    assert rows(catalog, database).num_rows == 3


def test_delete_where_and_expire_by_age(pipeline: Pipeline, catalog: Any, database: str) -> None:
    assert pipeline.run(put_capture(pipeline, "p", ["team-a", "team-b"], hour="10")) == {"batchItemFailures": []}

    [report, _everywhere] = run_cli(catalog, "delete", "--database", database, "--bucket", pipeline.bucket,
                                    "--table", "capture",
                                    "--where", "caller_id = 'team-b' AND gen_ai_usage_input_tokens > 20")
    assert report["rows_deleted"] == 1
    assert rows(catalog, database).column("caller_id").to_pylist() == ["team-a"]

    now = datetime(2026, 11, 30, tzinfo=UTC) + timedelta(days=31)
    age = (datetime.now(UTC) - now).days + 30  # rows of 2026-11-30 are older than this many days today
    reports = run_cli(catalog, "expire", "--database", database, "--bucket", pipeline.bucket,
                      "--older-than-days", str(max(age, 0)))
    assert {r["table"]: r["rows_deleted"] for r in reports} == {"capture_records": 1, "alb_access_logs": 0}
    assert rows(catalog, database).num_rows == 0


@pytest.mark.parametrize("text", ["caller_id = team-a", "caller_id != 'a'", "caller_id = 'a' OR x = 1",
                                  "nope = 'a'", "caller_id = 'a'; DROP", ""])
def test_the_predicate_grammar_refuses_anything_else(text: str) -> None:
    from capture_core.capture_tables import PredicateError, parse_predicate

    with pytest.raises(PredicateError):
        parse_predicate(text, ["caller_id", "x"])


def test_the_predicate_grammar() -> None:
    from capture_core.capture_tables import parse_predicate

    expression = parse_predicate("caller_id = 'o''brien' and x < 5 AND y > 2.5", ["caller_id", "x", "y"])
    assert "o'brien" in repr(expression) and "LessThan" in repr(expression) and "GreaterThan" in repr(expression)


def test_the_library_command_runs_the_runtime_module(capsys: pytest.CaptureFixture[str]) -> None:
    from hyperpod_inference_iac import capture_table_ops as capture_tables

    with pytest.raises(SystemExit) as exit_info:
        capture_tables.main(["delete", "--help"])
    assert exit_info.value.code == 0
    assert "--caller-id" in capsys.readouterr().out


def test_the_scheduled_retention_deletes_old_rows_and_keeps_an_audit_record(
    pipeline: Pipeline, catalog: Any, database: str
) -> None:
    """CaptureTables' daily rule invokes the processor with {"captureTablesRetention": ...}: rows older than the
    capture policy's days go, in both tables, with one audit record each; newer rows stay."""
    assert pipeline.run(put_capture(pipeline, "old", ["team-a", "team-b"])) == {"batchItemFailures": []}
    from handler import handler

    age = (datetime.now(UTC) - datetime(2026, 11, 30, tzinfo=UTC)).days  # the rows' day, in whole days ago
    keep = {"captureTablesRetention": {"olderThanDays": age + 1, "bucket": pipeline.bucket}}
    assert handler(keep, None) == {"batchItemFailures": []}
    assert rows(catalog, database).num_rows == 2  # not older than age + 1 days: kept
    drop = {"captureTablesRetention": {"olderThanDays": max(age - 1, 1), "bucket": pipeline.bucket}}
    assert handler(drop, None) == {"batchItemFailures": []}
    assert rows(catalog, database).num_rows == 0
    audits = [k for k in pipeline.keys("audit/table-deletions/")]
    records = [json.loads(pipeline.s3.get_object(Bucket=pipeline.bucket, Key=k)["Body"].read()) for k in audits]
    assert {r["table"] for r in records} == {"capture_records", "alb_access_logs"}
    assert any(r["rows_deleted"] == 2 and r["reason"].startswith("retention") for r in records)


@pytest.mark.parametrize("request_", [{}, {"olderThanDays": 0, "bucket": "b"}, {"olderThanDays": "30", "bucket": "b"},
                                      {"olderThanDays": 30}])
def test_a_malformed_retention_request_fails_loudly(request_: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
    from handler import handler

    with pytest.raises(ValueError, match="captureTablesRetention"):
        handler({"captureTablesRetention": request_}, None)

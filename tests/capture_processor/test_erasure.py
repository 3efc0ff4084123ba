"""Erasure everywhere, tried as an auditor would: the real handler writes both layouts (CURATED_OUTPUT=both) into a
versioned bucket on moto's S3 server, with pyiceberg on moto's Glue; ``delete --caller-id`` must leave no row of the
caller in any place a copy lives (both tables and their snapshots, every version under curated/, quarantine/, the
raw objects, athena-results/), ``verify`` must say so (and say what remains before), and neither a redelivered
notification of the erasure's own rewrite nor a restored copy of an old raw object may bring the rows back."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.test_iceberg_tables import DAY, catalog, database, rows  # noqa: F401 (fixtures)
from tests.capture_processor.transcripts import sidecar_record

RAW = f"data-capture/h/pod/{DAY}/10/"


def cli(tables: Any, *argv: str) -> tuple[int, list[dict[str, Any]]]:
    """The command, in process (``delete`` without ``--trail-bucket`` runs with ``--no-trail``: the trail has tests
    of its own, test_trail.py)."""
    from capture_core import capture_tables

    if argv[0] in ("delete", "expire") and "--trail-bucket" not in argv:
        argv = (*argv, "--no-trail")
    printed: list[dict[str, Any]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("builtins.print", lambda text, **kw: None if kw.get("file") else printed.append(json.loads(text)))
        status = capture_tables.main(list(argv), catalog_factory=lambda args: tables)
    return status, printed


def capture_lines(name: str, callers: list[str], when: datetime | None = None) -> bytes:
    lines = [sidecar_record(f"{name}-{index}", (when or datetime(2026, 11, 30, 10, index, tzinfo=UTC))
                            .strftime("%Y-%m-%dT%H:%M:%SZ"), caller, f"question {index}", ["An ", "answer."])
             for index, caller in enumerate(callers)]
    return ("\n".join(lines) + "\n").encode()


# A line the processor quarantines (not a capture record) that still names its caller.
QUARANTINED = json.dumps({"eventMetadata": {"callerId": "team-a", "eventId": "q-1"}, "note": "no capture data"})


def all_versions(pipeline: Pipeline, prefix: str) -> list[bytes]:
    s3, bodies = pipeline.s3, []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=pipeline.bucket, Prefix=prefix):
        for item in page.get("Versions", []):
            body = s3.get_object(Bucket=pipeline.bucket, Key=item["Key"], VersionId=item["VersionId"])["Body"].read()
            bodies.append(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    return bodies


@pytest.fixture
def both(pipeline: Pipeline, catalog: Any, monkeypatch: pytest.MonkeyPatch) -> Pipeline:  # noqa: F811
    pipeline.s3.put_bucket_versioning(Bucket=pipeline.bucket, VersioningConfiguration={"Status": "Enabled"})
    monkeypatch.setenv("CURATED_OUTPUT", "both")
    return pipeline


def test_a_caller_is_erased_from_every_place_and_verify_says_so(
    both: Pipeline, catalog: Any, database: str  # noqa: F811
) -> None:
    pipeline = both
    plain = pipeline.put(f"{RAW}plain.jsonl", capture_lines("p", ["team-a", "team-b"]) + QUARANTINED.encode() + b"\n")
    zipped = pipeline.put(f"{RAW}zipped.jsonl.gz", gzip.compress(capture_lines("z", ["team-b", "team-a"]), mtime=0))
    assert pipeline.run(plain, zipped) == {"batchItemFailures": []}
    # The same raw key again (a new version; the older one stays noncurrent), processed again: more copies.
    pipeline.put(plain, capture_lines("p2", ["team-a", "team-b"]))
    assert pipeline.run(plain) == {"batchItemFailures": []}
    pipeline.put("athena-results/capture/q1.csv", b'"caller_id","requests"\n"team-a","3"\n')
    pipeline.put("athena-results/capture-usage/q2.csv", b'"model","requests"\n"m","3"\n')  # names nobody
    assert "team-a" in pipeline.rows("curated/").__repr__() and pipeline.quarantine()

    common = ("--database", database, "--bucket", pipeline.bucket, "--raw-prefix", "data-capture/")
    status, [before] = cli(catalog, "verify", *common, "--caller-id", "team-a")
    assert status == 1 and before["remaining"] > 0
    assert before["places"]["curated/"] and before["places"]["quarantine/"] and before["places"]["data-capture/"]
    assert before["places"]["table capture_records"] and before["places"]["athena-results/"]

    status, printed = cli(catalog, "delete", *common, "--caller-id", "team-a", "--reason", "DSR-7")
    assert status == 0
    summary = printed[-1]
    status, [after] = cli(catalog, "verify", *common, "--erasure-id", summary["erasure_id"])
    assert status == 0 and after["remaining"] == 0, after

    # Nothing of team-a in any version of any place; team-b's rows are all still there.
    for prefix in ("curated/", "quarantine/", "data-capture/", "athena-results/", "curated-iceberg/"):
        for body in all_versions(pipeline, prefix):
            assert b"team-a" not in body, prefix
    assert sorted(r["caller_id"] for r in pipeline.rows("curated/")) == ["team-b"] * 3
    assert sorted(rows(catalog, database).column("caller_id").to_pylist()) == ["team-b"] * 3
    current = pipeline.s3.get_object(Bucket=pipeline.bucket, Key=zipped)
    assert current["Metadata"]["capture-erasure"] == summary["erasure_id"]
    assert [json.loads(line)["eventMetadata"]["callerId"] for line in gzip.decompress(current["Body"].read())
            .splitlines()] == ["team-b"]  # still gzip, the other caller's line kept
    assert pipeline.keys("athena-results/") == []  # every result from before the erasure, in every version

    # The audit record lists every object touched, per place, and the tables' snapshots and purged files.
    record = json.loads(pipeline.s3.get_object(
        Bucket=pipeline.bucket, Key=summary["audit"].removeprefix(f"s3://{pipeline.bucket}/"))["Body"].read())
    touched = {place: {item["key"] for item in items} for place, items in record["objects"].items()}
    assert touched["data-capture/"] == {plain, zipped}
    assert touched["athena-results/"] == {"athena-results/capture/q1.csv", "athena-results/capture-usage/q2.csv"}
    assert len(touched["quarantine/"]) == 1 and len(touched["curated/"]) >= 2
    assert all(item["versions_deleted"] >= 1 for items in record["objects"].values() for item in items)
    table = next(t for t in record["tables"] if t["table"] == "capture_records")
    assert table["rows_deleted"] == 3 and table["unreferenced_files"] and table["versions_deleted"] >= len(
        table["unreferenced_files"])
    assert record["register_key"] == f"audit/erasure-register/{summary['erasure_id']}.json"


def test_the_register_keeps_erased_rows_from_coming_back(
    both: Pipeline, catalog: Any, database: str  # noqa: F811
) -> None:
    pipeline = both
    old = capture_lines("o", ["team-a", "team-b"]) + QUARANTINED.encode() + b"\n"
    first = pipeline.put(f"{RAW}first.jsonl", old)
    assert pipeline.run(first) == {"batchItemFailures": []}
    status, printed = cli(catalog, "delete", "--database", database, "--bucket", pipeline.bucket,
                          "--caller-id", "team-a")
    assert status == 0

    # S3 redelivers the notification of the erasure's own rewrite: skipped, nothing appended twice.
    assert pipeline.run(first) == {"batchItemFailures": []}
    # An old raw object restored from a backup under another key: team-a's rows and quarantined line are dropped.
    restored = pipeline.put(f"{RAW}restored-copy.jsonl", old)
    # New traffic of the same caller after the erasure is kept.
    later = datetime.now(UTC) + timedelta(minutes=5)
    fresh = pipeline.put(f"data-capture/h/pod/{later:%Y/%m/%d/%H}/new.jsonl", capture_lines("n", ["team-a"], later))
    assert pipeline.run(restored, fresh) == {"batchItemFailures": []}

    table = rows(catalog, database)
    pairs = sorted(zip(table.column("caller_id").to_pylist(), table.column("event_id").to_pylist(), strict=True))
    assert pairs == [("team-a", "n-0"), ("team-b", "o-1"), ("team-b", "o-1")]  # the restored copy's row too
    curated = sorted((r["caller_id"], r["event_id"]) for r in pipeline.rows("curated/"))
    assert curated == [("team-a", "n-0"), ("team-b", "o-1"), ("team-b", "o-1")]  # the restored copy's own files
    assert "team-a" not in json.dumps(pipeline.quarantine())
    status, [after] = cli(catalog, "verify", "--database", database, "--bucket", pipeline.bucket,
                          "--erasure-id", printed[-1]["erasure_id"])
    assert after["places"]["quarantine/"] == {}
    # verify reads every raw object too: the restored copy still holds the rows (a raw object is erased by an
    # erasure, not by the processor), and verify names it.
    remaining = after["places"]["data-capture/"]
    assert status == 1 and remaining and all(key.startswith(f"{restored}@") for key in remaining)


def test_a_predicate_the_lines_cannot_evaluate_is_named_not_guessed(
    both: Pipeline, catalog: Any, database: str  # noqa: F811
) -> None:
    pipeline = both
    assert pipeline.run(pipeline.put(f"{RAW}x.jsonl", capture_lines("x", ["team-a", "team-b"]))) == {
        "batchItemFailures": []}
    status, printed = cli(catalog, "delete", "--database", database, "--bucket", pipeline.bucket, "--table", "capture",
                          "--where", "gen_ai_usage_input_tokens > 20")
    assert status == 0 and printed[-1]["unevaluated_columns"] == ["gen_ai_usage_input_tokens"]
    assert printed[-1]["objects"]["data-capture/"] == 0  # raw lines left alone, not guessed at
    assert rows(catalog, database).num_rows == 0 and pipeline.rows("curated/") == []


@pytest.mark.parametrize("predicate", ["caller_id = 'a' OR 1 = 1", "caller_id = a", ""])
def test_an_erasure_outside_the_grammar_writes_nothing(
    predicate: str, both: Pipeline, catalog: Any, database: str  # noqa: F811
) -> None:
    status, printed = cli(catalog, "delete", "--database", database, "--bucket", both.bucket, "--where", predicate)
    assert status == 2 and printed == []
    assert both.keys("audit/") == []


def test_a_second_erasure_reaches_the_rows_a_first_erasure_rewrote(
    both: Pipeline, catalog: Any, database: str  # noqa: F811
) -> None:
    """A raw object an erasure rewrote still holds other callers' lines: a later erasure of one of them reads it
    again, and the processor skips each rewrite (two register entries, two ids)."""
    pipeline = both
    key = pipeline.put(f"{RAW}three.jsonl", capture_lines("t", ["team-a", "team-b", "team-c"]))
    assert pipeline.run(key) == {"batchItemFailures": []}
    common = ("--database", database, "--bucket", pipeline.bucket)
    for caller in ("team-a", "team-b"):
        status, printed = cli(catalog, "delete", *common, "--caller-id", caller)
        assert status == 0 and printed[-1]["objects"]["data-capture/"] == 1
        assert pipeline.run(key) == {"batchItemFailures": []}  # the rewrite's notification: skipped
    body = pipeline.s3.get_object(Bucket=pipeline.bucket, Key=key)["Body"].read()
    assert [json.loads(line)["eventMetadata"]["callerId"] for line in body.splitlines()] == ["team-c"]
    assert rows(catalog, database).column("caller_id").to_pylist() == ["team-c"]
    for caller in ("team-a", "team-b"):
        status, [after] = cli(catalog, "verify", *common, "--caller-id", caller)
        assert status == 0 and after["remaining"] == 0


def test_an_erasure_off_the_trail_is_refused_unless_asked_for(
    both: Pipeline, catalog: Any, database: str  # noqa: F811
) -> None:
    """``delete`` without ``--trail-bucket`` (and without ``--no-trail``) writes nothing and says why."""
    from capture_core import capture_tables

    pipeline = both
    assert pipeline.run(pipeline.put(f"{RAW}x.jsonl", capture_lines("x", ["team-a"]))) == {"batchItemFailures": []}
    for command in (["delete", "--caller-id", "team-a"], ["expire", "--older-than-days", "1"]):
        status = capture_tables.main([*command, "--database", database, "--bucket", pipeline.bucket],
                                     catalog_factory=lambda args: catalog)
        assert status == 2
    assert pipeline.keys("audit/") == [] and "team-a" in [row["caller_id"] for row in pipeline.rows("curated/")]


@pytest.mark.parametrize("refused_after", [0, 1])
def test_an_erasure_refused_half_way_is_completed_by_running_it_again(
    both: Pipeline, catalog: Any, database: str, monkeypatch: pytest.MonkeyPatch, refused_after: int  # noqa: F811
) -> None:
    """AWS refuses a purge after the tables' part committed (the role without s3:DeleteObjectVersion, a key policy):
    the rows are deleted and the older snapshots expired, but the files only they held are still there. Running the
    same request again must purge them: they were named by an earlier metadata.json's snapshots and by none of the
    current ones (found by tests/rehearsal/test_eraser.py, where a rerun left them). ``refused_after``: how many
    purges succeed before the refusal (the first data file, or none)."""
    from botocore.exceptions import ClientError

    from capture_core import erasure

    pipeline = both
    for name, callers in (("a", ["team-a", "team-b"]), ("b", ["team-b", "team-a"]), ("c", ["team-b"])):
        key = pipeline.put(f"{RAW}{name}.jsonl", capture_lines(name, callers))
        assert pipeline.run(key) == {"batchItemFailures": []}  # a snapshot per object: several data files
    common = ("--database", database, "--bucket", pipeline.bucket, "--raw-prefix", "data-capture/")
    purge = erasure.purge_key
    calls = {"n": 0}

    def refused(s3: Any, bucket: str, key: str, keep: str | None = None) -> int:
        calls["n"] += 1
        if calls["n"] > refused_after:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "s3:DeleteObjectVersion"}}, "DeleteObject")
        return purge(s3, bucket, key, keep)

    monkeypatch.setattr(erasure, "purge_key", refused)
    status, _ = cli(catalog, "delete", *common, "--caller-id", "team-a", "--reason", "DSR-8")
    assert status != 0 and calls["n"] == refused_after + 1
    status, [left] = cli(catalog, "verify", *common, "--caller-id", "team-a")
    assert status == 1 and any(place.startswith("curated-iceberg/") for place in left["places"]), left
    monkeypatch.setattr(erasure, "purge_key", purge)

    status, printed = cli(catalog, "delete", *common, "--caller-id", "team-a", "--reason", "DSR-8")
    assert status == 0
    status, [after] = cli(catalog, "verify", *common, "--erasure-id", printed[-1]["erasure_id"])
    assert status == 0 and after["remaining"] == 0, after
    for body in all_versions(pipeline, "curated-iceberg/"):
        assert b"team-a" not in body  # data files, manifests (their bounds) and manifest lists
    assert sorted(rows(catalog, database).column("caller_id").to_pylist()) == ["team-b"] * 3
    record = json.loads(pipeline.s3.get_object(
        Bucket=pipeline.bucket, Key=printed[-1]["audit"].removeprefix(f"s3://{pipeline.bucket}/"))["Body"].read())
    table = next(t for t in record["tables"] if t["table"] == "capture_records")
    assert table["earlier_files"]  # the rerun names what it purged for the refused run


def test_an_object_under_curated_that_is_not_parquet_is_named_not_skipped_and_a_folder_is_nothing(
    both: Pipeline, catalog: Any, database: str, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """`verify` and `delete` read every object under `curated/` as Parquet. A folder the S3 console made (an empty
    object) holds no row; any other object there (a JSON Lines file someone put) may hold the caller's rows that they
    can neither count nor erase: each command stops with exit status 2 naming it, no traceback (found by the
    rehearsal, where a reader's probe under `curated/` made `verify` fail with a traceback)."""
    pipeline = both
    key = pipeline.put(f"{RAW}a.jsonl", capture_lines("a", ["team-a", "team-b"]))
    assert pipeline.run(key) == {"batchItemFailures": []}
    common = ("--database", database, "--bucket", pipeline.bucket, "--raw-prefix", "data-capture/")
    pipeline.put("curated/exports/", b"")  # a console folder
    status, [before] = cli(catalog, "verify", *common, "--caller-id", "team-a")
    assert status == 1 and before["remaining"] > 0
    pipeline.put("curated/exports/team-a.jsonl", b'{"caller_id": "team-a"}\n')
    from capture_core import capture_tables

    capsys.readouterr()
    for command in (("verify",), ("delete", "--reason", "DSR-9", "--no-trail")):
        status = capture_tables.main([*command, *common, "--caller-id", "team-a"], catalog_factory=lambda args: catalog)
        out, error = capsys.readouterr()
        assert status == 2 and out == "", command
        assert "curated/exports/team-a.jsonl is not Parquet" in error and "Traceback" not in error, error

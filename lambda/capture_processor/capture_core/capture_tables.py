"""Table operations on the curated Iceberg tables: create them, delete rows on request, apply retention.

``python -m hyperpod_inference_iac.capture_table_ops`` (docs/capture-processor.md, "Deleting rows") runs these:

- ``create``: the two tables (``capture_records``, ``alb_access_logs``) from the processor's curated schemas, in the
  Glue database, at ``s3://BUCKET/curated-iceberg/TABLE/``, partitioned by ``day(time column)``; existing tables are
  left alone (a newer processor adds its columns itself, on its first append).
- ``delete --caller-id X`` or ``delete --where 'PREDICATE'``: erasure everywhere (:mod:`capture_core.erasure`): the
  erasure is registered first (the processor then drops what it covers), the matching rows are deleted from the
  tables (copy-on-write: a file with matching rows is rewritten without them), every older snapshot is expired (each
  may still hold the rows: time travel to them must find nothing), every version of the files and manifests only
  those snapshots held is deleted, and so are the rows' copies under ``curated/``, ``quarantine/``, the raw objects
  and ``athena-results/``; an audit record (who, when, what, every object touched) goes to ``audit/erasures/`` and,
  with ``--trail-bucket``, into the hash-chained trail (:mod:`capture_core.trail`).
- ``verify``: what remains of an erasure in each place, every version read (exit status 1 when anything does).
- ``verify-trail --trail-bucket B``: walks the trail's hash chain and names the first missing, reordered or broken
  link (exit status 1).
- ``expire --older-than-days N``: the retention job on the tables: the rows whose event time is older than N days
  (counted from the start of today, UTC, so whole day partitions go, a metadata-only delete) are deleted, the older
  snapshots expired, an audit record written (and a trail link with ``--trail-bucket``); the other places expire by
  the bucket's lifecycle.

PREDICATE is a small, safe grammar: ``column OP literal`` joined by ``AND``, OP one of ``=``, ``<``, ``>``; a
literal is a single-quoted string (``''`` for a quote) or a number; the column must be one of the table's.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import And, BooleanExpression, EqualTo, GreaterThan, LessThan
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform

from capture_core import alb_format, capture_format
from capture_core.erasure import UnreadableObject, sse_kms
from capture_core.predicates import PredicateError, parse_terms

WAREHOUSE_PREFIX = "curated-iceberg/"
AUDIT_PREFIX = "audit/table-deletions/"
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.format.default": "parquet",
    "write.parquet.compression-codec": "zstd",
    # A commit a minute per writer: keep the metadata folder from growing without bound.
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    "write.target-file-size-bytes": str(512 << 20),
    # pyiceberg's own retry of a conflicting commit (it reuses the data files it wrote); the processor retries
    # what outlasts it (iceberg_sink).
    "commit.retry.num-retries": "4",
    "commit.retry.min-wait-ms": "100",
    "commit.retry.max-wait-ms": "5000",
}


@dataclass(frozen=True)
class TableSpec:
    kind: str  # "capture" | "alb"
    schema: pa.Schema
    time_column: str


SPECS = {
    "capture": TableSpec("capture", capture_format.CURATED_SCHEMA, "inference_time"),
    "alb": TableSpec("alb", alb_format.CURATED_SCHEMA, "time"),
}
DEFAULT_NAMES = {"capture": "capture_records", "alb": "alb_access_logs"}


def parse_predicate(text: str, columns: Sequence[str]) -> BooleanExpression:
    """``column OP literal [AND ...]`` as a pyiceberg expression (the module docstring's grammar)."""
    expressions: list[BooleanExpression] = [
        {"=": EqualTo, "<": LessThan, ">": GreaterThan}[term.op](term.column, term.literal)
        for term in parse_terms(text, columns)]
    result = expressions[0]
    for expression in expressions[1:]:
        result = And(result, expression)
    return result


def caller_predicate(caller_id: str) -> str:
    """The grammar's text for every row of one caller."""
    return f"caller_id = '{caller_id.replace(chr(39), chr(39) * 2)}'"


def create_table(catalog: Catalog, database: str, name: str, spec: TableSpec, bucket: str,
                 prefix: str = WAREHOUSE_PREFIX, *, location: str | None = None) -> tuple[Table, bool]:
    """The table (created when missing, partitioned by the day of its time column); whether it was created.
    ``location`` overrides ``s3://BUCKET/PREFIX/NAME`` (the benchmark's local warehouse)."""
    try:
        return catalog.load_table((database, name)), False
    except NoSuchTableError:
        pass
    table = catalog.create_table(
        (database, name), schema=spec.schema, location=location or f"s3://{bucket}/{prefix}{name}",
        properties=TABLE_PROPERTIES,
    )
    with table.update_spec() as update:
        update.add_field(spec.time_column, DayTransform(), f"{spec.time_column}_day")
    return table, True


@dataclass
class DeletionRecord:
    """The audit record of one deletion, as written to ``audit/table-deletions/``."""

    table: str
    predicate: str
    requested_by: str  # STS GetCallerIdentity ARN
    started_at: str
    finished_at: str = ""
    rows_deleted: int = 0
    deletion_snapshot_id: int | None = None
    snapshot_before_deletion: int | None = None
    expired_snapshot_ids: list[int] = field(default_factory=list)
    unreferenced_files: list[str] = field(default_factory=list)
    # manifests and manifest lists only the expired snapshots referenced (a manifest keeps column bounds: a
    # caller id can be one)
    unreferenced_metadata_files: list[str] = field(default_factory=list)
    purged_files: int = 0
    reason: str = ""


def _data_files(table: Table) -> dict[int, set[str]]:
    """The live data files of every snapshot (manifests are read once each, however many snapshots share them)."""
    io = table.io
    manifest_files: dict[str, set[str]] = {}
    result = {}
    for snapshot in table.metadata.snapshots:
        files: set[str] = set()
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path not in manifest_files:
                manifest_files[manifest.manifest_path] = {
                    entry.data_file.file_path for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)
                }
            files |= manifest_files[manifest.manifest_path]
        result[snapshot.snapshot_id] = files
    return result


def _metadata_files(table: Table) -> set[str]:
    """The manifest lists and manifests the table's snapshots reference."""
    files: set[str] = set()
    for snapshot in table.metadata.snapshots:
        files.add(snapshot.manifest_list)
        files |= {manifest.manifest_path for manifest in snapshot.manifests(table.io)}
    return files


def earlier_files(table: Table) -> dict[str, set[str]]:
    """The data files that snapshots of the table's earlier metadata files (its ``metadata-log``) referenced and no
    snapshot of the current metadata references, each with the manifests and manifest lists of those expired snapshots
    that name it: files committed once and expired since. An erasure refused after its expiry (a purge AWS refused)
    leaves such files, and its own record of them is gone with the failure; a rerun finds them here. A file no metadata
    ever named (an append still in flight) is never among them, so no grace period is guessed. A metadata file, a
    manifest list or a manifest already purged is skipped."""
    from pyiceberg.serializers import FromInputFile

    io = table.io
    current_ids = {snapshot.snapshot_id for snapshot in table.metadata.snapshots}
    current_data = set().union(*_data_files(table).values())
    current_metadata = _metadata_files(table)
    named: dict[str, set[str]] = {}
    manifests_read: dict[str, set[str]] = {}
    seen: set[int] = set()
    for entry in table.metadata.metadata_log:
        try:
            earlier = FromInputFile.table_metadata(io.new_input(entry.metadata_file))
        except OSError:
            continue
        for snapshot in earlier.snapshots:
            if snapshot.snapshot_id in current_ids or snapshot.snapshot_id in seen:
                continue
            seen.add(snapshot.snapshot_id)
            try:
                manifests = snapshot.manifests(io)
            except OSError:
                continue
            for manifest in manifests:
                path = manifest.manifest_path
                if path not in manifests_read:
                    try:
                        manifests_read[path] = {item.data_file.file_path
                                                for item in manifest.fetch_manifest_entry(io, discard_deleted=True)}
                    except OSError:
                        manifests_read[path] = set()
                for data_file in manifests_read[path] - current_data:
                    named.setdefault(data_file, set()).update({path, snapshot.manifest_list} - current_metadata)
    return named


def _total_records(table: Table) -> int:
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    return int((summary["total-records"] if summary is not None else None) or 0)


def delete_rows(
    table: Table,
    predicate: BooleanExpression,
    record: DeletionRecord,
    *,
    purge_unreferenced: bool = False,
    label: str | None = None,
) -> DeletionRecord:
    """Deletes the rows, expires every snapshot older than the deletion (they may hold the rows), and fills in
    ``record``: rows deleted, snapshot ids, the data files no snapshot references any more."""
    before = table.current_snapshot()
    record.snapshot_before_deletion = before.snapshot_id if before is not None else None
    records_before = _total_records(table)
    # The snapshot says which deletion it was; an erasure's label is its id, never its predicate, which names
    # what was erased (a caller id) and would stay in every later metadata.json.
    table.delete(predicate, snapshot_properties={"capture.deletion": (label or record.predicate)[:500],
                                                 "capture.requested-by": record.requested_by})
    after = table.current_snapshot()
    record.rows_deleted = records_before - _total_records(table)
    if after is None or (before is not None and after.snapshot_id == before.snapshot_id):
        return record  # nothing matched: no snapshot was written, nothing to expire
    record.deletion_snapshot_id = after.snapshot_id
    files_before = _data_files(table)
    metadata_before = _metadata_files(table)
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    older = [s.snapshot_id for s in table.metadata.snapshots
             if s.snapshot_id not in protected and s.timestamp_ms <= after.timestamp_ms
             and s.snapshot_id != after.snapshot_id]
    if older:
        table.maintenance.expire_snapshots().by_ids(older).commit()
    record.expired_snapshot_ids = sorted(older)
    still = set().union(*_data_files(table).values())
    record.unreferenced_files = sorted(set().union(*files_before.values()) - still)
    record.unreferenced_metadata_files = sorted(metadata_before - _metadata_files(table))
    if purge_unreferenced:
        for path in record.unreferenced_files:
            table.io.delete(path)
        record.purged_files = len(record.unreferenced_files)
    return record


def retention_predicate(spec: TableSpec, older_than_days: int, now: datetime) -> tuple[BooleanExpression, str]:
    """Rows before the start of (today - N days), UTC: whole day partitions."""
    cutoff = datetime(now.year, now.month, now.day, tzinfo=UTC) - timedelta(days=older_than_days)
    text = f"{spec.time_column} < '{cutoff.isoformat()}'"
    # (pyiceberg's expressions are pydantic models whose positional constructors mypy does not see)
    return LessThan(spec.time_column, cutoff.isoformat()), text  # type: ignore[call-arg, arg-type]


def write_audit(s3: Any, bucket: str, record: DeletionRecord, prefix: str = AUDIT_PREFIX, *,
                put_arguments: Mapping[str, Any] | None = None) -> str:
    """One JSON object per deletion; the key sorts by time. ``put_arguments``: the SSE-KMS headers naming the
    capture key (:func:`capture_core.erasure.sse_kms`)."""
    key = f"{prefix}{record.started_at.replace(':', '')}-{record.table}-{uuid.uuid4().hex[:8]}.json"
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(asdict(record), indent=2).encode(),
                  ContentType="application/json", **(put_arguments or {}))
    return key


def apply_retention(catalog: Catalog, database: str, tables: Mapping[str, str], bucket: str, older_than_days: int,
                    requested_by: str, s3: Any, now: datetime | None = None, *, trail_bucket: str | None = None,
                    put_arguments: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The capture policy's retention as a table operation (the scheduled run and ``expire`` alike): in each table
    (``tables``: kind -> name), the rows older than ``older_than_days`` whole days are deleted, the snapshots that
    still hold them expired, and one audit record written per table. What each table reported, for the log.
    ``trail_bucket``: each record is also a link of the audit trail there, and so is the tables' manifest after.
    ``put_arguments``: the records' SSE-KMS headers (the processor's ``OUTPUT_KMS_KEY_ID``)."""
    now = now or datetime.now(UTC)
    reports = []
    for kind, name in tables.items():
        table = catalog.load_table((database, name))
        predicate, text = retention_predicate(SPECS[kind], older_than_days, now)
        record = DeletionRecord(name, text, requested_by, now.isoformat(timespec="seconds"),
                                reason=f"retention: older than {older_than_days} days")
        delete_rows(table, predicate, record)
        record.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        key = write_audit(s3, bucket, record, put_arguments=put_arguments)
        reports.append({"table": name, "rows_deleted": record.rows_deleted,
                        "expired_snapshots": len(record.expired_snapshot_ids), "audit": f"s3://{bucket}/{key}"})
        if trail_bucket:
            from capture_core.trail import append

            reports[-1]["trail"] = append(s3, trail_bucket, "retention", asdict(record))
    if trail_bucket:  # the daily manifest: what the tables hold after the run
        from capture_core.trail import write_manifest

        manifest = write_manifest(s3, trail_bucket, [catalog.load_table((database, name)) for name in tables.values()])
        reports.append({"manifest": f"s3://{trail_bucket}/{manifest}"})
    return reports


# The IAM action of each call the commands make (named when AWS refuses one: the grants are
# CaptureStorage.grant_erase and CaptureTables.grant_erase).
_ACTIONS = {
    "ListObjectVersions": "s3:ListBucketVersions", "ListObjectsV2": "s3:ListBucket",
    "GetObject": "s3:GetObject (s3:GetObjectVersion for a version)", "HeadObject": "s3:GetObject "
    "(s3:GetObjectVersion for a version; s3:GetObjectRetention and s3:GetObjectLegalHold to see a lock)",
    "PutObject": "s3:PutObject", "DeleteObject": "s3:DeleteObject (s3:DeleteObjectVersion for a version)",
    "GetTable": "glue:GetTable", "UpdateTable": "glue:UpdateTable", "GetDatabase": "glue:GetDatabase",
    "CreateTable": "glue:CreateTable",
}


def main(argv: Sequence[str] | None = None, *, catalog_factory: Callable[[argparse.Namespace], Catalog] | None = None,
         clients: Callable[[str], Any] | None = None) -> int:
    """The command line; exit status 0, 1 (``verify``/``verify-trail``: something remains, or the chain is broken),
    2 (a usage error, or an object in a place that is not in the place's format: named) or 3 (AWS refused a call:
    the call, its IAM action and AWS's message, no traceback)."""
    from botocore.exceptions import ClientError

    try:
        return _run(argv, catalog_factory, clients)
    except ClientError as error:
        operation = error.operation_name
        code = error.response.get("Error", {}).get("Code", "")
        print(f"capture_tables: AWS refused {operation} ({code}; IAM action {_ACTIONS.get(operation, '?')}): "
              f"{error.response.get('Error', {}).get('Message', '')}", file=sys.stderr)
        return 3
    except PermissionError as error:  # pyarrow's S3 file system (pyiceberg's table files)
        print(f"capture_tables: AWS refused a table file operation: {error}", file=sys.stderr)
        return 3
    except UnreadableObject as error:  # an object of a place not in its format: named, never skipped
        print(f"capture_tables: {error}", file=sys.stderr)
        return 2


def _run(argv: Sequence[str] | None, catalog_factory: Callable[[argparse.Namespace], Catalog] | None,
         clients: Callable[[str], Any] | None) -> int:
    import boto3

    args = _parser().parse_args(argv)
    clients = clients or boto3.client
    if args.command == "verify-trail":
        from capture_core.trail import verify_trail

        if not args.trail_bucket:
            print("capture_tables: verify-trail needs --trail-bucket (the audit bucket)", file=sys.stderr)
            return 2

        report = verify_trail(clients("s3"), args.trail_bucket, args.trail_prefix)
        print(json.dumps(report))
        return 0 if report["intact"] else 1
    if args.command in ("delete", "expire") and not args.trail_bucket and not args.no_trail:
        # An erasure or a retention run off the trail is one an auditor cannot see was complete: chained by
        # default, left out only when asked (nothing is written before this check).
        print(f"capture_tables: {args.command} needs --trail-bucket (the audit bucket: the record becomes a link of "
              "the hash-chained trail), or --no-trail to write the record to the capture bucket only", file=sys.stderr)
        return 2
    catalog = (catalog_factory or _glue_catalog)(args)
    kinds = [args.table_kind] if getattr(args, "table_kind", None) else list(SPECS)
    names = {"capture": args.capture_table, "alb": args.alb_table}
    if args.command == "create":
        for kind in kinds:
            _, created = create_table(catalog, args.database, names[kind], SPECS[kind], args.bucket, args.prefix)
            print(json.dumps({"table": names[kind], "created": created}))
        return 0
    if args.command in ("delete", "verify"):
        return _erase_or_verify(args, catalog, [names[kind] for kind in kinds], clients)
    requested_by = clients("sts").get_caller_identity()["Arn"]
    s3 = clients("s3")
    now = datetime.now(UTC)
    for kind in kinds:
        table = catalog.load_table((args.database, names[kind]))
        predicate, text = retention_predicate(SPECS[kind], args.older_than_days, now)
        reason = f"retention: older than {args.older_than_days} days"
        record = DeletionRecord(names[kind], text, requested_by, now.isoformat(timespec="seconds"), reason=reason)
        delete_rows(table, predicate, record, purge_unreferenced=args.purge_unreferenced)
        record.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        key = write_audit(s3, args.bucket, record, put_arguments=sse_kms(args.kms_key_id))
        _append_trail(clients, args, "retention", record)
        print(json.dumps({"table": record.table, "rows_deleted": record.rows_deleted,
                          "deletion_snapshot_id": record.deletion_snapshot_id,
                          "expired_snapshots": len(record.expired_snapshot_ids),
                          "unreferenced_files": record.unreferenced_files, "audit": f"s3://{args.bucket}/{key}"}))
    return 0


def _erase_or_verify(args: argparse.Namespace, catalog: Catalog, tables: list[str],
                     clients: Callable[[str], Any]) -> int:
    """``delete``: erasure everywhere (capture_core.erasure), one line per table and one for the whole erasure;
    ``verify``: what remains per place, exit 1 when anything does."""
    from capture_core import erasure as erasing

    s3 = clients("s3")
    places = erasing.Places(args.curated_prefix, args.quarantine_prefix, tuple(args.raw_prefix or ["data-capture/"]),
                            args.athena_results_prefix)
    if args.command == "verify" and args.erasure_id:
        key = f"{erasing.REGISTER_PREFIX}{args.erasure_id}.json"
        entry = erasing.Erasure(**json.loads(s3.get_object(Bucket=args.bucket, Key=key)["Body"].read()))
    else:
        text = caller_predicate(args.caller_id) if args.caller_id else args.where
        try:
            entry = erasing.Erasure.new(text, "" if args.command == "verify"
                                        else clients("sts").get_caller_identity()["Arn"], getattr(args, "reason", ""))
        except PredicateError as error:
            print(f"capture_tables: {error}", file=sys.stderr)
            return 2
    if args.where:  # a predicate names columns: each table chosen must have them (a caller: the ALB's has none)
        for name in tables:
            try:
                parse_predicate(entry.predicate, catalog.load_table((args.database, name)).schema().column_names)
            except PredicateError as error:
                print(f"capture_tables: {name}: {error}", file=sys.stderr)
                return 2
    if args.command == "verify":
        report, remaining = erasing.verify_everywhere(s3, args.bucket, catalog, args.database, tables, entry, places)
        print(json.dumps({"erasure_id": entry.erasure_id, "predicate": entry.predicate, "remaining": remaining,
                          "places": report}))
        return 0 if remaining == 0 else 1
    arguments = erasing.sse_kms(args.kms_key_id)
    record = erasing.erase_everywhere(s3, args.bucket, catalog, args.database, tables, entry, places,
                                      put_arguments=arguments)
    key = erasing.write_record(s3, args.bucket, record, put_arguments=arguments)
    _append_trail(clients, args, "erasure", record)
    for table in record.tables:
        if table["applies"]:
            print(json.dumps({"table": table["table"], "rows_deleted": table["rows_deleted"],
                              "deletion_snapshot_id": table["deletion_snapshot_id"],
                              "expired_snapshots": len(table["expired_snapshot_ids"]),
                              "unreferenced_files": table["unreferenced_files"],
                              "audit": f"s3://{args.bucket}/{key}"}))
    print(json.dumps({"erasure_id": record.erasure_id, "register": f"s3://{args.bucket}/{record.register_key}",
                      "audit": f"s3://{args.bucket}/{key}",
                      "objects": {place: len(items) for place, items in record.objects.items()},
                      "unevaluated_columns": record.unevaluated_columns}))
    return 0


def _append_trail(clients: Callable[[str], Any], args: argparse.Namespace, kind: str, record: Any) -> None:
    """The record into the hash-chained trail (capture_core.trail) when ``--trail-bucket`` names one."""
    if getattr(args, "trail_bucket", None):
        from capture_core.trail import append

        body = record.to_json() if hasattr(record, "to_json") else json.dumps(asdict(record), sort_keys=True).encode()
        append(clients("s3"), args.trail_bucket, kind, json.loads(body), prefix=args.trail_prefix)


def _glue_catalog(args: argparse.Namespace) -> Catalog:
    import os

    from pyiceberg.catalog.glue import GlueCatalog

    from capture_core.iceberg_sink import catalog_properties
    from capture_core.settings import IcebergSettings

    settings = IcebergSettings(args.database, args.capture_table, args.alb_table, args.catalog_id)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return GlueCatalog("glue", **catalog_properties(settings, os.environ.get("AWS_ENDPOINT_URL"), region,
                                                    getattr(args, "kms_key_id", None)))


def _parser() -> argparse.ArgumentParser:
    from capture_core.trail import TRAIL_PREFIX

    parser = argparse.ArgumentParser(prog="python -m hyperpod_inference_iac.capture_table_ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database", required=True, help="the Glue database of the capture tables")
    common.add_argument("--bucket", required=True,
                        help="the capture bucket (tables' warehouse, every other place, audit records, the register)")
    common.add_argument("--catalog-id", help="the Glue catalog's account id (default: the caller's)")
    common.add_argument("--capture-table", default=DEFAULT_NAMES["capture"])
    common.add_argument("--alb-table", default=DEFAULT_NAMES["alb"])
    common.add_argument("--table", dest="table_kind", choices=sorted(SPECS), help="one table only (default: both)")
    trail = argparse.ArgumentParser(add_help=False)
    trail.add_argument("--trail-bucket", help="the audit bucket (Object Lock) whose hash-chained trail gets the record")
    trail.add_argument("--trail-prefix", default=TRAIL_PREFIX)
    chain = argparse.ArgumentParser(add_help=False)
    chain.add_argument("--no-trail", action="store_true",
                       help="write the audit record to the capture bucket only, not into the trail (without it, "
                            "delete and expire need --trail-bucket)")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", parents=[common], help="create the tables when missing")
    create.add_argument("--prefix", default=WAREHOUSE_PREFIX, help="the tables' key prefix in the bucket")
    delete = commands.add_parser("delete", parents=[common, trail, chain],
                                 help="erase rows everywhere: tables and their snapshots, curated/, quarantine/, the "
                                      "raw objects, athena-results/; register the erasure")
    verify = commands.add_parser("verify", parents=[common],
                                 help="what remains of an erasure in each place (exit 1 when anything does)")
    for command in (delete, verify):
        which = command.add_mutually_exclusive_group(required=True)
        which.add_argument("--caller-id", help="every row of this caller_id (capture_records only)")
        which.add_argument("--where", help="column = literal [AND column < literal ...]")
        if command is verify:
            which.add_argument("--erasure-id", help="an erasure of the register (audit/erasure-register/)")
        command.add_argument("--curated-prefix", default="curated/")
        command.add_argument("--quarantine-prefix", default="quarantine/")
        command.add_argument("--raw-prefix", action="append", help="a capture prefix (repeat; default data-capture/)")
        command.add_argument("--athena-results-prefix", default="athena-results/")
    delete.add_argument("--reason", default="", help="why (a ticket, a request id): kept in the audit record")
    for command in (delete, expire := commands.add_parser(
            "expire", parents=[common, trail, chain], help="retention: delete rows older than N days")):
        command.add_argument("--kms-key-id", help="the capture key's ARN (or alias ARN): the register, the audit "
                                                  "records and the tables' rewrites name it (SSE-KMS), whatever the "
                                                  "bucket's default encryption (SSE-S3 when it accepts ALB access "
                                                  "logs)")
    expire.add_argument("--older-than-days", type=int, required=True)
    expire.add_argument("--purge-unreferenced", action="store_true",
                        help="delete the data files no snapshot references now (else the orphan file optimizer)")
    commands.add_parser("verify-trail", parents=[trail],
                        help="check the hash chain of the audit trail; name the first broken link")
    return parser


if __name__ == "__main__":
    sys.exit(main())

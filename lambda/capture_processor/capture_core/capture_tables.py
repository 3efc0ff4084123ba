"""Table operations on the curated Iceberg tables: create them, delete rows on request, apply retention.

``python -m hyperpod_inference_iac.capture_table_ops`` (docs/capture-processor.md, "Deleting rows") runs these:

- ``create``: the two tables (``capture_records``, ``alb_access_logs``) from the processor's curated schemas, in the
  Glue database, at ``s3://BUCKET/curated-iceberg/TABLE/``, partitioned by ``day(time column)``; existing tables are
  left alone (a newer processor adds its columns itself, on its first append).
- ``delete --caller-id X`` or ``delete --where 'PREDICATE'``: deletes the matching rows (copy-on-write: a file with
  matching rows is rewritten without them), then expires every older snapshot (each may still hold the rows: time
  travel to them must find nothing), lists the data files no snapshot references any more (the Data Catalog's
  orphan file deletion removes them after its retention; ``--purge-unreferenced`` deletes them now), and writes an
  audit record (who, when, what, how many rows, which snapshots) to ``audit/table-deletions/`` in the bucket.
- ``expire --older-than-days N``: the retention job: the same for the rows whose event time is older than N days
  (counted from the start of today, UTC, so whole day partitions go, a metadata-only delete).

PREDICATE is a small, safe grammar: ``column OP literal`` joined by ``AND``, OP one of ``=``, ``<``, ``>``; a
literal is a single-quoted string (``''`` for a quote) or a number; the column must be one of the table's.
"""

from __future__ import annotations

import argparse
import json
import re
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


class PredicateError(ValueError):
    """A --where predicate outside the grammar, or naming a column the table does not have."""


_TERM = re.compile(
    r"\s*(?P<column>[a-z_][a-z0-9_]*)\s*(?P<op>=|<|>)\s*(?:'(?P<string>(?:[^']|'')*)'|(?P<number>-?\d+(?:\.\d+)?))\s*",
)


def parse_predicate(text: str, columns: Sequence[str]) -> BooleanExpression:
    """``column OP literal [AND ...]`` as a pyiceberg expression (the module docstring's grammar)."""
    terms = re.split(r"\s+AND\s+", text.strip(), flags=re.IGNORECASE) if text.strip() else []
    if not terms:
        raise PredicateError("the predicate is empty")
    expressions: list[BooleanExpression] = []
    for term in terms:
        match = _TERM.fullmatch(term)
        if match is None:
            raise PredicateError(f"{term!r} is not `column = literal`, `column < literal` or `column > literal`")
        column = match["column"]
        if column not in columns:
            raise PredicateError(f"{column!r} is not a column of the table")
        literal: Any
        if match["string"] is not None:
            literal = match["string"].replace("''", "'")
        else:
            literal = float(match["number"]) if "." in match["number"] else int(match["number"])
        operator = {"=": EqualTo, "<": LessThan, ">": GreaterThan}[match["op"]]
        expressions.append(operator(column, literal))
    result = expressions[0]
    for expression in expressions[1:]:
        result = And(result, expression)
    return result


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
) -> DeletionRecord:
    """Deletes the rows, expires every snapshot older than the deletion (they may hold the rows), and fills in
    ``record``: rows deleted, snapshot ids, the data files no snapshot references any more."""
    before = table.current_snapshot()
    record.snapshot_before_deletion = before.snapshot_id if before is not None else None
    records_before = _total_records(table)
    table.delete(predicate, snapshot_properties={"capture.deletion": record.predicate[:500],
                                                 "capture.requested-by": record.requested_by})
    after = table.current_snapshot()
    record.rows_deleted = records_before - _total_records(table)
    if after is None or (before is not None and after.snapshot_id == before.snapshot_id):
        return record  # nothing matched: no snapshot was written, nothing to expire
    record.deletion_snapshot_id = after.snapshot_id
    files_before = _data_files(table)
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    older = [s.snapshot_id for s in table.metadata.snapshots
             if s.snapshot_id not in protected and s.timestamp_ms <= after.timestamp_ms
             and s.snapshot_id != after.snapshot_id]
    if older:
        table.maintenance.expire_snapshots().by_ids(older).commit()
    record.expired_snapshot_ids = sorted(older)
    still = set().union(*_data_files(table).values())
    record.unreferenced_files = sorted(set().union(*files_before.values()) - still)
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


def write_audit(s3: Any, bucket: str, record: DeletionRecord, prefix: str = AUDIT_PREFIX) -> str:
    """One JSON object per deletion; the key sorts by time."""
    key = f"{prefix}{record.started_at.replace(':', '')}-{record.table}-{uuid.uuid4().hex[:8]}.json"
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(asdict(record), indent=2).encode(),
                  ContentType="application/json")
    return key


def apply_retention(catalog: Catalog, database: str, tables: Mapping[str, str], bucket: str, older_than_days: int,
                    requested_by: str, s3: Any, now: datetime | None = None) -> list[dict[str, Any]]:
    """The capture policy's retention as a table operation (the scheduled run and ``expire`` alike): in each table
    (``tables``: kind -> name), the rows older than ``older_than_days`` whole days are deleted, the snapshots that
    still hold them expired, and one audit record written per table. What each table reported, for the log."""
    now = now or datetime.now(UTC)
    reports = []
    for kind, name in tables.items():
        table = catalog.load_table((database, name))
        predicate, text = retention_predicate(SPECS[kind], older_than_days, now)
        record = DeletionRecord(name, text, requested_by, now.isoformat(timespec="seconds"),
                                reason=f"retention: older than {older_than_days} days")
        delete_rows(table, predicate, record)
        record.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        key = write_audit(s3, bucket, record)
        reports.append({"table": name, "rows_deleted": record.rows_deleted,
                        "expired_snapshots": len(record.expired_snapshot_ids), "audit": f"s3://{bucket}/{key}"})
    return reports


def main(argv: Sequence[str] | None = None, *, catalog_factory: Callable[[argparse.Namespace], Catalog] | None = None,
         clients: Callable[[str], Any] | None = None) -> int:
    import boto3

    args = _parser().parse_args(argv)
    clients = clients or boto3.client
    catalog = (catalog_factory or _glue_catalog)(args)
    kinds = [args.table_kind] if getattr(args, "table_kind", None) else list(SPECS)
    names = {"capture": args.capture_table, "alb": args.alb_table}
    if args.command == "create":
        for kind in kinds:
            _, created = create_table(catalog, args.database, names[kind], SPECS[kind], args.bucket, args.prefix)
            print(json.dumps({"table": names[kind], "created": created}))
        return 0
    requested_by = clients("sts").get_caller_identity()["Arn"]
    s3 = clients("s3")
    now = datetime.now(UTC)
    for kind in kinds:
        table = catalog.load_table((args.database, names[kind]))
        if args.command == "expire":
            predicate, text = retention_predicate(SPECS[kind], args.older_than_days, now)
            reason = f"retention: older than {args.older_than_days} days"
        else:
            text = f"caller_id = '{args.caller_id.replace(chr(39), chr(39) * 2)}'" if args.caller_id else args.where
            if kind == "alb" and args.caller_id:
                continue  # the ALB's log has no caller column
            try:
                predicate = parse_predicate(text, table.schema().column_names)
            except PredicateError as error:
                print(f"capture_tables: {names[kind]}: {error}", file=sys.stderr)
                return 2
            reason = args.reason
        record = DeletionRecord(names[kind], text, requested_by, now.isoformat(timespec="seconds"), reason=reason)
        delete_rows(table, predicate, record, purge_unreferenced=args.purge_unreferenced)
        record.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        key = write_audit(s3, args.bucket, record)
        print(json.dumps({"table": record.table, "rows_deleted": record.rows_deleted,
                          "deletion_snapshot_id": record.deletion_snapshot_id,
                          "expired_snapshots": len(record.expired_snapshot_ids),
                          "unreferenced_files": record.unreferenced_files, "audit": f"s3://{args.bucket}/{key}"}))
    return 0


def _glue_catalog(args: argparse.Namespace) -> Catalog:
    import os

    from pyiceberg.catalog.glue import GlueCatalog

    from capture_core.iceberg_sink import catalog_properties
    from capture_core.settings import IcebergSettings

    settings = IcebergSettings(args.database, args.capture_table, args.alb_table, args.catalog_id)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return GlueCatalog("glue", **catalog_properties(settings, os.environ.get("AWS_ENDPOINT_URL"), region))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hyperpod_inference_iac.capture_table_ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database", required=True, help="the Glue database of the capture tables")
    common.add_argument("--bucket", required=True, help="the capture bucket (tables' warehouse, audit records)")
    common.add_argument("--catalog-id", help="the Glue catalog's account id (default: the caller's)")
    common.add_argument("--capture-table", default=DEFAULT_NAMES["capture"])
    common.add_argument("--alb-table", default=DEFAULT_NAMES["alb"])
    common.add_argument("--table", dest="table_kind", choices=sorted(SPECS), help="one table only (default: both)")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", parents=[common], help="create the tables when missing")
    create.add_argument("--prefix", default=WAREHOUSE_PREFIX, help="the tables' key prefix in the bucket")
    delete = commands.add_parser("delete", parents=[common], help="delete rows, expire the snapshots holding them")
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument("--caller-id", help="delete every row of this caller_id (capture_records only)")
    which.add_argument("--where", help="column = literal [AND column < literal ...]")
    delete.add_argument("--reason", default="", help="why (a ticket, a request id): kept in the audit record")
    expire = commands.add_parser("expire", parents=[common], help="retention: delete rows older than N days")
    expire.add_argument("--older-than-days", type=int, required=True)
    for command in (delete, expire):
        command.add_argument("--purge-unreferenced", action="store_true",
                             help="delete the data files no snapshot references now (else the orphan file optimizer)")
    return parser


if __name__ == "__main__":
    sys.exit(main())

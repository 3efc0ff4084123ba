"""Curated rows appended to the Iceberg tables of the Glue Data Catalog (docs/capture-processor.md, "Iceberg tables").

One commit per table per invocation: the rows of every source object of the SQS batch are appended together, so the
commit rate is the invocation rate (set by the event source's batch size and batching window), not the object rate.

Idempotency, exactly: every append records the ids of its source objects (:func:`capture_core.processor.output_file_id`,
bucket/key@version) in its snapshot summary, ``capture.source-objects``. Before appending, and again after any
failed or unanswered commit, the table is refreshed and each object is looked for in the summaries of the current
snapshot's ancestry, back to the first snapshot committed before the object was written to S3 (less
:data:`CLOCK_SKEW_MS`: no older snapshot can hold it). An object found there is skipped. When the ancestry was cut
short by snapshot expiry before that point, the object's ``source_key`` is looked for in the rows themselves (a scan
of one column; rare: a redelivery older than the table's snapshot retention). So a redelivered message, a retry
after a commit whose response was lost, and a second invocation racing the first all add no rows twice.

Conflicts: a concurrent writer's commit makes ours fail (``CommitFailedException``). pyiceberg first retries it
itself, reusing the data files it wrote (the table's ``commit.retry.*`` properties: 4 retries from 100 ms); a
conflict that outlasts those, or an unanswered commit, is retried here: the table is refreshed, the idempotency
check repeated and the append retried after a jittered exponential backoff, at most ``ICEBERG_COMMIT_RETRIES``
times; then the objects' messages are reported failed, and SQS delivers them again. Every conflict is counted
(``IcebergCommitConflicts``), pyiceberg's own retries included.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import In
from pyiceberg.table import Table

from capture_core.settings import IcebergSettings
from capture_core.telemetry import log

SOURCE_OBJECTS = "capture.source-objects"
PROCESSOR_PROPERTY = "capture.writer"
PROCESSOR_NAME = "capture-processor"
# S3's LastModified and the committing function's clock: a snapshot this much older than an object is still read.
CLOCK_SKEW_MS = 15 * 60 * 1000


@dataclass
class PendingObject:
    """The curated rows of one source object, waiting for the invocation's commit."""

    message_id: str
    source_id: str  # output_file_id(bucket, key, version)
    source_key: str
    last_modified: datetime
    table: pa.Table


@dataclass
class CommitOutcome:
    appended: list[str] = field(default_factory=list)  # source ids
    already_present: list[str] = field(default_factory=list)
    failed_messages: set[str] = field(default_factory=set)
    commits: int = 0
    conflicts: int = 0
    rows: int = 0


def catalog_properties(settings: IcebergSettings, endpoint_url: str | None, region: str | None,
                       kms_key_id: str | None = None) -> dict[str, str]:
    """pyiceberg's Glue catalog. With ``kms_key_id`` (the processor's ``OUTPUT_KMS_KEY_ID``, the eraser's
    ``--kms-key-id``), every object the tables' writes put names that key (:mod:`capture_core.sse_kms_io`): the
    capture bucket's policy requires it where its default is SSE-S3 (ALB access logs accepted). Without it,
    PyArrow's S3 file IO writes without SSE headers: the bucket's default encryption (the capture key) applies."""
    properties = {"type": "glue", "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    if kms_key_id:
        properties["py-io-impl"] = "capture_core.sse_kms_io.SseKmsFileIO"
        properties["s3.sse-kms-key-id"] = kms_key_id
    if settings.catalog_id:
        properties["glue.id"] = settings.catalog_id
    if region:
        properties["glue.region"] = properties["s3.region"] = region
    if endpoint_url:  # tests: moto on loopback
        properties["glue.endpoint"] = properties["s3.endpoint"] = endpoint_url
    return properties


@lru_cache(maxsize=4)
def _catalog(settings: IcebergSettings, endpoint_url: str | None, region: str | None,
             kms_key_id: str | None) -> Catalog:
    from pyiceberg.catalog.glue import GlueCatalog

    return GlueCatalog("glue", **catalog_properties(settings, endpoint_url, region, kms_key_id))


def catalog_for(settings: IcebergSettings, endpoint_url: str | None, region: str | None,
                kms_key_id: str | None = None) -> Catalog:
    """One catalog (and boto3 client) per warm container and settings."""
    return _catalog(settings, endpoint_url, region, kms_key_id)


def committed_sources(table: Table, objects: Iterable[PendingObject]) -> set[str]:
    """The ids of ``objects`` whose rows the table already holds (the module docstring's rule)."""
    wanted = {item.source_id: item for item in objects}
    if not wanted:
        return set()
    horizon = min(int(item.last_modified.timestamp() * 1000) for item in wanted.values()) - CLOCK_SKEW_MS
    found: set[str] = set()
    reached_ms: int | None = None  # timestamp of the oldest snapshot read, when the ancestry was cut short
    for snapshot, cut_short in _ancestry(table):
        found |= wanted.keys() & set((snapshot.summary[SOURCE_OBJECTS] or "").split(","))
        if found == wanted.keys() or snapshot.timestamp_ms < horizon:
            return found
        reached_ms = snapshot.timestamp_ms if cut_short else None
    if reached_ms is None:
        return found  # the whole history was read
    # Snapshot expiry removed part of the history the objects may be in: look in the rows.
    unsure = [item for item in wanted.values()
              if item.source_id not in found and int(item.last_modified.timestamp() * 1000) - CLOCK_SKEW_MS
              < reached_ms]
    if unsure:
        keys = {item.source_key for item in unsure}
        # (pyiceberg's expressions are pydantic models whose positional constructors mypy does not see)
        keys_filter = In("source_key", keys)  # type: ignore[call-arg, arg-type]
        rows = table.scan(row_filter=keys_filter, selected_fields=("source_key",)).to_arrow()
        present = set(rows.column("source_key").to_pylist())
        found |= {item.source_id for item in unsure if item.source_key in present}
    return found


def _ancestry(table: Table) -> Iterator[tuple[Any, bool]]:
    """The current snapshot and its ancestors, newest first, each with whether its parent was expired. Expiry
    clears the parent id of the oldest survivor; sequence numbers (format 2) tell: the table's first snapshot
    has 1, so an orphaned snapshot with a higher one had a parent."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        parent_id = snapshot.parent_snapshot_id
        parent = table.metadata.snapshot_by_id(parent_id) if parent_id is not None else None
        yield snapshot, parent is None and (parent_id is not None or (snapshot.sequence_number or 0) > 1)
        snapshot = parent


def evolve_schema(table: Table, schema: pa.Schema) -> bool:
    """Add the columns ``schema`` has and the table lacks (a newer processor's): metadata only, no data rewritten.
    Returns whether the schema changed."""
    known = set(table.schema().column_names)
    if all(name in known for name in schema.names):
        return False
    with table.update_schema() as update:
        update.union_by_name(schema)
    log("INFO", "table schema evolved", table=table.name()[-1], added=[n for n in schema.names if n not in known])
    return True


class _ConflictCounter(logging.Handler):
    """Counts the conflicts pyiceberg retries itself (it reports each as a warning of ``pyiceberg.table``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "concurrent update" in record.getMessage():
            self.count += 1


class IcebergSink:
    """Collects the curated rows of an invocation per table, then appends each table's rows in one commit."""

    def __init__(
        self,
        catalog: Catalog,
        settings: IcebergSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._catalog = catalog
        self._settings = settings
        self._sleep = sleep
        self._jitter = jitter
        self._pending: dict[str, list[PendingObject]] = {}
        self._bytes = 0
        self.outcome = CommitOutcome()

    def add(self, table_name: str, item: PendingObject) -> None:
        self._pending.setdefault(table_name, []).append(item)
        self._bytes += item.table.nbytes
        if self._bytes >= self._settings.max_commit_bytes:
            self.commit()

    def discard(self, message_id: str) -> None:
        """Forget the rows of a message that failed (SQS delivers it again, whole)."""
        for name, items in self._pending.items():
            kept = [item for item in items if item.message_id != message_id]
            self._bytes -= sum(item.table.nbytes for item in items if item.message_id == message_id)
            self._pending[name] = kept

    def commit(self) -> CommitOutcome:
        """Commits what is pending; the messages whose rows could not be committed are in ``failed_messages``."""
        pending, self._pending, self._bytes = self._pending, {}, 0
        for name, items in pending.items():
            if not items:
                continue
            try:
                self._commit_table(name, items)
            except Exception as error:  # bounded retries exhausted, or the table cannot be read: SQS retries
                log("ERROR", "iceberg commit failed; the messages will be retried", table=name,
                    objects=len(items), error=f"{type(error).__name__}: {error}")
                self.outcome.failed_messages |= {item.message_id for item in items}
        return self.outcome

    def _commit_table(self, name: str, items: list[PendingObject]) -> None:
        identifier = (self._settings.database, name)
        table = self._catalog.load_table(identifier)
        attempt = 0
        while True:
            present = committed_sources(table, items)
            todo = [item for item in items if item.source_id not in present]
            self.outcome.already_present += [item.source_id for item in items if item.source_id in present]
            if not todo:
                return
            rows = pa.concat_tables([item.table for item in todo], promote_options="default")
            counter, pyiceberg_log = _ConflictCounter(), logging.getLogger("pyiceberg.table")
            pyiceberg_log.addHandler(counter)
            try:
                evolve_schema(table, rows.schema)
                table.append(rows, snapshot_properties={
                    SOURCE_OBJECTS: ",".join(item.source_id for item in todo),
                    PROCESSOR_PROPERTY: PROCESSOR_NAME,
                })
            except Exception as error:
                # A conflict, or an unanswered commit that may have landed: refresh, look again, back off.
                if attempt >= self._settings.commit_retries:
                    raise
                if isinstance(error, CommitFailedException):
                    self.outcome.conflicts += 1
                attempt += 1
                delay_ms = min(self._settings.retry_max_ms, self._settings.retry_base_ms * 2 ** (attempt - 1))
                self._sleep(delay_ms * (0.5 + self._jitter() / 2) / 1000)  # "equal jitter"
                log("WARN", "iceberg commit retried", table=name, attempt=attempt,
                    error=f"{type(error).__name__}: {error}")
                table = self._catalog.load_table(identifier)
                items = todo
                continue
            finally:
                pyiceberg_log.removeHandler(counter)
                self.outcome.conflicts += counter.count
            self.outcome.commits += 1
            self.outcome.rows += rows.num_rows
            self.outcome.appended += [item.source_id for item in todo]
            return

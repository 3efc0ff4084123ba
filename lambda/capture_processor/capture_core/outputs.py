"""Local output files: one Parquet file per (dt, hour) partition, plus the quarantine file.

Files are written under a temporary directory and uploaded only after the whole source object
was read, so a failure part-way leaves nothing half-written in S3; the names are derived from
the source object's identity, so reprocessing overwrites instead of duplicating.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from capture_core.records import RejectedRun, Rejection

_json_string: Callable[[str], str] = json.encoder.encode_basestring
_REASON = attrgetter("reason")
_MICROS_PER_HOUR = 3_600_000_000
QUARANTINE_RAW_LIMIT = 1 << 20  # bytes of a rejected line kept; the source object keeps the rest
_ENTRIES_PER_WRITE = 4096
MAX_RANGES_PER_ENTRY = 4096  # line ranges in one quarantine entry; a run with more goes on in the next entry
ROW_GROUP_ROWS = 50_000
# Arrow bytes buffered across all partitions before they are written: sets the row group size
# of a one-hour object, and is the main memory cost after the chunks in flight.
ROW_GROUP_BYTES = 8 << 20


@dataclass(frozen=True, order=True)
class Partition:
    dt: str  # YYYY-MM-DD
    hour: str  # HH

    @classmethod
    def of_hour(cls, hours_since_epoch: int) -> Partition:
        start = datetime.fromtimestamp(hours_since_epoch * 3600, UTC)
        return cls(start.strftime("%Y-%m-%d"), start.strftime("%H"))

    def key_prefix(self, output_prefix: str, tier: str) -> str:
        return f"{output_prefix}tier={tier}/dt={self.dt}/hour={self.hour}/"


@dataclass(frozen=True)
class PartitionFile:
    partition: Partition
    path: Path
    rows: int


class PartitionedParquetFiles:
    """Appends tables to per-partition Parquet files. Rows are buffered per partition and
    written as one row group once a partition holds ROW_GROUP_ROWS rows or all partitions
    together hold ROW_GROUP_BYTES, so memory stays bounded however large the object is, and
    row groups stay large enough for Athena to read efficiently.

    Writing (encoding and zstd compression, which release the GIL) runs on one background
    thread, overlapping with parsing; at most one write call is in flight.
    """

    def __init__(
        self, directory: Path, schema: pa.Schema, time_column: str, payload_columns: tuple[str, ...] = ()
    ) -> None:
        self._directory = directory
        self._schema = schema
        self._time_column = time_column
        # Payload columns are large and unique: dictionaries and min/max statistics only cost time.
        small = [name for name in schema.names if name not in payload_columns]
        self._writer_options = {"compression": "zstd", "use_dictionary": small, "write_statistics": small}
        self._writers: dict[Partition, pq.ParquetWriter] = {}
        self._rows: dict[Partition, int] = {}
        self._buffered: dict[Partition, list[pa.Table]] = {}
        self._buffered_bytes = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-writer")
        self._pending: Future[None] | None = None

    def write(self, table: pa.Table) -> None:
        self._wait_for_pending_write()
        if table.num_rows:
            self._pending = self._executor.submit(self._write_partitions, table)

    def close(self) -> list[PartitionFile]:
        try:
            self._wait_for_pending_write()
            for partition in list(self._buffered):
                self._flush(partition)
        finally:
            self._executor.shutdown(wait=True)
            writers, self._writers = self._writers, {}
            for writer in writers.values():
                writer.close()
        return [
            PartitionFile(partition, Path(writer.where), self._rows[partition])
            for partition, writer in sorted(writers.items())
        ]

    def _wait_for_pending_write(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()  # re-raises a failed write here, in the caller's thread

    def _write_partitions(self, table: pa.Table) -> None:
        # Integer division of epoch microseconds: the hour each row belongs to (times are after 1970).
        hours = pc.divide(table.column(self._time_column).cast(pa.int64()), _MICROS_PER_HOUR)
        for hour in pc.unique(hours).to_pylist():
            rows = table.filter(pc.equal(hours, hour))
            partition = Partition.of_hour(hour)
            self._buffered.setdefault(partition, []).append(rows)
            self._buffered_bytes += rows.nbytes
            self._rows[partition] = self._rows.get(partition, 0) + rows.num_rows
            if sum(buffered.num_rows for buffered in self._buffered[partition]) >= ROW_GROUP_ROWS:
                self._flush(partition)
        if self._buffered_bytes >= ROW_GROUP_BYTES:
            for partition in list(self._buffered):
                self._flush(partition)

    def _flush(self, partition: Partition) -> None:
        tables = self._buffered.pop(partition)
        self._buffered_bytes -= sum(table.nbytes for table in tables)
        self._writer(partition).write_table(pa.concat_tables(tables), row_group_size=ROW_GROUP_ROWS)

    def _writer(self, partition: Partition) -> pq.ParquetWriter:
        writer = self._writers.get(partition)
        if writer is None:
            path = self._directory / f"dt={partition.dt}-hour={partition.hour}.parquet"
            writer = pq.ParquetWriter(path, self._schema, **self._writer_options)
            self._writers[partition] = writer
        return writer


@dataclass(frozen=True)
class QuarantineSource:
    bucket: str
    key: str
    version: str  # S3 version id, else the ETag: what the output file names derive from


class QuarantineFile:
    """JSON Lines: one entry per run of rejected lines with the same reason and text (one line, or 200,000 lines of
    `{}`): where they came from, why, their (redacted) text once, and every line number (docs/capture-processor.md,
    "Quarantine")."""

    def __init__(self, path: Path, source: QuarantineSource) -> None:
        self.path = path
        self.entries = 0  # entries written
        self.lines = 0  # rejected lines they stand for (the QuarantinedLines metric)
        source_fields = {"source_bucket": source.bucket, "source_key": source.key, "source_version": source.version}
        self._head = json.dumps(source_fields, ensure_ascii=False)[:-1] + ", "
        self._file: IO[str] | None = None
        self._open: dict[str, _Run] = {}  # runs the last call added to, by their entry's tail

    def add(self, rejected: Rejection, redact: Callable[[str], str]) -> None:
        # Redacted like the curated columns (raw readers only read it, but it should leak no more),
        # and redacted whole before the cut, so the cut cannot split a value out of a rule's reach.
        self.add_redacted(rejected, redact(rejected.raw.decode("utf-8", errors="replace")))

    def add_redacted(self, rejected: Rejection, raw: str) -> None:
        """`raw` is the line decoded as UTF-8 (invalid bytes as U+FFFD) and redacted whole."""
        self.add_many_redacted([rejected], [raw])

    def add_many_redacted(self, rejected: Sequence[Rejection], raws: Sequence[str]) -> None:
        """One chunk's rejections, each with its text (decoded as UTF-8, invalid bytes as U+FFFD, redacted whole).
        The lines of equal reason and text (as the entry writes it: cut at QUARANTINE_RAW_LIMIT) are one run, whatever
        lies between them; a run goes on into the next call (the next chunk) when that one rejects such lines too,
        and is written when it ends, at `close`, or once it holds MAX_RANGES_PER_ENTRY ranges (an entry stays a few
        hundred KiB however the lines are spread). Entries come in the order their runs end."""
        if not rejected:
            return
        tails = {key: self._tail(*key) for key in dict.fromkeys(zip(map(_REASON, rejected), raws, strict=True))}
        groups: dict[str, list[Sequence[int]]] = {}
        for item, raw in zip(rejected, raws, strict=True):
            numbers = item.line_numbers if isinstance(item, RejectedRun) else (item.line_number,)
            groups.setdefault(tails[item.reason, raw], []).append(numbers)
        self._write([self._open.pop(tail) for tail in [tail for tail in self._open if tail not in groups]])
        full: list[_Run] = []
        for tail, parts in groups.items():
            run = self._open.get(tail) or self._open.setdefault(tail, _Run(tail))
            run.extend(parts[0] if len(parts) == 1 else sorted(chain.from_iterable(parts)))
            if len(run.ranges) >= MAX_RANGES_PER_ENTRY:
                full.append(self._open.pop(tail))
        self._write(full)

    def _write(self, runs: list[_Run]) -> None:
        if not runs:
            return
        if self._file is None:
            self._file = self.path.open("w", encoding="utf-8")
        runs.sort(key=_first_line)
        for start in range(0, len(runs), _ENTRIES_PER_WRITE):  # bounded memory: a few MB at a time
            entries = [entry for run in runs[start : start + _ENTRIES_PER_WRITE] for entry in run.entries(self._head)]
            self._file.write("".join(entries))
            self.entries += len(entries)
        self.lines += sum(run.count for run in runs)

    @staticmethod
    def _tail(reason: str, raw: str) -> str:
        truncated = len(raw) > QUARANTINE_RAW_LIMIT // 4 and len(raw.encode("utf-8")) > QUARANTINE_RAW_LIMIT
        if truncated:
            raw = raw.encode("utf-8")[:QUARANTINE_RAW_LIMIT].decode("utf-8", errors="ignore")
        flag = "true" if truncated else "false"
        return f'"reason": {_json_string(reason)}, "raw_truncated": {flag}, "raw": {_json_string(raw)}}}\n'

    def close(self) -> None:
        try:
            self._write(list(self._open.values()))
            self._open.clear()
        finally:
            if self._file is not None:
                self._file.close()


class _Run:
    """Lines of one reason and text: their numbers as ranges, and the entry's text after the numbers."""

    __slots__ = ("count", "ranges", "tail")

    def __init__(self, tail: str) -> None:
        self.tail = tail
        self.ranges: list[list[int]] = []  # [first, last], inclusive, ascending, disjoint and not adjacent
        self.count = 0

    def extend(self, numbers: Sequence[int]) -> None:
        """`numbers`: strictly ascending, after every line already in the run."""
        if not numbers:
            return
        ranges = self.ranges
        self.count += len(numbers)
        first, last = numbers[0], numbers[-1]
        if last - first == len(numbers) - 1:  # one block of consecutive lines (200,000 lines of `{}`): no loop
            if ranges and ranges[-1][1] + 1 == first:
                ranges[-1][1] = last
            else:
                ranges.append([first, last])
            return
        for number in numbers:
            if ranges and ranges[-1][1] + 1 == number:
                ranges[-1][1] = number
            else:
                ranges.append([number, number])

    def entries(self, head: str) -> list[str]:
        """As json.dumps(entry, ensure_ascii=False) writes them: one entry per MAX_RANGES_PER_ENTRY ranges. One line:
        `line_number` alone (the format of every entry before runs); a run: its first line as `line_number`, then
        `line_ranges` and `count`."""
        entries = []
        for start in range(0, len(self.ranges), MAX_RANGES_PER_ENTRY):
            ranges = self.ranges[start : start + MAX_RANGES_PER_ENTRY]
            count = sum(last - first + 1 for first, last in ranges) if len(ranges) < len(self.ranges) else self.count
            if count == 1:
                entries.append(f'{head}"line_number": {ranges[0][0]}, {self.tail}')
                continue
            text = ", ".join([f"[{first}, {last}]" for first, last in ranges])
            entries.append(f'{head}"line_number": {ranges[0][0]}, "line_ranges": [{text}], "count": {count}, '
                           f"{self.tail}")
        return entries


def _first_line(run: _Run) -> int:
    return run.ranges[0][0]

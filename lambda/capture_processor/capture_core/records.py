"""What every parser hands to the processor: curated rows, plus the lines it could not use."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import pyarrow as pa


class RejectedLine(NamedTuple):
    """A tuple, not a frozen dataclass: one chunk can reject 200,000 lines, and a frozen dataclass costs three
    `object.__setattr__` calls each (a fifth of the time of 200,000 lines of `{}`)."""

    line_number: int
    reason: str
    raw: bytes


class RejectedRun(NamedTuple):
    """Equal lines rejected for one reason: one object for all of them (a chunk of 200,000 lines of `{}` is one
    run), carried to the quarantine, where it is one entry naming its lines (outputs.QuarantineFile)."""

    line_numbers: list[int]  # ascending, 1-based
    reason: str
    raw: bytes


Rejection = RejectedLine | RejectedRun


@dataclass(frozen=True)
class ChunkContext:
    """Facts about the source object that rows carry or fall back on."""

    source_key: str
    deployment_hash: str | None
    key_time: datetime | None  # from the key's YYYY/MM/DD/HH or the ALB file end time
    last_modified: datetime  # last resort for rows without any usable time


@dataclass(frozen=True)
class ParsedChunk:
    table: pa.Table  # curated schema of the tier; `time` column never null
    rejected: tuple[Rejection, ...]
    counters: dict[str, int]  # parser-specific counts, e.g. ALB lines with newer trailing fields


# Record times outside this window are not trusted for partitioning (a clock at 1970 or 9999 files
# rows where partition projection never looks): the key's time is used instead.
EARLIEST_RECORD_TIME = datetime(2000, 1, 1, tzinfo=UTC)
LATEST_RECORD_SKEW = timedelta(days=1)  # after the object's LastModified


def parse_iso_time(value: str | None) -> datetime | None:
    """ISO-8601 in UTC (no zone: taken as UTC); None when unparsable or its offset overflows 9999."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def fill_missing_times(times: list[datetime | None], context: ChunkContext) -> tuple[list[datetime], list[str]]:
    """Each row's partition time and where it came from: its own time when it is within the sane
    window, else the key's, else the object's LastModified (the placeholder "{%s}" in public
    samples is one such case; a clock at 1970 is another)."""
    fallback, fallback_source = (
        (context.key_time, "object_key") if context.key_time else (context.last_modified, "last_modified")
    )
    latest = context.last_modified.astimezone(UTC) + LATEST_RECORD_SKEW
    sane = [value if value is not None and EARLIEST_RECORD_TIME <= value <= latest else None for value in times]
    filled = [value or fallback for value in sane]
    sources = ["record" if value else fallback_source for value in sane]
    return filled, sources


def constant_column(value: str | None, length: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), length)

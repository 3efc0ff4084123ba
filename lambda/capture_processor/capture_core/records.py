"""What every parser hands to the processor: curated rows, plus the lines it could not use."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa


@dataclass(frozen=True)
class RejectedLine:
    line_number: int
    reason: str
    raw: bytes


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
    rejected: tuple[RejectedLine, ...]
    counters: dict[str, int]  # parser-specific counts, e.g. ALB lines with newer trailing fields


def fill_missing_times(times: list[datetime | None], context: ChunkContext) -> tuple[list[datetime], list[str]]:
    """Each row's partition time and where it came from: its own time, else the key's, else
    the object's LastModified (the placeholder "{%s}" in public samples is one such case)."""
    fallback, fallback_source = (
        (context.key_time, "object_key") if context.key_time else (context.last_modified, "last_modified")
    )
    filled = [value or fallback for value in times]
    sources = ["record" if value else fallback_source for value in times]
    return filled, sources


def constant_column(value: str | None, length: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), length)

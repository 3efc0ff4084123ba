"""Turn an S3 body stream into chunks of whole lines, with memory bounded by the chunk size.

Gzip is detected from the magic bytes (capture objects may be compressed without a `.gz`
name) and decompressed incrementally; concatenated gzip members are one valid gzip file.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

GZIP_MAGIC = b"\x1f\x8b"
READ_SIZE = 1 << 20


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class CorruptObjectError(ValueError):
    """The object's bytes cannot be decoded at all (not a line-level problem)."""


@dataclass(frozen=True)
class LineChunk:
    first_line: int  # 1-based number of the first line in `data`
    data: bytes  # whole lines, each ending in b"\n" except possibly the object's last one
    line_count: int  # newlines in data


@dataclass(frozen=True)
class OversizedLine:
    line_number: int
    prefix: bytes  # the first max_line_bytes of the line; the rest was skipped


@dataclass
class DecodeStatus:
    bytes_read: int = 0  # as stored (compressed when gzip)
    bytes_decoded: int = 0
    ended_early: bool = False  # gzip stream cut short: everything before the cut was still used
    over_limit: bool = False  # the object decodes to more than the limit: the rest was not read


def decoded_blocks(
    stream: Readable, status: DecodeStatus, read_size: int = READ_SIZE, max_decoded_bytes: int | None = None
) -> Iterator[bytes]:
    """The object's bytes, gunzipped when it is gzip; at most `max_decoded_bytes` of them (a small
    gzip object can inflate a thousandfold): past it, `status.over_limit` is set and reading stops."""
    first = stream.read(read_size)
    status.bytes_read += len(first)
    raw = _raw_blocks(stream, first, status, read_size)
    blocks = _gunzip(raw, status, read_size) if first.startswith(GZIP_MAGIC) else raw
    for block in blocks:
        if max_decoded_bytes is not None and status.bytes_decoded + len(block) > max_decoded_bytes:
            block = block[: max_decoded_bytes - status.bytes_decoded]
            status.bytes_decoded += len(block)
            status.over_limit = True  # line_chunks drops the line the limit falls in
            if block:
                yield block
            return
        status.bytes_decoded += len(block)
        yield block


def _raw_blocks(stream: Readable, first: bytes, status: DecodeStatus, read_size: int) -> Iterator[bytes]:
    block = first
    while block:
        yield block
        block = stream.read(read_size)
        status.bytes_read += len(block)


def _gunzip(raw: Iterator[bytes], status: DecodeStatus, out_size: int) -> Iterator[bytes]:
    member = zlib.decompressobj(wbits=31)
    member_fed = False
    for block in raw:
        data = block
        while True:
            member_fed = member_fed or bool(data)
            # max_length bounds the output of one call, so a highly compressed block cannot
            # inflate into memory all at once.
            out = member.decompress(data, out_size)
            if out:
                yield out
            if member.eof:
                data = member.unused_data
                if data and not data.startswith(GZIP_MAGIC[: len(data)]):
                    raise CorruptObjectError("bytes after the end of the gzip stream are not another gzip member")
                member, member_fed = zlib.decompressobj(wbits=31), False
                if not data:
                    break
                continue
            data = member.unconsumed_tail
            if not data and len(out) < out_size:  # input used up and no output held back by the cap
                break
    if member_fed:
        tail = member.flush()
        if tail:
            yield tail
        status.ended_early = not member.eof


def line_chunks(
    blocks: Iterator[bytes], *, chunk_bytes: int, max_line_bytes: int, status: DecodeStatus | None = None
) -> Iterator[LineChunk | OversizedLine]:
    """Whole lines grouped into chunks of about `chunk_bytes`. A line is reported as an
    OversizedLine (its prefix) once more than `max_line_bytes` of it is buffered, so lines up to
    one read block longer than the limit may still pass: the limit bounds memory."""
    pending = bytearray()
    line_number = 1
    skipping = False  # inside an oversized line, discarding until its newline
    for block in blocks:
        if skipping:
            newline = block.find(b"\n")
            if newline < 0:
                continue
            skipping = False
            line_number += 1
            block = block[newline + 1 :]
        pending += block
        if len(pending) < chunk_bytes and len(pending) <= max_line_bytes:
            continue
        cut = pending.rfind(b"\n") + 1
        if cut:
            with memoryview(pending) as view:  # one copy out of the buffer, not two
                chunk = bytes(view[:cut])
            del pending[:cut]
            newlines = chunk.count(b"\n")
            yield LineChunk(line_number, chunk, newlines)
            line_number += newlines
        if len(pending) > max_line_bytes:  # no newline left in pending: one line is that long
            yield OversizedLine(line_number, bytes(pending[:max_line_bytes]))
            skipping = True
            pending.clear()
    if pending and not skipping and status is not None and status.over_limit:
        del pending[pending.rfind(b"\n") + 1 :]  # the line the size limit cut is not read at all
    if pending and not skipping:
        yield LineChunk(line_number, bytes(pending), pending.count(b"\n"))

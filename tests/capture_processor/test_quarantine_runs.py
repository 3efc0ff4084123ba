"""Rejected lines as runs (issue 27, bounded work per record): equal rejected lines (the same reason and the same text
as the entry writes it) are one quarantine entry that names every line (`line_number`: the first, `line_ranges`:
`[first, last]` inclusive, `count`), so 200,000 lines of `{}` are one entry, not 43 MB of entries. Tried for what a
reader of the quarantine needs: the exact text, the source, the reason and every line number, nothing lost; runs
across chunks, mixed with distinct lines, hostile lines (huge, binary, invalid UTF-8) in a run; an erasure of a caller
whose lines sit in a run, and `verify` after it. Old entries of one line (no `count`) are still read."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from capture_core import outputs, processor
from capture_core.erasure import quarantine_entry_line_numbers, quarantine_entry_lines
from capture_core.outputs import QuarantineSource
from capture_core.processor import convert_stream
from capture_core.records import ChunkContext
from capture_core.redaction import DEFAULT_RULES, Redactor
from capture_core.routing import Tier
from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.test_erasure import RAW, both, capture_lines, cli  # noqa: F401 (both: a fixture)
from tests.capture_processor.test_iceberg_tables import catalog, database  # noqa: F401 (fixtures)
from tests.capture_processor.test_record_budgets import good

NOT_A_RECORD = "not a capture record: no captureData.endpointInput or endpointOutput object"
HEAD = {"source_bucket": "b", "source_key": "k", "source_version": "v"}


def quarantine_of(data: bytes, directory: Path) -> tuple[list[dict[str, Any]], int]:
    """The quarantine entries of one object converted in process, and the lines the conversion counted."""
    directory.mkdir(exist_ok=True)
    context = ChunkContext("h/pod/2026/11/30/10/x.jsonl", "h", None, datetime(2026, 11, 30, 10, tzinfo=UTC))
    conversion = convert_stream(
        io.BytesIO(data), Tier.POD, context, Redactor(DEFAULT_RULES), directory, QuarantineSource("b", "k", "v")
    )
    text = conversion.quarantine.path.read_text(encoding="utf-8") if conversion.quarantine.entries else ""
    entries = [json.loads(line) for line in text.splitlines()]
    assert len(entries) == conversion.quarantine.entries
    return entries, conversion.quarantine.lines


def by_first_line(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entries, key=lambda entry: entry["line_number"])


def lines_of(*lines: str | bytes) -> bytes:
    return b"".join((line.encode() if isinstance(line, str) else line) + b"\n" for line in lines)


def test_equal_bad_lines_are_one_entry_naming_every_line_and_distinct_ones_keep_theirs(tmp_path: Path) -> None:
    data = lines_of(
        good("a"), "{}", "{}", "{}", "[]", "{}", "{not json", "{not json", good("b"), "{}",
        '{"mail": "alice.smith@example.com"}', '{"mail": "bob.jones@example.com"}', "{}",
    )

    entries, lines = quarantine_of(data, tmp_path / "q")

    braces, array, not_json, mail = by_first_line(entries)
    assert braces == {**HEAD, "line_number": 2, "line_ranges": [[2, 4], [6, 6], [10, 10], [13, 13]], "count": 6,
                      "reason": NOT_A_RECORD, "raw_truncated": False, "raw": "{}"}
    assert array == {**HEAD, "line_number": 5, "reason": "a capture line must be a JSON object, got list",
                     "raw_truncated": False, "raw": "[]"}  # one line: the entry as before runs
    assert not_json["line_ranges"] == [[7, 8]] and not_json["count"] == 2 and not_json["raw"] == "{not json"
    assert not_json["reason"].startswith("invalid JSON: ")
    # Two lines redacted to the same text are one run: the entry says what each of them says.
    assert mail["line_ranges"] == [[11, 12]] and mail["raw"] == '{"mail": "[REDACTED:email]"}'
    named = [number for entry in entries for number in quarantine_entry_line_numbers(entry)]
    assert sorted(named) == [2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13] and lines == len(named)
    assert sum(map(quarantine_entry_lines, entries)) == lines


def test_a_run_spans_chunks_as_one_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processor, "CHUNK_BYTES", 256)  # ~80 lines of `{}` a chunk, a record a chunk of its own
    data = lines_of(*["{}"] * 1_000, good("middle"), *["{}"] * 1_000, "[]", *["{}"] * 10)

    entries, lines = quarantine_of(data, tmp_path / "q")

    braces, array = by_first_line(entries)
    assert braces["line_ranges"] == [[1, 1_000], [1_002, 2_001], [2_003, 2_012]] and braces["count"] == 2_010
    assert array["line_number"] == 2_002 and "count" not in array
    assert lines == 2_011


def test_a_run_with_more_ranges_than_an_entry_holds_goes_on_in_the_next_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outputs, "MAX_RANGES_PER_ENTRY", 3)
    monkeypatch.setattr(processor, "CHUNK_BYTES", 64)
    data = lines_of(*["{}", "[]"] * 20)  # `{}` on every odd line: one range per line

    entries, lines = quarantine_of(data, tmp_path / "q")

    braces = [entry for entry in entries if entry["raw"] == "{}"]
    assert all(len(entry.get("line_ranges", [0])) <= 3 for entry in braces)
    named = sorted(number for entry in braces for number in quarantine_entry_line_numbers(entry))
    assert named == list(range(1, 41, 2))  # every line once, none lost at an entry's edge
    assert sum(map(quarantine_entry_lines, braces)) == 20 and lines == 40


def test_hostile_lines_in_runs_keep_their_text_reason_and_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outputs, "QUARANTINE_RAW_LIMIT", 4_096)
    huge = '{"a": "' + "x" * 10_000  # cut at the limit: lines that differ only after the cut read the same
    binary = b"\x00\x01\x02\xff\xfe\x1b[31m"
    invalid = b'{"x": "caf\xe9"}'  # Windows-1252, not UTF-8
    data = lines_of(
        huge + 'Y"}', binary, invalid, huge + 'Z"}', binary, "{}", invalid, binary, huge + '"}',
    )

    entries, lines = quarantine_of(data, tmp_path / "q")

    cut, binaries, latin, braces = by_first_line(entries)
    assert cut["line_ranges"] == [[1, 1], [4, 4], [9, 9]] and cut["count"] == 3
    assert cut["raw_truncated"] is True and cut["raw"] == huge[:4_096] and cut["reason"] == NOT_A_RECORD
    assert binaries["line_ranges"] == [[2, 2], [5, 5], [8, 8]] and binaries["count"] == 3
    assert binaries["raw"] == binary.decode("utf-8", errors="replace") and binaries["raw_truncated"] is False
    assert binaries["reason"].startswith(("invalid JSON", "not UTF-8 text"))
    assert latin["line_ranges"] == [[3, 3], [7, 7]] and latin["raw"] == '{"x": "caf\ufffd"}'
    assert latin["reason"].startswith("not UTF-8 text")
    assert braces["line_number"] == 6 and braces["raw"] == "{}" and "count" not in braces
    assert lines == 9


def test_an_entry_of_one_line_written_before_runs_is_still_read() -> None:
    old = {**HEAD, "line_number": 7, "reason": NOT_A_RECORD, "raw_truncated": False, "raw": "{}"}

    assert quarantine_entry_lines(old) == 1 and quarantine_entry_line_numbers(old) == [7]


# ---- erasure: a caller whose quarantined lines sit in a run ------------------------------------------------------

TEAM_A = json.dumps({"eventMetadata": {"callerId": "team-a", "eventId": "q-a"}, "note": "no capture data"})
TEAM_B = json.dumps({"eventMetadata": {"callerId": "team-b", "eventId": "q-b"}, "note": "no capture data"})


def test_an_erasure_removes_a_run_of_the_callers_lines_and_verify_counts_every_line(
    both: Pipeline, catalog: Any, database: str  # noqa: F811
) -> None:
    pipeline = both  # (test_erasure's: a versioned bucket, CURATED_OUTPUT=both)
    body = capture_lines("p", ["team-a", "team-b"]) + lines_of(TEAM_A, TEAM_B, TEAM_A, "{}", TEAM_A, TEAM_B)
    key = pipeline.put(f"{RAW}runs.jsonl", body)
    assert pipeline.run(key) == {"batchItemFailures": []}
    runs = {entry["raw"]: entry for entry in pipeline.quarantine()}
    assert runs[TEAM_A]["line_ranges"] == [[3, 3], [5, 5], [7, 7]] and runs[TEAM_A]["count"] == 3
    assert runs[TEAM_B]["line_ranges"] == [[4, 4], [8, 8]]

    common = ("--database", database, "--bucket", pipeline.bucket)
    status, [before] = cli(catalog, "verify", *common, "--caller-id", "team-a")
    assert status == 1 and list(before["places"]["quarantine/"].values()) == [3]  # lines, not entries

    status, printed = cli(catalog, "delete", *common, "--caller-id", "team-a")
    assert status == 0
    status, [after] = cli(catalog, "verify", *common, "--erasure-id", printed[-1]["erasure_id"])
    assert status == 0 and after["remaining"] == 0, after
    remaining = {entry["raw"]: entry for entry in pipeline.quarantine()}
    assert set(remaining) == {TEAM_B, "{}"} and remaining[TEAM_B] == runs[TEAM_B]  # the other runs untouched
    record = json.loads(pipeline.s3.get_object(
        Bucket=pipeline.bucket, Key=printed[-1]["audit"].removeprefix(f"s3://{pipeline.bucket}/"))["Body"].read())
    [touched] = record["objects"]["quarantine/"]
    assert touched["rows_removed"] == 3 and touched["action"] == "rewritten"

    # A restored copy of the raw object: the processor drops the caller's run before it writes the quarantine.
    restored = pipeline.put(f"{RAW}restored.jsonl", body)
    assert pipeline.run(restored) == {"batchItemFailures": []}
    assert "team-a" not in json.dumps(pipeline.quarantine())
    assert sum(quarantine_entry_lines(entry) for entry in pipeline.quarantine()) == 2 * 3  # team-b's 2 and `{}`

"""Erasure everywhere a copy of a row lives, its verification, and the register the processor consults.

A deletion by caller (or by the closed predicate grammar of :mod:`capture_core.capture_tables`) removes the matching
rows from (docs/capture-processor.md, "Erasure"):

- both Iceberg tables (a table without a column the predicate names is not touched), with every snapshot older
  than the deletion, and every version of each data file and manifest only those snapshots referenced;
- the per-object Parquet layout under ``curated/``: each object holding a matching row is rewritten without it
  (or deleted when nothing is left), in its current version, and every older version holding one is deleted;
- the quarantine (``quarantine/``): JSON Lines entries whose captured line matches, rewritten the same way;
- the raw objects (``data-capture/``, tiers ``sme`` and ``pod``): the matching capture lines are removed, the
  object is written again (gzip if it was) with the metadata ``capture-erasure: <id>``, so the processor skips that
  new version, and every older version is deleted;
- the Athena query results (``athena-results/``): every result written before the deletion, in every version. A
  result holding a caller's rows need not name the caller (``SELECT input_text … WHERE …``), so results are not
  searched: they are derived, and the workgroups make them again on request.

Every version: the capture bucket is versioned, so a rewrite or a delete alone would leave the rows in a
noncurrent version for ``capture.noncurrentVersionRetentionDays``; the erasure deletes those versions by id.

Before anything, the erasure writes its entry to the **register** (``audit/erasure-register/<id>.json``): from then
on the processor drops, from every object it processes, the rows that match an entry and whose event time is not
after the entry's ``erased_before`` (a redelivered or restored raw object cannot bring them back; new traffic of
the same caller after the deletion is kept), and skips the raw objects the erasure itself rewrote.

Matching a captured line (the raw objects, the quarantine): ``caller_id``, ``event_id``, ``inference_id`` are read
from the line's ``eventMetadata``, ``source_key`` from the entry or the key; a term on any other column matches
when it is ``column = 'text'`` and the line contains the JSON string ``"text"`` (a text the processor stored in
that column came from the line); other terms on other columns match nothing there and are named in the record's
``unevaluated`` (such predicates are for the tables).
"""

from __future__ import annotations

import gzip
import json
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from capture_core.predicates import PredicateError, Term, parse_terms
from capture_core.routing import Tier, route_object

REGISTER_PREFIX = "audit/erasure-register/"
ERASURE_AUDIT_PREFIX = "audit/erasures/"
ERASURE_METADATA = "capture-erasure"  # x-amz-meta-capture-erasure on a raw object an erasure rewrote
GZIP_MAGIC = b"\x1f\x8b"
# The capture line's eventMetadata fields the grammar's columns name (capture_format reads the same).
_LINE_COLUMNS = {"caller_id": "callerId", "event_id": "eventId", "inference_id": "inferenceId"}
_TIME_COLUMNS = {"capture": "inference_time", "alb": "time"}


@dataclass(frozen=True)
class Erasure:
    """One entry of the register: what was erased, and the event time up to which it applies."""

    erasure_id: str
    predicate: str  # the grammar's text
    erased_before: str  # ISO-8601 UTC: rows whose event time is not after this are erased
    requested_by: str = ""
    reason: str = ""

    @classmethod
    def new(cls, predicate: str, requested_by: str, reason: str = "", now: datetime | None = None) -> Erasure:
        parse_terms(predicate)  # refuse a predicate outside the grammar before anything is written
        moment = (now or datetime.now(UTC)).isoformat(timespec="seconds")
        return cls(f"{moment.replace(':', '').replace('+0000', 'Z')}-{uuid.uuid4().hex[:8]}", predicate, moment,
                   requested_by, reason)

    def terms(self) -> list[Term]:
        return parse_terms(self.predicate)

    @property
    def before(self) -> datetime:
        return datetime.fromisoformat(self.erased_before)


# ---- matching -------------------------------------------------------------------------------------------------


def arrow_mask(table: pa.Table, terms: Sequence[Term], time_column: str | None = None,
               before: datetime | None = None) -> pa.ChunkedArray | None:
    """The rows of ``table`` the terms match (nulls never match), only those at or before ``before`` when given;
    None when the table lacks a column a term names (the predicate does not apply to it)."""
    if any(term.column not in table.column_names for term in terms):
        return None
    mask: Any = None
    for term in terms:
        column = table.column(term.column)
        literal: Any = term.literal
        if pa.types.is_timestamp(column.type) and isinstance(literal, str):
            literal = _instant(literal)
        elif pa.types.is_string(column.type) and not isinstance(literal, str):
            literal = str(literal)
        compare = {"=": pc.equal, "<": pc.less, ">": pc.greater}[term.op]
        try:
            hit = compare(column, pa.scalar(literal, type=column.type) if not pa.types.is_list(column.type)
                          else literal)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise PredicateError(f"{term.column} {term.op} {term.literal!r}: {error}") from None
        mask = hit if mask is None else pc.and_kleene(mask, hit)
    if time_column is not None and before is not None and time_column in table.column_names:
        until = pa.scalar(before, pa.timestamp("us", "UTC"))
        mask = pc.and_kleene(mask, pc.less_equal(table.column(time_column), until))
    return pc.fill_null(mask, False)


def _instant(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass
class LineMatcher:
    """The terms applied to captured lines (raw objects, quarantine entries): the module docstring's rule."""

    terms: Sequence[Term]
    before: datetime | None = None  # lines whose eventMetadata.inferenceTime is later do not match
    unevaluated: set[str] = field(default_factory=set)

    def matches(self, line: str, source_key: str) -> bool:
        if self.before is not None and not _line_before(line, self.before):
            return False
        document: Any = None
        for term in self.terms:
            if term.column in _LINE_COLUMNS or term.column == "source_key":
                if term.column == "source_key":
                    value: Any = source_key
                else:
                    if document is None:
                        document = _json_object(line)
                    metadata = document.get("eventMetadata") if isinstance(document, dict) else None
                    value = metadata.get(_LINE_COLUMNS[term.column]) if isinstance(metadata, dict) else None
                    if value is None and term.op == "=" and isinstance(term.literal, str):
                        # a line cut at 1 MiB in the quarantine is not JSON any more: look for the field as written
                        value = term.literal if _field_written(line, _LINE_COLUMNS[term.column], term.literal) \
                            else None
                if not _compare(value, term):
                    return False
            elif term.op == "=" and isinstance(term.literal, str):
                if json.dumps(term.literal, ensure_ascii=False) not in line and json.dumps(term.literal) not in line:
                    return False
            else:
                self.unevaluated.add(term.column)
                return False
        return True


def _field_written(line: str, name: str, literal: str) -> bool:
    quoted = json.dumps(literal)
    return any(f'"{name}"{separator}{quoted}' in line for separator in (":", ": "))


def _json_object(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _compare(value: Any, term: Term) -> bool:
    if value is None:
        return False
    try:
        if term.op == "=":
            return bool(value == term.literal)
        return bool(value < term.literal) if term.op == "<" else bool(value > term.literal)
    except TypeError:
        return False


# ---- S3 versions ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    key: str
    version_id: str  # "null" in a bucket that was never versioned
    latest: bool
    last_modified: datetime
    delete_marker: bool = False


def versions(s3: Any, bucket: str, prefix: str) -> Iterator[Version]:
    """Every version and delete marker under ``prefix``."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Versions", []):
            yield Version(item["Key"], item.get("VersionId") or "null", bool(item.get("IsLatest")),
                          item["LastModified"])
        for item in page.get("DeleteMarkers", []):
            yield Version(item["Key"], item.get("VersionId") or "null", bool(item.get("IsLatest")),
                          item["LastModified"], delete_marker=True)


def purge_key(s3: Any, bucket: str, key: str, keep: str | None = None) -> int:
    """Deletes every version and delete marker of exactly ``key`` but ``keep``; how many."""
    doomed = [v for v in versions(s3, bucket, key) if v.key == key and v.version_id != keep]
    for version in doomed:
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version.version_id)
    return len(doomed)


def _download(s3: Any, bucket: str, version: Version, into: IO[bytes]) -> dict[str, Any]:
    response = s3.get_object(Bucket=bucket, Key=version.key, VersionId=version.version_id)
    try:
        for block in iter(lambda: response["Body"].read(1 << 20), b""):
            into.write(block)
    finally:
        response["Body"].close()
    into.seek(0)
    return response  # type: ignore[no-any-return]


def _put_arguments(response: Mapping[str, Any]) -> dict[str, Any]:
    """The original's encryption (the bucket policy requires the capture key by ARN) and content type."""
    arguments: dict[str, Any] = {}
    if response.get("ServerSideEncryption") == "aws:kms":
        arguments["ServerSideEncryption"] = "aws:kms"
        if response.get("SSEKMSKeyId"):
            arguments["SSEKMSKeyId"] = response["SSEKMSKeyId"]
    if response.get("ContentType"):
        arguments["ContentType"] = response["ContentType"]
    return arguments


# ---- places -------------------------------------------------------------------------------------------------


@dataclass
class Touched:
    """One object an erasure changed: ``action`` rewritten (a new version without the rows) or deleted."""

    key: str
    action: str
    rows_removed: int = 0
    versions_deleted: int = 0
    new_version: str | None = None


# A reader of one version's rows: (local file) -> (matching count, rewrite: write the kept rows to a file, whether
# any row is kept).
Reader = Callable[[IO[bytes], str], tuple[int, Callable[[IO[bytes]], bool]]]


class UnreadableObject(Exception):
    """An object in a place the command reads that is not in the place's format: it may hold rows the command can
    neither count nor remove, so the command stops and names it rather than skip it or fail with a traceback."""


def parquet_reader(terms: Sequence[Term], before: datetime | None = None) -> Reader:
    """Curated Parquet (the per-object layout, the tables' data files); only rows not after ``before``. An empty
    object (a folder the S3 console made) holds no row; any other object that is not Parquet is UnreadableObject."""
    def read(file: IO[bytes], key: str) -> tuple[int, Callable[[IO[bytes]], bool]]:
        try:
            names = pq.read_schema(file).names
        except pa.ArrowInvalid:
            file.seek(0, 2)
            if file.tell() == 0:
                return 0, lambda out: False
            raise UnreadableObject(f"{key} is not Parquet, so the rows it may hold can be neither counted nor erased "
                                   "(only the processor's Parquet files belong there): move it out of that prefix "
                                   "or delete it, then run the command again") from None
        time_column = next((name for name in ("inference_time", "time") if name in names), None)
        # the predicate's columns first (a few small columns of a file that mostly holds text): most files match
        # nothing, and are never read whole
        wanted = [name for name in names if name == time_column or any(term.column == name for term in terms)]
        file.seek(0)
        mask = arrow_mask(pq.read_table(file, columns=wanted), terms, time_column, before)
        count = int(pc.sum(mask).as_py() or 0) if mask is not None else 0

        def rewrite(out: IO[bytes]) -> bool:
            file.seek(0)
            kept = pq.read_table(file).filter(pc.invert(mask))
            pq.write_table(kept, out, compression="zstd")
            return bool(kept.num_rows)
        return count, rewrite
    return read


def lines_reader(matcher: LineMatcher, *, quarantine: bool) -> Reader:
    """Capture JSON Lines (plain or gzip) or quarantine entries (the captured line in ``raw``); the count is of
    captured lines (a quarantine entry of a run stands for ``count`` of them)."""
    def read(file: IO[bytes], key: str) -> tuple[int, Callable[[IO[bytes]], bool]]:
        zipped = file.read(2) == GZIP_MAGIC
        file.seek(0)
        source: IO[bytes] = gzip.GzipFile(fileobj=file) if zipped else file  # type: ignore[assignment]
        dropped: dict[int, int] = {}  # line of the object -> captured lines it holds
        for number, raw in enumerate(source):
            if lines := _line_matches(matcher, raw, key, quarantine):
                dropped[number] = lines

        def rewrite(out: IO[bytes]) -> bool:
            file.seek(0)
            reader: IO[bytes] = gzip.GzipFile(fileobj=file) if zipped else file  # type: ignore[assignment]
            writer: IO[bytes] = gzip.GzipFile(fileobj=out, mode="wb", mtime=0) if zipped else out  # type: ignore[assignment]
            kept = 0
            for number, raw in enumerate(reader):
                if number not in dropped:
                    writer.write(raw)
                    kept += 1
            if zipped:
                writer.close()
            return kept > 0
        return sum(dropped.values()), rewrite
    return read


def _line_matches(matcher: LineMatcher, raw: bytes, key: str, quarantine: bool) -> int:
    """How many captured lines ``raw`` holds that match: 0 or 1 for a capture line, a quarantine entry's count."""
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    if not text:
        return 0
    if quarantine:
        entry = _json_object(text)
        if not isinstance(entry, dict):
            return 0
        matched = matcher.matches(str(entry.get("raw") or ""), str(entry.get("source_key") or ""))
        return quarantine_entry_lines(entry) if matched else 0
    return int(matcher.matches(text, key))


def quarantine_entry_lines(entry: Mapping[str, Any]) -> int:
    """The captured lines a quarantine entry stands for: its ``count`` (a run of equal lines), else one (an entry
    of one line, and every entry written before runs)."""
    count = entry.get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def quarantine_entry_line_numbers(entry: Mapping[str, Any]) -> list[int]:
    """Every line number a quarantine entry names: its ``line_ranges`` (``[first, last]``, inclusive), else its
    ``line_number``."""
    ranges = entry.get("line_ranges")
    if isinstance(ranges, list):
        return [number for first, last in ranges for number in range(first, last + 1)]
    return [entry["line_number"]]


def erase_place(s3: Any, bucket: str, prefix: str, read: Reader, *, erasure_id: str,
                include: Callable[[str], bool] = lambda key: True, metadata: bool = False) -> list[Touched]:
    """Every version under ``prefix``: the current one rewritten without the matching rows (deleted when nothing
    is left), an older one holding any deleted. ``metadata``: mark the rewrite as the erasure's (raw objects)."""
    touched: dict[str, Touched] = {}
    for version in sorted(versions(s3, bucket, prefix), key=lambda v: (v.key, not v.latest)):
        if version.delete_marker or not include(version.key):
            continue
        with tempfile.TemporaryFile() as local:
            response = _download(s3, bucket, version, local)  # an earlier erasure's rewrite too: other rows
            count, rewrite = read(local, version.key)
            if not count:
                continue
            entry = touched.setdefault(version.key, Touched(version.key, "deleted"))
            entry.rows_removed += count
            if version.latest:
                with tempfile.TemporaryFile() as out:
                    if rewrite(out):
                        out.seek(0)
                        arguments = _put_arguments(response)
                        if metadata:
                            arguments["Metadata"] = {**response.get("Metadata", {}), ERASURE_METADATA: erasure_id}
                        put = s3.put_object(Bucket=bucket, Key=version.key, Body=out.read(), **arguments)
                        entry.action, entry.new_version = "rewritten", put.get("VersionId")
                        entry.versions_deleted += _delete_version(s3, bucket, version)
                    else:
                        entry.versions_deleted += purge_key(s3, bucket, version.key)
            else:
                entry.versions_deleted += _delete_version(s3, bucket, version)
    return list(touched.values())


def _delete_version(s3: Any, bucket: str, version: Version) -> int:
    try:
        s3.delete_object(Bucket=bucket, Key=version.key, VersionId=version.version_id)
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") not in ("NoSuchVersion", "NoSuchKey"):
            raise
        return 0
    return 1


def count_place(s3: Any, bucket: str, prefix: str, read: Reader,
                include: Callable[[str], bool] = lambda key: True) -> dict[str, int]:
    """What remains: matching rows per ``key@version``, every version under ``prefix``."""
    remaining = {}
    for version in versions(s3, bucket, prefix):
        if version.delete_marker or not include(version.key):
            continue
        with tempfile.TemporaryFile() as local:
            _download(s3, bucket, version, local)
            count, _ = read(local, version.key)
        if count:
            remaining[f"{version.key}@{version.version_id}"] = count
    return remaining


def delete_results(s3: Any, bucket: str, prefix: str, before: datetime) -> list[Touched]:
    """Every version of every Athena result written at or before ``before`` (the module docstring's why)."""
    touched: dict[str, Touched] = {}
    for version in versions(s3, bucket, prefix):
        if version.last_modified <= before:
            entry = touched.setdefault(version.key, Touched(version.key, "deleted"))
            entry.versions_deleted += _delete_version(s3, bucket, version)
    return list(touched.values())


def results_before(s3: Any, bucket: str, prefix: str, before: datetime) -> list[str]:
    return [f"{v.key}@{v.version_id}" for v in versions(s3, bucket, prefix)
            if not v.delete_marker and v.last_modified <= before]


# ---- the places of a deployment -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Places:
    """Where copies live (CaptureStorage's prefixes)."""

    curated: str = "curated/"
    quarantine: str = "quarantine/"
    raw: tuple[str, ...] = ("data-capture/",)
    athena_results: str = "athena-results/"
    iceberg: str = "curated-iceberg/"


def _capture_tier(key: str) -> bool:
    return route_object(key, skip_prefixes=()).tier in (Tier.SME, Tier.POD)


def _readers(erasure: Erasure, matcher: LineMatcher) -> dict[str, Reader]:
    terms = erasure.terms()
    return {"parquet": parquet_reader(terms, erasure.before), "quarantine": lines_reader(matcher, quarantine=True),
            "raw": lines_reader(matcher, quarantine=False)}


def erase_objects(s3: Any, bucket: str, erasure: Erasure, places: Places) -> tuple[dict[str, list[Touched]], set[str]]:
    """The object places (all but the tables); the objects touched per place and the columns not evaluated on
    captured lines."""
    matcher = LineMatcher(erasure.terms(), erasure.before)
    read = _readers(erasure, matcher)
    touched = {
        places.curated: erase_place(s3, bucket, places.curated, read["parquet"], erasure_id=erasure.erasure_id),
        places.quarantine: erase_place(s3, bucket, places.quarantine, read["quarantine"],
                                       erasure_id=erasure.erasure_id),
    }
    for prefix in places.raw:
        touched[prefix] = erase_place(s3, bucket, prefix, read["raw"], erasure_id=erasure.erasure_id,
                                      include=_capture_tier, metadata=True)
    touched[places.athena_results] = delete_results(s3, bucket, places.athena_results, erasure.before)
    return touched, matcher.unevaluated


def verify_objects(s3: Any, bucket: str, erasure: Erasure, places: Places,
                   table_prefixes: Iterable[str] = ()) -> dict[str, dict[str, int] | list[str]]:
    """What remains of the erased rows in each object place, every version read (the Iceberg tables' data files
    under ``table_prefixes`` too, referenced or not); results: those written before the erasure."""
    matcher = LineMatcher(erasure.terms(), erasure.before)
    read = _readers(erasure, matcher)
    report: dict[str, dict[str, int] | list[str]] = {
        places.curated: count_place(s3, bucket, places.curated, read["parquet"]),
        places.quarantine: count_place(s3, bucket, places.quarantine, read["quarantine"]),
    }
    for prefix in places.raw:
        report[prefix] = count_place(s3, bucket, prefix, read["raw"], include=_capture_tier)
    for prefix in table_prefixes:
        report[prefix] = count_place(s3, bucket, prefix, read["parquet"], include=lambda key: key.endswith(".parquet"))
    report[places.athena_results] = results_before(s3, bucket, places.athena_results, erasure.before)
    return report


# ---- the register ---------------------------------------------------------------------------------------------


def register(s3: Any, bucket: str, erasure: Erasure, prefix: str = REGISTER_PREFIX, *,
             put_arguments: Mapping[str, Any] | None = None) -> str:
    """The entry, as ``<prefix><id>.json``; ``put_arguments``: the SSE-KMS headers naming the capture key (the
    entry names the erased caller: personal data, under the capture key like the rows, whatever the bucket's
    default encryption; :func:`sse_kms`)."""
    key = f"{prefix}{erasure.erasure_id}.json"
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(asdict(erasure), indent=2).encode(),
                  ContentType="application/json", **(put_arguments or {}))
    return key


def sse_kms(key_id: str | None) -> dict[str, str]:
    """The PutObject arguments that name ``key_id`` (SSE-KMS), or none (the bucket's default encryption). A bucket
    that accepts ALB access logs has SSE-S3 as its default, and its policy refuses every other write that does not
    name the capture key (``CaptureStorage``, ``load_balancer_logs``): the register and the audit records name it."""
    return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": key_id} if key_id else {}


class DeletionRegister:
    """The erasures the processor applies to what it processes (the module docstring). Read once per invocation
    (a LIST of the prefix; entries are cached by key and ETag in a warm container). A register that cannot be read
    fails the message: SQS retries it, rather than rows coming back."""

    _cache: ClassVar[dict[tuple[str, str, str], Erasure]] = {}

    def __init__(self, erasures: Sequence[Erasure]) -> None:
        self.erasures = list(erasures)
        self._ids = {erasure.erasure_id for erasure in erasures}

    @classmethod
    def load(cls, s3: Any, bucket: str, prefix: str = REGISTER_PREFIX) -> DeletionRegister:
        erasures = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                cache_key = (bucket, item["Key"], item["ETag"])
                if cache_key not in cls._cache:
                    body = json.loads(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
                    cls._cache[cache_key] = Erasure(**body)
                erasures.append(cls._cache[cache_key])
        return cls(erasures)

    def __bool__(self) -> bool:
        return bool(self.erasures)

    def rewritten_by_erasure(self, metadata: Mapping[str, str]) -> bool:
        """A raw object an erasure of this register rewrote (the rows it kept are in the outputs already)."""
        return metadata.get(ERASURE_METADATA) in self._ids

    def scrub_table(self, table: pa.Table, kind: str) -> tuple[pa.Table, int]:
        """``table`` without the rows an erasure covers; how many were dropped."""
        dropped = 0
        for erasure in self.erasures:
            mask = arrow_mask(table, erasure.terms(), _TIME_COLUMNS[kind], erasure.before)
            if mask is None:
                continue
            hits = int(pc.sum(mask).as_py() or 0)
            if hits:
                table, dropped = table.filter(pc.invert(mask)), dropped + hits
        return table, dropped

    def scrub_parquet(self, path: Path, kind: str) -> int:
        """Rewrites a local Parquet file without the covered rows; how many were dropped."""
        table = pq.read_table(path)
        kept, dropped = self.scrub_table(table, kind)
        if dropped:
            pq.write_table(kept, path, compression="zstd")
        return dropped

    def scrub_quarantine(self, path: Path) -> tuple[int, int, int]:
        """Rewrites a local quarantine file without the entries an erasure covers (every entry is of an object
        being processed now, so from before any erasure's time only when its lines are: the time bound is the
        line's ``eventMetadata.inferenceTime`` when it has one). An entry of a run holds equal lines: they match
        together. (entries kept, lines they hold, lines dropped)."""
        if not path.exists():
            return 0, 0, 0
        kept_lines, kept, dropped = [], 0, 0
        with path.open(encoding="utf-8") as file:
            for line in file:
                entry = json.loads(line)
                raw, key = str(entry.get("raw") or ""), str(entry.get("source_key") or "")
                if any(LineMatcher(e.terms(), e.before).matches(raw, key) for e in self.erasures):
                    dropped += quarantine_entry_lines(entry)
                else:
                    kept_lines.append(line)
                    kept += quarantine_entry_lines(entry)
        if dropped:
            path.write_text("".join(kept_lines), encoding="utf-8")
        return len(kept_lines), kept, dropped


def _line_before(raw: str, before: datetime) -> bool:
    document = _json_object(raw)
    metadata = document.get("eventMetadata") if isinstance(document, dict) else None
    when = metadata.get("inferenceTime") if isinstance(metadata, dict) else None
    if not isinstance(when, str):
        return True  # no time of its own: an entry of an object written before now; erased
    try:
        return _instant(when) <= before
    except ValueError:
        return True


@dataclass
class ErasureRecord:
    """The audit record of one erasure: every object it touched, per place."""

    erasure_id: str
    predicate: str
    requested_by: str
    reason: str
    started_at: str
    finished_at: str = ""
    register_key: str = ""
    tables: list[dict[str, Any]] = field(default_factory=list)
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unevaluated_columns: list[str] = field(default_factory=list)

    def add_objects(self, touched: Mapping[str, list[Touched]]) -> None:
        for place, items in touched.items():
            self.objects[place] = [asdict(item) for item in items]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()


def write_record(s3: Any, bucket: str, record: ErasureRecord, prefix: str = ERASURE_AUDIT_PREFIX, *,
                 put_arguments: Mapping[str, Any] | None = None) -> str:
    key = f"{prefix}{record.erasure_id}.json"
    s3.put_object(Bucket=bucket, Key=key, Body=record.to_json(), ContentType="application/json",
                  **(put_arguments or {}))
    return key


# ---- the whole erasure, and its verification --------------------------------------------------------------------


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.removeprefix("s3://").removeprefix("s3a://").partition("/")
    return bucket, key


def erase_everywhere(s3: Any, bucket: str, catalog: Any, database: str, tables: Iterable[str],
                     erasure: Erasure, places: Places, *, put_arguments: Mapping[str, Any] | None = None
                     ) -> ErasureRecord:
    """The register entry first (written with ``put_arguments``), then the tables (a table without a column the
    predicate names is left alone), then every object place; the record of every object touched (not written here:
    :func:`write_record`)."""
    from capture_core.capture_tables import DeletionRecord, delete_rows, earlier_files, parse_predicate

    record = ErasureRecord(erasure.erasure_id, erasure.predicate, erasure.requested_by, erasure.reason,
                           erasure.erased_before)
    record.register_key = register(s3, bucket, erasure, put_arguments=put_arguments)
    for name in tables:
        table = catalog.load_table((database, name))
        try:
            predicate = parse_predicate(erasure.predicate, table.schema().column_names)
        except PredicateError:
            record.tables.append({"table": name, "applies": False})
            continue
        deletion = DeletionRecord(name, erasure.predicate, erasure.requested_by, erasure.erased_before,
                                  reason=erasure.reason)
        delete_rows(table, predicate, deletion, label=f"erasure {erasure.erasure_id}")
        versions_deleted = sum(purge_key(s3, *_split(path))
                               for path in deletion.unreferenced_files + deletion.unreferenced_metadata_files)
        deletion.purged_files = len(deletion.unreferenced_files) + len(deletion.unreferenced_metadata_files)
        # What an earlier run left: files expired snapshots named that still hold the rows (that run was refused a
        # purge after its expiry), with the manifests and manifest lists that name them (their bounds may name the
        # caller). Every version is read, as verify reads them.
        read = parquet_reader(erasure.terms(), erasure.before)
        earlier = {path: metadata for path, metadata in earlier_files(table).items() if _holds_rows(s3, path, read)}
        earlier_metadata = sorted(set().union(*earlier.values()) - set(deletion.unreferenced_metadata_files))
        versions_deleted += sum(purge_key(s3, *_split(path)) for path in [*sorted(earlier), *earlier_metadata])
        record.tables.append({"applies": True, **asdict(deletion), "earlier_files": sorted(earlier),
                              "earlier_metadata_files": earlier_metadata, "versions_deleted": versions_deleted})
    touched, unevaluated = erase_objects(s3, bucket, erasure, places)
    record.add_objects(touched)
    record.unevaluated_columns = sorted(unevaluated)
    record.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    return record


def _holds_rows(s3: Any, path: str, read: Reader) -> bool:
    """Whether any version of the object at ``path`` (``s3://bucket/key``) holds a row ``read`` counts."""
    bucket, key = _split(path)
    return bool(count_place(s3, bucket, key, read, include=key.__eq__))


def verify_everywhere(s3: Any, bucket: str, catalog: Any, database: str, tables: Iterable[str], erasure: Erasure,
                      places: Places) -> tuple[dict[str, Any], int]:
    """What remains, per place: per table and snapshot the matching rows (time travel included), and per object
    version elsewhere; with the total (0: erased everywhere)."""
    from pyiceberg.expressions import And, LessThanOrEqual

    from capture_core.capture_tables import SPECS, parse_predicate

    time_columns = {spec.time_column for spec in SPECS.values()}
    report: dict[str, Any] = {}
    table_prefixes = []
    total = 0
    for name in tables:
        table = catalog.load_table((database, name))
        try:
            predicate = parse_predicate(erasure.predicate, table.schema().column_names)
        except PredicateError:
            continue
        time_column = next(name for name in table.schema().column_names if name in time_columns)
        predicate = And(predicate, LessThanOrEqual(time_column, erasure.erased_before))  # type: ignore[call-arg, arg-type]
        counts = {str(snapshot.snapshot_id): table.scan(row_filter=predicate, snapshot_id=snapshot.snapshot_id,
                                                        selected_fields=(erasure.terms()[0].column,)).to_arrow()
                  .num_rows for snapshot in table.snapshots()}
        report[f"table {name}"] = {snapshot: n for snapshot, n in counts.items() if n}
        total += sum(counts.values())
        table_bucket, key = _split(table.location().rstrip("/") + "/data/")
        if table_bucket == bucket:
            table_prefixes.append(key)
    objects = verify_objects(s3, bucket, erasure, places, table_prefixes)
    for place, remaining in objects.items():
        report[place] = remaining
        total += sum(remaining.values()) if isinstance(remaining, dict) else len(remaining)
    return report, total


def scrub_conversion(register: DeletionRegister, conversion: Any, tier: Tier) -> int:
    """A converted object's local outputs without what the register's erasures cover (before any upload or
    commit); how many rows and quarantined lines were dropped."""
    kind = "alb" if tier == Tier.ALB else "capture"
    dropped = 0
    for file in conversion.partition_files:
        dropped += register.scrub_parquet(file.path, kind)
    entries, lines, dropped_lines = register.scrub_quarantine(conversion.quarantine.path)
    if dropped_lines:
        conversion.quarantine.entries, conversion.quarantine.lines = entries, lines
    return dropped + dropped_lines


class Registers:
    """The register of each output bucket, read at most once per invocation."""

    def __init__(self, s3: Any) -> None:
        self._s3 = s3
        self._loaded: dict[str, DeletionRegister] = {}

    def of(self, bucket: str) -> DeletionRegister:
        if bucket not in self._loaded:
            self._loaded[bucket] = DeletionRegister.load(self._s3, bucket)
        return self._loaded[bucket]

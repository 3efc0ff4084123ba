"""Benchmark of the curated Iceberg table against today's layout (issue 20): files per day before and after
compaction, commits and conflicts of two concurrent writers, processor CPU seconds per GB, and the scan time of
one day's "tokens per caller" query with DuckDB over both layouts, in the same run.

    .venv/bin/python benchmarks/capture_tables_bench.py --seconds 300

Traffic: ``--rps`` requests a second (100) captured by the sidecar at full sampling, flushed every
``--records-per-object`` records (its batchSize, 10): ``rps / records`` objects a second, each a JSON Lines object
of streamed vLLM chats (tests/capture_processor/transcripts.py: the request as JSON, the SSE response as BASE64,
the sidecar's metadata), 50 callers. ``--seconds`` of that traffic (default 300: five minutes, so the run stays
within a few minutes on two shared cores) are simulated and every per-day figure is extrapolated linearly
(x 86400 / seconds): the number of objects, commits and bytes grow linearly with time at a steady rate.

Each object goes through the processor's own transform (``convert_stream``: parse, redact, Parquet per hour), then
(a) today's layout: its per-hour Parquet file is written under ``curated/tier=pod/dt=/hour=/part-<id>.parquet``
    (what the upload does), and
(b) the Iceberg table: the rows join the real ``IcebergSink`` (pyiceberg, a SQL catalog in SQLite on the local file
    system: real optimistic concurrency, a compare-and-swap of the metadata location), ten objects per
    invocation (an SQS batch of 10), one commit per invocation;
by two writer processes at once (the even and odd objects), so their commits race as two Lambda pollers' would.
Then the day's table is compacted (its files rewritten into ``write.target-file-size-bytes`` files, as the Data
Catalog's compaction optimizer does) and the query runs over (a) the glob of the day's files and (b) the table's
current data files (the file list from pyiceberg's scan planning, timed with the query). Local files: no S3 GET per
file, so the measured ratio understates the gain on S3 (every file there is at least one request).
"""

from __future__ import annotations

import argparse
import io
import math
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "lambda" / "capture_processor"))
sys.path.insert(0, str(REPO_ROOT))

from capture_core.capture_tables import SPECS, TABLE_PROPERTIES, create_table  # noqa: E402
from capture_core.iceberg_sink import IcebergSink  # noqa: E402
from capture_core.outputs import QuarantineSource  # noqa: E402
from capture_core.processor import _add_to_sink, convert_stream  # noqa: E402
from capture_core.records import ChunkContext  # noqa: E402
from capture_core.redaction import DEFAULT_RULES, Redactor  # noqa: E402
from capture_core.routing import Tier, route_object  # noqa: E402
from capture_core.settings import IcebergSettings, Settings  # noqa: E402
from tests.capture_processor.transcripts import sidecar_record  # noqa: E402

START = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
DAY_SECONDS = 86_400
NAMESPACE = "captures"
TABLE = "capture_records"
_WORDS = [
    "the", "model", "answer", "context", "token", "latency", "inference", "request", "response", "deploy", "cluster",
    "node", "gpu", "capture", "prompt", "user", "assistant", "summary", "please", "explain", "why", "how", "many",
    "what", "when", "billing", "invoice", "kubernetes",
]  # fmt: skip


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def make_object(index: int, objects_per_second: float, records: int, callers: int, seed: int) -> tuple[str, bytes]:
    """One sidecar object: ``records`` streamed chats of a few hundred tokens each."""
    rng = random.Random(seed * 1_000_003 + index)
    at = START + timedelta(seconds=index / objects_per_second)
    lines = []
    for n in range(records):
        prompt_words, answer_words = rng.randint(20, 400), rng.randint(30, 600)
        answer = _text(rng, answer_words)
        deltas = [answer[i:i + 24] for i in range(0, len(answer), 24)]
        when = (at + timedelta(milliseconds=n * 97)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lines.append(sidecar_record(f"{index}-{n}-{uuid.UUID(int=rng.getrandbits(128))}", when,
                                    f"caller-{rng.randrange(callers):03d}", _text(rng, prompt_words), deltas,
                                    usage=(int(prompt_words * 1.3), int(answer_words * 1.3)),
                                    duration_ms=rng.uniform(200, 9000)))
    key = f"a1b2c3/pod/{at:%Y/%m/%d/%H}/{at:%H-%M-%S}-{index:07d}.jsonl"
    return key, ("\n".join(lines) + "\n").encode()


@dataclass
class WriterResult:
    objects: int = 0
    records: int = 0
    source_bytes: int = 0
    convert_cpu: float = 0.0
    parquet_cpu: float = 0.0
    iceberg_cpu: float = 0.0
    generate_seconds: float = 0.0
    commits: int = 0
    conflicts: int = 0
    failed_messages: int = 0
    wall: float = 0.0


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def catalog(root: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("bench", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=f"file://{root / 'warehouse'}")


def writer(worker: int, workers: int, args: argparse.Namespace, root: Path, results: Any) -> None:
    """Converts its share of the objects and writes them both ways, ten objects (one SQS batch) per commit."""
    started = time.perf_counter()
    result = WriterResult()
    table_settings = IcebergSettings(NAMESPACE, capture_table=TABLE)
    settings = Settings(None, "curated/", "quarantine/", DEFAULT_RULES, curated_output="both", iceberg=table_settings)
    sink = IcebergSink(catalog(root), table_settings)
    parquet_root = root / "parquet"
    objects_per_second = args.rps / args.records_per_object
    total = int(args.seconds * objects_per_second)
    mine = range(worker, total, workers)
    with tempfile.TemporaryDirectory(prefix=f"bench-{worker}-", dir=root) as scratch:
        for batch_start in range(0, len(mine), args.batch):
            for index in mine[batch_start:batch_start + args.batch]:
                t0 = time.perf_counter()
                key, body = make_object(index, objects_per_second, args.records_per_object, args.callers, args.seed)
                result.generate_seconds += time.perf_counter() - t0
                route = route_object(key, skip_prefixes=("curated/",))
                assert route.tier is not None
                directory = Path(scratch, str(index))
                directory.mkdir()
                cpu = _process_cpu()
                conversion = convert_stream(
                    io.BytesIO(body), route.tier, ChunkContext(key, route.deployment_hash, route.key_time, START),
                    Redactor(settings.redaction_rules), directory, QuarantineSource("bench", key, "v1"))
                result.convert_cpu += _process_cpu() - cpu
                file_id = f"{index:020d}"
                cpu = _process_cpu()
                for file in conversion.partition_files:  # (a) today's layout: one file per object and hour
                    target = parquet_root / file.partition.key_prefix("curated/", Tier.POD.value)
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(file.path, target / f"part-{file_id}.parquet")
                result.parquet_cpu += _process_cpu() - cpu
                cpu = _process_cpu()
                _add_to_sink(sink, settings, route.tier, f"m{index}", file_id, key, START, conversion)
                result.iceberg_cpu += _process_cpu() - cpu
                shutil.rmtree(directory)
                result.objects += 1
                result.records += conversion.records
                result.source_bytes += conversion.bytes_decoded
            cpu = _process_cpu()
            sink.commit()  # the invocation's one commit
            result.iceberg_cpu += _process_cpu() - cpu
    result.commits, result.conflicts = sink.outcome.commits, sink.outcome.conflicts
    result.failed_messages = len(sink.outcome.failed_messages)
    result.wall = time.perf_counter() - started
    results.put((worker, result))


def query_times(sql: str, sources: dict[str, Any], repeat: int) -> dict[str, tuple[float, list[tuple[Any, ...]]]]:
    import duckdb

    timings = {}
    for name, source in sources.items():
        runs, answer = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            files = source() if callable(source) else source
            connection = duckdb.connect()
            answer = connection.execute(sql.format(files=files)).fetchall()
            connection.close()
            runs.append(time.perf_counter() - started)
        timings[name] = (statistics.median(runs), sorted(answer))
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=300, help="seconds of traffic simulated (300)")
    parser.add_argument("--rps", type=float, default=100.0)
    parser.add_argument("--records-per-object", type=int, default=10, help="the sidecar's batchSize (10)")
    parser.add_argument("--batch", type=int, default=10, help="objects per invocation (the SQS batch size, 10)")
    parser.add_argument("--writers", type=int, default=2, help="concurrent writer processes (2)")
    parser.add_argument("--callers", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each query (the median is reported)")
    parser.add_argument("--keep", help="a folder to keep the outputs in (default: a temporary one, removed)")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="capture-tables-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        run(args, root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def run(args: argparse.Namespace, root: Path) -> None:
    import pyarrow.parquet as pq

    cat = catalog(root)
    cat.create_namespace(NAMESPACE)
    table, _ = create_table(cat, NAMESPACE, TABLE, SPECS["capture"], "unused",
                            location=f"file://{root / 'warehouse' / TABLE}")
    print(f"simulating {args.seconds} s at {args.rps:g} requests/s, {args.records_per_object} records per object, "
          f"{args.batch} objects per invocation, {args.writers} concurrent writers (pyiceberg, SQL catalog)")
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [context.Process(target=writer, args=(w, args.writers, args, root, results))
                 for w in range(args.writers)]
    started = time.perf_counter()
    for process in processes:
        process.start()
    gathered = [results.get()[1] for _ in processes]
    for process in processes:
        process.join()
    wall = time.perf_counter() - started
    fields = WriterResult.__dataclass_fields__
    total = WriterResult(**{name: sum(getattr(r, name) for r in gathered) for name in fields})
    scale = DAY_SECONDS / args.seconds
    gigabytes = total.source_bytes / 1e9

    table = cat.load_table((NAMESPACE, TABLE))
    parquet_files = sorted((root / "parquet").rglob("*.parquet"))
    parquet_bytes = sum(f.stat().st_size for f in parquet_files)
    iceberg_files = table.inspect.files()
    iceberg_bytes = sum(iceberg_files.column("file_size_in_bytes").to_pylist())
    snapshots = len(table.snapshots())

    sql = ("SELECT caller_id, sum(gen_ai_usage_input_tokens), sum(gen_ai_usage_output_tokens) "
           "FROM read_parquet({files}) WHERE inference_time >= TIMESTAMPTZ '2026-11-30 00:00:00+00' "
           "AND inference_time < TIMESTAMPTZ '2026-12-01 00:00:00+00' GROUP BY caller_id")
    glob = f"'{root / 'parquet'}/curated/tier=pod/dt=2026-11-30/*/*.parquet'"

    def iceberg_files_now() -> str:
        current = cat.load_table((NAMESPACE, TABLE))
        day_filter = ("inference_time >= '2026-11-30T00:00:00+00:00' AND "
                      "inference_time < '2026-12-01T00:00:00+00:00'")  # pruned to the day's partition
        paths = [task.file.file_path.removeprefix("file://") for task in current.scan(
            row_filter=day_filter,
            selected_fields=("caller_id", "gen_ai_usage_input_tokens", "gen_ai_usage_output_tokens")).plan_files()]
        return "[" + ",".join(f"'{p}'" for p in paths) + "]"

    before_compaction = query_times(sql, {"iceberg": iceberg_files_now}, args.repeat)["iceberg"]

    # Compaction as the managed optimizer does it: the day's files rewritten into target-size files.
    started_compaction = time.perf_counter()
    day = table.scan().to_arrow()
    with table.transaction() as transaction:
        transaction.overwrite(day, snapshot_properties={"capture.compaction": "bench"})
    compaction_seconds = time.perf_counter() - started_compaction
    table = cat.load_table((NAMESPACE, TABLE))
    compacted = table.inspect.files()
    compacted_files = compacted.num_rows
    target = int(TABLE_PROPERTIES["write.target-file-size-bytes"])
    compacted_bytes = sum(compacted.column("file_size_in_bytes").to_pylist())
    day_bytes = compacted_bytes * scale

    timings = query_times(sql, {"today's layout": glob, "iceberg, compacted": iceberg_files_now}, args.repeat)
    answers = {name: answer for name, (_, answer) in timings.items()}
    answers["iceberg, before compaction"] = before_compaction[1]
    assert len({repr(a) for a in answers.values()}) == 1, "both layouts must give the same answer"

    rows_check = pq.read_metadata(parquet_files[0]).num_rows if parquet_files else 0
    print(f"\nobjects {total.objects:,}, records {total.records:,}, source {total.source_bytes / 1e6:,.1f} MB decoded, "
          f"wall {wall:.0f} s (generating the objects: {total.generate_seconds:.0f} s of it); rows in one object's "
          f"file: {rows_check}")
    print("\n| figure | today's layout (Parquet per object and hour) | Iceberg table |")
    print("| --- | --- | --- |")
    print(f"| data files in the window | {len(parquet_files):,} ({parquet_bytes / 1e6:,.1f} MB) | "
          f"{iceberg_files.num_rows:,} before compaction ({iceberg_bytes / 1e6:,.1f} MB), {compacted_files} after "
          f"({compacted_bytes / 1e6:,.1f} MB, {compaction_seconds:.1f} s) |")
    print(f"| data files per day (x {scale:g}) | {len(parquet_files) * scale:,.0f} (nothing merges them) | "
          f"{iceberg_files.num_rows * scale:,.0f} before compaction; after: "
          f"{max(1, math.ceil(day_bytes / target))} ({day_bytes / 1e9:,.2f} GB a day / "
          f"{target >> 20} MiB target files) |")
    print(f"| commits | none (one PUT per file) | {total.commits:,} ({total.commits * scale:,.0f} a day), "
          f"{snapshots} snapshots; conflicts {total.conflicts} (retried), failed messages {total.failed_messages} |")
    convert = total.convert_cpu / gigabytes
    print(f"| processor CPU s per GB decoded | {convert + total.parquet_cpu / gigabytes:,.1f} "
          f"(transform {convert:,.1f} + files {total.parquet_cpu / gigabytes:,.1f}) | "
          f"{convert + total.iceberg_cpu / gigabytes:,.1f} (transform {convert:,.1f} + "
          f"append/commit {total.iceberg_cpu / gigabytes:,.1f}) |")
    old, new = timings["today's layout"][0], timings["iceberg, compacted"][0]
    print(f"| tokens per caller, the window's day (DuckDB, median of {args.repeat}) | {old * 1000:,.0f} ms over "
          f"{len(parquet_files):,} files | {new * 1000:,.0f} ms over {compacted_files} file(s), planning included "
          f"({old / new:,.1f}x faster); before compaction {before_compaction[0] * 1000:,.0f} ms over "
          f"{iceberg_files.num_rows:,} files ({old / before_compaction[0]:,.1f}x) |")
    print("\nwriters: " + "; ".join(f"{r.objects} objects, {r.commits} commits, {r.conflicts} conflicts, "
                                     f"wall {r.wall:.0f} s" for r in gathered))
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()

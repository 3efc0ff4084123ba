"""Where the capture processor's time goes, phase by phase, and the floor of its redaction's RE2 work (issue 27,
"seventh step" in docs/capture-processor.md): figures, never assertions.

    taskset -c 1 .venv/bin/python benchmarks/capture_processor_phases.py [--streams] [--off] [--plant-every 10]
    taskset -c 1 .venv/bin/python benchmarks/capture_processor_phases.py --floor [--streams]

Phases: the benchmark's generated mix (32 MiB) converted in one thread (the parser pool made sequential), a wrapper
summing each function's CPU time (nested phases are inside their parents; the wrappers add ~1 µs a call), best of
three runs. Floor: the bytes each RE2 pass of the redaction reads in that mix (captured during one conversion) and the
time of RE2 alone over them, each pattern compiled once and warm, best of five: what no Python around it can go under.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "lambda" / "capture_processor"))
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import capture_processor_bench as bench  # noqa: E402  (after the path)
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from capture_core import capture_format, documents, openai_format, outputs, payloads, processor, redaction  # noqa: E402
from capture_core.line_chunks import LineChunk  # noqa: E402
from capture_core.outputs import QuarantineSource  # noqa: E402
from capture_core.records import ChunkContext  # noqa: E402
from capture_core.redaction import DEFAULT_RULES, Redactor  # noqa: E402
from capture_core.routing import Tier  # noqa: E402

PHASES: list[tuple[Any, str, str]] = [
    (capture_format, "_prefiltered", "envelope: prefilter"),
    (capture_format, "_read_whole_chunk", "envelope: Arrow's JSON reader"),
    (capture_format, "_side_of", "sides: BASE64, charsets, payload parse, streams"),
    (payloads, "_parsed", "  payloads parsed for their facts (orjson)"),
    (openai_format, "reassemble_stream", "  stream merge"),
    (openai_format, "exchange_facts", "facts"),
    (capture_format, "_table", "table (with the documents' rendering)"),
    (documents.DocumentBatch, "result", "  rendering of the documents"),
    (outputs.PartitionedParquetFiles, "close", "Parquet writer's close (the writing is on its thread)"),
    (documents.DocumentBatch, "redact", "redaction"),
    (documents.DocumentBatch, "_plan_escaped", "  plan of the escaped documents"),
    (documents, "_decoded_for_scan", "    escape-decoding passes"),
    (redaction.Redactor, "scan_finding_unicode_escapes", "    combined scan and \\u search"),
    (documents.DocumentBatch, "_plan_spliced", "    cutting the flagged documents"),
    (redaction.Redactor, "redact_owned", "  rules over the pieces (redact_owned)"),
    (redaction.Redactor, "_over_budget", "    budget"),
    (redaction, "_spans", "    RE2 searches (_spans: the combined scan's and the rules')"),
    (redaction, "_confirmed", "    candidates confirmed (validators)"),
]


def _sequential(
    chunks: Iterator[Any], parse: Callable[..., Any], context: ChunkContext, redactor: Redactor
) -> Iterator[tuple[Any, Any]]:
    for item in chunks:
        yield item, (parse(item.data, item.first_line, context, redactor) if isinstance(item, LineChunk) else None)


def _convert(source: Path, rules: tuple[str, ...]) -> float:
    context = ChunkContext("bench/sme/x.jsonl", "bench", None, datetime.now(UTC))
    with tempfile.TemporaryDirectory() as directory, source.open("rb") as stream:
        started = time.process_time()
        processor.convert_stream(
            stream, Tier.SME, context, Redactor(rules), Path(directory), QuarantineSource("b", "k", "v")
        )
        return time.process_time() - started


def phases(source: Path, rules: tuple[str, ...], runs: int = 3) -> None:
    spent: dict[str, float] = defaultdict(float)

    def wrapped(function: Callable[..., Any], label: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - started

        return timed

    for owner, name, label in PHASES:
        setattr(owner, name, wrapped(getattr(owner, name), label))
    results = []
    for _ in range(runs):
        spent.clear()
        results.append((_convert(source, rules), dict(spent)))
    total, best = min(results, key=lambda result: result[0])
    print(f"CPU s, one thread, best of {runs}: {total:.3f} s in all ({'every default rule' if rules else 'no rules'})")
    print("| phase | CPU s |\n|---|---|")
    for _, _, label in PHASES:
        if label in best:
            print(f"| {label.strip() if not label.startswith(' ') else '— ' + label.strip()} | {best[label]:.3f} |")


def _best(function: Callable[[], Any], runs: int = 5) -> float:
    out = float("inf")
    for _ in range(runs):
        started = time.process_time()
        function()
        out = min(out, time.process_time() - started)
    return out


def floor(source: Path) -> None:
    escaped: list[pa.Array] = []
    scanned: list[pa.Array] = []
    pieces: list[list[str]] = []
    flagged = [0]
    decoded_for_scan = documents._decoded_for_scan
    scan = Redactor.scan_finding_unicode_escapes
    redacted = Redactor._redacted_compiled
    plan_flagged = documents.DocumentBatch._plan_flagged

    def capture_escaped(texts: pa.Array) -> pa.Array:
        escaped.append(texts)
        return decoded_for_scan(texts)

    def capture_scanned(self: Redactor, texts: pa.Array, first: int) -> Any:
        scanned.append(texts)
        return scan(self, texts, first)

    def capture_pieces(self: Redactor, rows: list[str], row_ids: list[int], hits: dict[int, set[str]]) -> Any:
        pieces.append(list(rows))
        return redacted(self, rows, row_ids, hits)

    def capture_flagged(self: documents.DocumentBatch, documents_: set[int], planned: int, may: Any) -> Any:
        flagged[0] += len(documents_)
        return plan_flagged(self, documents_, planned, may)

    documents._decoded_for_scan = capture_escaped  # type: ignore[assignment]
    Redactor.scan_finding_unicode_escapes = capture_scanned  # type: ignore[method-assign]
    Redactor._redacted_compiled = capture_pieces  # type: ignore[method-assign]
    documents.DocumentBatch._plan_flagged = capture_flagged  # type: ignore[method-assign]
    _convert(source, DEFAULT_RULES)
    redactor = Redactor(DEFAULT_RULES)
    assert redactor._any is not None and redactor._compiled is not None, "google-re2 is needed for the floor"
    escaped_bytes = sum(pc.sum(pc.binary_length(texts)).as_py() or 0 for texts in escaped)
    buffers = [redaction._joined_rows(texts)[0] for texts in scanned]
    joins = [redaction._join([text.encode() for text in rows], range(len(rows))) for rows in pieces]
    piece_bytes = sum(len(join.joined) for join in joins)
    decode = _best(lambda: [decoded_for_scan(texts) for texts in escaped])
    combined = _best(lambda: [redaction._spans(redactor._any, buffer) for buffer in buffers])
    print(f"flagged documents {flagged[0]}; their pieces {sum(map(len, pieces))}")
    print("| RE2 pass | bytes read | CPU s | MB/s |\n|---|---|---|---|")
    print(f"| escape-decoding passes (Arrow's `replace_substring_regex`, two) | {escaped_bytes / 1e6:.1f} MB | "
          f"{decode:.3f} | {escaped_bytes / 1e6 / decode:.0f} |")
    scanned_bytes = sum(len(buffer) for buffer in buffers)
    print(f"| combined pattern over the documents (and the pieces that share the scan) | {scanned_bytes / 1e6:.1f} MB "
          f"| {combined:.3f} | {scanned_bytes / 1e6 / combined:.0f} |")
    rules_total = 0.0
    for rule, compiled in zip(redactor.rules, redactor._compiled, strict=True):
        if rule.needs:  # searched only where its needs are: a small part of the pieces
            continue
        seconds = _best(lambda compiled=compiled: [redaction._spans(compiled, join.joined) for join in joins])
        rules_total += seconds
        print(f"| rule `{rule.name}` over every flagged piece | {piece_bytes / 1e6:.2f} MB | {seconds:.3f} | "
              f"{piece_bytes / 1e6 / seconds:.0f} |")
    print(f"| **RE2 alone, in all** | | **{decode + combined + rules_total:.3f}** | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", action="store_true", help="the streamed mix (default: no streams)")
    parser.add_argument("--off", action="store_true", help="redaction off")
    parser.add_argument("--floor", action="store_true", help="the floor of the redaction's RE2 work instead")
    parser.add_argument("--plant-every", type=int, default=1)
    parser.add_argument("--size-mib", type=int, default=32)
    args = parser.parse_args()
    bench.STREAMED, bench.PLANT_EVERY = args.streams, args.plant_every
    processor._parsed_in_order = _sequential  # type: ignore[assignment]  # one thread: each phase is its own
    processor.use_frugal_memory_pool()
    with tempfile.TemporaryDirectory(prefix="capture-phases-") as directory:
        source = Path(directory) / "capture.jsonl"
        records = bench.generate_capture_file(source, args.size_mib * bench.MIB)
        print(f"{source.stat().st_size / 1e6:.0f} MB, {records} records, "
              f"{'25% streamed' if args.streams else 'no streams'}, secrets in 1 record of {args.plant_every}")
        if args.floor:
            floor(source)
        else:
            phases(source, () if args.off else DEFAULT_RULES)


if __name__ == "__main__":
    main()

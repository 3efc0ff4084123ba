"""The capture processor's parse path alone (Arrow's reader, decoding, streams, facts, redaction with every default
rule), chunk by chunk on one thread, in CPU seconds: the figure to compare two versions of the code side by side on a
machine others share, where the full benchmark's wall time and its threads add noise.

    taskset -c 1 .venv/bin/python benchmarks/capture_processor_parse_bench.py --mix streamed
    taskset -c 1 .venv/bin/python benchmarks/capture_processor_parse_bench.py --mix streamed \
        --runtime /tmp/old/lambda/capture_processor

`--runtime` points at another checkout's `lambda/capture_processor` (e.g. `git archive <commit> lambda/capture_processor
| tar -x -C /tmp/old`); run the two in turns and compare the best of each.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", choices=("streamed", "no-streams"), default="streamed")
    parser.add_argument("--size-mib", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="the best is printed")
    parser.add_argument("--runtime", type=Path, default=BENCHMARKS.parent / "lambda" / "capture_processor")
    args = parser.parse_args()

    sys.path.insert(0, str(BENCHMARKS))
    import capture_processor_bench as bench

    bench.STREAMED = args.mix == "streamed"
    with tempfile.TemporaryDirectory(prefix="capture-parse-bench-") as directory:
        source = Path(directory) / "capture.jsonl"
        bench.generate_capture_file(source, args.size_mib << 20)
        data = source.read_bytes()
    sys.path.insert(0, str(args.runtime.resolve()))  # ahead of the runtime the bench module put on the path
    for name in [name for name in sys.modules if name == "capture_core" or name.startswith("capture_core.")]:
        del sys.modules[name]
    from capture_core.capture_format import parse_capture_chunk
    from capture_core.line_chunks import LineChunk, line_chunks
    from capture_core.records import ChunkContext
    from capture_core.redaction import DEFAULT_RULES, Redactor

    chunks = [chunk for chunk in line_chunks(iter([data]), chunk_bytes=2 << 20, max_line_bytes=64 << 20)]
    context = ChunkContext("bench/sme/x.jsonl", "bench", None, datetime.now(UTC))
    gc.disable()  # as the processor runs a conversion
    best = float("inf")
    for _ in range(args.runs):
        started = time.process_time()
        for chunk in chunks:
            assert isinstance(chunk, LineChunk)
            parse_capture_chunk(chunk.data, chunk.first_line, context, Redactor(DEFAULT_RULES))
        best = min(best, time.process_time() - started)
    print(f"{args.runtime}: {args.mix}, {len(data) / 1e6:.1f} MB, best of {args.runs}: {best:.3f} CPU s, "
          f"{len(data) / 1e6 / best:.1f} MB/s")


if __name__ == "__main__":
    main()

"""The reassembly of the benchmark's streams alone, in CPU seconds: the per-event path (`sse_events` and `reassemble`,
the template merge) against the split merge (`reassemble_stream`), on the same decoded stream texts, with the results
compared.

    taskset -c 1 .venv/bin/python benchmarks/capture_stream_merge_bench.py --size-mib 8

The streams are those of benchmarks/capture_processor_bench.py's streamed mix (vLLM chat streams, a chunk per ~4
characters); figures in docs/capture-processor.md ("Issue 27, fourth step").
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="the best is printed")
    args = parser.parse_args()

    sys.path.insert(0, str(BENCHMARKS))
    import capture_processor_bench as bench

    from capture_core import openai_format

    bench.STREAMED = True
    streams: list[str] = []
    with tempfile.TemporaryDirectory(prefix="capture-stream-bench-") as directory:
        source = Path(directory) / "capture.jsonl"
        bench.generate_capture_file(source, args.size_mib << 20)
        for line in source.read_text().splitlines():
            output = json.loads(line)["captureData"]["endpointOutput"]
            if output["observedContentType"] == "text/event-stream":
                streams.append(base64.b64decode(output["data"]).decode())

    def best(run: Callable[[], object]) -> float:
        seconds = float("inf")
        for _ in range(args.runs):
            started = time.process_time()
            run()
            seconds = min(seconds, time.process_time() - started)
        return seconds

    per_event = best(lambda: [openai_format.reassemble(openai_format.sse_events(text)) for text in streams])
    split = best(lambda: [openai_format.reassemble_stream(text) for text in streams])
    same = all(
        json.dumps(openai_format.reassemble(openai_format.sse_events(text)))
        == json.dumps(openai_format.reassemble_stream(text))
        for text in streams
    )
    megabytes = sum(len(text) for text in streams) / 1e6
    print(f"{len(streams)} streams, {megabytes:.1f} MB, best of {args.runs}, CPU seconds")
    print(f"per event (sse_events + reassemble): {per_event * 1e3:.1f} ms")
    print(f"split merge (reassemble_stream):     {split * 1e3:.1f} ms")
    print(f"same results: {same}")


if __name__ == "__main__":
    main()

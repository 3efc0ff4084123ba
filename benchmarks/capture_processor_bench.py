"""Benchmark of the capture processor: transform throughput against DuckDB, and peak memory
of the real Lambda handler as objects grow.

    .venv/bin/python benchmarks/capture_processor_bench.py --size-mib 128 --rss-sizes 64,256,1024

(1) Throughput: one generated LLM-style capture file (JSON Lines; chat prompts and responses,
    some with emails, phone numbers and tokens; a quarter of the responses BASE64) is turned
    into Parquet by the processor's own transform (redaction on, and off for reference) and by
    DuckDB (`COPY (SELECT * FROM read_json(...)) TO ... (FORMAT parquet)`), in the same run.
(2) Memory: for each size, the file is put into a real moto S3 server (in this process) and a
    child process runs `handler.handler` on an SQS-shaped S3 notification; the child's peak
    RSS comes from os.wait4 (ru_maxrss), so the server's own memory is not counted.
Results are printed as tables; the figures in docs/capture-processor.md come from this script.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RUNTIME_DIR = REPO_ROOT / "lambda" / "capture_processor"
sys.path.insert(0, str(RUNTIME_DIR))
sys.path.insert(0, str(REPO_ROOT))

MIB = 1 << 20
# Wall time by default; --cpu-time measures the process's CPU time instead (all its threads), the fairer figure on
# a machine others share, where a pinned core is not the benchmark's alone.
CLOCK = time.perf_counter
_WORDS = [
    "the",
    "model",
    "answer",
    "context",
    "token",
    "latency",
    "inference",
    "request",
    "response",
    "deploy",
    "cluster",
    "node",
    "gpu",
    "capture",
    "prompt",
    "user",
    "assistant",
    "system",
    "summary",
    "please",
    "explain",
    "why",
    "how",
    "data",
    "pipeline",
    "result",
    "value",
    "quality",
    "evaluate",
    "metric",
    "version",
    "region",
    "bucket",
    "object",
    "stream",
    "memory",
    "batch",
    "schedule",
]


# --------------------------------------------------------------------------- input generation
STREAMED = True  # --no-streams: every response non-streamed (the mix of the figures before issue 16)
# --plant-every K: secrets only in one record of K (the default mix plants one in 45% of the requests, far more than
# real chat traffic is likely to hold; K=10 gives 4.5%).
PLANT_EVERY = 1

def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _paragraph(rng: random.Random, sentences: tuple[int, int]) -> str:
    return " ".join(_sentence(rng, rng.randint(8, 20)) for _ in range(rng.randint(*sentences)))


def _text(rng: random.Random, paragraphs: tuple[int, int], sentences: tuple[int, int]) -> str:
    """Several paragraphs with line breaks, as chats are: in the capture's JSON every break is `\\n`."""
    return "\n\n".join(_paragraph(rng, sentences) for _ in range(rng.randint(*paragraphs)))


def _stream(answer: str, index: int) -> str:
    """The answer as a vLLM chat stream: a chunk per ~4 characters (a token), usage last."""
    head = {"id": f"chatcmpl-{index}", "object": "chat.completion.chunk", "created": 1764460800, "model": "llama"}
    events = [
        head
        | {"choices": [{"index": 0, "delta": {"content": answer[i : i + 4]}, "logprobs": None, "finish_reason": None}]}
        for i in range(0, len(answer), 4)
    ]
    events.append(head | {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]})
    events.append(head | {"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": len(events)}})
    return "".join(f"data: {json.dumps(event, separators=(',', ':'))}\n\n" for event in events) + "data: [DONE]\n\n"


def capture_record(rng: random.Random, index: int) -> str:
    """One capture line: ~3 KB, like a chat completion, its texts in paragraphs. Of the records,
    20% carry an email, 20% a phone number, 5% tokens (Bearer JWT, Hugging Face), some of them at
    the start of a line; 25% of the responses are streamed (a vLLM event stream, BASE64, a chunk
    per token) and 25% are BASE64 JSON; every record names its caller, as the sidecar writes it."""
    user = _text(rng, (1, 3), (2, 4))
    slot = index // PLANT_EVERY if index % PLANT_EVERY == 0 else -1  # the record's index when PLANT_EVERY is 1
    if slot % 5 == 0 and slot >= 0:
        user += f"\nReach me at user{index}.name@example{index % 7}.com."
    if slot % 5 == 1:
        user += f" Call +1 (415) 555-{index % 10000:04d} after five."
    if slot % 20 == 3:
        user += "\nUse hf_" + "a1B2c3D4e5" * 4 + " with Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijkl"
    request = {
        "model": "llama",
        "messages": [{"role": "system", "content": _sentence(rng, 15)}, {"role": "user", "content": user}],
        "max_tokens": 512,
        "temperature": 0.7,
    }
    answer = _text(rng, (2, 4), (2, 4))
    response = {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "model": "llama",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100 + index % 50, "completion_tokens": 300 + index % 80},
    }
    if index % 4 == 0:
        output = {"observedContentType": "application/octet-stream", "mode": "OUTPUT", "encoding": "BASE64"}
        output["data"] = base64.b64encode(json.dumps(response).encode()).decode()
    elif STREAMED and index % 4 == 1:
        request["stream"] = True
        output = {"observedContentType": "text/event-stream", "mode": "OUTPUT", "encoding": "BASE64"}
        output["data"] = base64.b64encode(_stream(answer, index).encode()).decode()
    else:
        output = {"observedContentType": "application/json", "mode": "OUTPUT", "encoding": "JSON"}
        output["data"] = json.dumps(response)
    seconds = index // 10  # ten requests per second: a 1 GiB file spans about 9 hours
    return json.dumps(
        {
            "captureData": {
                "endpointInput": {
                    "observedContentType": "application/json",
                    "mode": "INPUT",
                    "data": json.dumps(request),
                    "encoding": "JSON",
                },
                "endpointOutput": output,
            },
            "eventMetadata": {
                "eventId": f"00000000-0000-4000-8000-{index:012d}",
                "inferenceId": str(index),
                "inferenceTime": f"2026-11-30T{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z",
                "callerId": f"team-{index % 7}",
                "responseStatus": 200,
                "durationMs": 850.0 + index % 300,
                "timeToFirstChunkMs": 45.0 + index % 40,
            },
            "eventVersion": "0",
        }
    )


def generate_capture_file(path: Path, size_bytes: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    written = records = 0
    with path.open("w", encoding="utf-8") as out:
        while written < size_bytes:
            line = capture_record(rng, records) + "\n"
            out.write(line)
            written += len(line)
            records += 1
    return records


# --------------------------------------------------------------------------- throughput
@dataclass(frozen=True)
class Throughput:
    name: str
    seconds: float
    mb_per_s: float
    output_bytes: int


def measure_processor(source: Path, work: Path, rules: tuple[str, ...], name: str) -> Throughput:
    from capture_core.outputs import QuarantineSource
    from capture_core.processor import convert_stream, use_frugal_memory_pool
    from capture_core.records import ChunkContext
    from capture_core.redaction import Redactor
    from capture_core.routing import Tier

    use_frugal_memory_pool()  # as the handler does at import
    context = ChunkContext("bench/sme/x.jsonl", "bench", None, datetime.now(UTC))
    with tempfile.TemporaryDirectory(dir=work) as directory, source.open("rb") as stream:
        started = CLOCK()
        conversion = convert_stream(
            stream, Tier.SME, context, Redactor(rules), Path(directory), QuarantineSource("b", "k", "v")
        )
        seconds = CLOCK() - started
        output = sum(file.path.stat().st_size for file in conversion.partition_files)
    return Throughput(name, seconds, source.stat().st_size / 1e6 / seconds, output)


def measure_duckdb(source: Path, work: Path) -> Throughput:
    import duckdb

    target = work / "duckdb.parquet"
    connection = duckdb.connect()
    started = CLOCK()
    connection.execute(
        f"COPY (SELECT * FROM read_json('{source}', format='newline_delimited', "
        f"maximum_object_size=67108864)) TO '{target}' (FORMAT parquet)"
    )
    seconds = CLOCK() - started
    output = target.stat().st_size
    target.unlink()
    return Throughput(
        "DuckDB read_json -> Parquet (no redaction)", seconds, source.stat().st_size / 1e6 / seconds, output
    )


def interleaved_runs(runs: int, measures: list[Callable[[], Throughput]]) -> list[list[Throughput]]:
    """Every run of each engine, the engines taking turns, so a burst of load from elsewhere on the machine hits
    all of them alike rather than one."""
    results: list[list[Throughput]] = [[] for _ in measures]
    for _ in range(runs):
        for index, measure in enumerate(measures):
            results[index].append(measure())
    return results


def best_and_median(results: list[Throughput]) -> tuple[Throughput, Throughput]:
    ordered = sorted(results, key=lambda result: result.seconds)
    return ordered[0], ordered[(len(ordered) - 1) // 2]


# --------------------------------------------------------------------------- memory
_CHILD = """
import json, sys, time
sys.path.insert(0, {runtime!r})
from handler import handler
event = {{"Records": [{{"messageId": "m-1", "body": {body!r}}}]}}
started, cpu_started = time.perf_counter(), time.process_time()
result = handler(event, None)
seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
print(json.dumps({{"result": result, "seconds": seconds, "cpu_seconds": cpu_seconds, "peak_kib": {peak}}}))
"""

_BASELINE_CHILD = """
import sys
sys.path.insert(0, {runtime!r})
import handler, boto3, pyarrow.parquet, pyarrow.json, pyarrow.compute
boto3.client("s3")
print({peak})
"""

# VmHWM is the process's own peak RSS. ru_maxrss from wait4 would not do: Linux keeps it across
# fork+exec, so a child would report the benchmark's (and moto's) memory as its own.
_PEAK_KIB = 'int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")))'


@dataclass(frozen=True)
class MemoryRun:
    size_mib: int
    records: int
    peak_rss_mib: float
    seconds: float
    outcome: str


def run_child(code: str, env: dict[str, str]) -> str:
    """The last line a child process running `code` printed (it reports its own peak RSS)."""
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if child.returncode != 0:
        raise RuntimeError(f"child failed ({child.returncode}): {child.stderr[-2000:]}")
    return child.stdout.strip().splitlines()[-1]


def measure_memory(sizes_mib: list[int], work: Path) -> tuple[float, list[MemoryRun]]:
    import boto3
    from boto3.s3.transfer import TransferConfig

    from tests.support.s3server import moto_server

    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        MALLOC_ARENA_MAX="2",  # as CapturePipeline configures the function
    )
    os.environ.update(env)
    runs = []
    with moto_server() as endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="bench")
        baseline = int(run_child(_BASELINE_CHILD.format(runtime=str(RUNTIME_DIR), peak=_PEAK_KIB), env)) / 1024
        for size in sizes_mib:
            path = work / f"capture-{size}.jsonl"
            records = generate_capture_file(path, size * MIB)
            key = f"data-capture/bench/sme/ep/AllTraffic/2026/11/30/00/{size}mib.jsonl"
            s3.upload_file(str(path), "bench", key, Config=TransferConfig(multipart_chunksize=64 * MIB))
            path.unlink()
            body = json.dumps(
                {
                    "Records": [
                        {"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "bench"}, "object": {"key": key}}}
                    ]
                }
            )
            result = json.loads(run_child(_CHILD.format(runtime=str(RUNTIME_DIR), body=body, peak=_PEAK_KIB), env))
            outcome = "ok" if result["result"] == {"batchItemFailures": []} else f"FAILED {result['result']}"
            runs.append(MemoryRun(size, records, result["peak_kib"] / 1024, result["seconds"], outcome))
            s3.delete_object(Bucket="bench", Key=key)
    return baseline, runs


# --------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=128, help="throughput input size (default 128)")
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per engine: best and median")
    parser.add_argument("--rss-sizes", default="64,256", help="object sizes in MiB for the memory runs")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--no-streams", action="store_true", help="no streamed responses (each stream is ~13x its answer in bytes)"
    )
    parser.add_argument(
        "--plant-every", type=int, default=1, help="secrets in one record of K only (default 1: 45%% of requests)"
    )
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--cpu-time", action="store_true", help="CPU seconds of the process instead of wall time")
    args = parser.parse_args()
    global STREAMED, CLOCK, PLANT_EVERY
    STREAMED = not args.no_streams
    PLANT_EVERY = args.plant_every
    if args.cpu_time:
        CLOCK = time.process_time

    cpu = platform.processor() or platform.machine()
    print(f"machine: {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="capture-bench-") as directory:
        work = Path(directory)
        source = work / "capture.jsonl"
        records = generate_capture_file(source, args.size_mib * MIB)
        print(f"\n(1) throughput: {source.stat().st_size / 1e6:.0f} MB, {records} records, {args.runs} runs")
        from capture_core.settings import DEFAULT_REDACT

        rules = tuple(DEFAULT_REDACT.split(","))
        engines = {
            "duckdb": lambda: measure_duckdb(source, work),
            "on": lambda: measure_processor(source, work, rules, "processor, redaction on"),
            "off": lambda: measure_processor(source, work, (), "processor, redaction off"),
        }
        runs = interleaved_runs(args.runs, list(engines.values()))
        print(f"{'engine':45} {'seconds':>8} {'MB/s':>7} {'vs DuckDB':>10} {'median s':>9} {'median vs':>10} "
              f"{'Parquet MB':>11}")
        duckdb_best, duckdb_median = best_and_median(runs[0])
        for results in runs:
            best, median = best_and_median(results)
            print(
                f"{best.name:45} {best.seconds:8.2f} {best.mb_per_s:7.0f} {best.mb_per_s / duckdb_best.mb_per_s:10.0%} "
                f"{median.seconds:9.2f} {median.mb_per_s / duckdb_median.mb_per_s:10.0%} "
                f"{best.output_bytes / 1e6:11.1f}"
            )
        print(f"load average at the end: {' '.join(f'{value:.1f}' for value in os.getloadavg())}")
        source.unlink()

        if not args.skip_memory:
            sizes = [int(size) for size in args.rss_sizes.split(",")]
            baseline, runs = measure_memory(sizes, work)
            print(f"\n(2) peak RSS of the handler in a child process (imports + S3 client alone: {baseline:.0f} MiB)")
            print(f"{'object MiB':>10} {'records':>9} {'peak RSS MiB':>13} {'seconds':>8} {'MB/s':>6}  outcome")
            for run in runs:
                print(
                    f"{run.size_mib:10d} {run.records:9d} {run.peak_rss_mib:13.0f} {run.seconds:8.1f} "
                    f"{run.size_mib * MIB / 1e6 / run.seconds:6.0f}  {run.outcome}"
                )


if __name__ == "__main__":
    main()

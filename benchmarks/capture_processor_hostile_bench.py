"""Benchmark of the capture processor on hostile objects (issue 27, bounded work per record): peak RSS and time
of the real handler, in a child process, against a moto S3 server.

    .venv/bin/python benchmarks/capture_processor_hostile_bench.py

Objects (each between ordinary records, whose rows must land):
- `gzip-bomb`: one record whose request is a gzip body of ~119 KiB inflating to 60 MiB of e-mail addresses;
- `gzip-bomb-x8`: eight such records in one object;
- `match-budget`: one 8 MiB JSON request (the sidecar's bound, uncompressed) of e-mail addresses;
- `tiny-lines`: 200,000 lines of `{}`.
Goals (issue 27): the gzip body under 256 MiB peak RSS; the tiny lines within a second per MiB of input.

    .venv/bin/python benchmarks/capture_processor_hostile_bench.py --convert tiny-lines

converts one of the objects in process instead (`convert_stream`, no S3), five times after a warm-up, and prints
the CPU seconds of each run: the conversion without the handler's fixed costs (boto3, the upload).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from capture_processor_bench import _CHILD, _PEAK_KIB, MIB, RUNTIME_DIR, capture_record, run_child


def _emails(size: int) -> bytes:
    """`size` bytes of e-mail addresses, as repetitive as an attacker makes them (gzip shrinks them ~500x)."""
    block = "".join(f"user{index}@example.com " for index in range(1000)).encode()
    return (block * (size // len(block) + 1))[:size]


def _record(index: int, request: dict[str, str]) -> str:
    line = json.loads(capture_record(random.Random(index), index))
    line["captureData"]["endpointInput"] = request | {"mode": "INPUT"}
    return json.dumps(line)


def _bomb(index: int, body: bytes) -> str:
    data = base64.b64encode(gzip.compress(body, 9, mtime=0)).decode()
    return _record(index, {"observedContentType": "application/json", "encoding": "BASE64", "data": data})


def objects() -> dict[str, bytes]:
    rng = random.Random(1)
    ordinary = [capture_record(rng, index) for index in range(20)]
    sixty = json.dumps({"messages": [{"role": "user", "content": ""}]}).encode()[:-4] + _emails(60 * MIB) + b'"}]}'
    bomb = _bomb(100, sixty)
    print(f"gzip body: {len(gzip.compress(sixty, 9, mtime=0)) / 1024:.0f} KiB inflating to {len(sixty) / MIB:.0f} MiB")
    eight_mib = json.dumps({"messages": [{"role": "user", "content": _emails(8 * MIB - 64).decode()}]})
    budget = _record(101, {"observedContentType": "application/json", "encoding": "JSON", "data": eight_mib})
    return {
        "gzip-bomb": "\n".join([*ordinary[:10], bomb, *ordinary[10:]]).encode() + b"\n",
        "gzip-bomb-x8": "\n".join([*ordinary[:10], *[bomb] * 8, *ordinary[10:]]).encode() + b"\n",
        "match-budget": "\n".join([*ordinary[:10], budget, *ordinary[10:]]).encode() + b"\n",
        "tiny-lines": "\n".join([ordinary[0], *["{}"] * 200_000, ordinary[1]]).encode() + b"\n",
    }


def convert_in_process(name: str, runs: int = 5) -> None:
    import contextlib
    import io
    import time
    from datetime import UTC, datetime

    from capture_core.outputs import QuarantineSource
    from capture_core.processor import convert_stream
    from capture_core.records import ChunkContext
    from capture_core.redaction import DEFAULT_RULES, Redactor
    from capture_core.routing import Tier

    with contextlib.redirect_stdout(io.StringIO()):
        data = objects()[name]
    context = ChunkContext("h/sme/2026/11/30/10/x.jsonl", "h", None, datetime(2026, 11, 30, 10, tzinfo=UTC))

    def once() -> tuple[int, int, int]:
        with tempfile.TemporaryDirectory() as directory:
            conversion = convert_stream(io.BytesIO(data), Tier.SME, context, Redactor(DEFAULT_RULES), Path(directory),
                                        QuarantineSource("b", "k", "v"))
            quarantine = conversion.quarantine
            return conversion.records, getattr(quarantine, "lines", quarantine.entries), quarantine.entries

    once()
    seconds = []
    for _ in range(runs):
        started = time.process_time()
        records, lines, entries = once()
        seconds.append(time.process_time() - started)
    print(f"{name}: {len(data) / MIB:.2f} MiB, {records} rows, {lines} lines quarantined in {entries} entries; "
          f"CPU s per conversion: {' '.join(f'{value:.3f}' for value in seconds)}; "
          f"load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    if sys.argv[1:2] == ["--convert"]:
        convert_in_process(sys.argv[2])
        return
    import boto3

    from tests.support.s3server import moto_server

    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        MALLOC_ARENA_MAX="2",
    )
    os.environ.update(env)
    # CPU seconds of the handler's process (moto runs in another): the fairer figure on a machine others share.
    print(f"{'object':14} {'MiB':>6} {'peak RSS MiB':>13} {'seconds':>8} {'s/MiB':>6} {'CPU s':>6} {'CPU s/MiB':>9}  "
          "rows, quarantined, outcome")
    with moto_server() as endpoint, tempfile.TemporaryDirectory():
        env["AWS_ENDPOINT_URL"] = endpoint
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="bench")
        for name, body in objects().items():
            key = f"data-capture/bench/sme/ep/AllTraffic/2026/11/30/00/{name}.jsonl"
            s3.put_object(Bucket="bench", Key=key, Body=body)
            created = {"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "bench"}, "object": {"key": key}}}
            notification = {"Records": [created]}
            code = _CHILD.format(runtime=str(RUNTIME_DIR), body=json.dumps(notification), peak=_PEAK_KIB)
            result = json.loads(run_child(code, env))
            outcome = "ok" if result["result"] == {"batchItemFailures": []} else f"FAILED {result['result']}"
            curated = s3.list_objects_v2(Bucket="bench", Prefix="curated/").get("KeyCount", 0)
            quarantine = s3.list_objects_v2(Bucket="bench", Prefix="quarantine/").get("Contents", [])
            entries = [
                json.loads(line)
                for item in quarantine
                for line in s3.get_object(Bucket="bench", Key=item["Key"])["Body"].read().splitlines()
            ]
            lines = sum(entry.get("count", 1) for entry in entries)  # an entry of a run stands for `count` lines
            size = len(body) / MIB
            print(
                f"{name:14} {size:6.1f} {result['peak_kib'] / 1024:13.0f} {result['seconds']:8.2f} "
                f"{result['seconds'] / size:6.2f} {result['cpu_seconds']:6.2f} {result['cpu_seconds'] / size:9.2f}  "
                f"{curated} curated files, {lines} quarantined in {len(entries)} entries, {outcome}"
            )
            for prefix in ("curated/", "quarantine/"):
                for item in s3.list_objects_v2(Bucket="bench", Prefix=prefix).get("Contents", []):
                    s3.delete_object(Bucket="bench", Key=item["Key"])
            s3.delete_object(Bucket="bench", Key=key)
    print(f"load average at the end: {' '.join(f'{value:.1f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    main()

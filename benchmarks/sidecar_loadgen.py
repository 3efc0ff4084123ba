"""Closed-loop HTTP/1.1 load generator for the capture sidecar benchmark.

Deliberately small: keep-alive connections on asyncio streams (uvloop when present), a request
written in one call, responses framed by Content-Length or chunked encoding. It records the
latency of each request and, for chunked responses, the arrival of the first body chunk.
Prints one JSON object on stdout.

    python sidecar_loadgen.py --port 8080 --path /v1/completions --concurrency 64 --requests 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time


async def read_response(reader: asyncio.StreamReader) -> tuple[int, int | None, bool]:
    """Read one response; return (status, nanoseconds at the first body chunk or None, keep-alive)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    keep_alive = b"connection: close" not in lower
    if b"transfer-encoding: chunked" in lower:
        first_chunk_at = None
        while True:
            size = int((await reader.readline()).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readline()
                return status, first_chunk_at, keep_alive
            await reader.readexactly(size + 2)
            if first_chunk_at is None:
                first_chunk_at = time.perf_counter_ns()
    start = lower.find(b"content-length:")
    length = int(lower[start + 15 : lower.find(b"\r\n", start)]) if start >= 0 else 0
    if length:
        await reader.readexactly(length)
    return status, None, keep_alive


async def client(
    port: int, request: bytes, count: int, latencies: list[int], first_chunks: list[int], errors: list[str]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            started = time.perf_counter_ns()
            writer.write(request)
            status, first_chunk_at, keep_alive = await read_response(reader)
            finished = time.perf_counter_ns()
            if not keep_alive:  # the server closes this connection: open a new one (not timed)
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if status != 200:
                errors.append(f"status {status}")
            latencies.append(finished - started)
            if first_chunk_at is not None:
                first_chunks.append(first_chunk_at - started)
    finally:
        writer.close()


async def run(args: argparse.Namespace) -> dict[str, object]:
    body = args.body.encode()
    request = (
        f"POST {args.path} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    per_client = [args.requests // args.concurrency] * args.concurrency
    for index in range(args.requests % args.concurrency):
        per_client[index] += 1
    warmup: list[int] = []
    await asyncio.gather(
        *(client(args.port, request, args.warmup, warmup, [], []) for _ in range(min(args.concurrency, 8)))
    )
    latencies: list[int] = []
    first_chunks: list[int] = []
    errors: list[str] = []
    started = time.perf_counter()
    await asyncio.gather(*(client(args.port, request, n, latencies, first_chunks, errors) for n in per_client))
    elapsed = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "errors": len(errors),
        "latencies_ns": latencies,
        "first_chunk_ns": first_chunks,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--body", default='{"prompt": "What is the capital of France?", "max_tokens": 16}')
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    try:
        import uvloop

        result = uvloop.run(run(args))
    except ImportError:
        result = asyncio.run(run(args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

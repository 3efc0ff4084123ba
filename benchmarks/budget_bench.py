"""Budgets across replicas: over-admission, added time to first chunk, store round trips (docs/usage-and-budgets.md).

    .venv/bin/python benchmarks/budget_bench.py [--streams 500] [--budget 1500000] [--latency-requests 2000]

Processes, all on 127.0.0.1: redis-server (Debian's; valkey-server if installed) as the shared store, the
vLLM-like stand-in (tests/sidecar/standin_server.py, /vllm/..., counting tokens like vLLM's counters), an S3 sink
and capture sidecars.

1. Over-admission: three sidecars share one caller's daily budget through the store; `--streams` concurrent
   clients stream chat completions across them (round robin, each request a random prompt and max_tokens, 2 ms
   between events) until the budget refuses them. Admitted tokens are the model server's own counters (prompt +
   generation); over-admission = max(0, admitted - budget) / budget.
2. Added time to first chunk: the same streams, 64 at a time, through one sidecar that meters usage (asks for it
   and removes it) without limits, and one that also enforces a large budget through the store (leases); the
   difference of their p99 is what the limiter adds.
3. Store round trips per admitted request (redis INFO commandstats), and the same with the store stopped mid-run
   (fail open: every request still answered, none waits longer than the store timeout).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.redis_server import redis_server  # noqa: E402

PYTHON = sys.executable
STANDIN = REPO / "tests" / "sidecar" / "standin_server.py"
S3_SINK = REPO / "benchmarks" / "sidecar_s3_sink.py"
CHAT = "/vllm/v1/chat/completions"
KEY = "bench-team-key-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing on {port}")


@contextmanager
def process(args: list[str], port: int, env: dict[str, str] | None = None, cwd: Path | None = None) -> Iterator[None]:
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def sidecar_env(upstream: int, s3: int, port: int, metrics: int, keys: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "UPSTREAM_URL": f"http://127.0.0.1:{upstream}",
        "CAPTURE_S3_URI": "s3://bench/captures/",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "LISTEN_HOST": "127.0.0.1",
        "LISTEN_PORT": str(port),
        "METRICS_PORT": str(metrics),
        "SAMPLING_PERCENTAGE": "0",
        "USAGE_PATHS": CHAT,
        "API_KEYS_FILE": str(keys),
        "MAX_CONNECTIONS": "4096",
        **extra,
    }


def vllm_tokens(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/vllm/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("vllm:prompt_tokens_total", "vllm:generation_tokens_total")):
            total += float(line.rpartition(" ")[2])
    return total


def redis_calls(url: str) -> int:
    import redis

    stats = redis.Redis.from_url(url).info("commandstats")
    return sum(
        int(value["calls"])
        for name, value in stats.items()
        if name in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_decrby", "cmdstat_script")
    )


def request_body(chooser: random.Random) -> bytes:
    words = " ".join(["word"] * chooser.randrange(5, 200))
    request = {
        "messages": [{"role": "user", "content": words}],
        "max_tokens": chooser.randrange(16, 128),
        "stream": True,
    }
    return json.dumps(request).encode()


async def one_stream(session: aiohttp.ClientSession, port: int, body: bytes) -> tuple[int, float | None]:
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    async with session.post(f"http://127.0.0.1:{port}{CHAT}?delay_ms=2", data=body, headers=headers) as response:
        first = None
        while await response.content.readany():
            if first is None:
                first = time.perf_counter() - started
        return response.status, first


async def over_admission(ports: list[int], streams: int, seed: int) -> dict[str, int]:
    chooser = random.Random(seed)
    counts = {"admitted": 0, "refused": 0, "other": 0}
    stop = asyncio.Event()

    async def client(index: int, session: aiohttp.ClientSession) -> None:
        turn = index
        while not stop.is_set():
            status, _ = await one_stream(session, ports[turn % len(ports)], request_body(chooser))
            turn += 1
            if status == 200:
                counts["admitted"] += 1
            elif status == 429:
                counts["refused"] += 1
                if counts["refused"] >= streams:  # every client has met the end of the budget once
                    stop.set()
                return
            else:
                counts["other"] += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(client(index, session) for index in range(streams)))
    return counts


async def latency(port: int, concurrency: int, requests: int, seed: int) -> list[float]:
    chooser = random.Random(seed)
    bodies = [request_body(chooser) for _ in range(requests)]
    firsts: list[float] = []
    queue = list(range(requests))

    async def client(session: aiohttp.ClientSession) -> None:
        while queue:
            body = bodies[queue.pop()]
            status, first = await one_stream(session, port, body)
            if status == 200 and first is not None:
                firsts.append(first * 1000)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return firsts


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def admission_cost(rounds: int = 200_000) -> float:
    """CPU of one admit + settle on a lease (the common case: no store call), in microseconds."""
    sys.path.insert(0, str(REPO / "sidecar"))
    from capture_sidecar.limits import FAIL_OPEN, CallerLimits, Limiter

    limiter = Limiter(
        {"team": CallerLimits(tokens_per_minute=10**15, tokens_per_day=10**15)},
        store=None,
        key_prefix="x:",
        fail_mode=FAIL_OPEN,
        store_timeout_seconds=0.1,
    )
    started = time.process_time()
    for _ in range(rounds):
        reservation = limiter.admit("team", 500)
        limiter.settle(reservation, 400)  # type: ignore[arg-type]
    return (time.process_time() - started) / rounds * 1e6


def over_admission_part(args: argparse.Namespace, replicas: list[int], standin: int, store: str) -> None:
    tokens_before, calls_before = vllm_tokens(standin), redis_calls(store)
    started = time.monotonic()
    counts = asyncio.run(over_admission(replicas, args.streams, args.seed))
    elapsed = time.monotonic() - started
    admitted_tokens = vllm_tokens(standin) - tokens_before
    calls = redis_calls(store) - calls_before
    over = max(0.0, admitted_tokens - args.budget) / args.budget
    print(f"over-admission: {args.streams} concurrent streams across 3 replicas, budget {args.budget} tokens/day")
    print(
        f"  requests admitted {counts['admitted']}, refused {counts['refused']}, other {counts['other']}, "
        f"{elapsed:.1f} s"
    )
    print(
        f"  tokens admitted (model server's counters) {admitted_tokens:.0f} = "
        f"{100 * admitted_tokens / args.budget:.2f} % of the budget; over-admission {100 * over:.2f} %"
    )
    print(f"  store round trips {calls}: {calls / max(1, counts['admitted'] + counts['refused']):.3f} per request")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--budget", type=int, default=1_500_000, help="the caller's tokensPerDay in part 1")
    parser.add_argument("--latency-requests", type=int, default=2000)
    parser.add_argument("--latency-concurrency", type=int, default=64)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--rounds", type=int, default=2, help="latency rounds, alternating the two sidecars")
    parser.add_argument("--latency-only", action="store_true", help="skip part 1")
    args = parser.parse_args()
    print(f"admission on a lease (in process, no store call): {admission_cost():.2f} us of CPU per admit + settle")

    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys"
        keys.write_text(f"bench-team:{KEY}\n")
        store = stack.enter_context(redis_server())
        standin, s3 = free_port(), free_port()
        stack.enter_context(process([PYTHON, str(STANDIN), str(standin)], standin))
        stack.enter_context(process([PYTHON, str(S3_SINK), str(s3)], s3))

        def sidecar(label: str, **extra: str) -> int:
            port, metrics = free_port(), free_port()
            env = sidecar_env(standin, s3, port, metrics, keys, LIMITS_KEY_PREFIX=f"bench-{label}:", **extra)
            stack.enter_context(process([PYTHON, "-m", "capture_sidecar"], port, env, REPO / "sidecar"))
            return port

        limited = {
            "LIMITS_STORE_URL": store,
            "CALLER_LIMITS": json.dumps({"bench-team": {"tokensPerDay": args.budget}}),
        }
        replicas = [sidecar("shared", **limited) for _ in range(3)]

        # 1. Over-admission across three replicas.
        if not args.latency_only:
            over_admission_part(args, replicas, standin, store)

        # 2. Added time to first chunk: metering alone vs metering + limits (a budget that is never reached).
        metered = sidecar("metered")
        big = {"LIMITS_STORE_URL": store, "CALLER_LIMITS": json.dumps({"bench-team": {"tokensPerDay": 10**12}})}
        budgeted = sidecar("budgeted", **big)
        results: dict[str, list[float]] = {"metered": [], "metered + limits": []}
        calls_before = redis_calls(store)
        for run in range(args.rounds):  # alternate, so load drifts hit both
            for label, port in (("metered", metered), ("metered + limits", budgeted))[:: 1 if run % 2 == 0 else -1]:
                results[label] += asyncio.run(
                    latency(port, args.latency_concurrency, args.latency_requests // args.rounds, args.seed + run)
                )
        calls = redis_calls(store) - calls_before
        print(
            f"time to first chunk, {args.latency_concurrency} concurrent streams, {args.latency_requests} requests "
            "per sidecar:"
        )
        for label, values in results.items():
            print(
                f"  {label:18s} p50 {percentile(values, 0.5):7.2f} ms  p99 {percentile(values, 0.99):7.2f} ms  "
                f"mean {statistics.fmean(values):7.2f} ms  (n={len(values)})"
            )
        added = percentile(results["metered + limits"], 0.99) - percentile(results["metered"], 0.99)
        print(
            f"  added p99 by the limiter: {added:+.2f} ms; store round trips {calls} for {args.latency_requests} "
            f"requests ({calls / args.latency_requests:.4f} per request)"
        )


if __name__ == "__main__":
    main()

"""Capture sidecar benchmark: added latency, throughput and first-chunk latency versus calling the
model server directly, with nginx as the reference proxy, all in one run on 127.0.0.1.

    .venv/bin/python benchmarks/sidecar_bench.py [--quick]

Processes (each its own): the stand-in model server (tests/sidecar/standin_server.py), an S3
sink (benchmarks/sidecar_s3_sink.py), nginx (`proxy_buffering off`, one worker, upstream
keep-alive), the sidecar with capture off (SAMPLING_PERCENTAGE=0, pure proxy cost) and with
capture of every request (100 %, default batching of 10 records per PutObject), and the load
generator (benchmarks/sidecar_loadgen.py, a closed loop on keep-alive connections). Needs nginx
on PATH (Debian: apt-get install nginx-light) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
STANDIN = REPO / "tests" / "sidecar" / "standin_server.py"
S3_SINK = REPO / "benchmarks" / "sidecar_s3_sink.py"
LOADGEN = REPO / "benchmarks" / "sidecar_loadgen.py"

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;  # the default 1000 would reconnect every load-generator client
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream model {{ server 127.0.0.1:{upstream}; keepalive 256; }}
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        location / {{
            proxy_pass http://model;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    concurrency: int
    requests: int
    streamed: bool = False


@dataclass(frozen=True)
class Measurement:
    p50_us: float
    p99_us: float
    throughput: float
    first_chunk_p50_us: float | None
    first_chunk_p99_us: float | None
    errors: int
    proxy_cpu_us_per_request: float | None  # None when calling the model server directly
    model_cpu_us_per_request: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {port}")


@contextmanager
def process(args: list[str], port: int, log: Path | None = None, **kwargs) -> Iterator[subprocess.Popen[bytes]]:
    stderr = log.open("wb") if log else subprocess.DEVNULL
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr, **kwargs)
    try:
        wait_for_port(port)
        yield child
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def sidecar_args(upstream: int, port: int, metrics_port: int, s3_port: int, sampling: str) -> dict:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "UPSTREAM_URL": f"http://127.0.0.1:{upstream}",
        "CAPTURE_S3_URI": "s3://bench-bucket/captures/pod/",
        "LISTEN_HOST": "127.0.0.1",
        "LISTEN_PORT": str(port),
        "METRICS_PORT": str(metrics_port),
        "SAMPLING_PERCENTAGE": sampling,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3_port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    return {"args": [PYTHON, "-m", "capture_sidecar"], "port": port, "cwd": REPO / "sidecar", "env": env}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its direct children (nginx's worker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0.0
    for each in [pid, *map(int, children)]:
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def percentile(sorted_values: list[int], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))] / 1000


def load(
    port: int, scenario: Scenario, model_pid: int, proxy_pid: int | None, requests: int | None = None
) -> Measurement:
    model_cpu_before = cpu_seconds(model_pid)
    proxy_cpu_before = cpu_seconds(proxy_pid) if proxy_pid else 0.0
    command = [PYTHON, str(LOADGEN), "--port", str(port), "--path", scenario.path]
    command += ["--concurrency", str(scenario.concurrency), "--requests", str(requests or scenario.requests)]
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"load generator failed on port {port}:\n{completed.stderr}")
    output = completed.stdout
    result = json.loads(output)
    count = result["requests"]
    proxy_cpu = (cpu_seconds(proxy_pid) - proxy_cpu_before) / count * 1e6 if proxy_pid else None
    model_cpu = (cpu_seconds(model_pid) - model_cpu_before) / count * 1e6
    latencies = sorted(result["latencies_ns"])
    first_chunks = sorted(result["first_chunk_ns"])
    return Measurement(
        p50_us=percentile(latencies, 0.50),
        p99_us=percentile(latencies, 0.99),
        throughput=result["requests"] / result["seconds"],
        first_chunk_p50_us=percentile(first_chunks, 0.50) if first_chunks else None,
        first_chunk_p99_us=percentile(first_chunks, 0.99) if first_chunks else None,
        errors=result["errors"],
        proxy_cpu_us_per_request=proxy_cpu,
        model_cpu_us_per_request=model_cpu,
    )


def scenarios(scale: float) -> list[Scenario]:
    def n(count: int) -> int:
        return max(64, int(count * scale))

    return [
        Scenario("small JSON, 1 client", "/v1/completions", 1, n(3000)),
        Scenario("small JSON, 64 clients", "/v1/completions", 64, n(20000)),
        Scenario("JSON, 20 ms model time, 64 clients", "/v1/completions?delay_ms=20", 64, n(6400)),
        Scenario("SSE 10 events 2 ms apart, 1 client", "/v1/stream?events=10&delay_ms=2", 1, n(300), True),
        Scenario("SSE 10 events 2 ms apart, 64 clients", "/v1/stream?events=10&delay_ms=2", 64, n(3200), True),
    ]


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests, to check the setup")
    parser.add_argument("--sustained", type=int, default=50_000, help="requests for the RSS measurement")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"

    ports = {name: free_port() for name in ("model", "s3", "nginx", "off", "off_m", "on", "on_m")}
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-") as tmp:
        capturing_log = Path(tmp) / "sidecar-capturing.log"
        conf = Path(tmp) / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=ports["model"], port=ports["nginx"]))
        with (
            process([PYTHON, str(STANDIN), str(ports["model"])], ports["model"]) as model,
            process([PYTHON, str(S3_SINK), str(ports["s3"])], ports["s3"]),
            process([nginx, "-c", str(conf), "-p", tmp], ports["nginx"]) as nginx_master,
            process(**sidecar_args(ports["model"], ports["off"], ports["off_m"], ports["s3"], "0")) as plain,
            process(
                **sidecar_args(ports["model"], ports["on"], ports["on_m"], ports["s3"], "100"), log=capturing_log
            ) as capturing,
        ):
            targets = {
                "direct": (ports["model"], None),
                "nginx": (ports["nginx"], nginx_master.pid),
                "sidecar, capture off": (ports["off"], plain.pid),
                "sidecar, capture 100 %": (ports["on"], capturing.pid),
            }
            rss_start = rss_mib(capturing.pid)
            rows = []
            for scenario in scenarios(scale):
                results = {}
                for target, (port, proxy_pid) in targets.items():
                    load(port, scenario, model.pid, proxy_pid, requests=max(64, scenario.requests // 10))  # warm-up
                    results[target] = load(port, scenario, model.pid, proxy_pid)
                rows.append((scenario, results))
                print(f"measured: {scenario.name}", file=sys.stderr)
            rss_after_table = rss_mib(capturing.pid)
            sustained = Scenario("sustained", "/v1/completions", 64, int(args.sustained * scale))
            load(ports["on"], sustained, model.pid, capturing.pid)
            rss_after_sustained = rss_mib(capturing.pid)
            time.sleep(1)
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{ports['on_m']}/metrics").read().decode()
            s3_stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ports['s3']}/stats").read())
        warnings = [line for line in capturing_log.read_text().splitlines() if " WARNING " in line or " ERROR " in line]

    print(f"\nMachine: {os.cpu_count()} cores; Python {sys.version.split()[0]}; all processes on 127.0.0.1\n")
    print(
        "| scenario | target | p50 µs | p99 µs | added p50 µs | added p99 µs | req/s | vs direct "
        "| 1st chunk p50 µs | 1st chunk p99 µs | added 1st chunk p50 µs | proxy CPU µs/req "
        "| model CPU µs/req | errors |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario, results in rows:
        direct = results["direct"]
        for target, measured in results.items():
            is_direct = target == "direct"
            added_first = (
                None
                if is_direct or measured.first_chunk_p50_us is None
                else measured.first_chunk_p50_us - (direct.first_chunk_p50_us or 0)
            )
            print(
                f"| {scenario.name} | {target} | {fmt(measured.p50_us)} | {fmt(measured.p99_us)} "
                f"| {'' if is_direct else fmt(measured.p50_us - direct.p50_us)} "
                f"| {'' if is_direct else fmt(measured.p99_us - direct.p99_us)} "
                f"| {fmt(measured.throughput)} | {measured.throughput / direct.throughput:.0%} "
                f"| {fmt(measured.first_chunk_p50_us)} | {fmt(measured.first_chunk_p99_us)} "
                f"| {'' if added_first is None else fmt(added_first)} "
                f"| {fmt(measured.proxy_cpu_us_per_request)} | {fmt(measured.model_cpu_us_per_request)} "
                f"| {measured.errors} |"
            )
    print(
        f"\nSidecar with capture 100 %: RSS {rss_start:.1f} MiB at start, {rss_after_table:.1f} MiB after the "
        f"table, {rss_after_sustained:.1f} MiB after {sustained.requests:,} more requests at 64 clients."
    )
    wanted = ("records_captured_total", "records_uploaded_total", "records_dropped_total", "uploads_total")
    print("Its counters at the end:")
    for line in metrics.splitlines():
        if not line.startswith("#") and any(name in line for name in wanted):
            print(f"  {line}")
    for line in warnings:
        print(f"  sidecar log: {line}")
    print(f"S3 sink received {s3_stats['puts']:,} PutObject calls, {s3_stats['bytes'] / 2**20:.1f} MiB.")


if __name__ == "__main__":
    main()

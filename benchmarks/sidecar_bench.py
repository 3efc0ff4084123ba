"""Capture sidecar benchmark: CPU per request, throughput and added latency of the sidecar against
nginx as a plain reverse proxy and against calling the model server directly, in one run on
127.0.0.1.

    .venv/bin/python benchmarks/sidecar_bench.py [--runs 3] [--seconds 5] [--quick]
    make bench-sidecar

Processes (each its own): the stand-in model server (tests/sidecar/standin_server.py), an S3
sink (benchmarks/sidecar_s3_sink.py, so S3's CPU is not charged to the box), nginx (one worker,
`proxy_buffering off`, upstream keep-alive), the sidecar with capture off (SAMPLING_PERCENTAGE=0)
and with capture of every request (100 %, default batching). Load: wrk (C, cheap) for CPU and
throughput; benchmarks/sidecar_loadgen.py (closed loop, records the first body chunk) for
latencies. CPU is user + system time from /proc of the proxy process and its children (nginx's
worker; the sidecar's upload threads are in its own figure), divided by the requests served.

Comparing a change: `--variant 'LABEL;NAME=VALUE;...'` adds a sidecar capturing every request with
those extra environment variables (`SRC=/path/to/dir` runs `capture_sidecar` from another source
directory, e.g. an unpacked `git archive` of the base commit), so the reference and the candidate
are measured in the same run, under the same load (each run starts at another target, so the order
rotates). `--scenarios sse64,json32` keeps only some rows.

Needs nginx and wrk (Debian: apt-get install -y nginx-light wrk). When they are missing and this
runs as root on a Debian-like system, it installs them; otherwise it says what to install.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
STANDIN = REPO / "tests" / "sidecar" / "standin_server.py"
S3_SINK = REPO / "benchmarks" / "sidecar_s3_sink.py"
LOADGEN = REPO / "benchmarks" / "sidecar_loadgen.py"
BODY = '{"prompt": "What is the capital of France?", "max_tokens": 16}'

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

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('\\n{{"requests": %d, "duration_us": %d, "errors": %d, "non2xx": %d, '
    .. '"p50_us": %d, "p99_us": %d}}\\n', summary.requests, summary.duration,
    e.connect + e.read + e.write + e.timeout, e.status, latency:percentile(50), latency:percentile(99)))
end
"""

TARGETS = ("direct", "nginx", "sidecar, capture off", "sidecar, capture 100 %")


@dataclass(frozen=True)
class Scenario:
    key: str
    name: str
    path: str
    concurrency: int
    tool: str  # "wrk" or "loadgen"
    events: int = 0  # SSE events per response (for CPU per event)
    requests: int = 0  # loadgen requests


def scenarios(quick: bool) -> list[Scenario]:
    scale = 0.2 if quick else 1.0
    return [
        Scenario("json32", "small JSON, 32 connections (wrk)", "/v1/completions", 32, "wrk"),
        Scenario(
            "sse32", "SSE 40 events 1 ms apart, 32 streams (wrk)", "/v1/stream?events=40&delay_ms=1", 32, "wrk", 41
        ),
        Scenario(
            "json1", "small JSON, 1 client (loadgen)", "/v1/completions", 1, "loadgen", requests=int(3000 * scale)
        ),
        Scenario(
            "sse64",
            "SSE 10 events 2 ms apart, 64 clients (loadgen)",
            "/v1/stream?events=10&delay_ms=2",
            64,
            "loadgen",
            11,
            requests=int(3200 * scale),
        ),
    ]


def need_tools() -> tuple[str, str]:
    """nginx and wrk, installed from Debian's packages when missing and possible."""

    def find() -> tuple[str | None, str | None]:
        return shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None), shutil.which(
            "wrk"
        )

    nginx, wrk = find()
    if nginx and wrk:
        return nginx, wrk
    missing = [name for name, path in (("nginx-light", nginx), ("wrk", wrk)) if not path]
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"installing {' '.join(missing)} (Debian packages) ...", file=sys.stderr)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
        subprocess.run(["apt-get", "update", "-qq"], check=False, **quiet)
        done = subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False, **quiet)
        nginx, wrk = find()
        if done.returncode == 0 and nginx and wrk:
            return nginx, wrk
    sys.exit(
        f"sidecar benchmark: needs {' and '.join(missing)} on PATH.\n"
        f"  Debian/Ubuntu: sudo apt-get install -y {' '.join(missing)}\n"
        "  (nginx is the reference proxy, wrk the load generator.)"
    )


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


def sidecar_args(
    upstream: int, port: int, metrics_port: int, s3_port: int, sampling: str, extra: dict[str, str] | None = None
) -> dict:
    extra = dict(extra or {})
    source = Path(extra.pop("SRC", REPO / "sidecar"))
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
        **extra,
    }
    return {"args": [PYTHON, "-m", "capture_sidecar"], "port": port, "cwd": source, "env": env}


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """'LABEL;NAME=VALUE;...' -> (label, environment)."""
    label, *assignments = text.split(";")
    env = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep:
            raise SystemExit(f"--variant {text!r}: {assignment!r} is not NAME=VALUE")
        env[name.strip()] = value
    return label.strip(), env


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) and its direct children."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0.0
    for each in [pid, *map(int, children)]:
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


@dataclass(frozen=True)
class Cell:
    throughput: float
    p50_us: float
    p99_us: float
    first_p50_us: float | None
    first_p99_us: float | None
    proxy_cpu_us: float | None
    model_cpu_us: float
    errors: int


def run_wrk(wrk: str, script: Path, port: int, scenario: Scenario, seconds: float) -> dict:
    command = [wrk, "-t2", f"-c{scenario.concurrency}", f"-d{max(1, round(seconds))}s", "-s", str(script)]
    command.append(f"http://127.0.0.1:{port}{scenario.path}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    last = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not last:
        raise RuntimeError(f"wrk failed on {port}: {done.stdout}\n{done.stderr}")
    result = json.loads(last[-1])
    return {
        "requests": result["requests"],
        "seconds": result["duration_us"] / 1e6,
        "errors": result["errors"] + result["non2xx"],
        "p50_us": result["p50_us"],
        "p99_us": result["p99_us"],
        "first": [],
    }


def run_loadgen(port: int, scenario: Scenario) -> dict:
    command = [PYTHON, str(LOADGEN), "--port", str(port), "--path", scenario.path]
    command += ["--concurrency", str(scenario.concurrency), "--requests", str(scenario.requests)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed on port {port}:\n{done.stderr}")
    result = json.loads(done.stdout)
    latencies = sorted(result["latencies_ns"])
    return {
        "requests": result["requests"],
        "seconds": result["seconds"],
        "errors": result["errors"],
        "p50_us": pct(latencies, 0.5),
        "p99_us": pct(latencies, 0.99),
        "first": sorted(result["first_chunk_ns"]),
    }


def pct(sorted_ns: list[int], fraction: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(len(sorted_ns) * fraction))] / 1000


def measure(run, model_pid: int, proxy_pid: int | None) -> Cell:
    model_before = cpu_seconds(model_pid)
    proxy_before = cpu_seconds(proxy_pid) if proxy_pid else 0.0
    result = run()
    count = max(1, result["requests"])
    first = result["first"]
    return Cell(
        throughput=result["requests"] / result["seconds"],
        p50_us=result["p50_us"],
        p99_us=result["p99_us"],
        first_p50_us=pct(first, 0.5) if first else None,
        first_p99_us=pct(first, 0.99) if first else None,
        proxy_cpu_us=(cpu_seconds(proxy_pid) - proxy_before) / count * 1e6 if proxy_pid else None,
        model_cpu_us=(cpu_seconds(model_pid) - model_before) / count * 1e6,
        errors=result["errors"],
    )


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def spread(values: list[float], digits: int = 0) -> str:
    """median [min-max] over the runs."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return fmt(values[0], digits)
    return f"{fmt(statistics.median(values), digits)} [{fmt(min(values), digits)}-{fmt(max(values), digits)}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="repetitions of the whole table (medians and ranges)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each wrk cell")
    parser.add_argument("--quick", action="store_true", help="one run of short cells, to check the setup")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="'LABEL;NAME=VALUE;...': one more sidecar target (capture 100 %%) with these extra environment "
        "variables; SRC=DIR runs capture_sidecar from another source directory",
    )
    parser.add_argument("--scenarios", default="", help="comma-separated scenario keys (json32,sse32,json1,sse64)")
    args = parser.parse_args()
    variants = [parse_variant(text) for text in args.variant]
    wanted_scenarios = {key.strip() for key in args.scenarios.split(",") if key.strip()}
    chosen = [sc for sc in scenarios(args.quick) if not wanted_scenarios or sc.key in wanted_scenarios]
    if args.quick:
        args.runs, args.seconds = 1, 2.0
    nginx, wrk = need_tools()

    ports = {name: free_port() for name in ("model", "s3", "nginx", "off", "off_m", "on", "on_m")}
    variant_ports = [(free_port(), free_port()) for _ in variants]
    all_targets = TARGETS + tuple(label for label, _ in variants)
    results: dict[tuple[str, str], list[Cell]] = {}
    rss: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-") as tmp, ExitStack() as stack:
        script = Path(tmp) / "post.lua"
        script.write_text(WRK_SCRIPT.format(body=BODY))
        capturing_log = Path(tmp) / "sidecar-capturing.log"
        conf = Path(tmp) / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=ports["model"], port=ports["nginx"]))
        model = stack.enter_context(process([PYTHON, str(STANDIN), str(ports["model"])], ports["model"]))
        stack.enter_context(process([PYTHON, str(S3_SINK), str(ports["s3"])], ports["s3"]))
        nginx_master = stack.enter_context(process([nginx, "-c", str(conf), "-p", tmp], ports["nginx"]))
        plain = stack.enter_context(
            process(**sidecar_args(ports["model"], ports["off"], ports["off_m"], ports["s3"], "0"))
        )
        capturing = stack.enter_context(
            process(**sidecar_args(ports["model"], ports["on"], ports["on_m"], ports["s3"], "100"), log=capturing_log)
        )
        targets = {
            "direct": (ports["model"], None),
            "nginx": (ports["nginx"], nginx_master.pid),
            "sidecar, capture off": (ports["off"], plain.pid),
            "sidecar, capture 100 %": (ports["on"], capturing.pid),
        }
        for (label, env), (port, metrics_port) in zip(variants, variant_ports, strict=True):
            child = stack.enter_context(
                process(**sidecar_args(ports["model"], port, metrics_port, ports["s3"], "100", env))
            )
            targets[label] = (port, child.pid)
        rss_start = rss_mib(capturing.pid)
        for run in range(args.runs):
            # Each run starts the round at another target, so no target is always measured right
            # after the same neighbour (the load of a shared box drifts within a round).
            order = list(targets.items())
            order = order[run % len(order) :] + order[: run % len(order)]
            for scenario in chosen:
                for target, (port, pid) in order:
                    if scenario.tool == "wrk":
                        warm = Scenario(**{**scenario.__dict__})
                        run_wrk(wrk, script, port, warm, 1)
                        cell = measure(
                            lambda p=port, sc=scenario: run_wrk(wrk, script, p, sc, args.seconds), model.pid, pid
                        )
                    else:
                        run_loadgen(
                            port, Scenario(**{**scenario.__dict__, "requests": max(64, scenario.requests // 10)})
                        )
                        cell = measure(lambda p=port, sc=scenario: run_loadgen(p, sc), model.pid, pid)
                    results.setdefault((scenario.key, target), []).append(cell)
                rss.append(rss_mib(capturing.pid))
                print(f"run {run + 1}/{args.runs}: {scenario.name}", file=sys.stderr)
        time.sleep(1.5)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{ports['on_m']}/metrics").read().decode()
        s3_stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ports['s3']}/stats").read())
        warnings = [line for line in capturing_log.read_text().splitlines() if " WARNING " in line or " ERROR " in line]

    print(
        f"\nMachine: {os.cpu_count()} cores, load average before the end {os.getloadavg()[0]:.1f}; "
        f"Python {sys.version.split()[0]}; {args.runs} run(s); cells: median [min-max]\n"
    )
    print(
        "| scenario | target | req/s | vs direct | p50 µs | p99 µs | added p50 µs | 1st chunk p50 µs "
        "| 1st chunk p99 µs | added 1st chunk p50 / p99 µs | proxy CPU µs/req | proxy CPU µs/event "
        "| CPU vs nginx | errors |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario in chosen:
        direct = results[(scenario.key, "direct")]
        reference = results[(scenario.key, "nginx")]
        for target in all_targets:
            cells = results[(scenario.key, target)]
            vs_direct = [c.throughput / d.throughput for c, d in zip(cells, direct, strict=True)]
            added = [c.p50_us - d.p50_us for c, d in zip(cells, direct, strict=True)]
            added_first = [
                (c.first_p50_us - d.first_p50_us, c.first_p99_us - d.first_p99_us)
                for c, d in zip(cells, direct, strict=True)
                if c.first_p50_us is not None and d.first_p50_us is not None
            ]
            cpu = [c.proxy_cpu_us for c in cells]
            per_event = [c.proxy_cpu_us / scenario.events for c in cells if c.proxy_cpu_us] if scenario.events else []
            ratio = [
                c.proxy_cpu_us / r.proxy_cpu_us
                for c, r in zip(cells, reference, strict=True)
                if c.proxy_cpu_us and r.proxy_cpu_us
            ]
            is_direct = target == "direct"
            first_cell = (
                ""
                if is_direct or not added_first
                else spread([a for a, _ in added_first]) + " / " + spread([b for _, b in added_first])
            )
            print(
                f"| {scenario.name} | {target} | {spread([c.throughput for c in cells])} "
                f"| {spread([v * 100 for v in vs_direct])} % | {spread([c.p50_us for c in cells])} "
                f"| {spread([c.p99_us for c in cells])} | {'' if is_direct else spread(added)} "
                f"| {spread([c.first_p50_us for c in cells])} | {spread([c.first_p99_us for c in cells])} "
                f"| {first_cell} "
                f"| {spread(cpu)} | {spread(per_event, 1) if per_event else '-'} "
                f"| {spread(ratio, 1) + 'x' if ratio and target != 'nginx' else ''} "
                f"| {sum(c.errors for c in cells)} |"
            )
    print(
        f"\nSidecar with capture 100 %: RSS {rss_start:.1f} MiB at start, at most {max(rss):.1f} MiB after a scenario."
    )
    wanted = ("records_captured_total", "records_uploaded_total", "records_dropped_total", "uploads_total")
    print("Its counters at the end:")
    for line in metrics.splitlines():
        if not line.startswith("#") and any(name in line for name in wanted) and not line.endswith(" 0"):
            print(f"  {line}")
    for line in warnings[:10]:
        print(f"  sidecar log: {line}")
    print(f"S3 sink received {s3_stats['puts']:,} PutObject calls, {s3_stats['bytes'] / 2**20:.1f} MiB.")


if __name__ == "__main__":
    main()

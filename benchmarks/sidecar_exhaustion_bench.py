"""Capture sidecar under the connection-exhaustion attack of issue 17, on 127.0.0.1: peak RSS and fds of the
sidecar, the time its fds take to come back to where they were, and the latency of a client with the key meanwhile.

    .venv/bin/python benchmarks/sidecar_exhaustion_bench.py [--connections 6000] [--slowloris 300] [--src DIR]

The attack (tests/sidecar/exhaustion.py): waves of 500 unauthenticated connections that send part of a request
head, half of them then EOF; slowloris clients that send a byte each 0.5 s (reconnecting when closed); one client
with the key calling on a new connection each time, 10 ms apart. `--src DIR` runs `capture_sidecar` from another
source directory (e.g. an unpacked `git archive` of the base commit), `--env NAME=VALUE` adds settings. The
sidecar captures nothing (SAMPLING_PERCENTAGE=0) and uploads to nowhere: only connections are measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.sidecar.exhaustion import (  # noqa: E402
    fd_count,
    proc_status_mib,
    raise_file_limit,
    run_attack,
    wait_for_fds,
)
from tests.support.s3server import free_loopback_port  # noqa: E402

API_KEY = "bench-exhaustion-key-0123456789abcdef"
STANDIN = REPO / "tests" / "sidecar" / "standin_server.py"


def wait_for(url: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def keyed_call(port: int) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=b"{}",
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=6000)
    parser.add_argument("--slowloris", type=int, default=300)
    parser.add_argument("--src", default=str(REPO / "sidecar"), help="directory holding capture_sidecar")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the sidecar (repeatable)")
    parser.add_argument("--recover-timeout", type=float, default=120.0)
    args = parser.parse_args()
    raise_file_limit(args.connections + args.slowloris + 1024)

    model_port, port, metrics_port = free_loopback_port(), free_loopback_port(), free_loopback_port()
    env = {key: value for key, value in os.environ.items() if key.startswith(("PATH", "HOME", "LANG"))}
    env |= {
        "UPSTREAM_URL": f"http://127.0.0.1:{model_port}",
        "CAPTURE_S3_URI": "s3://bench-exhaustion/p/",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_loopback_port()}",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "LISTEN_HOST": "127.0.0.1",
        "LISTEN_PORT": str(port),
        "METRICS_PORT": str(metrics_port),
        "SAMPLING_PERCENTAGE": "0",
        "API_KEY": API_KEY,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env |= dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryFile() as log:
        model = subprocess.Popen([sys.executable, str(STANDIN), str(model_port)], stdout=subprocess.DEVNULL)
        sidecar = subprocess.Popen([sys.executable, "-m", "capture_sidecar"], cwd=args.src, env=env, stderr=log)
        try:
            wait_for(f"http://127.0.0.1:{metrics_port}/healthz")
            time.sleep(0.3)
            assert keyed_call(port) == 200
            pid = sidecar.pid
            baseline_fds, rss_before = fd_count(pid), proc_status_mib(pid, "VmRSS")
            result = run_attack(port, pid, API_KEY, connections=args.connections, slowloris=args.slowloris)
            ended = time.monotonic()
            fds_at_end = fd_count(pid)
            recovered = wait_for_fds(pid, baseline_fds + 2, args.recover_timeout)
            after = time.monotonic() - ended
            alive = sidecar.poll() is None
            try:
                metrics_text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
            except OSError:
                metrics_text = b""
            counters = {
                line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in metrics_text.decode().splitlines()
                if line.startswith("capture_sidecar_")
                and any(word in line for word in ("connections", "timeouts", "half_open"))
            }
            statuses = result.keyed_statuses
            latencies_ms = [1000 * value for value in result.keyed_latencies]
            report = {
                "sidecar_alive": alive,
                "attack_seconds": round(result.seconds, 1),
                "attack_connections_opened": result.opened,
                "attack_connect_failures": result.connect_failures,
                "slowloris_connections": result.slowloris_connections,
                "rss_mib_before": round(rss_before, 1),
                "rss_mib_peak_sampled": round(result.peak_rss_mib, 1),
                "vmhwm_mib": round(proc_status_mib(pid, "VmHWM"), 1) if alive else None,
                "fds_before": baseline_fds,
                "fds_peak_sampled": result.peak_fds,
                "fds_when_attack_ended": fds_at_end,
                "seconds_to_fds_baseline": None if recovered is None else round(recovered, 2),
                "fds_after_wait": fd_count(pid) if alive else None,
                "waited_seconds": round(after, 1),
                "keyed_calls": len(statuses),
                "keyed_200": statuses.count(200),
                "keyed_failed": len(statuses) - statuses.count(200),
                "keyed_latency_ms_p50": round(statistics.median(latencies_ms), 2) if latencies_ms else None,
                "keyed_latency_ms_p99": round(percentile(latencies_ms, 0.99), 2) if latencies_ms else None,
                "keyed_latency_ms_max": round(max(latencies_ms), 2) if latencies_ms else None,
                "metrics": counters,
            }
            print(json.dumps(report, indent=2))
        finally:
            for process in (sidecar, model):
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()

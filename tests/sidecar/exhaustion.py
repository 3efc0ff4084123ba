"""The connection-exhaustion attack of issue 17, on loopback, bounded in count and time: waves of unauthenticated
connections that send part of a request head (half of them then EOF, half nothing more), slowloris clients that
trickle a head a byte at a time (reconnecting when closed), and a client with the key that keeps calling on new
connections. Used by tests/sidecar/test_exhaustion.py and benchmarks/sidecar_exhaustion_bench.py."""

from __future__ import annotations

import http.client
import os
import resource
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PARTIAL_HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Pad: "
SLOW_START = b"POST /v1/completions HTTP/1.1\r\nX-Slow: "


def raise_file_limit(wanted: int) -> int:
    """This process's soft RLIMIT_NOFILE, raised towards `wanted` within the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def proc_status_mib(pid: int, name: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {name}")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class AttackResult:
    opened: int = 0  # attack connections the sidecar accepted (connect succeeded)
    connect_failures: int = 0
    slowloris_connections: int = 0
    keyed_statuses: list[int] = field(default_factory=list)  # 0: no answer (connection refused, reset)
    keyed_latencies: list[float] = field(default_factory=list)  # seconds, answered calls
    peak_rss_mib: float = 0.0
    peak_fds: int = 0
    seconds: float = 0.0


def _open(port: int, data: bytes) -> socket.socket | None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(data)
    except OSError:
        return None
    sock.setblocking(False)
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _keyed_client(port: int, api_key: str, stop: threading.Event, result: AttackResult) -> None:
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    while not stop.is_set():
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("POST", "/v1/completions", b"{}", headers)
            response = connection.getresponse()
            response.read()
            result.keyed_statuses.append(response.status)
            result.keyed_latencies.append(time.perf_counter() - started)
        except (OSError, http.client.HTTPException):
            result.keyed_statuses.append(0)
        finally:
            connection.close()
        time.sleep(0.01)


def run_attack(
    port: int,
    pid: int,
    api_key: str,
    *,
    connections: int = 6000,
    wave: int = 500,
    slowloris: int = 300,
    trickle_seconds: float = 0.5,
) -> AttackResult:
    """The attack against the sidecar at `port` (process `pid`); returns once every wave is sent and every client
    socket is closed. Samples the sidecar's RSS and fd count while it runs."""
    result = AttackResult()
    stop = threading.Event()
    keyed = threading.Thread(target=_keyed_client, args=(port, api_key, stop, result), daemon=True)
    started = time.monotonic()
    keyed.start()
    held: list[socket.socket] = []
    slow: list[socket.socket] = []

    def sample() -> None:
        result.peak_rss_mib = max(result.peak_rss_mib, proc_status_mib(pid, "VmRSS"))
        result.peak_fds = max(result.peak_fds, fd_count(pid))

    def trickle() -> None:
        for index, sock in enumerate(slow):
            try:
                sock.send(b"a")
                continue
            except BlockingIOError:
                continue
            except OSError:
                sock.close()
            fresh = _open(port, SLOW_START)
            if fresh is not None:
                result.slowloris_connections += 1
                slow[index] = fresh

    try:
        for _ in range(slowloris):
            sock = _open(port, SLOW_START)
            if sock is not None:
                result.slowloris_connections += 1
                slow.append(sock)
        last_trickle = time.monotonic()
        for first in range(0, connections, wave):
            for index in range(first, min(first + wave, connections)):
                sock = _open(port, PARTIAL_HEAD + b"a" * 200)
                if sock is None:
                    result.connect_failures += 1
                    continue
                result.opened += 1
                if index % 2 == 0:
                    sock.shutdown(socket.SHUT_WR)  # half-open: EOF before the head is complete
                held.append(sock)
            sample()
            if time.monotonic() - last_trickle >= trickle_seconds:
                trickle()
                last_trickle = time.monotonic()
            time.sleep(0.1)
            still = []
            for sock in held:
                if _closed_by_peer(sock):
                    sock.close()
                else:
                    still.append(sock)
            held = still
        # The slowloris clients go on for a few more trickles after the last wave.
        for _ in range(4):
            time.sleep(trickle_seconds)
            trickle()
            sample()
    finally:
        stop.set()
        keyed.join(timeout=15)
        for sock in held + slow:
            sock.close()
        result.seconds = time.monotonic() - started
    return result


def wait_for_fds(pid: int, at_most: int, timeout: float) -> float | None:
    """Seconds until the process holds at most `at_most` file descriptors, or None after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if fd_count(pid) <= at_most:
            return time.monotonic() - started
        time.sleep(0.1)
    return None

"""A real Valkey/Redis server on loopback (Debian's redis-server or valkey-server) for the budget store's tests
and benchmark. `make test` installs redis-server when it runs as root (Makefile, `store-server`)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.s3server import free_loopback_port

START_TIMEOUT_SECONDS = 10.0


def server_binary() -> str:
    for name in ("valkey-server", "redis-server"):
        path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
        if path:
            return path
    raise RuntimeError(
        "neither valkey-server nor redis-server is installed: `apt-get install -y redis-server` "
        "(make test does it when run as root)"
    )


@contextmanager
def redis_server() -> Iterator[str]:
    """Start a private server (no persistence) on a free loopback port; yield its redis:// URL."""
    port = free_loopback_port()
    with tempfile.TemporaryDirectory(prefix="budget-store-") as directory:
        process = subprocess.Popen(
            [
                server_binary(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                directory,
                "--protected-mode",
                "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while True:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        sock.sendall(b"PING\r\n")
                        if sock.recv(16).startswith(b"+PONG"):
                            break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the store server did not start on port {port}")
                time.sleep(0.03)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(timeout=10)

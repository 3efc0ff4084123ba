"""A real Valkey/Redis server on loopback (Debian's redis-server or valkey-server) for the budget store's tests
and benchmark. `make test` installs redis-server when it runs as root (Makefile, `store-server`)."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ServerTls:
    """The server's certificate, its key and the CA clients verify it with (PEM files)."""

    cert_file: str
    key_file: str
    ca_file: str


@contextmanager
def redis_server(*, tls: ServerTls | None = None, users: Sequence[str] = ()) -> Iterator[str]:
    """Start a private server (no persistence) on a free loopback port; yield its redis:// URL, or with ``tls`` its
    rediss:// URL (TLS only: no plain port, clients not asked for certificates) named ``localhost``. ``users``: ACL
    rules, one user each (``"name on >password ~pattern +command"``)."""
    port = free_loopback_port()
    listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", tls.cert_file, "--tls-key-file",
              tls.key_file, "--tls-ca-cert-file", tls.ca_file, "--tls-auth-clients", "no"] if tls is not None \
        else ["--port", str(port)]
    acl = [argument for user in users for argument in ("--user", *user.split())]
    with tempfile.TemporaryDirectory(prefix="budget-store-") as directory:
        process = subprocess.Popen(
            [
                server_binary(),
                *listen,
                *acl,
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
            while not _answers(port, tls):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the store server did not start on port {port}")
                time.sleep(0.03)
            yield f"rediss://localhost:{port}" if tls is not None else f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(timeout=10)


def _answers(port: int, tls: ServerTls | None) -> bool:
    """Whether the server answers on ``port`` (PING: +PONG, or -NOAUTH when its default user is off)."""
    with socket.socket() as raw:
        if raw.connect_ex(("127.0.0.1", port)) != 0:
            return False
        sock: socket.socket = raw
        if tls is not None:
            context = ssl.create_default_context(cafile=tls.ca_file)
            context.check_hostname = False  # (readiness only: a test may give the server another host's name)
            try:
                sock = context.wrap_socket(raw, server_hostname="localhost")
            except (ssl.SSLError, OSError):
                return False
        sock.sendall(b"PING\r\n")
        answer = sock.recv(16)
        return answer.startswith((b"+PONG", b"-NOAUTH"))

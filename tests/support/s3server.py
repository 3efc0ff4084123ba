"""A real S3/SQS-compatible server on loopback (moto in server mode) for tests.

Tests talk to it with real boto3 clients over HTTP, exactly as the Lambda and the sidecar
talk to AWS; nothing is patched in-process.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def moto_server() -> Iterator[str]:
    """Start moto's server on a free loopback port; yield its endpoint URL."""
    port = free_loopback_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()

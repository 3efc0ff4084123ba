"""Real processes on loopback: the stand-in model server, capture sidecars, moto's S3."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest

from tests.support.s3server import free_loopback_port

REPO = Path(__file__).resolve().parents[2]
SIDECAR_DIR = REPO / "sidecar"
STANDIN_SCRIPT = Path(__file__).with_name("standin_server.py")
BUCKET = "capture-sidecar-tests"
# Safety timeouts, not expectations: generous enough that a machine whose cores are busy with other work still
# passes (docs/testing.md: no test asserts a duration). A process that starts, or an answer that comes, sooner
# ends the wait sooner.
START_TIMEOUT_SECONDS = 120.0
CALL_TIMEOUT_SECONDS = 60.0

sys.path.insert(0, str(SIDECAR_DIR))  # unit tests import capture_sidecar directly


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = START_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.03)
    raise TimeoutError(f"nothing listening on {port} after {timeout} s")


@dataclass(frozen=True)
class HttpResult:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key.lower() == name.lower()), None)

    def header_values(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]


def http_call(
    port: int, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> HttpResult:
    """One request with only the headers given (plus Host, and Content-Length for a body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CALL_TIMEOUT_SECONDS)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return HttpResult(response.status, response.getheaders(), response.read())
    finally:
        connection.close()


@dataclass
class Sidecar:
    process: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    prefix: str
    log_path: Path
    stopped: bool = field(default=False)

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):
        try:
            return http_call(self.port, method, path, body, headers)
        except ConnectionError as error:  # say whether the sidecar died, and why
            state = "running" if self.process.poll() is None else f"exited with {self.process.returncode}"
            raise AssertionError(f"sidecar {state}; its log:\n{self.log()}") from error

    def metrics(self) -> dict[str, float]:
        """Samples of the sidecar's /metrics, keyed by name with labels, e.g. 'x_total{reason="a"}'."""
        text = http_call(self.metrics_port, "GET", "/metrics").body.decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def wait_for_metric(self, name: str, at_least: float, timeout: float = 60.0) -> float:  # a safety timeout
        deadline = time.monotonic() + timeout
        while True:
            value = self.metrics().get(name, 0.0)
            if value >= at_least or time.monotonic() > deadline:
                return value
            time.sleep(0.05)

    def terminate(self, timeout: float = 60.0) -> int:
        if not self.stopped:
            self.stopped = True
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text()


@pytest.fixture(scope="session")
def standin_port() -> Iterator[int]:
    port = free_loopback_port()
    process = subprocess.Popen([sys.executable, str(STANDIN_SCRIPT), str(port)], stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield port
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def s3(moto_endpoint: str):
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=BUCKET)
    return client


def sidecar_env(upstream_port: int, s3_endpoint: str, prefix: str, **overrides: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key.startswith(("AWS_", "PATH", "HOME", "LANG")) and key != "AWS_ENDPOINT_URL"
    }
    env.update(
        {
            "UPSTREAM_URL": f"http://127.0.0.1:{upstream_port}",
            "CAPTURE_S3_URI": f"s3://{BUCKET}/{prefix}",
            "AWS_ENDPOINT_URL": s3_endpoint,
            "LISTEN_HOST": "127.0.0.1",
            "LISTEN_PORT": str(free_loopback_port()),
            "METRICS_PORT": str(free_loopback_port()),
            "BATCH_SIZE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    env.update(overrides)
    return env


class SidecarLauncher:
    """Starts `python -m capture_sidecar` with env overrides and kills what it started on close()."""

    def __init__(self, upstream_port: int, s3_endpoint: str, log_dir: Path) -> None:
        self.upstream_port = upstream_port
        self.s3_endpoint = s3_endpoint
        self.log_dir = log_dir
        self.started: list[Sidecar] = []

    def __call__(self, **overrides: str) -> Sidecar:
        prefix = f"run-{uuid.uuid4().hex[:12]}/pod/"
        env = sidecar_env(self.upstream_port, self.s3_endpoint, prefix, **overrides)
        log_path = self.log_dir / f"{prefix.split('/')[0]}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "capture_sidecar"], cwd=SIDECAR_DIR, env=env, stderr=log_file
            )
        sidecar = Sidecar(process, int(env["LISTEN_PORT"]), int(env["METRICS_PORT"]), prefix, log_path)
        self.started.append(sidecar)
        # Both listeners: the proxy port may open after the metrics port (a test that called the proxy
        # as soon as /metrics answered was refused now and then).
        wait_for_port(sidecar.metrics_port, process)
        wait_for_port(sidecar.port, process)
        return sidecar

    def close(self) -> None:
        for sidecar in self.started:
            if sidecar.process.poll() is None:
                sidecar.process.kill()
                sidecar.process.wait()


@pytest.fixture(scope="module")
def start_module_sidecar(
    standin_port: int, moto_endpoint: str, s3, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarLauncher]:
    launcher = SidecarLauncher(standin_port, moto_endpoint, tmp_path_factory.mktemp("sidecar-logs"))
    yield launcher
    launcher.close()


@pytest.fixture
def start_sidecar(standin_port: int, moto_endpoint: str, s3, tmp_path: Path) -> Iterator[SidecarLauncher]:
    """Start sidecars for one test; they are killed when it ends."""
    launcher = SidecarLauncher(standin_port, moto_endpoint, tmp_path)
    yield launcher
    launcher.close()


def read_records(s3, prefix: str, expected: int, timeout: float = 60.0) -> list[dict]:
    """Every capture record under the prefix, once at least `expected` are there (or at timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        keys = [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]
        records = [
            json.loads(line)
            for key in keys
            for line in s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().splitlines()
        ]
        if len(records) >= expected or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def object_keys(s3, prefix: str) -> list[str]:
    return [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]

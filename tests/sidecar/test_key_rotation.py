"""API key rotation through a running sidecar (issue 17): the keys file is re-read when the kubelet rewrites the
mounted Secret, so the old and the new key are both accepted while both are in it and the old one is refused once
it is gone, on the same process, without a restart; and a whole rotation (the rotation function against moto's
Secrets Manager, External Secrets' sync emulated) never refuses a client that reads the current key."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.support.rotation import rotation, rotation_function, stages, synced_api_keys
from tests.support.waiting import eventually

from .conftest import Sidecar, read_records

CALLER = "qwen3-8b-portable-api-key"
OLD_KEY = "old-key-0123456789abcdefghijklmnopqrstuvwxyzABCD"
NEW_KEY = "new-key-0123456789abcdefghijklmnopqrstuvwxyzABCD"
TEAM_B_KEY = "team-b-key-0123456789abcdefghijklmnopqrstuvwxyz"
RELOAD = "0.1"  # API_KEYS_RELOAD_SECONDS; the chart's default is 5
NAMESPACE = "ContainerInsights/Prometheus"


class MountedSecret:
    """A Secret volume as the kubelet writes it (its AtomicWriter): the file is a symlink through ``..data`` to a
    timestamped directory, and an update is a new directory and an atomic swap of ``..data``."""

    def __init__(self, root: Path, key: str = "api-keys") -> None:
        self.root, self.key = root, key
        root.mkdir()
        self.path = root / key

    def write(self, content: str) -> None:
        version = self.root / f"..{time.time_ns()}"
        version.mkdir()
        (version / self.key).write_text(content)
        link = self.root / "..data_tmp"
        link.symlink_to(version.name)
        os.replace(link, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(f"..data/{self.key}")


def status(sidecar: Sidecar, key: str) -> int:
    return sidecar.call("POST", "/v1/completions", b"{}", {"Authorization": f"Bearer {key}",
                                                            "Content-Type": "application/json"}).status


def wait_for(sidecar: Sidecar, key: str, wanted: int) -> None:
    assert eventually(lambda: status(sidecar, key) == wanted), f"still not {wanted} after the file changed"


def test_the_old_and_the_new_key_overlap_then_the_old_one_is_refused_without_a_restart(
        start_sidecar, s3, tmp_path: Path) -> None:
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(f"{CALLER}:{OLD_KEY}\n")
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)
    pid = sidecar.process.pid
    assert status(sidecar, OLD_KEY) == 200 and status(sidecar, NEW_KEY) == 401

    # A client on a keep-alive connection, authenticated with the old key before anything changed.
    kept = http.client.HTTPConnection("127.0.0.1", sidecar.port, timeout=60)
    old_bearer = {"Authorization": f"Bearer {OLD_KEY}", "Content-Type": "application/json"}
    kept.request("POST", "/v1/completions", b"{}", old_bearer)
    first = kept.getresponse()
    assert first.status == 200 and first.read()

    # The rotation's pending key arrives: both are accepted, under the one caller id.
    secret.write(f"{CALLER}:{OLD_KEY}\n{CALLER}:{NEW_KEY}\n")
    wait_for(sidecar, NEW_KEY, 200)
    assert status(sidecar, OLD_KEY) == 200

    # The old key leaves the file: refused from the next request on, on the open connection too.
    secret.write(f"{CALLER}:{NEW_KEY}\n")
    wait_for(sidecar, OLD_KEY, 401)
    kept.request("POST", "/v1/completions", b"{}", old_bearer)
    assert kept.getresponse().status == 401
    kept.close()
    assert status(sidecar, NEW_KEY) == 200

    assert sidecar.process.poll() is None and sidecar.process.pid == pid  # the same process throughout
    records = read_records(s3, sidecar.prefix, expected=6)
    assert {record["eventMetadata"]["callerId"] for record in records} == {CALLER}  # stable across the rotation
    metrics = sidecar.metrics()
    assert metrics['capture_sidecar_api_keys_reloads_total{result="ok"}'] == 2
    assert metrics['capture_sidecar_api_keys_reloads_total{result="failed"}'] == 0
    assert metrics["capture_sidecar_api_keys"] == 1
    log = sidecar.log()
    assert OLD_KEY not in log and NEW_KEY not in log
    assert "API_KEYS_FILE changed: 2 keys of 1 callers accepted now" in log


def test_a_removed_key_is_refused_even_when_other_lines_of_the_new_file_are_refused(
        start_sidecar, tmp_path: Path) -> None:
    """Issue 28 (revocation fails open): a leaked key is taken out of the file while another line is malformed. The
    file used to be refused whole and the removed key kept working; now the removal takes effect, the bad line is
    refused on its own, logged by number and counted."""
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(f"{CALLER}:{OLD_KEY}\nteam-b:{TEAM_B_KEY}\n")
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)
    assert status(sidecar, OLD_KEY) == 200 and status(sidecar, TEAM_B_KEY) == 200

    secret.write(f"{CALLER}:{NEW_KEY}\nnot a key line\nteam-b:{TEAM_B_KEY}\n")
    wait_for(sidecar, OLD_KEY, 401)
    assert status(sidecar, NEW_KEY) == 200 and status(sidecar, TEAM_B_KEY) == 200
    metrics = sidecar.metrics()
    assert metrics['capture_sidecar_api_keys_reloads_total{result="partial"}'] == 1
    assert metrics["capture_sidecar_api_keys_lines_refused_total"] == 1
    assert metrics['capture_sidecar_api_keys_reloads_total{result="failed"}'] == 0
    log = sidecar.log()
    assert "line 2 (not shown)" in log and "1 lines refused" in log
    assert OLD_KEY not in log and NEW_KEY not in log and TEAM_B_KEY not in log


def test_a_key_in_force_on_a_refused_line_stays_and_a_refused_line_adds_no_key(
        start_sidecar, s3, tmp_path: Path) -> None:
    """A line broken by mistake (a caller id with a space) locks its caller out no more than it lets a new key in:
    the key it holds stays in force under the caller id it had; a refused line with a key not in force adds
    nothing."""
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(f"{CALLER}:{OLD_KEY}\nteam-b:{TEAM_B_KEY}\n")
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)

    secret.write(f"team b:{TEAM_B_KEY}\nteam c:{NEW_KEY}\n{NEW_KEY}\n")  # OLD_KEY removed, every line refused
    wait_for(sidecar, OLD_KEY, 401)
    assert status(sidecar, TEAM_B_KEY) == 200 and status(sidecar, NEW_KEY) == 401
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_api_keys_lines_refused_total"] == 3
    assert metrics["capture_sidecar_api_keys"] == 1
    # Its requests are recorded under the caller id it had.
    assert eventually(lambda: "team-b" in {record["eventMetadata"]["callerId"]
                                           for record in read_records(s3, sidecar.prefix, 1)}), "no record of team-b"


def test_a_file_without_keys_refuses_every_request_and_only_a_missing_file_keeps_the_keys(
        start_sidecar, tmp_path: Path) -> None:
    """Every key removed: the proxy refuses every request (it does not open); the Secret's volume gone (nothing known
    of the keys): the keys in force stay, counted as failed, said once."""
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(f"{CALLER}:{OLD_KEY}\n")
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)

    (secret.root / "..data").unlink()  # gone: the keys in force stay
    assert sidecar.wait_for_metric('capture_sidecar_api_keys_reloads_total{result="failed"}', 1) == 1
    time.sleep(0.3)
    assert sidecar.metrics()['capture_sidecar_api_keys_reloads_total{result="failed"}'] == 1  # said once
    assert status(sidecar, OLD_KEY) == 200 and status(sidecar, "") == 401

    secret.write("# nobody\n")
    wait_for(sidecar, OLD_KEY, 401)
    assert status(sidecar, "") == 401 and status(sidecar, NEW_KEY) == 401
    assert sidecar.metrics()["capture_sidecar_api_keys"] == 0
    assert sidecar.call("GET", "/v1/models", b"", {}).status == 401


def test_each_accepted_key_is_shown_by_a_short_fingerprint_that_the_rotation_computes_too(
        start_sidecar, tmp_path: Path) -> None:
    """The gauge the rotation reads (issue 28, rotation that never locks a caller out): one series per accepted key,
    by fingerprint and caller id, never the key; the rotation function's fingerprint of a key is the sidecar's."""
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(f"{CALLER}:{OLD_KEY}\n")
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)
    old, new = rotation.key_fingerprint(OLD_KEY), rotation.key_fingerprint(NEW_KEY)
    assert len(old) == 12 and old != new
    gauge = 'capture_sidecar_api_key_accepted{{fingerprint="{}",caller_id="{}"}}'
    assert sidecar.metrics()[gauge.format(old, CALLER)] == 1
    assert gauge.format(new, CALLER) not in sidecar.metrics()
    secret.write(f"{CALLER}:{OLD_KEY}\n{CALLER}:{NEW_KEY}\n")
    wait_for(sidecar, NEW_KEY, 200)
    metrics = sidecar.metrics()
    assert metrics[gauge.format(old, CALLER)] == 1 and metrics[gauge.format(new, CALLER)] == 1
    assert not [name for name in metrics if OLD_KEY in name or NEW_KEY in name]


def test_a_whole_rotation_never_refuses_a_client_that_reads_the_current_key(
        start_sidecar, moto_endpoint: str, tmp_path: Path) -> None:
    """The rotation function runs its four steps against moto's Secrets Manager; between them External Secrets'
    sync is emulated (``synced_api_keys``: current, pending and previous into the mounted file). A client reads
    AWSCURRENT before each call, as documented: it is never refused, not even right after finishSecret, before
    the next sync, because the sidecar had the new key since it was pending."""
    client = boto3.client("secretsmanager", endpoint_url=moto_endpoint)
    name = f"llm-platform/portable/e2e{uuid.uuid4().hex[:8]}/api-key"
    client.create_secret(Name=name, SecretString=OLD_KEY)
    secret = MountedSecret(tmp_path / "api-keys")
    written: list[str] = []

    def sync() -> None:
        """External Secrets' refresh and the kubelet's update, then the sidecar's next look at the file: returns once
        the sidecar has the new keys in force (each sync here changes them)."""
        content = synced_api_keys(client, name, CALLER)
        if written and content == written[-1]:
            return
        reloaded = sidecar.metrics()['capture_sidecar_api_keys_reloads_total{result="ok"}'] if written else 0
        secret.write(content)
        if written:
            assert sidecar.wait_for_metric('capture_sidecar_api_keys_reloads_total{result="ok"}', reloaded + 1) > \
                reloaded, sidecar.log()
        written.append(content)

    def client_call() -> int:
        return status(sidecar, client.get_secret_value(SecretId=name)["SecretString"])

    sync()
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)
    assert client_call() == 200
    with rotation_function(moto_endpoint, f"rotate-e2e-{uuid.uuid4().hex[:6]}") as (arn, invocations):
        original = invocations.context

        class SyncingContext:
            """External Secrets refreshes while the function waits in testSecret (PROPAGATION_SECONDS)."""

            def get_remaining_time_in_millis(self) -> int:
                if invocations.steps[-1] == "testSecret":
                    sync()
                assert client_call() == 200
                return original.get_remaining_time_in_millis()

        invocations.context = SyncingContext()  # type: ignore[assignment]
        client.rotate_secret(SecretId=name, RotationLambdaARN=arn, RotationRules={"AutomaticallyAfterDays": 30})
    new_key = stages(client, name)["AWSCURRENT"]
    assert new_key != OLD_KEY
    assert client_call() == 200  # finishSecret made it current; the file has had it since testSecret
    assert status(sidecar, OLD_KEY) == 200  # still accepted: clients that read the key earlier keep working
    sync()
    assert status(sidecar, OLD_KEY) == 200  # now as AWSPREVIOUS
    # Revoked at once (docs/secrets.md: the previous key leaked): the next sync drops it.
    previous = next(v["VersionId"] for v in client.list_secret_version_ids(SecretId=name)["Versions"]
                    if "AWSPREVIOUS" in v["VersionStages"])
    client.update_secret_version_stage(SecretId=name, VersionStage="AWSPREVIOUS", RemoveFromVersionId=previous)
    sync()
    wait_for(sidecar, OLD_KEY, 401)
    assert client_call() == 200 and status(sidecar, new_key) == 200


class Agent:
    """The metrics agent, emulated: scrapes the sidecar's /metrics every ``interval`` seconds and puts what the
    CloudWatch agent's EMF declarations make of it (``capture_sidecar_api_keys`` and one
    ``capture_sidecar_api_key_accepted`` per fingerprint, with the server's dimensions) into moto's CloudWatch."""

    def __init__(self, sidecar: Sidecar, cloudwatch: Any, dimensions: dict[str, str], interval: float = 0.1) -> None:
        self.sidecar, self.cloudwatch, self.dimensions, self.interval = sidecar, cloudwatch, dimensions, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _dimensions(self, **extra: str) -> list[dict[str, str]]:
        return [{"Name": name, "Value": value} for name, value in {**self.dimensions, **extra}.items()]

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            samples = self.sidecar.metrics()
            at = datetime.now(UTC)
            data = [{"MetricName": "capture_sidecar_api_keys", "Dimensions": self._dimensions(), "Value":
                     samples["capture_sidecar_api_keys"], "Timestamp": at}]
            data += [{"MetricName": "capture_sidecar_api_key_accepted", "Timestamp": at, "Value": value,
                      "Dimensions": self._dimensions(fingerprint=name.split('fingerprint="')[1].split('"')[0])}
                     for name, value in samples.items() if name.startswith("capture_sidecar_api_key_accepted{")]
            self.cloudwatch.put_metric_data(Namespace=NAMESPACE, MetricData=data)

    def __enter__(self) -> Agent:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


class Deadline:
    """Lambda's context: the time left of one invocation, running down."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.checked: list[Callable[[], None]] = []

    def get_remaining_time_in_millis(self) -> int:
        for check in self.checked:
            check()
        return int((self.end - time.monotonic()) * 1000)


def test_a_rotation_with_the_sync_stalled_fails_before_it_locks_anyone_out_and_finishes_once_synced(
        start_sidecar, moto_endpoint: str, tmp_path: Path) -> None:
    """Issue 28 (rotation can lock callers out): External Secrets stops syncing during a rotation. The function used
    to wait a fixed time and make the new key current all the same: every client that reads the current key got 401
    until the sync came back. Now testSecret waits for every sidecar to show the pending key's fingerprint (the
    metrics agent's CloudWatch series) and fails when they do not: the current key stays current, clients never see
    a 401. Once the sync runs, Secrets Manager's retry of the same version (driven step by step here) finishes."""
    secretsmanager = boto3.client("secretsmanager", endpoint_url=moto_endpoint,
                                  config=Config(retries={"total_max_attempts": 1}))
    cloudwatch = boto3.client("cloudwatch", endpoint_url=moto_endpoint)
    name = f"llm-platform/portable/stall{uuid.uuid4().hex[:8]}/api-key"
    secretsmanager.create_secret(Name=name, SecretString=OLD_KEY)
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(synced_api_keys(secretsmanager, name, CALLER))
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)
    dimensions = {"ClusterName": "c", "Namespace": "inference", "Workload": f"w{uuid.uuid4().hex[:8]}"}
    acceptance = rotation.Acceptance(NAMESPACE, dimensions, window_seconds=1, settle_seconds=0, poll_seconds=0.2)
    refused: list[int] = []

    def client_call() -> None:
        """A client as documented: reads AWSCURRENT, sends it; on a 401 reads again and retries once."""
        for _ in range(2):
            got = status(sidecar, secretsmanager.get_secret_value(SecretId=name)["SecretString"])
            if got == 200:
                return
        refused.append(got)

    with Agent(sidecar, cloudwatch, dimensions), \
            rotation_function(moto_endpoint, f"rotate-stall-{uuid.uuid4().hex[:6]}") as (arn, invocations):
        invocations.environment["ACCEPTANCE"] = json.dumps(dataclasses.asdict(acceptance))
        invocations.context = Deadline(rotation.RESERVE_SECONDS + 3)  # type: ignore[assignment]
        invocations.context.checked.append(client_call)  # type: ignore[attr-defined]
        with pytest.raises(ClientError):  # the step failed; Secrets Manager marks the rotation failed
            secretsmanager.rotate_secret(SecretId=name, RotationLambdaARN=arn,
                                         RotationRules={"AutomaticallyAfterDays": 30})
    assert invocations.steps == ["createSecret", "setSecret", "testSecret"]
    values = stages(secretsmanager, name)
    assert values["AWSCURRENT"] == OLD_KEY and values["AWSPENDING"] != OLD_KEY  # nothing changed for clients
    client_call()
    assert refused == []

    # The sync comes back: the pending key reaches the sidecar; the retry of the same version goes through.
    secret.write(synced_api_keys(secretsmanager, name, CALLER))
    wait_for(sidecar, values["AWSPENDING"], 200)
    token = next(version for version, labels in
                 secretsmanager.describe_secret(SecretId=name)["VersionIdsToStages"].items() if "AWSPENDING" in labels)
    with Agent(sidecar, cloudwatch, dimensions):
        for step in ("createSecret", "setSecret", "testSecret", "finishSecret"):
            client_call()
            left = Deadline(rotation.RESERVE_SECONDS + 10)
            rotation.rotate(secretsmanager, step=step, secret_id=name, token=token, propagation_seconds=0,
                            remaining_seconds=lambda left=left: left.get_remaining_time_in_millis() / 1000,
                            acceptance=acceptance, cloudwatch=cloudwatch)
    assert stages(secretsmanager, name)["AWSCURRENT"] == values["AWSPENDING"]
    client_call()
    assert status(sidecar, OLD_KEY) == 200  # the previous key: clients that read it before keep working
    assert refused == []

"""API key rotation through a running sidecar (issue 17): the keys file is re-read when the kubelet rewrites the
mounted Secret, so the old and the new key are both accepted while both are in it and the old one is refused once
it is gone, on the same process, without a restart; and a whole rotation (the rotation function against moto's
Secrets Manager, External Secrets' sync emulated) never refuses a client that reads the current key."""

from __future__ import annotations

import http.client
import os
import time
import uuid
from pathlib import Path

import boto3

from tests.support.rotation import rotation_function, stages, synced_api_keys

from .conftest import Sidecar, read_records

CALLER = "qwen3-8b-portable-api-key"
OLD_KEY = "old-key-0123456789abcdefghijklmnopqrstuvwxyzABCD"
NEW_KEY = "new-key-0123456789abcdefghijklmnopqrstuvwxyzABCD"
RELOAD = "0.1"  # API_KEYS_RELOAD_SECONDS; the chart's default is 5


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


def wait_for(sidecar: Sidecar, key: str, wanted: int, timeout: float = 60.0) -> None:  # a safety timeout
    deadline = time.monotonic() + timeout
    while (got := status(sidecar, key)) != wanted:
        assert time.monotonic() < deadline, f"still {got}, not {wanted}, {timeout} s after the file changed"
        time.sleep(0.05)


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


def test_a_broken_or_missing_file_keeps_the_keys_in_force(start_sidecar, tmp_path: Path) -> None:
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(f"{CALLER}:{OLD_KEY}\n")
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)

    secret.write(f"{CALLER}:{NEW_KEY}\nnot a key line\n")  # refused as a whole: neither opened nor locked out
    assert sidecar.wait_for_metric('capture_sidecar_api_keys_reloads_total{result="failed"}', 1) == 1
    assert status(sidecar, OLD_KEY) == 200 and status(sidecar, NEW_KEY) == 401
    secret.write("# nobody\n")  # a file without keys would open the proxy: refused too
    assert sidecar.wait_for_metric('capture_sidecar_api_keys_reloads_total{result="failed"}', 2) == 2
    (secret.root / "..data").unlink()  # gone (the Secret was deleted): the keys in force stay
    assert sidecar.wait_for_metric('capture_sidecar_api_keys_reloads_total{result="failed"}', 3) == 3
    time.sleep(0.3)
    assert sidecar.metrics()['capture_sidecar_api_keys_reloads_total{result="failed"}'] == 3  # said once
    assert status(sidecar, OLD_KEY) == 200 and status(sidecar, "") == 401
    assert "line 2 (not shown)" in sidecar.log() and NEW_KEY not in sidecar.log()


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

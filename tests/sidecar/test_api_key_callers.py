"""Several callers on one portable server (issue 29.0), through the real sidecar: each caller's key is a Secrets
Manager secret of its own, synced with the others into the one keys file (``synced_callers_file``, what the
ExternalSecret's template renders). Rotating one caller's key through the rotation function keeps its caller id in
the records and leaves the other callers' keys alone; revoking one caller refuses its requests and no one else's,
without a restart."""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3

from tests.support.rotation import rotation_function, stages, synced_callers_file

from .conftest import read_records
from .test_key_rotation import MountedSecret, status, wait_for

RELOAD = "0.1"  # API_KEYS_RELOAD_SECONDS; the chart's default is 5
TEAM_A_KEY = "teamAkey0123456789abcdefghijklmnopqrstuvwxyzABCDEF"[:48]
TEAM_B_KEY = "teamBkey0123456789abcdefghijklmnopqrstuvwxyzABCDEF"[:48]


def _callers(moto_endpoint: str, name: str) -> tuple[object, dict[str, str]]:
    client = boto3.client("secretsmanager", endpoint_url=moto_endpoint)
    base = f"llm-platform/portable/{name}/api-key"
    callers = {"team-a": f"{base}/team-a", "team-b": f"{base}/team-b"}
    client.create_secret(Name=callers["team-a"], SecretString=TEAM_A_KEY)
    client.create_secret(Name=callers["team-b"], SecretString=TEAM_B_KEY)
    return client, callers


def _caller_ids(s3: object, prefix: str, expected: int) -> list[str]:
    records = read_records(s3, prefix, expected=expected)
    return [record["eventMetadata"]["callerId"] for record in records]


def test_rotating_one_callers_key_keeps_its_caller_id_and_leaves_the_others_untouched(
        start_sidecar, s3, moto_endpoint: str, tmp_path: Path) -> None:
    client, callers = _callers(moto_endpoint, f"callers{uuid.uuid4().hex[:8]}")
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(synced_callers_file(client, callers))
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)
    assert status(sidecar, TEAM_A_KEY) == 200 and status(sidecar, TEAM_B_KEY) == 200
    team_b_before = {v["VersionId"]: v["VersionStages"]
                     for v in client.list_secret_version_ids(SecretId=callers["team-b"])["Versions"]}

    with rotation_function(moto_endpoint, f"rotate-callers-{uuid.uuid4().hex[:6]}") as (arn, invocations):
        original = invocations.context

        class SyncingContext:
            """External Secrets refreshes the one keys file while the function waits in testSecret."""

            def get_remaining_time_in_millis(self) -> int:
                if invocations.steps[-1] == "testSecret":
                    secret.write(synced_callers_file(client, callers))
                    pending = stages(client, callers["team-a"]).get("AWSPENDING")
                    if pending is not None:
                        wait_for(sidecar, pending, 200)
                return original.get_remaining_time_in_millis()

        invocations.context = SyncingContext()  # type: ignore[assignment]
        client.rotate_secret(SecretId=callers["team-a"], RotationLambdaARN=arn,
                             RotationRules={"AutomaticallyAfterDays": 30})
    assert invocations.steps == ["createSecret", "setSecret", "testSecret", "finishSecret"]
    new_key = stages(client, callers["team-a"])["AWSCURRENT"]
    assert new_key != TEAM_A_KEY
    secret.write(synced_callers_file(client, callers))
    assert status(sidecar, new_key) == 200 and status(sidecar, TEAM_A_KEY) == 200  # the previous one, kept
    assert status(sidecar, TEAM_B_KEY) == 200
    # The other caller's secret: no new version, no stage moved.
    assert {v["VersionId"]: v["VersionStages"]
            for v in client.list_secret_version_ids(SecretId=callers["team-b"])["Versions"]} == team_b_before
    assert stages(client, callers["team-b"]) == {"AWSCURRENT": TEAM_B_KEY}
    # Records: team-a's requests before, during (its pending key) and after the rotation (its new key, its previous
    # one) are all team-a's; team-b's two are team-b's.
    ids = _caller_ids(s3, sidecar.prefix, 6)
    assert ids.count("team-b") == 2 and ids.count("team-a") >= 4 and set(ids) == {"team-a", "team-b"}
    log = sidecar.log()
    assert TEAM_A_KEY not in log and new_key not in log and TEAM_B_KEY not in log


def test_revoking_one_caller_refuses_its_requests_and_no_one_elses(
        start_sidecar, s3, moto_endpoint: str, tmp_path: Path) -> None:
    """Both ways of revoking: the caller's ``revoked`` flag (the ExternalSecret no longer reads its secret) and its
    secret deleted in Secrets Manager (External Secrets skips its entries): its lines leave the file, the sidecar
    refuses its key from the next reload on, the other caller keeps working on the same process."""
    client, callers = _callers(moto_endpoint, f"revoke{uuid.uuid4().hex[:8]}")
    secret = MountedSecret(tmp_path / "api-keys")
    secret.write(synced_callers_file(client, callers))
    sidecar = start_sidecar(API_KEYS_FILE=str(secret.path), API_KEYS_RELOAD_SECONDS=RELOAD)
    pid = sidecar.process.pid
    assert status(sidecar, TEAM_A_KEY) == 200 and status(sidecar, TEAM_B_KEY) == 200

    # revoked: true for team-b: the sync lists team-a only.
    secret.write(synced_callers_file(client, {"team-a": callers["team-a"]}))
    wait_for(sidecar, TEAM_B_KEY, 401)
    assert status(sidecar, TEAM_A_KEY) == 200
    # Un-revoked: team-b's secret was kept, so the same key and id come back.
    secret.write(synced_callers_file(client, callers))
    wait_for(sidecar, TEAM_B_KEY, 200)

    # team-b's secret deleted (with a recovery window): its entries are skipped, only its lines go.
    client.delete_secret(SecretId=callers["team-b"], RecoveryWindowInDays=7)
    content = synced_callers_file(client, callers)
    assert content == f"team-a:{TEAM_A_KEY}\n"
    secret.write(content)
    wait_for(sidecar, TEAM_B_KEY, 401)
    assert status(sidecar, TEAM_A_KEY) == 200
    assert sidecar.process.poll() is None and sidecar.process.pid == pid
    assert set(_caller_ids(s3, sidecar.prefix, 6)) == {"team-a", "team-b"}
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_api_keys"] == 1
    assert metrics['capture_sidecar_api_keys_reloads_total{result="partial"}'] == 0

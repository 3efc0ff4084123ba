"""Rehearsal of the erasure on the platform's own templates: the default config deploys no eraser role
(``capture.eraserPrincipals`` is empty), so the app is synthesized a second time (the CDK CLI, ~20 s of CPU: hence
slow) from the default file plus one principal, a role standing in for the privacy officers. Its templates go into a
moto server of their own through the rehearsal's loader. Then, as docs/capture-processor.md tells an operator:

- the role's trust policy, as the template writes it, admits the officers' role and not another role of the account
  holding the same identity grant (``sts:AssumeRole``), decided by moto's own evaluator with the caller's role ARN,
  as IAM matches a role principal against that role's sessions: moto's server compares the session's ARN
  (``assumed-role/<role>/<session>``) with the principal literally, so it refuses every session of a role a trust
  policy names (pinned below); the eraser's session is then moto's ``sts:AssumeRole`` by the admin;
- with the eraser session's credentials, ``python -m hyperpod_inference_iac.capture_table_ops delete --caller-id``,
  then ``verify`` and ``verify-trail``, against the rows the processor's own handler (the staged asset, under its
  role) curated into both tables, the Parquet layout, the quarantine, the raw objects, and an Athena result. moto
  authorizes Glue against resource ``*`` only, so every boto3 call of the command is decided by `CallGate` with the
  eraser role's policies as the template writes them (enforcement paused for the command), and every S3 request
  moto logged is judged against the role afterwards;
- negative: the eraser role without ``s3:DeleteObjectVersion``: the command exits 3 naming it, no traceback.

Cannot prove (docs/rehearsal.md): the conditions of the grants (``kms:ViaService``, the bucket policies' allowlists:
tests/capture_processor/test_erasure_grant.py checks them on the synthesized policies), the trail bucket's Object
Lock, the one-hour session limit."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

from tests.capture_processor.transcripts import sidecar_record
from tests.rehearsal.conftest import Platform, base_environment, capture_sidecars, record_timing, s3_requests_refused
from tests.rehearsal.test_capture_processor import invoke, sqs_event
from tests.support.rehearsal import (
    CallGate,
    Credentials,
    FunctionRuntime,
    MotoServer,
    Rehearsal,
    checkout_import_path,
    function_runtimes,
    split_s3_uri,
    without_action,
)
from tests.support.synth import REPO, Assembly, run_cdk_synth

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

OFFICERS, STRANGER = "privacy-officers", "not-a-privacy-officer"
SUBJECT, REFUSED, BYSTANDER = "dsr-subject", "dsr-refused", "dsr-bystander"  # the callers of the seeded rows

# The command as an operator runs it, its boto3 calls decided by the gate (argv: gate file, checkout, command line).
PROGRAM = """import sys
sys.path.append(sys.argv[2])
from tests.support.rehearsal import CallGate
CallGate.load(sys.argv[1]).install()
from hyperpod_inference_iac.capture_table_ops import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.fixture(scope="module")
def eraser_assembly(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    """``cdk synth`` of the default file plus ``capture.eraserPrincipals``, importing this checkout's library."""
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("eraser-platform")
    data = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    assert not data["capture"].get("eraserPrincipals")  # (the default has none: this file adds one)
    data["capture"]["eraserPrincipals"] = [f"arn:aws:iam::{platform.account}:role/{OFFICERS}"]
    config = folder / "eraser.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    shim = checkout_import_path(REPO, folder / "import-path")
    result = run_cdk_synth(folder / "cdk.out", config=config, env={"PYTHONPATH": str(shim)})
    assert result.returncode == 0, f"cdk synth failed:\n{result.stdout}\n{result.stderr}"
    record_timing("cdk synth of the eraser variant", time.monotonic() - started)
    return Assembly(folder / "cdk.out")


@pytest.fixture(scope="module")
def eraser_rehearsal(eraser_assembly: Assembly, platform: Platform,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    """The variant's templates in a moto server of their own (the session's holds the default platform's)."""
    server = MotoServer(account=platform.account, log_path=tmp_path_factory.mktemp("moto-eraser") / "moto.log")
    try:
        yield Rehearsal(server, eraser_assembly.templates, account=platform.account, region=platform.region)
    finally:
        server.stop()


@dataclass
class World:
    rehearsal: Rehearsal
    eraser_arn: str
    officers: str  # the role the config names
    stranger: str  # another role of the account with the same identity grant
    officers_session: Credentials
    database: str
    bucket: str
    key_arn: str
    trail: str
    home: Path

    def trust_admits(self, caller_role_arn: str) -> bool:
        """The eraser role's trust policy, as moto holds it, decided by moto's evaluator for ``sts:AssumeRole`` by a
        session of ``caller_role_arn`` (IAM matches a role principal against the role's sessions)."""
        from moto.iam.access_control import IAMPolicy, PermissionResult

        trust = self.rehearsal.client("iam").get_role(RoleName=self.eraser_arn.rsplit("/", 1)[-1])[
            "Role"]["AssumeRolePolicyDocument"]
        return bool(IAMPolicy(json.dumps(trust)).is_action_permitted(
            "sts:AssumeRole", self.eraser_arn, caller_role_arn, {}) == PermissionResult.PERMITTED)

    def assume_eraser(self) -> Credentials:
        """The eraser's session (moto's sts:AssumeRole by the admin: see trust_admits)."""
        return self.rehearsal.credentials(self.eraser_arn, session="dsr-1")

    def gate(self, record: Path, *, without: str | None = None) -> CallGate:
        identity = self.rehearsal.role_policies(self.eraser_arn.rsplit("/", 1)[-1])
        if without:
            identity = without_action(identity, without)
        return CallGate(principal_arn=self.eraser_arn, account=self.rehearsal.account,
                        region=self.rehearsal.region, identity=identity, record=str(record))

    def run(self, credentials: Credentials, gate: CallGate, *argv: str) -> tuple[subprocess.CompletedProcess[str],
                                                                                 list[dict[str, Any]], list[Any]]:
        """The command with the session's credentials; its result, the gate's decisions, moto's S3 requests."""
        workdir = self.home / f"run-{time.monotonic_ns()}"
        workdir.mkdir()
        gate_file = workdir / "gate.json"
        gate.record = str(workdir / "calls")
        Path(gate.record).write_text("")
        gate.dump(gate_file)
        env = {**base_environment(workdir), "PYTHONPATH": str(REPO), **self.rehearsal.environment(credentials)}
        offset = self.rehearsal.server.log_offset()
        with self.rehearsal.server.enforcement_paused():  # (the gate decides: moto checks Glue against "*")
            result = subprocess.run([sys.executable, "-c", PROGRAM, str(gate_file), str(REPO), *argv], env=env,
                                    capture_output=True, text=True, timeout=300, check=False, cwd=workdir)
        calls = [json.loads(line) for line in Path(gate.record).read_text().splitlines()]
        return result, calls, self.rehearsal.server.requests_since(offset)

    def common(self) -> tuple[str, ...]:
        return ("--database", self.database, "--bucket", self.bucket)

    def verify(self, credentials: Credentials, caller: str) -> dict[str, Any]:
        result, calls, _ = self.run(credentials, self.gate(self.home / "unused"), "verify", *self.common(),
                                    "--caller-id", caller)
        assert result.returncode in (0, 1), result.stdout + result.stderr
        assert not [call for call in calls if call["refused"]], calls
        report: dict[str, Any] = json.loads(result.stdout)
        return report


def capture_lines(name: str, callers: list[str]) -> bytes:
    return "".join(sidecar_record(f"{name}-{index}", f"2026-11-30T10:{index:02d}:00Z", caller, f"question {index}",
                                  ["An ", "answer."]) + "\n" for index, caller in enumerate(callers)).encode()


@pytest.fixture(scope="module")
def world(eraser_rehearsal: Rehearsal, eraser_assembly: Assembly,
          tmp_path_factory: pytest.TempPathFactory) -> World:
    rehearsal = eraser_rehearsal
    [eraser_arn] = [arn for arn, spec in rehearsal.created.roles.items() if spec.name.endswith("-capture-eraser")]
    assume = {"assume": {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": eraser_arn}]}}
    officers, stranger = rehearsal.create_role(OFFICERS, assume), rehearsal.create_role(STRANGER, assume)
    [processor] = [f for f in function_runtimes(rehearsal.resolver) if f.queue_arns]
    env = processor.environment
    bucket, prefix = split_s3_uri(capture_sidecars(eraser_assembly)[0].env["CAPTURE_S3_URI"])
    world = World(rehearsal, eraser_arn, officers, stranger, rehearsal.credentials(officers, session="officer"),
                  env["ICEBERG_DATABASE"], bucket,
                  env["OUTPUT_KMS_KEY_ID"], env["AUDIT_TRAIL_BUCKET"], tmp_path_factory.mktemp("eraser"))
    seed(world, processor, eraser_assembly, prefix)
    return world


def seed(world: World, processor: FunctionRuntime, assembly: Assembly, prefix: str) -> None:
    """The tables (``create``, as the admin), raw objects of three callers in the portable sidecar's layout curated by
    the processor's handler under its role (CURATED_OUTPUT=both, the template's), a quarantined line of the subject,
    an Athena result, a noncurrent raw version."""
    started = time.monotonic()
    rehearsal = world.rehearsal
    rehearsal.client("glue").create_database(DatabaseInput={"Name": world.database})
    admin = {**base_environment(world.home), "PYTHONPATH": str(REPO), **rehearsal.environment(rehearsal.admin)}
    created = subprocess.run([sys.executable, "-m", "hyperpod_inference_iac.capture_table_ops", "create",
                              *world.common()], env=admin, capture_output=True, text=True, timeout=300, check=False)
    assert created.returncode == 0, created.stderr
    folder = f"{prefix.rstrip('/')}/2026/11/30/10/"
    quarantined = json.dumps({"eventMetadata": {"callerId": SUBJECT, "eventId": "q-1"}, "note": "not a capture"})
    objects = {f"{folder}one.jsonl": capture_lines("one", [SUBJECT, BYSTANDER, REFUSED]) + quarantined.encode() + b"\n",
               f"{folder}two.jsonl": capture_lines("two", [REFUSED, SUBJECT])}
    s3 = rehearsal.client("s3")
    s3.put_object(Bucket=world.bucket, Key=f"{folder}one.jsonl", Body=capture_lines("old", [SUBJECT]))  # noncurrent
    for key, body in objects.items():
        s3.put_object(Bucket=world.bucket, Key=key, Body=body)
    s3.put_object(Bucket=world.bucket, Key="athena-results/capture/q1.csv", Body=f'"caller_id"\n"{SUBJECT}"\n'.encode())
    messages = [{"MessageId": f"seed-{index}", "ReceiptHandle": "none", "MD5OfBody": "", "Body": json.dumps(
        {"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
                      "s3": {"bucket": {"name": world.bucket}, "object": {"key": key}}}]})}
                for index, key in enumerate(objects)]
    with rehearsal.server.enforcement_paused():  # (Glue: moto checks "*" only; test_capture_processor.py says why)
        answer, log = invoke(rehearsal, processor, assembly, sqs_event(messages, processor.queue_arns[0],
                                                                       rehearsal.region), world.home / "lambda")
    assert answer == {"batchItemFailures": []}, log
    record_timing("eraser variant: seeding through the processor", time.monotonic() - started)


@dataclass
class Erased:
    before: dict[str, Any]
    result: subprocess.CompletedProcess[str]
    calls: list[dict[str, Any]]
    requests: list[Any]
    after: dict[str, Any]
    trail: subprocess.CompletedProcess[str]
    bystander: dict[str, Any]


@pytest.fixture(scope="module")
def erased(world: World) -> Erased:
    """What an operator does: assume the role, delete, verify, verify the trail."""
    started = time.monotonic()
    session = world.assume_eraser()
    before = world.verify(session, SUBJECT)
    result, calls, requests = world.run(session, world.gate(world.home / "unused"), "delete", *world.common(),
                                        "--kms-key-id", world.key_arn, "--trail-bucket", world.trail,
                                        "--caller-id", SUBJECT, "--reason", "DSR-1")
    after = world.verify(session, SUBJECT)
    trail, _, _ = world.run(session, world.gate(world.home / "unused"), "verify-trail", "--trail-bucket", world.trail)
    bystander = world.verify(session, BYSTANDER)
    record_timing("eraser variant: assume, delete, verify, verify-trail", time.monotonic() - started)
    return Erased(before, result, calls, requests, after, trail, bystander)


def test_the_officers_may_assume_the_eraser_role_and_another_role_may_not(world: World) -> None:
    assert world.trust_admits(world.officers)
    assert not world.trust_admits(world.stranger)
    assert not world.trust_admits(f"arn:aws:iam::{world.rehearsal.account}:root")


def test_moto_refuses_a_session_of_the_role_its_trust_policy_names(world: World) -> None:
    """Why the trust is decided by the evaluator: moto's server compares the caller's session ARN with the principal
    literally (moto/iam/access_control.py, ``_check_principal``), so even the officers' session is refused. When this
    fails, moto has learnt to match sessions: assume the role as the officers there instead."""
    with pytest.raises(ClientError) as refused:
        world.rehearsal.client("sts", world.officers_session).assume_role(RoleArn=world.eraser_arn,
                                                                            RoleSessionName="dsr-1")
    assert refused.value.response["Error"]["Code"] == "AccessDenied", refused.value.response


def test_the_subjects_rows_were_in_every_place_before(world: World, erased: Erased) -> None:
    places = erased.before["places"]
    assert erased.before["remaining"] > 0
    for place in ("curated/", "quarantine/", "data-capture/", "athena-results/"):
        assert places[place], (place, places)
    assert any(place.startswith("table ") and found for place, found in places.items()), places


def test_delete_under_the_eraser_role_erases_everywhere_and_verify_reports_zero(world: World, erased: Erased) -> None:
    assert erased.result.returncode == 0, erased.result.stdout + erased.result.stderr
    assert not [call for call in erased.calls if call["refused"]], erased.calls
    summary = json.loads(erased.result.stdout.splitlines()[-1])
    assert all(summary["objects"][place] for place in ("curated/", "quarantine/", "data-capture/",
                                                       "athena-results/")), summary
    assert erased.after["remaining"] == 0, erased.after
    # The other callers' rows all stay.
    assert erased.bystander["remaining"] > 0, erased.bystander


def test_what_moto_logged_of_s3_was_allowed_to_the_eraser_role(world: World, erased: Erased) -> None:
    assert erased.requests
    refused = s3_requests_refused(world.rehearsal, world.eraser_arn, erased.requests)
    assert not refused, refused


def test_its_record_chains_into_an_intact_trail(erased: Erased) -> None:
    assert erased.trail.returncode == 0, erased.trail.stdout + erased.trail.stderr
    report = json.loads(erased.trail.stdout)
    assert report["intact"] and report["links"] == 1, report


def test_without_delete_object_version_the_command_fails_and_names_it(world: World, erased: Erased) -> None:
    session = world.assume_eraser()
    result, calls, _ = world.run(session, world.gate(world.home / "unused", without="s3:DeleteObjectVersion"),
                                 "delete", *world.common(), "--kms-key-id", world.key_arn, "--trail-bucket",
                                 world.trail, "--caller-id", REFUSED, "--reason", "DSR-2")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "s3:DeleteObjectVersion" in result.stderr and "Traceback" not in result.stderr, result.stderr
    denied = [call for call in calls if call["refused"]]
    assert denied and denied[0]["action"] == "s3:DeleteObjectVersion", denied


def test_an_erasure_refused_half_way_is_completed_by_running_it_again(world: World, erased: Erased) -> None:
    """After the negative (the register written, the tables' rows deleted and the older snapshots expired, then the
    purge of the files only they held refused), the same request under the whole role leaves nothing. Found here: a
    rerun used to purge only ``DeletionRecord.unreferenced_files``, the files referenced before *its own* delete and
    not after, so the file the refused run left (its snapshot already expired) kept the rows, and ``verify`` named it.
    A rerun now also purges what earlier metadata files' expired snapshots named (``capture_tables.earlier_files``),
    under the same role: it reads the earlier ``metadata.json`` files, manifest lists and manifests as it reads the
    current ones (unit test: tests/capture_processor/test_erasure.py)."""
    test_without_delete_object_version_the_command_fails_and_names_it(world, erased)
    session = world.assume_eraser()
    result, _, _ = world.run(session, world.gate(world.home / "unused"), "delete", *world.common(),
                                 "--kms-key-id", world.key_arn, "--trail-bucket", world.trail,
                                 "--caller-id", REFUSED, "--reason", "DSR-2")
    assert result.returncode == 0, result.stdout + result.stderr
    after = world.verify(session, REFUSED)
    assert after["remaining"] == 0, after

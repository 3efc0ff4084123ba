"""The erasure command under its own grant: ``CaptureStorage.grant_erase`` and ``CaptureTables.grant_erase`` on a
role of a small synthesized stack (capture storage accepting ALB logs, so its default encryption is SSE-S3, the
pipeline, the tables), loaded into a moto server of its own with IAM enforced (tests/support/rehearsal.py). The real
command (``python -m hyperpod_inference_iac.capture_table_ops``, a process with the role's credentials) erases a
caller the real handler curated into both layouts, verifies it and verifies the trail; without one action of the
grant it fails with exit status 3 and names that action. What moto cannot check (conditions, and Glue calls, which it
checks against resource ``*`` only: the role's Glue statements are loaded with ``*`` and their ARNs checked with
moto's own evaluator) is checked on the synthesized policies with the policy evaluator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from hyperpod_inference_iac import CaptureEraser, CapturePipeline, CaptureStorage, CaptureTables
from tests.capture_processor.transcripts import sidecar_record
from tests.support.policy_eval import Request, decision
from tests.support.rehearsal import MotoServer, Rehearsal, RoleSpec

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("erasure-grant")]  # one moto world, built once (module scope)

ACCOUNT, REGION = "111122223333", "us-west-2"
BUCKET, AUDIT = "capture-erasure-grant", "capture-audit-erasure-grant"
DATABASE = "capture_iceberg"
PRIVACY_OFFICERS = f"arn:aws:iam::{ACCOUNT}:role/privacy-officers"
RAW = "data-capture/h/pod/2026/11/30/10/"
REPO = Path(__file__).resolve().parents[2]


def synthesize() -> tuple[dict[str, Any], str]:
    app = App()
    stack = Stack(app, "Erasure", env=Environment(account=ACCOUNT, region=REGION))
    storage = CaptureStorage(stack, "Storage", capture_bucket_name=BUCKET, audit_bucket_name=AUDIT,
                             load_balancer_logs=True)
    pipeline = CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                               capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
                               quarantine_prefix=storage.quarantine_prefix)
    tables = CaptureTables(stack, "Tables", pipeline=pipeline, database_name=DATABASE)
    eraser = CaptureEraser(stack, "Eraser", storage=storage, tables=tables, role_name="capture-eraser",
                           eraser_principals=[PRIVACY_OFFICERS])
    assert eraser.role.node.default_child is not None
    return Template.from_stack(stack).to_json(), "capture-eraser"


@dataclass
class World:
    rehearsal: Rehearsal
    eraser: str  # the role moto holds (Glue statements on "*": what moto can check)
    spec: RoleSpec  # the role as synthesized
    key_arn: str
    home: Path

    def run(self, role_arn: str, *argv: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "PYTHONPATH": str(REPO),
               **self.rehearsal.environment(self.rehearsal.credentials(role_arn, session="eraser"))}
        return subprocess.run([sys.executable, "-m", "hyperpod_inference_iac.capture_table_ops", *argv], env=env,
                              capture_output=True, text=True, timeout=300, check=False, cwd=self.home)

    def common(self) -> tuple[str, ...]:
        return ("--database", DATABASE, "--bucket", BUCKET)


def glue_on_any(document: dict[str, Any]) -> dict[str, Any]:
    """moto checks a Glue call against resource "*": the same actions there (their ARNs: test_glue_*)."""
    statements = []
    for statement in document["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if all(action.startswith("glue:") for action in actions):
            statement = {**statement, "Resource": "*"}
        statements.append(statement)
    return {**document, "Statement": statements}


def capture_lines(name: str, callers: list[str]) -> bytes:
    return "".join(sidecar_record(f"{name}-{index}", f"2026-11-30T10:{index:02d}:00Z", caller,
                                  f"question {index}", ["An ", "answer."]) + "\n"
                   for index, caller in enumerate(callers)).encode()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    template, role_name = synthesize()
    home = tmp_path_factory.mktemp("erasure-grant")
    server = MotoServer(account=ACCOUNT, log_path=home / "moto.log")
    try:
        rehearsal = Rehearsal(server, {"Erasure": template}, account=ACCOUNT, region=REGION)
        [spec] = [s for s in rehearsal.created.roles.values() if s.name == role_name]
        eraser = rehearsal.create_role("capture-eraser-in-moto", {
            name: glue_on_any(document) for name, document in spec.inline.items()})
        [key_arn] = rehearsal.created.keys
        world = World(rehearsal, eraser, spec, key_arn, home)
        seed(world)
        yield world
    finally:
        server.stop()


def seed(world: World) -> None:
    """As the admin: the tables (``create``), two raw objects of three callers curated by the real handler into both
    layouts, a quarantined line, an Athena result, a noncurrent raw version."""
    rehearsal = world.rehearsal
    rehearsal.client("glue").create_database(DatabaseInput={"Name": DATABASE})
    admin_env = {"PATH": os.environ["PATH"], "HOME": str(world.home), "PYTHONPATH": str(REPO),
                 **rehearsal.environment(rehearsal.admin)}
    result = subprocess.run([sys.executable, "-m", "hyperpod_inference_iac.capture_table_ops", "create",
                             *world.common()], env=admin_env, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    s3 = rehearsal.client("s3")
    sse = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": world.key_arn}
    quarantined = json.dumps({"eventMetadata": {"callerId": "team-a", "eventId": "q-1"}, "note": "not a capture"})
    objects = {f"{RAW}one.jsonl": capture_lines("one", ["team-a", "team-b", "team-c"]) + quarantined.encode() + b"\n",
               f"{RAW}two.jsonl": capture_lines("two", ["team-c", "team-a"])}
    s3.put_object(Bucket=BUCKET, Key=f"{RAW}one.jsonl", Body=capture_lines("old", ["team-a"]), **sse)  # noncurrent
    for key, body in objects.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body, **sse)
    s3.put_object(Bucket=BUCKET, Key="athena-results/capture/q1.csv", Body=b'"caller_id"\n"team-a"\n', **sse)
    program = ("import json, sys\nfrom handler import handler\nkeys = sys.argv[1:]\n"
               "event = {'Records': [{'messageId': f'm{i}', 'body': json.dumps({'Records': [{'eventSource': "
               "'aws:s3', 'eventName': 'ObjectCreated:Put', 's3': {'bucket': {'name': '" + BUCKET + "'}, "
               "'object': {'key': k}}}]})} for i, k in enumerate(keys)]}\n"
               "print(json.dumps(handler(event, None)))\n")
    env = {**admin_env, "PYTHONPATH": str(REPO / "lambda" / "capture_processor"), "CURATED_OUTPUT": "both",
           "OUTPUT_PREFIX": "curated/", "QUARANTINE_PREFIX": "quarantine/", "OUTPUT_KMS_KEY_ID": world.key_arn,
           "ICEBERG_DATABASE": DATABASE, "ICEBERG_CATALOG_ID": ACCOUNT}
    result = subprocess.run([sys.executable, "-c", program, *objects], env=env, capture_output=True, text=True,
                            timeout=300, check=False, cwd=world.home)
    assert result.returncode == 0 and '"batchItemFailures": []' in result.stdout, result.stdout + result.stderr


def test_the_eraser_role_erases_verifies_and_verifies_the_trail_under_its_own_grant(world: World) -> None:
    common = (*world.common(), "--caller-id", "team-a")
    before = world.run(world.eraser, "verify", *common)
    assert before.returncode == 1 and json.loads(before.stdout)["remaining"] > 0, before.stderr

    erased = world.run(world.eraser, "delete", *common, "--kms-key-id", world.key_arn, "--trail-bucket", AUDIT,
                       "--reason", "DSR-1")
    assert erased.returncode == 0, erased.stderr
    summary = json.loads(erased.stdout.splitlines()[-1])
    assert all(summary["objects"][place] for place in ("curated/", "quarantine/", "data-capture/",
                                                       "athena-results/")), summary

    after = world.run(world.eraser, "verify", *common)
    assert after.returncode == 0 and json.loads(after.stdout)["remaining"] == 0, after.stdout + after.stderr
    trail = world.run(world.eraser, "verify-trail", "--trail-bucket", AUDIT)
    assert trail.returncode == 0 and json.loads(trail.stdout)["links"] == 1, trail.stdout + trail.stderr
    # The register and the record name the capture key (the bucket's default here is SSE-S3).
    s3 = world.rehearsal.client("s3")
    for key in (summary["register"], summary["audit"]):
        head = s3.head_object(Bucket=BUCKET, Key=key.removeprefix(f"s3://{BUCKET}/"))
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", world.key_arn), key
    # The other callers' rows all stay.
    remaining = world.run(world.eraser, "verify", *world.common(), "--caller-id", "team-b")
    assert remaining.returncode == 1 and json.loads(remaining.stdout)["remaining"] > 0


@pytest.mark.parametrize(("action", "argv"), [
    ("s3:DeleteObjectVersion", ("delete", "--caller-id", "team-c")),
    ("s3:ListBucketVersions", ("verify", "--caller-id", "team-c")),
    ("s3:PutObject", ("delete", "--caller-id", "team-c")),
    # (the rows of team-c left the tables with the first control's run: the retention's delete commits here)
    ("glue:UpdateTable", ("expire", "--older-than-days", "1")),
])
def test_without_one_action_of_the_grant_the_command_fails_and_names_it(
    world: World, action: str, argv: tuple[str, ...]
) -> None:
    policies = {}
    for name, document in world.spec.inline.items():
        statements = []
        for statement in glue_on_any(document)["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            kept = [a for a in actions if a != action]
            if kept:
                statements.append({**statement, "Action": kept})
        policies[name] = {**document, "Statement": statements}
    variant = world.rehearsal.create_role(f"capture-eraser-without-{action.split(':')[1].lower()}", policies)
    command, *rest = argv
    key = ("--kms-key-id", world.key_arn, "--no-trail") if command in ("delete", "expire") else ()
    result = world.run(variant, command, *world.common(), *rest, *key)
    assert result.returncode == 3, result.stdout + result.stderr
    assert action in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_glue_calls_are_allowed_on_this_database_and_its_tables_only(world: World) -> None:
    rehearsal = world.rehearsal
    arn = f"arn:aws:glue:{REGION}:{ACCOUNT}"
    for action in ("glue:GetDatabase", "glue:GetTable", "glue:UpdateTable"):
        for resource in (f"{arn}:catalog", f"{arn}:database/{DATABASE}", f"{arn}:table/{DATABASE}/capture_records",
                         f"{arn}:table/{DATABASE}/alb_access_logs"):
            assert rehearsal.identity_allows(world.spec.arn, action, resource), (action, resource)
        assert not rehearsal.identity_allows(world.spec.arn, action, f"{arn}:table/{DATABASE}/other")
        assert not rehearsal.identity_allows(world.spec.arn, action, f"{arn}:table/other/capture_records")
    for action in ("glue:DeleteTable", "glue:CreateTable", "glue:DeleteDatabase"):
        assert not rehearsal.identity_allows(world.spec.arn, action, f"{arn}:table/{DATABASE}/capture_records")


def test_the_grant_reaches_no_other_prefix_and_never_unlocks_the_trail(world: World) -> None:
    """On the synthesized policies with their conditions: the role's own, the capture and audit buckets'."""
    rehearsal, role = world.rehearsal, world.spec.arn
    statements = [s for document in world.spec.inline.values() for s in document["Statement"]]
    capture = rehearsal.created.bucket_policies[BUCKET]["Statement"]
    audit = rehearsal.created.bucket_policies[AUDIT]["Statement"]

    def allowed(action: str, resource: str, bucket_policy: list[dict[str, Any]], **context: str) -> bool:
        return rehearsal.statements_allow(statements, action, resource) and decision(
            bucket_policy, Request(action, resource, principal_arn=role, context=context)) != "deny"

    named = {"s3:x-amz-server-side-encryption": "aws:kms", "s3:x-amz-server-side-encryption-aws-kms-key-id":
             world.key_arn}
    for key in ("data-capture/h/pod/x.jsonl", "curated/x.parquet", "quarantine/x.jsonl"):
        for action in ("s3:GetObjectVersion", "s3:DeleteObjectVersion"):
            assert allowed(action, f"arn:aws:s3:::{BUCKET}/{key}", capture), (action, key)
        assert allowed("s3:PutObject", f"arn:aws:s3:::{BUCKET}/{key}", capture, **named), key
    assert allowed("s3:DeleteObjectVersion", f"arn:aws:s3:::{BUCKET}/athena-results/capture/q.csv", capture)
    assert not allowed("s3:GetObject", f"arn:aws:s3:::{BUCKET}/athena-results/capture/q.csv", capture)
    for prefix in ("audit/erasure-register/", "audit/erasures/", "audit/table-deletions/"):
        assert allowed("s3:PutObject", f"arn:aws:s3:::{BUCKET}/{prefix}x.json", capture, **named), prefix
        assert not allowed("s3:DeleteObjectVersion", f"arn:aws:s3:::{BUCKET}/{prefix}x.json", capture), prefix
    for key in ("elsewhere/x", "certificates/x"):
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObjectVersion"):
            assert not allowed(action, f"arn:aws:s3:::{BUCKET}/{key}", capture, **named), (action, key)
    link = f"arn:aws:s3:::{AUDIT}/trail/000000000000-erasure.json"
    for action in ("s3:PutObject", "s3:GetObjectVersion", "s3:GetObjectRetention", "s3:GetObjectLegalHold"):
        assert allowed(action, link, audit), action
    for action in ("s3:BypassGovernanceRetention", "s3:PutObjectRetention", "s3:PutObjectLegalHold",
                   "s3:DeleteObject", "s3:DeleteObjectVersion"):
        assert not rehearsal.statements_allow(statements, action, link), action
    # Every KMS statement: the capture key through S3 only.
    for statement in statements:
        if any(str(a).startswith("kms:") for a in (statement["Action"] if isinstance(statement["Action"], list)
                                                   else [statement["Action"]])):
            assert statement["Resource"] == world.key_arn and "kms:ViaService" in json.dumps(statement["Condition"])

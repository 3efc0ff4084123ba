"""Secrets Manager's side of a rotation, against moto's server on loopback, and External Secrets' side of the
sync, for the tests of the API key rotation (tests/api_key_rotation/, tests/sidecar/test_key_rotation.py).

``RotateSecret`` in moto labels a new empty version ``AWSPENDING`` and then invokes the rotation function once per
step through its Lambda backend, which would run the function in Docker. :func:`rotation_function` registers a
function with moto's Lambda and, while active, has the backend call ``rotation.handler`` in this process instead,
with the function's environment: the four steps run exactly as Secrets Manager drives them, with real boto3 calls
over HTTP to the same moto server.
"""

from __future__ import annotations

import io
import json
import os
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import boto3
from botocore.exceptions import ClientError
from moto.awslambda.models import LambdaBackend

from tests.support.synth import REPO

ROTATION_DIR = REPO / "lambda" / "api_key_rotation"
if str(ROTATION_DIR) not in sys.path:
    sys.path.insert(0, str(ROTATION_DIR))

import rotation  # noqa: E402  (the Lambda's top-level module, from its folder)

STAGES = ("AWSCURRENT", "AWSPENDING", "AWSPREVIOUS")


@dataclass
class FakeContext:
    """What the handler reads of Lambda's context: the time left."""

    remaining_seconds: float = 900.0

    def get_remaining_time_in_millis(self) -> int:
        return int(self.remaining_seconds * 1000)


@dataclass
class Invocations:
    steps: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    context: FakeContext = field(default_factory=FakeContext)


@contextmanager
def rotation_function(endpoint: str, name: str, *, propagation_seconds: float = 0.0,
                      rotation_days: int = 30) -> Iterator[tuple[str, Invocations]]:
    """A Lambda function ``name`` in moto whose invocations run ``rotation.handler`` here; yields its ARN and the
    record of its invocations."""
    iam = boto3.client("iam", endpoint_url=endpoint)
    role_name = f"{name}-role"
    try:
        role_arn = iam.get_role(RoleName=role_name)["Role"]["Arn"]
    except ClientError:
        role_arn = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                    "Principal": {"Service": "lambda.amazonaws.com"}}]}))["Role"]["Arn"]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(ROTATION_DIR / "rotation.py", "rotation.py")
    environment = {"PROPAGATION_SECONDS": str(propagation_seconds), "KEY_LENGTH": "48",
                   "ROTATION_DAYS": str(rotation_days)}
    lambda_client = boto3.client("lambda", endpoint_url=endpoint)
    arn = lambda_client.create_function(
        FunctionName=name, Runtime="python3.14", Role=role_arn, Handler="rotation.handler",
        Code={"ZipFile": archive.getvalue()}, Environment={"Variables": environment})["FunctionArn"]
    invocations = Invocations(environment=environment)

    def invoke(self: LambdaBackend, function_name: str, qualifier: str | None, body: Any, headers: Any,
               response_headers: Any) -> bytes:
        event = json.loads(body)
        invocations.steps.append(event["Step"])
        with mock.patch.dict(os.environ, {**invocations.environment, "AWS_ENDPOINT_URL": endpoint}):
            rotation.handler(event, invocations.context)
        return b"null"

    try:
        with mock.patch.object(LambdaBackend, "invoke", invoke):
            yield arn, invocations
    finally:
        lambda_client.delete_function(FunctionName=name)


def stages(client: Any, secret_id: str) -> dict[str, str]:
    """The value of each stage that has one (what External Secrets can read)."""
    values = {}
    for stage in STAGES:
        try:
            values[stage] = client.get_secret_value(SecretId=secret_id, VersionStage=stage)["SecretString"]
        except ClientError as error:
            if error.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
    return values


def synced_api_keys(client: Any, secret_id: str, caller_id: str) -> str:
    """The ``api-keys`` file External Secrets writes from the secret (``SecretSync.manifests`` with an API keys
    file): a stage Secrets Manager does not have is left out (``deletionPolicy: Delete``), the current key first,
    then the pending and the previous one unless they are the current key, all under one caller id."""
    values = stages(client, secret_id)
    lines = [f"{caller_id}:{values['AWSCURRENT']}"]
    lines += [f"{caller_id}:{values[stage]}" for stage in ("AWSPENDING", "AWSPREVIOUS")
              if stage in values and values[stage] != values["AWSCURRENT"]]
    return "".join(line + "\n" for line in lines)


def _synced_stages(client: Any, secret_id: str) -> dict[str, str]:
    """What External Secrets reads of one caller's secret: each stage that has a value; none at all when the secret
    is gone or marked for deletion (its entries are skipped with ``deletionPolicy: Delete``: external-secrets PR
    #4562 maps AWS's ``InvalidRequestException`` "...was marked for deletion" to no secret, as it does
    ``ResourceNotFoundException``; moto words it "...currently marked deleted")."""
    try:
        return stages(client, secret_id)
    except ClientError as error:
        code, message = error.response["Error"]["Code"], str(error)
        deleted = "marked for deletion" in message or "marked deleted" in message
        if code == "ResourceNotFoundException" or (code == "InvalidRequestException" and deleted):
            return {}
        raise


def synced_callers_file(client: Any, callers: dict[str, str]) -> str:
    """The ``api-keys`` file External Secrets writes for a server with several callers (``SecretSync`` with
    ``keys_file_callers``, caller id -> secret), as its template renders it (checked with Go's text/template,
    docs/secrets.md): per caller, in order, its current key, then its pending and previous ones unless they are
    its current key; a caller whose secret is gone has no line, the others keep theirs."""
    lines = []
    for caller_id, secret_id in callers.items():
        values = _synced_stages(client, secret_id)
        current = values.get("AWSCURRENT")
        lines += [f"{caller_id}:{current}"] if current else []
        lines += [f"{caller_id}:{values[stage]}" for stage in ("AWSPENDING", "AWSPREVIOUS")
                  if values.get(stage) and values[stage] != current]
    return "".join(line + "\n" for line in lines)

"""Rehearsal of the API key rotation function (``rotation.handler`` of the staged asset in cdk.out, the code the
template deploys) under its own synthesized role, with the function's environment from the template: a full
rotation of the portable server's API key as Secrets Manager drives it (``createSecret``, ``setSecret``,
``testSecret`` with the template's ``ACCEPTANCE``, ``finishSecret``), and the scheduled check its EventBridge rule
sends (the rule's own ``Input``).

moto authorizes Secrets Manager and CloudWatch calls against resource ``*`` only (docs/rehearsal.md), so a grant
scoped to the secret would be refused by the server: the function's calls are decided in its own process by
`CallGate` (moto's evaluator on the secret's template ARN, the role's identity policies as moto holds them, and
the secret's resource policy with its ``aws:PrincipalArn`` conditions decided for the role), enforcement paused for
the invocation. Proves: the role and the secret's policy allow every call each step really makes, on this secret;
the function pointed at another secret, or the role without ``secretsmanager:PutSecretValue``, fails naming the
call. Cannot prove: the Lambda service's use of the role (trust), Secrets Manager's own invocation (its
``lambda:InvokeFunction`` permission), the KMS calls Secrets Manager makes for the secret (moto's evaluator on the
key's ARN instead; their ``kms:ViaService`` and encryption-context conditions are not evaluated), CloudWatch
Logs."""

from __future__ import annotations

import json
import string
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.rehearsal.conftest import Secrets, record_timing
from tests.rehearsal.conftest import invoke_gated as invoke
from tests.support.rehearsal import FunctionRuntime, Rehearsal, function_runtimes
from tests.support.synth import Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

ALPHABET = set(string.ascii_letters + string.digits)


@pytest.fixture(scope="module")
def rotation(rehearsal: Rehearsal) -> FunctionRuntime:
    [function] = [f for f in function_runtimes(rehearsal.resolver) if f.handler == "rotation.handler"]
    return function


def rotation_schedules(rehearsal: Rehearsal, function: FunctionRuntime) -> list[str]:
    """The template ARNs of the secrets the function rotates (its `AWS::SecretsManager::RotationSchedule`s)."""
    resolver = rehearsal.resolver
    function_arn = resolver.get_att(function.stack, function.logical_id, "Arn")
    return [resolver.resolve(stack, resource["Properties"]["SecretId"])
            for stack, _, resource in resolver.resources("AWS::SecretsManager::RotationSchedule")
            if resolver.resolve(stack, resource["Properties"]["RotationLambdaARN"]) == function_arn]


def start_rotation(rehearsal: Rehearsal, secret_arn: str, function_arn: str) -> str:
    """What Secrets Manager does when a rotation starts: an empty version labelled AWSPENDING, rotation enabled.
    moto's RotateSecret does exactly that and then fails to find the function in its own Lambda (the function runs
    here, not in moto): the state is kept (tests/rehearsal/test_what_moto_enforces.py pins it). The version id."""
    sm = rehearsal.client("secretsmanager")
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        sm.rotate_secret(SecretId=secret_arn, RotationLambdaARN=function_arn,
                         RotationRules={"AutomaticallyAfterDays": 30}, RotateImmediately=True)
    stages = sm.describe_secret(SecretId=secret_arn)["VersionIdsToStages"]
    [token] = [version for version, labels in stages.items() if labels == ["AWSPENDING"]]
    return token


def seed_acceptance(rehearsal: Rehearsal, acceptance: dict[str, Any], fingerprint: str, sidecars: int) -> None:
    """What the sidecars' metrics agent ships when every sidecar accepts the key (the template's ``ACCEPTANCE``):
    each scrape lists the key, inside the window the function reads."""
    from datetime import UTC, datetime, timedelta

    at = datetime.now(UTC) - timedelta(seconds=acceptance["settle_seconds"] + acceptance["window_seconds"] / 2)
    dimensions = [{"Name": k, "Value": v} for k, v in acceptance["dimensions"].items()]
    rehearsal.client("cloudwatch").put_metric_data(Namespace=acceptance["namespace"], MetricData=[
        *({"MetricName": "capture_sidecar_api_keys", "Dimensions": dimensions, "Timestamp": at, "Value": 2.0}
          for _ in range(sidecars)),
        *({"MetricName": "capture_sidecar_api_key_accepted", "Timestamp": at, "Value": 1.0,
           "Dimensions": [*dimensions, {"Name": "fingerprint", "Value": fingerprint}]} for _ in range(sidecars))])


def fingerprint(key: str) -> str:
    import hashlib

    return hashlib.sha256(b"capture-sidecar api key fingerprint v1\0" + key.encode()).hexdigest()[:12]


@pytest.fixture(scope="module")
def rotated(rehearsal: Rehearsal, assembly: Assembly, rotation: FunctionRuntime, secrets: Secrets,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    started = time.monotonic()
    template_arn = rotation_schedules(rehearsal, rotation)[0]
    name = secrets.name_of(template_arn)
    moto_arn = secrets.moto_arn[name]
    sm = rehearsal.client("secretsmanager")
    before = sm.get_secret_value(SecretId=moto_arn)["SecretString"]
    function_arn = rehearsal.resolver.get_att(rotation.stack, rotation.logical_id, "Arn")
    token = start_rotation(rehearsal, moto_arn, function_arn)
    workdir = tmp_path_factory.mktemp("rotation")
    steps: dict[str, tuple[int, str, list[dict[str, Any]]]] = {}
    for step in ("createSecret", "setSecret", "testSecret", "finishSecret"):
        if step == "testSecret":  # the sidecars take the new key (what the agent ships), as the step waits for
            pending = sm.get_secret_value(SecretId=moto_arn, VersionStage="AWSPENDING")["SecretString"]
            seed_acceptance(rehearsal, json.loads(rotation.environment["ACCEPTANCE"]), fingerprint(pending), 2)
        gate = secrets.gate(rehearsal, rotation.role_arn, workdir / f"{step}.calls")
        # Secrets Manager names the secret by its ARN (the schedule's SecretId)
        event = {"Step": step, "SecretId": moto_arn, "ClientRequestToken": token}
        steps[step] = invoke(rehearsal, rotation, assembly, gate, event, workdir / step)
    record_timing("API key rotation: four steps", time.monotonic() - started)
    return {"name": name, "template_arn": template_arn, "moto_arn": moto_arn, "before": before, "token": token,
            "steps": steps}


def test_a_rotation_under_its_role_makes_a_new_current_key(rehearsal: Rehearsal, rotated: dict[str, Any]) -> None:
    for step, (code, log, calls) in rotated["steps"].items():
        assert code == 0, f"{step} failed:\n{log}"
        assert all(call["refused"] is None for call in calls), (step, calls)
    sm = rehearsal.client("secretsmanager")
    current = sm.get_secret_value(SecretId=rotated["moto_arn"], VersionStage="AWSCURRENT")
    assert current["VersionId"] == rotated["token"]
    assert len(current["SecretString"]) == 48 and set(current["SecretString"]) <= ALPHABET
    assert current["SecretString"] != rotated["before"]
    previous = sm.get_secret_value(SecretId=rotated["moto_arn"], VersionStage="AWSPREVIOUS")["SecretString"]
    assert previous == rotated["before"]
    stages = sm.describe_secret(SecretId=rotated["moto_arn"])["VersionIdsToStages"]
    assert not any("AWSPENDING" in labels for labels in stages.values())


def test_every_call_of_each_step_is_on_its_secret_and_allowed(rotated: dict[str, Any]) -> None:
    made = {step: {call["action"] for call in calls} for step, (_, _, calls) in rotated["steps"].items()}
    assert {"secretsmanager:GetRandomPassword", "secretsmanager:PutSecretValue"} <= made["createSecret"]
    assert "cloudwatch:GetMetricData" in made["testSecret"]  # the template's ACCEPTANCE: it asked the sidecars
    assert "secretsmanager:UpdateSecretVersionStage" in made["finishSecret"]
    for _, _, calls in rotated["steps"].values():
        for call in calls:
            assert call["resource"] in (rotated["template_arn"], "*"), call
            assert call["resource"] != "*" or call["action"] in (
                "secretsmanager:GetRandomPassword", "cloudwatch:GetMetricData"), call


def test_its_role_allows_the_kms_calls_secrets_manager_makes_for_the_secret(
    rehearsal: Rehearsal, rotation: FunctionRuntime, secrets: Secrets, rotated: dict[str, Any]
) -> None:
    key = rehearsal.key_arn(secrets.kms_key[rotated["name"]])
    assert rehearsal.identity_allows(rotation.role_arn, "kms:GenerateDataKey", key)  # PutSecretValue
    assert rehearsal.identity_allows(rotation.role_arn, "kms:Decrypt", key)  # GetSecretValue


def test_the_scheduled_check_reports_the_key_under_its_role(
    rehearsal: Rehearsal, assembly: Assembly, rotation: FunctionRuntime, secrets: Secrets, rotated: dict[str, Any],
    tmp_path: Path
) -> None:
    """The EventBridge rule's own Input (its SecretId the template's ARN, here moto's)."""
    resolver = rehearsal.resolver
    function_arn = resolver.get_att(rotation.stack, rotation.logical_id, "Arn")
    inputs = [json.loads(resolver.resolve(stack, target["Input"]))
              for stack, _, rule in resolver.resources("AWS::Events::Rule")
              for target in rule["Properties"].get("Targets", [])
              if resolver.resolve(stack, target["Arn"]) == function_arn and "Input" in target]
    [event] = [item for item in inputs if item["SecretId"] == rotated["template_arn"]]
    event["SecretId"] = rotated["moto_arn"]
    gate = secrets.gate(rehearsal, rotation.role_arn, tmp_path / "check.calls")
    code, log, calls = invoke(rehearsal, rotation, assembly, gate, event, tmp_path / "check")
    assert code == 0, log
    assert all(call["refused"] is None for call in calls), calls
    assert '"KeysNotAccepted"' in log and '"KeyAgeHours"' in log, log


def test_without_put_secret_value_the_rotation_fails_naming_the_call(
    rehearsal: Rehearsal, assembly: Assembly, rotation: FunctionRuntime, secrets: Secrets, rotated: dict[str, Any],
    tmp_path: Path
) -> None:
    """The negative: the role's policies without secretsmanager:PutSecretValue (the same role, so the secret's
    policy still names it): createSecret is refused that call, and no key is stored."""
    name = next(n for n, arn in secrets.template_arn.items()
                if arn in rotation_schedules(rehearsal, rotation) and arn != rotated["template_arn"])
    gate = secrets.gate(rehearsal, rotation.role_arn, tmp_path / "calls")

    def without(statement: dict[str, Any]) -> dict[str, Any]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        return {**statement, "Action": [a for a in actions if a != "secretsmanager:PutSecretValue"] or ["none:None"]}

    gate.identity = [{**document, "Statement": [without(s) for s in document["Statement"]]}
                     for document in gate.identity]
    token = start_rotation(rehearsal, secrets.moto_arn[name],
                           rehearsal.resolver.get_att(rotation.stack, rotation.logical_id, "Arn"))
    code, log, calls = invoke(rehearsal, rotation, assembly, gate, {
        "Step": "createSecret", "SecretId": secrets.moto_arn[name], "ClientRequestToken": token}, tmp_path / "run")
    assert code != 0
    assert "AccessDeniedException" in log and "secretsmanager:PutSecretValue" in log, log
    assert [call["action"] for call in calls if call["refused"]] == ["secretsmanager:PutSecretValue"]
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        rehearsal.client("secretsmanager").get_secret_value(SecretId=secrets.moto_arn[name],
                                                            VersionStage="AWSPENDING")


def test_pointed_at_another_secret_it_is_refused(
    rehearsal: Rehearsal, assembly: Assembly, rotation: FunctionRuntime, secrets: Secrets, rotated: dict[str, Any],
    tmp_path: Path
) -> None:
    """The Hugging Face token (a secret of the templates it does not rotate): its first call is refused."""
    [other] = [n for n, arn in secrets.template_arn.items() if arn not in rotation_schedules(rehearsal, rotation)]
    gate = secrets.gate(rehearsal, rotation.role_arn, tmp_path / "calls")
    code, log, calls = invoke(rehearsal, rotation, assembly, gate, {
        "Check": "keys", "SecretId": secrets.moto_arn[other]}, tmp_path / "run")
    assert code != 0 and "AccessDeniedException" in log and "secretsmanager:DescribeSecret" in log, log
    assert calls == [{"action": "secretsmanager:DescribeSecret", "resource": secrets.template_arn[other],
                      "refused": "no identity-based policy allows the action"}]

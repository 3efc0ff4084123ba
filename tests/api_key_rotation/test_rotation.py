"""The API key rotation function (lambda/api_key_rotation/rotation.py) against moto's Secrets Manager on loopback:
``RotateSecret`` drives the four steps as Secrets Manager does, each step is idempotent, and a key is never
logged."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.support.rotation import rotation, rotation_function, stages

FIRST_KEY = "k" * 24 + "0123456789abcdefghijKLMN"  # 48 letters and digits, as the secret is created


@pytest.fixture
def secretsmanager(moto_endpoint: str) -> Any:
    return boto3.client("secretsmanager", endpoint_url=moto_endpoint)


@pytest.fixture
def secret(secretsmanager: Any) -> str:
    name = f"llm-platform/portable/s{uuid.uuid4().hex[:8]}/api-key"
    secretsmanager.create_secret(Name=name, SecretString=FIRST_KEY)
    return name


def rotate_now(secretsmanager: Any, secret: str, function_arn: str) -> None:
    """``aws secretsmanager rotate-secret``, with the schedule the construct sets."""
    secretsmanager.rotate_secret(SecretId=secret, RotationLambdaARN=function_arn,
                                 RotationRules={"AutomaticallyAfterDays": 30})


def test_rotate_secret_runs_the_four_steps_and_keeps_the_old_key_as_previous(
        secretsmanager: Any, secret: str, moto_endpoint: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="api_key_rotation")
    with rotation_function(moto_endpoint, "rotate-four-steps", propagation_seconds=1.5) as (arn, invocations):
        rotate_now(secretsmanager, secret, arn)

    assert invocations.steps == ["createSecret", "setSecret", "testSecret", "finishSecret"]
    # testSecret waited for the new key to reach the sidecars before finishSecret made it current (moto dates
    # versions to the second, so there is always a wait left): the order of the function's log says so.
    logged_steps = caplog.text
    assert 0 <= logged_steps.index("for the new key to reach every sidecar") < logged_steps.index("finishSecret of")
    values = stages(secretsmanager, secret)
    assert set(values) == {"AWSCURRENT", "AWSPREVIOUS"}  # no pending label left behind
    assert values["AWSPREVIOUS"] == FIRST_KEY
    new = values["AWSCURRENT"]
    assert len(new) == 48 and new.isalnum() and new != FIRST_KEY
    logged = caplog.text
    assert "finishSecret" in logged and new not in logged and FIRST_KEY not in logged


def test_back_to_back_rotations_keep_the_previous_key_for_its_period(
        secretsmanager: Any, secret: str, moto_endpoint: str) -> None:
    """Issue 28: a second rotation right after the first used to drop the first key minutes after it stopped being
    current, against the documented "one more rotation period". Now createSecret refuses it and the previous key
    stays; a revoked previous key (on purpose: it leaked) or a period gone by lets the rotation through."""
    with rotation_function(moto_endpoint, "rotate-twice") as (arn, _):
        rotate_now(secretsmanager, secret, arn)
    second = stages(secretsmanager, secret)["AWSCURRENT"]
    token = _pending_version(secretsmanager, secret)
    with pytest.raises(rotation.RotationError, match="revoke the AWSPREVIOUS key first"):
        step(secretsmanager, secret, token, "createSecret", rotation_days=30)
    values = stages(secretsmanager, secret)
    assert values["AWSCURRENT"] == second and values["AWSPREVIOUS"] == FIRST_KEY  # still synced, still accepted
    in_29_days = lambda: datetime.now(UTC) + timedelta(days=29, minutes=1)  # noqa: E731 (the schedule's window)
    step(secretsmanager, secret, token, "createSecret", rotation_days=30, now=in_29_days)
    assert stages(secretsmanager, secret)["AWSPENDING"] not in (second, FIRST_KEY)


def test_a_revoked_previous_key_lets_a_rotation_through_at_once(secretsmanager: Any, secret: str,
                                                                moto_endpoint: str) -> None:
    with rotation_function(moto_endpoint, "rotate-revoked") as (arn, _):
        rotate_now(secretsmanager, secret, arn)
        previous = next(v["VersionId"] for v in secretsmanager.list_secret_version_ids(SecretId=secret)["Versions"]
                        if "AWSPREVIOUS" in v["VersionStages"])
        secretsmanager.update_secret_version_stage(SecretId=secret, VersionStage="AWSPREVIOUS",
                                                   RemoveFromVersionId=previous)
        second = stages(secretsmanager, secret)["AWSCURRENT"]
        rotate_now(secretsmanager, secret, arn)
    values = stages(secretsmanager, secret)
    assert values["AWSPREVIOUS"] == second and FIRST_KEY not in values.values()


def _pending_version(secretsmanager: Any, secret: str) -> str:
    """What RotateSecret does before it invokes the function: an empty version labelled AWSPENDING (moto: the
    rotation function registered but never invoked, so the steps can be called one by one)."""
    token = str(uuid.uuid4())
    with pytest.raises(ClientError):  # no function behind the ARN: moto refuses after labelling the version
        secretsmanager.rotate_secret(SecretId=secret, ClientRequestToken=token,
                                     RotationLambdaARN="arn:aws:lambda:us-east-1:123456789012:function:none",
                                     RotationRules={"AutomaticallyAfterDays": 30})
    return token


def step(secretsmanager: Any, secret: str, token: str, name: str, **options: Any) -> None:
    rotation.rotate(secretsmanager, step=name, secret_id=secret, token=token,
                    propagation_seconds=options.pop("propagation_seconds", 0.0),
                    remaining_seconds=options.pop("remaining_seconds", lambda: 900.0), **options)


def test_each_step_can_run_again(secretsmanager: Any, secret: str) -> None:
    token = _pending_version(secretsmanager, secret)
    step(secretsmanager, secret, token, "createSecret")
    pending = secretsmanager.get_secret_value(SecretId=secret, VersionStage="AWSPENDING")["SecretString"]
    step(secretsmanager, secret, token, "createSecret")  # a retried rotation: the same token, the same key
    assert secretsmanager.get_secret_value(SecretId=secret, VersionStage="AWSPENDING")["SecretString"] == pending
    assert stages(secretsmanager, secret)["AWSCURRENT"] == FIRST_KEY  # clients still get the old key
    for name in ("setSecret", "testSecret", "finishSecret", "finishSecret", "testSecret"):
        step(secretsmanager, secret, token, name)  # after finishSecret: "already current", nothing done
    assert stages(secretsmanager, secret) == {"AWSCURRENT": pending, "AWSPREVIOUS": FIRST_KEY}


def test_setting_up_the_schedule_only_tests_the_configuration(secretsmanager: Any, secret: str,
                                                                moto_endpoint: str) -> None:
    """CloudFormation sets the schedule up without rotating (RotateImmediatelyOnUpdate false): Secrets Manager runs
    testSecret alone on a pending copy of the current key, which passes at once and changes nothing."""
    with rotation_function(moto_endpoint, "rotate-configure", propagation_seconds=600.0) as (arn, invocations):
        invocations.context.remaining_seconds = 60.0  # far less than the propagation wait: none is made
        secretsmanager.rotate_secret(SecretId=secret, RotationLambdaARN=arn, RotateImmediately=False,
                                     RotationRules={"AutomaticallyAfterDays": 30})
    assert invocations.steps == ["testSecret"]
    assert stages(secretsmanager, secret)["AWSCURRENT"] == FIRST_KEY


def test_test_secret_refuses_a_key_the_sidecar_or_the_chart_could_not_use(secretsmanager: Any, secret: str) -> None:
    with rotation_function(secretsmanager.meta.endpoint_url, "rotate-first") as (arn, _):
        rotate_now(secretsmanager, secret, arn)  # FIRST_KEY is previous now
    for bad in ("short0123456789", "x" * 47 + "!", FIRST_KEY):
        token = _pending_version(secretsmanager, secret)
        secretsmanager.put_secret_value(SecretId=secret, ClientRequestToken=token, SecretString=bad,
                                        VersionStages=["AWSPENDING"])
        with pytest.raises(rotation.RotationError) as raised:
            step(secretsmanager, secret, token, "testSecret")
        assert bad not in str(raised.value)
    assert stages(secretsmanager, secret)["AWSPREVIOUS"] == FIRST_KEY


def test_test_secret_waits_for_the_sidecars_or_fails_when_it_cannot(secretsmanager: Any, secret: str) -> None:
    token = _pending_version(secretsmanager, secret)
    step(secretsmanager, secret, token, "createSecret")
    waited: list[float] = []
    step(secretsmanager, secret, token, "testSecret", propagation_seconds=240.0, sleep=waited.append)
    assert len(waited) == 1 and 230 < waited[0] <= 240
    # An invocation without the time to wait fails rather than making the key current too early.
    with pytest.raises(rotation.RotationError, match=r"needs 2[34][0-9] s more"):
        step(secretsmanager, secret, token, "testSecret", propagation_seconds=240.0,
             remaining_seconds=lambda: 120.0, sleep=waited.append)
    assert len(waited) == 1


def test_a_secret_without_rotation_or_a_foreign_token_is_refused(secretsmanager: Any, secret: str) -> None:
    with pytest.raises(rotation.RotationError, match="rotation is not enabled"):
        step(secretsmanager, secret, str(uuid.uuid4()), "createSecret")
    _pending_version(secretsmanager, secret)
    with pytest.raises(rotation.RotationError, match="has no stage for rotation"):
        step(secretsmanager, secret, str(uuid.uuid4()), "createSecret")


def test_the_check_reports_the_keys_age_and_the_versions_the_sidecars_do_not_accept(
        secretsmanager: Any, secret: str, moto_endpoint: str) -> None:
    """What the key's alarms watch: the age (a rotation overdue) and, with the sidecars' metrics, the versions not
    every sidecar accepts (a sync that does not deliver), as one embedded-metric-format event."""
    cloudwatch = boto3.client("cloudwatch", endpoint_url=moto_endpoint)
    dimensions = {"ClusterName": "c", "Namespace": "inference", "Workload": f"w{uuid.uuid4().hex[:6]}"}
    acceptance = rotation.Acceptance("ContainerInsights/Prometheus", dimensions, window_seconds=5, settle_seconds=0)

    def scrape(*keys: str) -> None:
        at = datetime.now(UTC)
        cloudwatch.put_metric_data(Namespace=acceptance.namespace, MetricData=[
            {"MetricName": rotation.KEYS_METRIC, "Value": len(keys), "Timestamp": at,
             "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()]},
            *({"MetricName": rotation.ACCEPTED_METRIC, "Value": 1, "Timestamp": at,
               "Dimensions": [{"Name": k, "Value": v} for k, v in
                              {**dimensions, "fingerprint": rotation.key_fingerprint(key)}.items()]} for key in keys)])

    later = lambda: datetime.now(UTC) + timedelta(days=31)  # noqa: E731
    soon = lambda: datetime.now(UTC) + timedelta(seconds=2)  # noqa: E731 (moto, as CloudWatch, counts whole seconds)
    event = rotation.check_keys(secretsmanager, secret, acceptance=None, cloudwatch=None, now=later)
    assert event["KeyAgeHours"] > 31 * 24 - 1 and "KeysNotAccepted" not in event
    assert event["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "HyperPodInference/ApiKeys"
    assert event["Secret"] == secret
    assert rotation.check_keys(secretsmanager, secret, acceptance=acceptance, cloudwatch=cloudwatch, now=soon)[
        "KeysNotAccepted"] == 1  # no sidecar reports: nothing says the sync delivers
    scrape(FIRST_KEY)
    scrape(FIRST_KEY)
    event = rotation.check_keys(secretsmanager, secret, acceptance=acceptance, cloudwatch=cloudwatch, now=soon)
    assert event["KeysNotAccepted"] == 0 and event["KeyAgeHours"] < 1 and FIRST_KEY not in str(event)
    token = _pending_version(secretsmanager, secret)
    step(secretsmanager, secret, token, "createSecret")  # a pending key the sync has not delivered
    assert rotation.check_keys(secretsmanager, secret, acceptance=acceptance, cloudwatch=cloudwatch, now=soon)[
        "KeysNotAccepted"] == 1

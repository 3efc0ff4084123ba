"""ApiKeySync with and without rotation (issue 17): the schedule, what the rotation function may do (evaluated with
the key policy's conditions), what External Secrets syncs, the acknowledgment and warning without rotation, and the
rules of ``rotation_days``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

from hyperpod_inference_iac import ApiKeySync, ConfigError, SecretsKey, SecretSync
from hyperpod_inference_iac.foundation.nag import REASONS
from hyperpod_inference_iac.observability.api_key_alarms import add_api_key_alarms
from hyperpod_inference_iac.serving.api_keys import API_KEY_REFRESH_SECONDS, PROPAGATION_SECONDS, RotationAcceptance
from tests.unit.test_data_perimeter import resolve
from tests.unit.test_secrets_key import ACCOUNT, ADMIN, API_KEY, CLIENT, REGION, TOKEN, _cluster, kms_use

ROTATOR = f"arn:aws:iam::{ACCOUNT}:role/llm-qwen-api-key-rotation"
SYNC = SecretSync(namespace="inference", secrets_manager_name=API_KEY, kubernetes_secret_name="qwen-api-key",
                  key="api-key", reader_service_account="qwen-api-key-reader", reader_role_name="llm-qwen-api-key",
                  secret_store_name="qwen-api-key", refresh_interval_seconds=API_KEY_REFRESH_SECONDS,
                  keys_file="api-keys", keys_file_caller_id="qwen-api-key")


def build(**options: Any) -> tuple[Stack, ApiKeySync]:
    stack = Stack(App(), "ApiKey", env=Environment(account=ACCOUNT, region=REGION))
    key = SecretsKey(stack, "SecretsKey").key
    sync = ApiKeySync(stack, "ApiKey", cluster=_cluster(stack), client_role_arns=[CLIENT], encryption_key=key,
                      sync=options.pop("sync", SYNC), **options)
    return stack, sync


@pytest.fixture(scope="module")
def rotated() -> dict[str, Any]:
    stack, _ = build(rotation_days=7, rotation_role_name="llm-qwen-api-key-rotation")
    return Template.from_stack(stack).to_json()


def test_the_schedule_and_the_function(rotated: dict[str, Any]) -> None:
    resources = rotated["Resources"]
    (schedule,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SecretsManager::RotationSchedule"]
    assert schedule["RotationRules"] == {"ScheduleExpression": "rate(7 days)"}
    assert schedule["RotateImmediatelyOnUpdate"] is False  # the first rotation comes 7 days after the deploy
    function = resources[schedule["RotationLambdaARN"]["Fn::GetAtt"][0]]["Properties"]
    assert function["Environment"]["Variables"] == {"PROPAGATION_SECONDS": str(PROPAGATION_SECONDS),
                                                    "KEY_LENGTH": "48", "ROTATION_DAYS": "7"}
    assert PROPAGATION_SECONDS > API_KEY_REFRESH_SECONDS + 120  # External Secrets, then the kubelet, then the sidecar


def _policy_of(resources: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    (statements,) = [r["Properties"]["PolicyDocument"]["Statement"] for r in resources.values()
                     if r["Type"] == "AWS::IAM::Policy" and r["Properties"]["Roles"][0]["Ref"].startswith(role_prefix)]
    return statements  # type: ignore[no-any-return]


def test_the_rotation_function_decrypts_and_writes_its_secret_only(rotated: dict[str, Any]) -> None:
    resources = rotated["Resources"]
    (key,) = [r for r in resources.values() if r["Type"] == "AWS::KMS::Key"]
    key_policy = resolve(key["Properties"]["KeyPolicy"]["Statement"], resources)
    # The key policy enables its IAM statement for this secret, through Secrets Manager, and for nothing else.
    assert kms_use(key_policy, ROTATOR, secret=API_KEY) == "iam"
    assert kms_use(key_policy, ROTATOR, "kms:GenerateDataKey", secret=API_KEY) == "iam"
    assert kms_use(key_policy, ROTATOR, secret=API_KEY, via=None) == "neutral"
    assert kms_use(key_policy, ROTATOR, secret="llm/some-other-secret") == "neutral"
    assert kms_use(key_policy, ADMIN, secret=API_KEY) == "neutral"
    # Its IAM statements name the one secret (and the key, for that secret only).
    statements = _policy_of(resources, "ApiKeyRotationRole")
    kms = resolve([s for s in statements if "kms:" in str(s["Action"])], resources)
    assert {a for s in kms for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])} == {
        "kms:Decrypt", "kms:GenerateDataKey"}
    assert all(s["Condition"]["StringLike"]["kms:EncryptionContext:SecretARN"] == [
        f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{API_KEY}-??????"] for s in kms)
    (secret_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::SecretsManager::Secret"]
    secretsmanager = [s for s in statements if "secretsmanager:" in str(s["Action"])]
    assert all(s["Resource"] == {"Ref": secret_id} for s in secretsmanager if s["Resource"] != "*")
    assert [s["Action"] for s in secretsmanager if s["Resource"] == "*"] == ["secretsmanager:GetRandomPassword"]
    assert kms_use(key_policy, ROTATOR, secret=TOKEN) == "neutral"  # another secret of the same key


def test_the_resource_policy_lets_the_rotation_function_read_the_key(rotated: dict[str, Any]) -> None:
    resources = rotated["Resources"]
    (policy,) = [r["Properties"]["ResourcePolicy"] for r in resources.values()
                 if r["Type"] == "AWS::SecretsManager::ResourcePolicy"]
    deny = next(s for s in resolve(policy["Statement"], resources) if s["Sid"] == "OnlyReaderAndClients")
    assert deny["Condition"]["StringNotEquals"]["aws:PrincipalArn"] == [
        f"arn:aws:iam::{ACCOUNT}:role/llm-qwen-api-key", ROTATOR, CLIENT]


DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"
OPERATOR = f"arn:aws:iam::{ACCOUNT}:role/platform-oncall"


def test_only_the_rotation_function_and_the_deployer_write_the_key(rotated: dict[str, Any]) -> None:
    """Issue 28: the resource policy denied reads only, so any principal whose IAM allowed PutSecretValue could set a
    key it knows, which the sync hands to the sidecars. Now every write and stage change is denied to all but the
    rotation function and the deployer (CloudFormation's execution role)."""
    resources = rotated["Resources"]
    (policy,) = [r["Properties"]["ResourcePolicy"] for r in resources.values()
                 if r["Type"] == "AWS::SecretsManager::ResourcePolicy"]
    statements = {s["Sid"]: s for s in resolve(policy["Statement"], resources)}
    writes = statements["OnlyRotationAndDeployerWrite"]
    assert writes["Effect"] == "Deny" and writes["Principal"] == {"AWS": "*"}
    assert {"secretsmanager:PutSecretValue", "secretsmanager:UpdateSecret", "secretsmanager:DeleteSecret"} <= set(
        writes["Action"])
    assert writes["Condition"]["StringNotEquals"]["aws:PrincipalArn"] == [ROTATOR, DEPLOYER]
    relabel = statements["OnlyRotationDeployerAndOperatorsRelabel"]
    assert set(relabel["Action"]) == {"secretsmanager:RotateSecret", "secretsmanager:UpdateSecretVersionStage"}
    assert relabel["Condition"]["StringNotEquals"]["aws:PrincipalArn"] == [ROTATOR, DEPLOYER]
    assert "OperatorsRotateAndRevoke" not in statements


def test_operators_may_rotate_and_revoke_and_acceptance_reads_the_sidecars_metrics() -> None:
    stack, _ = build(rotation_days=30, rotation_role_name="llm-qwen-api-key-rotation", operator_role_arns=[OPERATOR],
                        acceptance=RotationAcceptance(cluster_name="llm", namespace="inference", workload="qwen"))
    resources = Template.from_stack(stack).to_json()["Resources"]
    (policy,) = [r["Properties"]["ResourcePolicy"] for r in resources.values()
                 if r["Type"] == "AWS::SecretsManager::ResourcePolicy"]
    statements = {s["Sid"]: s for s in resolve(policy["Statement"], resources)}
    assert statements["OnlyRotationDeployerAndOperatorsRelabel"]["Condition"]["StringNotEquals"][
        "aws:PrincipalArn"] == [ROTATOR, DEPLOYER, OPERATOR]
    assert OPERATOR not in str(statements["OnlyRotationAndDeployerWrite"])  # never a value
    assert statements["OperatorsRotateAndRevoke"]["Principal"] == {"AWS": OPERATOR}
    (function,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Function"
                   and r["Properties"].get("Handler") == "rotation.handler"]
    acceptance = json.loads(function["Environment"]["Variables"]["ACCEPTANCE"])
    assert acceptance["dimensions"] == {"ClusterName": "llm", "Namespace": "inference", "Workload": "qwen"}
    assert acceptance["namespace"] == "ContainerInsights/Prometheus"
    assert function["Timeout"] == 900  # as long as Lambda allows: it fails when the sidecars never report the key
    statements = _policy_of(resources, "ApiKeyRotationRole")
    assert [s["Resource"] for s in statements if s["Action"] == "cloudwatch:GetMetricData"] == ["*"]
    report = AwsSolutionsChecks(stack.node.root).validate_scope(stack)
    assert "AwsSolutions-IAM5" not in {violation.rule_name for violation in report.violations}


def test_without_rotation_the_missing_schedule_is_acknowledged_and_warned() -> None:
    """The reason `portable-api-key-rotation`, which the default platform (rotating) does not use."""
    stack, sync = build()
    assert sync.rotation_function is None and sync.rotation_schedule is None
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("ApiKeySync:notRotated"))
    assert len(warnings) == 1
    report = AwsSolutionsChecks(stack.node.root).validate_scope(stack)
    assert "AwsSolutions-SMG4" not in {violation.rule_name for violation in report.violations}
    resources = Template.from_stack(stack).to_json()["Resources"]
    assert not [r for r in resources.values() if r["Type"] == "AWS::SecretsManager::RotationSchedule"]
    assert REASONS["portable-api-key-rotation"][0] == "AwsSolutions-SMG4"


def test_with_rotation_cdk_nag_finds_the_schedule_and_nothing_to_acknowledge() -> None:
    stack, _ = build(rotation_days=30)
    report = AwsSolutionsChecks(stack.node.root).validate_scope(stack)
    rules = {violation.rule_name for violation in report.violations}
    assert not rules & {"AwsSolutions-SMG4", "AwsSolutions-IAM5", "AwsSolutions-L1", "AwsSolutions-IAM4"}, rules
    assert not Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("notRotated"))


def test_the_wait_follows_the_syncs_refresh() -> None:
    import dataclasses

    stack, _ = build(rotation_days=30, sync=dataclasses.replace(SYNC, refresh_interval_seconds=300))
    resources = Template.from_stack(stack).to_json()["Resources"]
    (function,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Function"
                   and r["Properties"].get("Handler") == "rotation.handler"]
    assert function["Environment"]["Variables"]["PROPAGATION_SECONDS"] == "460"  # 300 + 120 + 5 + 35
    assert function["Timeout"] == 580 <= 900


@pytest.mark.parametrize(("days", "sync", "codes"), [
    (0, SYNC, ["ApiKeySync.RotationDaysOutOfRange"]),
    (1001, SYNC, ["ApiKeySync.RotationDaysOutOfRange"]),
    (30, SecretSync(namespace="inference", secrets_manager_name=API_KEY, reader_role_name="r"),
     ["ApiKeySync.RotationWithoutKeysFile", "ApiKeySync.RotationRefreshTooSlow"]),  # the default hour
])
def test_rotation_days_are_checked(days: int, sync: SecretSync, codes: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        build(rotation_days=days, sync=sync)
    assert raised.value.codes == codes


def test_the_keys_alarms_watch_the_rotation_the_sync_and_the_401s() -> None:
    """Issue 28: no alarm or event rule referred to the rotation function or the secret. Now a failed rotation, a
    rotation older than its period plus a day (or a check that stopped), a version the sidecars do not all accept
    (the sync) and many 401s notify the topic, each with its runbook."""
    from aws_cdk import aws_sns as sns

    stack, sync = build(rotation_days=30, acceptance=RotationAcceptance(cluster_name="llm", namespace="inference",
                                                                        workload="qwen"))
    topic = sns.Topic(stack, "Topic")
    alarms = add_api_key_alarms(sync, alarm_name_prefix="llm", topic=topic)
    assert set(alarms) == {"rotation_failed", "rotation_overdue", "keys_not_synced", "unauthorized"}
    resources = Template.from_stack(stack).to_json()["Resources"]
    found = {r["Properties"]["AlarmName"]: r["Properties"] for r in resources.values()
             if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert set(found) == {f"llm-api-key-qwen-{what}" for what in
                          ("rotation-failed", "rotation-overdue", "keys-not-synced", "unauthorized")}
    runbooks = (Path(__file__).parents[2] / "docs" / "alarms.md").read_text()
    for name, alarm in found.items():
        anchor = "api-key-" + name.removeprefix("llm-api-key-qwen-")
        assert alarm["AlarmDescription"].endswith(f"section {anchor}") and alarm["AlarmActions"]
        assert f"\n### {anchor}\n" in runbooks
    overdue = found["llm-api-key-qwen-rotation-overdue"]
    assert overdue["Threshold"] == 31 * 24 and overdue["TreatMissingData"] == "breaching"
    assert found["llm-api-key-qwen-rotation-failed"]["MetricName"] == "Errors"
    (rule,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    assert rule["ScheduleExpression"] == "rate(15 minutes)"
    assert rule["Targets"][0]["Input"]["Fn::Join"][1][0].startswith('{"Check":"keys","SecretId":"')
    assert add_api_key_alarms(build()[1], alarm_name_prefix="llm") == {}  # no rotation: nothing to watch

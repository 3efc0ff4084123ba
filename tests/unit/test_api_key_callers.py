"""A key per caller (issue 29.0): ``portable[i].apiKey.callers`` in the config (ids checked, the single-key form
kept as one caller with the id it always had), one Secrets Manager secret per caller with its own schedule on the
one rotation function, one ExternalSecret for all of them, IAM that names exactly the synced callers' secrets, alarms
per caller, usage limits that must name a caller, and ``make review`` showing an added caller as broadening.
The sidecar's side (rotation of one caller, revocation of one caller) is tests/sidecar/test_api_key_callers.py."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from hyperpod_inference_iac import ApiKeySync, SecretsKey
from hyperpod_inference_iac.foundation.validation import ConfigError
from hyperpod_inference_iac.observability.api_key_alarms import add_api_key_alarms
from hyperpod_inference_iac.serving.api_keys import RotationAcceptance
from hyperpod_inference_iac.serving.hugging_face_token import SyncedCaller
from platform_config import parse_config
from tests.review.test_review_engine import lines
from tests.unit.test_api_key_sync import SYNC
from tests.unit.test_config import DEFAULT
from tests.unit.test_data_perimeter import resolve
from tests.unit.test_secrets_key import ACCOUNT, API_KEY, CLIENT, REGION, _cluster, kms_use

TEAM_B = f"arn:aws:iam::{ACCOUNT}:role/team-b-clients"
GONE = f"arn:aws:iam::{ACCOUNT}:role/gone-clients"
CALLERS = (SyncedCaller("qwen-api-key", API_KEY, (CLIENT,)), SyncedCaller("team-b", f"{API_KEY}/team-b", (TEAM_B,)),
           SyncedCaller("gone", f"{API_KEY}/gone", (GONE,), revoked=True))
MULTI = dataclasses.replace(SYNC, keys_file_callers=CALLERS)
ROTATOR = f"arn:aws:iam::{ACCOUNT}:role/llm-qwen-api-key-rotation"
READER = f"arn:aws:iam::{ACCOUNT}:role/llm-qwen-api-key"


def _arn(name: str) -> str:
    return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}-??????"


# ---- the config --------------------------------------------------------------------------------------------------

def _portable(edit: Any) -> dict[str, Any]:
    data = copy.deepcopy(DEFAULT)
    edit(data["portable"][0])
    return data


def _problems(data: dict[str, Any]) -> set[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    return {(problem.code, problem.path) for problem in caught.value.problems}


def test_the_default_platform_shows_two_callers_the_first_keeping_the_single_keys_secret() -> None:
    (sync,) = parse_config(copy.deepcopy(DEFAULT)).api_key_syncs.values()
    assert [(c.caller_id, c.secrets_manager_name, c.client_role_arns) for c in sync.keys_file_callers] == [
        ("qwen3-8b-portable-api-key", "llm-platform/portable/qwen3-8b-portable/api-key",
         ("arn:aws:iam::111122223333:role/inference-clients",)),
        ("team-b", "llm-platform/portable/qwen3-8b-portable/api-key/team-b",
         ("arn:aws:iam::111122223333:role/team-b-clients",))]


def test_the_single_key_form_is_one_caller_with_the_id_and_the_sync_it_always_had() -> None:
    """Kept, not migrated: a config written for 0.x deploys the same secret, the same ExternalSecret and the same
    caller id (records and usage limits keyed by it carry on)."""
    data = _portable(lambda p: p.__setitem__("apiKey", {"enabled": True, "clientRoleArns": [CLIENT]}))
    (sync,) = parse_config(data).api_key_syncs.values()
    assert sync.keys_file_callers == ()
    assert [(c.caller_id, c.secrets_manager_name) for c in sync.callers()] == [
        ("qwen3-8b-portable-api-key", "llm-platform/portable/qwen3-8b-portable/api-key")]
    spec = sync.manifests(region=REGION, reader_role_arn=READER)[2]["spec"]
    assert [entry["secretKey"] for entry in spec["data"]] == ["current", "pending", "previous"]
    assert spec["target"]["template"]["data"]["api-keys"].startswith("qwen3-8b-portable-api-key:{{ .current }}")


def test_caller_ids_are_checked_all_at_once_with_their_key_paths() -> None:
    def edit(portable: dict[str, Any]) -> None:
        portable["apiKey"] = {"clientRoleArns": [CLIENT], "callers": [
            {"id": "team-a"}, {"id": "Team-A"}, {"id": "-dash"}, {"id": "x" * 65}, {"id": "has space"},
            {"id": "team-c", "clientRoleArns": ["not-an-arn"]}]}
    assert _problems(_portable(edit)) == {
        ("Portable.ApiKeyClientRolesBesideCallers", "portable[0].apiKey.clientRoleArns"),
        ("Portable.ApiKeyCallerDuplicate", "portable[0].apiKey.callers[1].id"),
        ("Portable.ApiKeyCallerIdInvalid", "portable[0].apiKey.callers[2].id"),
        ("Portable.ApiKeyCallerIdInvalid", "portable[0].apiKey.callers[3].id"),
        ("Portable.ApiKeyCallerIdInvalid", "portable[0].apiKey.callers[4].id"),
        ("Portable.ApiKeyClientRoleInvalid", "portable[0].apiKey.callers[5].clientRoleArns[0]"),
    }


@pytest.mark.parametrize("callers", [[], [{"id": "team-a", "revoked": True}]])
def test_at_least_one_caller_is_not_revoked(callers: list[dict[str, Any]]) -> None:
    data = _portable(lambda p: p.__setitem__("apiKey", {"callers": callers}))
    assert _problems(data) == {("Portable.ApiKeyNoCaller", "portable[0].apiKey.callers")}


def test_callers_need_the_capture_sidecar() -> None:
    def edit(portable: dict[str, Any]) -> None:
        portable["apiKey"] = {"callers": [{"id": "team-a"}]}
        portable["dataCapture"]["modelPod"]["enabled"] = False
    assert _problems(_portable(edit)) == {
        ("Portable.ApiKeyCallersNeedCaptureSidecar", "portable[0].apiKey.callers")}


def test_a_usage_limit_names_a_caller_of_the_servers_keys() -> None:
    def edit(names: list[str]) -> Any:
        def apply(portable: dict[str, Any]) -> None:
            portable["usageLimits"] = {"callers": [{"callerId": name, "concurrentRequestsPerReplica": 4}
                                                   for name in names]}
        return apply
    assert _problems(_portable(edit(["team-b", "tema-b", "*"]))) == {
        ("UsageLimits.UnknownCaller", "portable[0].usageLimits.callers[1].callerId")}
    parse_config(_portable(edit(["team-b", "qwen3-8b-portable-api-key", "*"])))  # every known id, and *
    single = _portable(lambda p: p.__setitem__("apiKey", {"enabled": True}))
    single["portable"][0]["usageLimits"] = {"callers": [{"callerId": "team-b", "concurrentRequestsPerReplica": 4}]}
    assert _problems(single) == {("UsageLimits.UnknownCaller", "portable[0].usageLimits.callers[0].callerId")}


# ---- the construct -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def multi() -> tuple[dict[str, Any], ApiKeySync]:
    stack = Stack(App(), "ApiKey", env=Environment(account=ACCOUNT, region=REGION))
    key = SecretsKey(stack, "SecretsKey").key
    sync = ApiKeySync(stack, "ApiKey", cluster=_cluster(stack), encryption_key=key, sync=MULTI, rotation_days=30,
                      rotation_role_name="llm-qwen-api-key-rotation",
                      acceptance=RotationAcceptance(cluster_name="llm", namespace="inference", workload="qwen"))
    add_api_key_alarms(sync, alarm_name_prefix="llm")
    return Template.from_stack(stack).to_json()["Resources"], sync


def _secret_ids(resources: dict[str, Any]) -> dict[str, str]:
    return {r["Properties"]["Name"]: logical for logical, r in resources.items()
            if r["Type"] == "AWS::SecretsManager::Secret"}


def _statements(resources: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    return [s for r in resources.values() if r["Type"] == "AWS::IAM::Policy"
            and r["Properties"]["Roles"][0]["Ref"].startswith(role_prefix) for s in r["Properties"]["PolicyDocument"][
                "Statement"]]


def _resources_of(statements: list[dict[str, Any]], action: str) -> set[str]:
    found: set[str] = set()
    for statement in statements:
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        if action in actions:
            resource = statement["Resource"]
            found |= {r["Ref"] for r in (resource if isinstance(resource, list) else [resource])}
    return found


def test_one_secret_per_caller_the_single_keys_one_keeping_its_construct_id(multi: tuple[dict[str, Any], ApiKeySync]
                                                                            ) -> None:
    resources, sync = multi
    assert set(_secret_ids(resources)) == {API_KEY, f"{API_KEY}/team-b", f"{API_KEY}/gone"}
    assert sync.secrets["qwen-api-key"].node.id == "Secret"  # same logical id as before callers: not replaced
    assert sync.secret is sync.secrets["qwen-api-key"]
    assert sync.secret_names == {"qwen-api-key": API_KEY, "team-b": f"{API_KEY}/team-b", "gone": f"{API_KEY}/gone"}


def test_the_reader_reads_and_the_rotation_rotates_exactly_the_synced_callers_secrets(
        multi: tuple[dict[str, Any], ApiKeySync]) -> None:
    resources, _ = multi
    ids = _secret_ids(resources)
    synced = {ids[API_KEY], ids[f"{API_KEY}/team-b"]}
    reader = _statements(resources, "ApiKeyReaderRole")
    assert _resources_of(reader, "secretsmanager:GetSecretValue") == synced  # not the revoked caller's
    kms = [s for s in resolve(reader, resources) if "kms:" in str(s["Action"])]
    assert sorted(p for s in kms for p in s["Condition"]["StringLike"]["kms:EncryptionContext:SecretARN"]) == \
        sorted([_arn(API_KEY), _arn(f"{API_KEY}/team-b")])
    rotation = _statements(resources, "ApiKeyRotationRole")
    for action in ("secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage",
                   "secretsmanager:GetSecretValue"):
        assert _resources_of(rotation, action) == synced, action
    schedules = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SecretsManager::RotationSchedule"]
    assert {s["SecretId"]["Ref"] for s in schedules} == synced
    assert len({str(s["RotationLambdaARN"]) for s in schedules}) == 1  # one function for the server
    permissions = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Permission"
                   and r["Properties"]["Principal"] == "secretsmanager.amazonaws.com"]
    assert {p["SourceArn"]["Ref"] for p in permissions} == synced
    (key,) = [r for r in resources.values() if r["Type"] == "AWS::KMS::Key"]
    key_policy = resolve(key["Properties"]["KeyPolicy"]["Statement"], resources)
    assert kms_use(key_policy, TEAM_B, secret=f"{API_KEY}/team-b") == "allow"
    assert kms_use(key_policy, TEAM_B, secret=API_KEY) == "neutral"  # another caller's key
    assert kms_use(key_policy, GONE, secret=f"{API_KEY}/gone") == "neutral"  # revoked: no reader named


def test_each_callers_clients_read_its_key_only_and_a_revoked_callers_none(
        multi: tuple[dict[str, Any], ApiKeySync]) -> None:
    resources, _ = multi
    ids = _secret_ids(resources)
    policies = {r["Properties"]["SecretId"]["Ref"]: {s["Sid"]: s for s in resolve(
        r["Properties"]["ResourcePolicy"]["Statement"], resources)}
        for r in resources.values() if r["Type"] == "AWS::SecretsManager::ResourcePolicy"}
    expected = {API_KEY: [CLIENT], f"{API_KEY}/team-b": [TEAM_B], f"{API_KEY}/gone": []}
    for name, clients in expected.items():
        statements = policies[ids[name]]
        assert statements["OnlyReaderAndClients"]["Condition"]["StringNotEquals"]["aws:PrincipalArn"] == [
            READER, ROTATOR, *clients], name
        assert ("ClientsReadTheKey" in statements) == bool(clients)
        if clients:
            assert statements["ClientsReadTheKey"]["Principal"] == {"AWS": clients[0]}
        assert "OnlyRotationAndDeployerWrite" in statements  # writes limited on every caller's secret


def test_one_external_secret_for_the_synced_callers(multi: tuple[dict[str, Any], ApiKeySync]) -> None:
    (_, store, external) = MULTI.manifests(region=REGION, reader_role_arn=READER)
    assert store["kind"] == "SecretStore" and external["kind"] == "ExternalSecret"
    spec = external["spec"]
    assert [(e["secretKey"], e["remoteRef"]["key"]) for e in spec["data"]] == [
        (f"qwen-api-key.{stage}", API_KEY) for stage in ("current", "pending", "previous")] + [
        (f"team-b.{stage}", f"{API_KEY}/team-b") for stage in ("current", "pending", "previous")]
    template = spec["target"]["template"]["data"]["api-keys"]
    assert "gone" not in template and "gone" not in str(spec["data"])
    assert template.count("qwen-api-key:{{ . }}") == 3 and template.count("team-b:{{ . }}") == 3
    assert spec["target"]["deletionPolicy"] == "Delete"  # a caller's missing secret is skipped, not an error


def test_alarms_per_callers_key_and_one_per_server_for_the_function_and_the_401s(
        multi: tuple[dict[str, Any], ApiKeySync]) -> None:
    resources, sync = multi
    assert set(sync.alarms) == {"rotation_failed", "rotation_overdue", "keys_not_synced", "rotation_overdue:team-b",
                                "keys_not_synced:team-b", "unauthorized"}
    names = sorted(r["Properties"]["AlarmName"] for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm")
    assert names == ["llm-api-key-qwen-keys-not-synced", "llm-api-key-qwen-rotation-failed",
                     "llm-api-key-qwen-rotation-overdue", "llm-api-key-qwen-team-b-keys-not-synced",
                     "llm-api-key-qwen-team-b-rotation-overdue", "llm-api-key-qwen-unauthorized"]
    ids = _secret_ids(resources)
    checks = [json.dumps(r["Properties"]["Targets"][0]["Input"]) for r in resources.values()
              if r["Type"] == "AWS::Events::Rule"]
    assert len(checks) == 2  # each rotated caller's key is looked at; not the revoked one's
    assert {name for name in (API_KEY, f"{API_KEY}/team-b", f"{API_KEY}/gone")
            if any(ids[name] in check for check in checks)} == {API_KEY, f"{API_KEY}/team-b"}


# ---- the review ----------------------------------------------------------------------------------------------------

def test_an_added_caller_broadens_and_a_revoked_one_narrows() -> None:
    single = dataclasses.replace(SYNC, keys_file_callers=CALLERS[:1])
    two = dataclasses.replace(SYNC, keys_file_callers=CALLERS[:2])
    before = single.manifests(region=REGION, reader_role_arn=READER)[2]
    after = two.manifests(region=REGION, reader_role_arn=READER)[2]
    found = [line for line in lines(before, after) if line[2].startswith("API key callers")]
    assert found == [("identity", "qwen-api-key", "API key callers: + team-b", True)]
    found = [line for line in lines(after, before) if line[2].startswith("API key callers")]
    assert found == [("identity", "qwen-api-key", "API key callers: - team-b", False)]
    legacy = SYNC.manifests(region=REGION, reader_role_arn=READER)[2]  # the single-key form, migrated: no new caller
    assert [line for line in lines(legacy, before) if line[2].startswith("API key callers")] == []

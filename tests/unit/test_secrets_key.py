"""Who can decrypt the Hugging Face token and the API keys: the SecretsKey's key policy, evaluated with its conditions
for each kind of principal (tests/support/policy_eval.py), and the IAM grants that go with it."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import ApiKeySync, HuggingFaceTokenSync, SecretsKey, SecretSync
from tests.support.policy_eval import Request, decision
from tests.unit.test_data_perimeter import resolve

ACCOUNT, REGION = "111122223333", "us-west-2"
TOKEN = "llm/huggingface-token"
API_KEY = "llm/portable/qwen/api-key"
HF_READER = f"arn:aws:iam::{ACCOUNT}:role/llm-hf-token-reader"
API_READER = f"arn:aws:iam::{ACCOUNT}:role/llm-qwen-api-key"
CLIENT = f"arn:aws:iam::{ACCOUNT}:role/inference-clients"
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"
ADMIN = f"arn:aws:iam::{ACCOUNT}:role/Administrator"  # IAM AdministratorAccess, listed nowhere
OTHER = f"arn:aws:iam::{ACCOUNT}:role/some-workload"
KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/SecretsKey"


def secret_arn(name: str) -> str:
    return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}-AbC123"


def _cluster(stack: Stack) -> eks.ICluster:
    return eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="c",
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            stack, "Kubectl", service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:k",
            role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/k")),
        open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
            stack, "Oidc", f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/EXAMPLE"))


def build(*, with_key: bool = True) -> Stack:
    stack = Stack(App(), "Secrets", env=Environment(account=ACCOUNT, region=REGION))
    cluster = _cluster(stack)
    key = SecretsKey(stack, "SecretsKey", alias="alias/llm/secrets").key if with_key else None
    HuggingFaceTokenSync(stack, "Token", cluster=cluster, install_operator=False, encryption_key=key,  # type: ignore[arg-type]
                         sync=SecretSync(namespace="inference", secrets_manager_name=TOKEN,
                                         reader_role_name="llm-hf-token-reader"))
    ApiKeySync(stack, "ApiKey", cluster=cluster, client_role_arns=[CLIENT], encryption_key=key,
               sync=SecretSync(namespace="inference", secrets_manager_name=API_KEY,
                               kubernetes_secret_name="qwen-api-key", key="api-key",
                               reader_service_account="qwen-api-key-reader", reader_role_name="llm-qwen-api-key",
                               secret_store_name="qwen-api-key"))
    return stack


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return Template.from_stack(build()).to_json()


@pytest.fixture(scope="module")
def key_policy(template: dict[str, Any]) -> list[dict[str, Any]]:
    resources = template["Resources"]
    (key,) = [r for r in resources.values() if r["Type"] == "AWS::KMS::Key"]
    return resolve(key["Properties"]["KeyPolicy"]["Statement"], resources)  # type: ignore[no-any-return]


def kms_use(statements: list[dict[str, Any]], principal: str, action: str = "kms:Decrypt", *,
            secret: str = TOKEN, via: str | None = f"secretsmanager.{REGION}.amazonaws.com") -> str:
    context = {"kms:EncryptionContext:SecretARN": secret_arn(secret), "kms:EncryptionContext:SecretVersionId": "v1"}
    if via is not None:
        context["kms:ViaService"] = via
    return decision(statements, Request(action, KEY_ARN, principal, None, context))


def test_the_reader_decrypts_its_secret_through_secrets_manager_only(key_policy: list[dict[str, Any]]) -> None:
    # The key policy enables the reader's IAM statement (which the same grant wrote): "iam".
    assert kms_use(key_policy, HF_READER) == "iam"
    assert kms_use(key_policy, API_READER, secret=API_KEY) == "iam"
    assert kms_use(key_policy, HF_READER, via=None) == "neutral"  # kms:Decrypt called directly
    assert kms_use(key_policy, HF_READER, via=f"s3.{REGION}.amazonaws.com") == "neutral"
    assert kms_use(key_policy, HF_READER, secret=API_KEY) == "neutral"  # another secret of the same key
    assert kms_use(key_policy, API_READER) == "neutral"
    assert kms_use(key_policy, HF_READER, secret="llm/some-other-secret") == "neutral"


def test_clients_are_named_and_decrypt_only_their_key(key_policy: list[dict[str, Any]]) -> None:
    assert kms_use(key_policy, CLIENT, secret=API_KEY) == "allow"  # their IAM policies are not ours
    assert kms_use(key_policy, CLIENT, secret=TOKEN) == "neutral"
    assert kms_use(key_policy, CLIENT, secret=API_KEY, via=None) == "neutral"


def test_an_administrator_or_an_unlisted_role_decrypts_nothing(key_policy: list[dict[str, Any]]) -> None:
    for principal in (ADMIN, OTHER):
        for secret in (TOKEN, API_KEY):
            assert kms_use(key_policy, principal, secret=secret) == "neutral"
            assert kms_use(key_policy, principal, secret=secret, via=None) == "neutral"
        assert kms_use(key_policy, principal, "kms:ReEncryptFrom") == "neutral"


def test_the_account_administers_the_key_without_grants(key_policy: list[dict[str, Any]]) -> None:
    assert kms_use(key_policy, ADMIN, "kms:PutKeyPolicy", via=None) == "iam"
    assert kms_use(key_policy, ADMIN, "kms:EnableKeyRotation", via=None) == "iam"
    for principal in (ADMIN, HF_READER, CLIENT, DEPLOYER):
        assert kms_use(key_policy, principal, "kms:CreateGrant") == "neutral"
    principals = [s["Principal"] for s in key_policy]
    assert "*" not in principals and {"AWS": "*"} not in principals


def test_writing_a_value_is_left_to_iam_and_reveals_nothing(key_policy: list[dict[str, Any]]) -> None:
    # put-secret-value (the token, the API key runbook): the caller's IAM decides, through Secrets Manager only.
    assert kms_use(key_policy, ADMIN, "kms:GenerateDataKey") == "iam"
    assert kms_use(key_policy, ADMIN, "kms:GenerateDataKey", via=None) == "neutral"
    assert kms_use(key_policy, ADMIN, "kms:GenerateDataKey", secret="llm/some-other-secret") == "neutral"


def test_the_deployer_may_create_and_reencrypt_the_secrets(key_policy: list[dict[str, Any]]) -> None:
    # CreateSecret needs kms:GenerateDataKey and kms:Decrypt, UpdateSecret also kms:Encrypt (API reference).
    for action in ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"):
        for secret in (TOKEN, API_KEY):
            assert kms_use(key_policy, DEPLOYER, action, secret=secret) == "iam"
    assert kms_use(key_policy, DEPLOYER, via=None) == "neutral"
    assert kms_use(key_policy, DEPLOYER, secret="llm/some-other-secret") == "neutral"


def test_secrets_use_the_key_and_readers_iam_is_scoped_to_their_secret(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    (key_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::KMS::Key"]
    assert resources[key_id]["Properties"]["EnableKeyRotation"] is True
    secrets = [r for r in resources.values() if r["Type"] == "AWS::SecretsManager::Secret"]
    assert len(secrets) == 2
    assert all(s["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]} for s in secrets)
    policies = {r["Properties"]["Roles"][0]["Ref"]: r["Properties"]["PolicyDocument"]["Statement"]
                for r in resources.values() if r["Type"] == "AWS::IAM::Policy"}
    for role_prefix, name in (("TokenReaderRole", TOKEN), ("ApiKeyReaderRole", API_KEY)):
        (statements,) = [s for role, s in policies.items() if role.startswith(role_prefix)]
        (decrypt,) = [s for s in statements if s["Action"] == "kms:Decrypt"]
        assert decrypt["Resource"] == {"Fn::GetAtt": [key_id, "Arn"]}
        conditions = resolve(decrypt["Condition"], resources)
        assert conditions["StringEquals"]["kms:ViaService"] == f"secretsmanager.{REGION}.amazonaws.com"
        assert conditions["StringLike"]["kms:EncryptionContext:SecretARN"] == [
            f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}-??????"]
        assert all("kms:" not in str(s["Action"]) for s in statements if s is not decrypt)


def test_without_a_key_the_secrets_use_aws_secretsmanager() -> None:
    resources = Template.from_stack(build(with_key=False)).to_json()["Resources"]
    assert not [r for r in resources.values() if r["Type"] == "AWS::KMS::Key"]
    assert all("KmsKeyId" not in r["Properties"] for r in resources.values()
               if r["Type"] == "AWS::SecretsManager::Secret")
    assert "kms:" not in str([r for r in resources.values() if r["Type"] == "AWS::IAM::Policy"])


def test_a_key_that_is_not_a_secrets_key_is_warned_about() -> None:
    stack = Stack(App(), "Plain", env=Environment(account=ACCOUNT, region=REGION))
    ApiKeySync(stack, "ApiKey", cluster=_cluster(stack), client_role_arns=[CLIENT],
               encryption_key=kms.Key(stack, "PlainKey"),
               sync=SecretSync(namespace="inference", secrets_manager_name=API_KEY, reader_role_name="r"))
    warnings = Annotations.from_stack(stack).find_warning(
        "*", Match.string_like_regexp("SecretsKey:unmanagedKeyPolicy"))
    assert len(warnings) == 1


def test_a_synthesizer_without_a_known_deployer_is_warned_about() -> None:
    from aws_cdk import CliCredentialsStackSynthesizer

    stack = Stack(App(), "Cli", env=Environment(account=ACCOUNT, region=REGION),
                  synthesizer=CliCredentialsStackSynthesizer())
    SecretsKey(stack, "SecretsKey")
    assert Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("SecretsKey:noDeployer"))
    named = Stack(App(), "Named", env=Environment(account=ACCOUNT, region=REGION),
                  synthesizer=CliCredentialsStackSynthesizer())
    assert SecretsKey(named, "SecretsKey", deployer_role_arns=[ADMIN]).guard.deployer_role_arns == (ADMIN,)
    assert not Annotations.from_stack(named).find_warning("*", Match.string_like_regexp("SecretsKey:noDeployer"))

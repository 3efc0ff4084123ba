"""Who can use the key that envelope-encrypts the EKS cluster's Kubernetes secrets: InferenceCluster's key policy,
evaluated with its conditions for each kind of principal (tests/support/policy_eval.py), and the cluster role's
IAM statement that goes with it."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Environment, LegacyStackSynthesizer, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Annotations, Match, Template

from hyperpod_inference_iac import ConfigError, InferenceCluster
from tests.support.policy_eval import Request, decision
from tests.unit.test_data_perimeter import resolve

ACCOUNT, REGION = "111122223333", "us-west-2"
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"
ADMIN = f"arn:aws:iam::{ACCOUNT}:role/Administrator"  # IAM AdministratorAccess, listed nowhere
KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/EksSecretsKey"
VIA_EKS = {"kms:ViaService": f"eks.{REGION}.amazonaws.com"}


def _stack(**kwargs: Any) -> Stack:
    return Stack(App(), "Cluster", env=Environment(account=ACCOUNT, region=REGION), **kwargs)


def _cluster(stack: Stack, **props: Any) -> InferenceCluster:
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=[f"{REGION}a", f"{REGION}b"])
    return InferenceCluster(stack, "Eks", cluster_name="c", vpc=vpc, install_device_plugin=False, **props)


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    stack = _stack()
    _cluster(stack)
    resources = Template.from_stack(stack).to_json()["Resources"]
    (key,) = (r for r in resources.values() if r["Type"] == "AWS::KMS::Key")
    role_id = next(k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role" and k.startswith("EksClusterRole"))
    role_policy = next(r for k, r in resources.items() if r["Type"] == "AWS::IAM::Policy"
                       and k.startswith("EksClusterRoleDefaultPolicy"))
    cluster = next(r for r in resources.values() if r["Type"] == "AWS::EKS::Cluster")
    return {"key": resolve(key["Properties"]["KeyPolicy"]["Statement"], resources),
            "cluster_role": f"arn:aws:iam::{ACCOUNT}:role/{role_id}",
            "role_policy": role_policy, "cluster": cluster,
            "role_policy_id": next(k for k, r in resources.items() if r is role_policy)}


def kms(built: dict[str, Any], principal: str, action: str, **context: str) -> str:
    return decision(built["key"], Request(action, KEY_ARN, principal, None, context))


def test_no_principal_gets_kms_star(built: dict[str, Any]) -> None:
    for statement in built["key"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert not [a for a in actions if a in ("kms:*", "kms:Create*")], statement["Sid"]


def test_the_account_administers_the_key_without_using_it(built: dict[str, Any]) -> None:
    assert kms(built, ADMIN, "kms:PutKeyPolicy") == "iam"  # the account's IAM policies decide
    assert kms(built, ADMIN, "kms:DescribeKey") == "iam"
    for action in ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom"):
        assert kms(built, ADMIN, action) == "neutral", action
        assert kms(built, ADMIN, action, **VIA_EKS) == "neutral", action
    assert kms(built, ADMIN, "kms:CreateGrant", **VIA_EKS, **{"kms:GrantIsForAWSResource": "true"}) == "neutral"


def test_the_cluster_role_encrypts_and_decrypts_secrets(built: dict[str, Any]) -> None:
    role = built["cluster_role"]
    for action in ("kms:Encrypt", "kms:Decrypt", "kms:DescribeKey"):
        assert kms(built, role, action) == "iam", action  # enabled for the role's IAM statement below
    assert kms(built, role, "kms:CreateGrant", **{"kms:GrantIsForAWSResource": "true"}) == "neutral"
    assert kms(built, role, "kms:GenerateDataKey") == "neutral"
    (statement,) = built["role_policy"]["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Sid"] == "EncryptKubernetesSecrets"
    assert sorted(statement["Action"]) == ["kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:ListGrants"]
    assert statement["Resource"] == {"Fn::GetAtt": ["EksSecretsKey89C78FFD", "Arn"]}
    # The control plane uses the key as soon as it exists: the cluster waits for the role's statement.
    assert built["role_policy_id"] in built["cluster"]["DependsOn"]


def test_the_deployer_uses_the_key_and_creates_grants_only_through_eks(built: dict[str, Any]) -> None:
    assert kms(built, DEPLOYER, "kms:Encrypt", **VIA_EKS) == "iam"
    assert kms(built, DEPLOYER, "kms:Decrypt", **VIA_EKS) == "iam"
    assert kms(built, DEPLOYER, "kms:Decrypt") == "neutral"  # not directly
    assert kms(built, DEPLOYER, "kms:Decrypt", **{"kms:ViaService": f"s3.{REGION}.amazonaws.com"}) == "neutral"
    aws_resource = {"kms:GrantIsForAWSResource": "true"}
    assert kms(built, DEPLOYER, "kms:CreateGrant", **VIA_EKS, **aws_resource) == "iam"
    assert kms(built, DEPLOYER, "kms:CreateGrant", **VIA_EKS) == "neutral"  # a grant of its own
    assert kms(built, DEPLOYER, "kms:CreateGrant", **aws_resource) == "neutral"  # another service's


def test_deployer_roles_can_be_named_and_are_checked() -> None:
    stack = _stack()
    named = f"arn:aws:iam::{ACCOUNT}:role/platform-deploy"
    _cluster(stack, deployer_role_arns=[named])
    resources = Template.from_stack(stack).to_json()["Resources"]
    (key,) = (r for r in resources.values() if r["Type"] == "AWS::KMS::Key")
    statements = resolve(key["Properties"]["KeyPolicy"]["Statement"], resources)
    grant = Request("kms:CreateGrant", KEY_ARN, named, None, {**VIA_EKS, "kms:GrantIsForAWSResource": "true"})
    assert decision(statements, grant) == "iam"
    assert decision(statements, Request("kms:CreateGrant", KEY_ARN, DEPLOYER, None, grant.context)) == "neutral"
    with pytest.raises(ConfigError) as caught:
        _cluster(_stack(), deployer_role_arns=["cdk-deploy"])
    assert caught.value.codes == ["InferenceCluster.BadDeployerRoleArn"]


def test_an_unknown_deployer_is_warned() -> None:
    stack = _stack(synthesizer=LegacyStackSynthesizer())
    _cluster(stack)
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp(".*name it in deployer_role_arns.*"))
    resources = Template.from_stack(stack).to_json()["Resources"]
    (key,) = (r for r in resources.values() if r["Type"] == "AWS::KMS::Key")
    assert [s["Sid"] for s in key["Properties"]["KeyPolicy"]["Statement"]] == [
        "KeyAdministrationWithoutUse", "ClusterRoleEncryptsSecrets"]

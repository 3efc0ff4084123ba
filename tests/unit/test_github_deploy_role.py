"""GitHubDeployRole: trusted by one repository's one environment (exact StringEquals), CDK bootstrap roles only."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from aws_cdk import App, Aws, Environment, Stack
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from hyperpod_inference_iac import PreflightPolicy
from hyperpod_inference_iac.foundation.validation import ConfigError, KeyPaths, Problems

# Imported by name: the main package's __init__ exports it once merged; the module is the source either way.
mod = importlib.import_module("hyperpod_inference_iac.security.github_deploy_role")
GitHubDeployRole = mod.GitHubDeployRole

ENV = Environment(account="123456789012", region="us-west-2")
PROVIDER_ARN = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"


def _stack(env: Environment | None = ENV) -> Stack:
    return Stack(App(), "Deploy", env=env)


def _resources(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == kind]


@pytest.fixture(scope="module")
def built() -> tuple[Stack, Any, dict[str, Any]]:
    stack = _stack()
    role = GitHubDeployRole(stack, "GitHub", owner="octo-org", repository="hyperpod-platform",
                            role_name="platform-github-deploy", preflight=False)
    return stack, role, Template.from_stack(stack).to_json()


def test_trust_policy_is_exactly_one_repository_environment(built) -> None:
    _, role, template = built
    (resource,) = _resources(template, "AWS::IAM::Role")
    (provider_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::OIDCProvider"]
    assert resource["Properties"]["AssumeRolePolicyDocument"] == {
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": {"Ref": provider_id}},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                "token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
                "token.actions.githubusercontent.com:sub": "repo:octo-org/hyperpod-platform:environment:production",
            }},
        }],
    }
    assert role.subject == "repo:octo-org/hyperpod-platform:environment:production"


def test_no_wildcard_and_no_like_operator_in_the_trust(built) -> None:
    _, _, template = built
    (resource,) = _resources(template, "AWS::IAM::Role")
    trust = json.dumps(resource["Properties"]["AssumeRolePolicyDocument"])
    assert "*" not in trust and "?" not in trust
    assert "StringLike" not in trust and "ForAnyValue" not in trust


def test_provider_is_github_with_the_sts_audience(built) -> None:
    _, role, template = built
    (provider,) = _resources(template, "AWS::IAM::OIDCProvider")
    assert provider["Properties"]["Url"] == "https://token.actions.githubusercontent.com"
    assert provider["Properties"]["ClientIdList"] == ["sts.amazonaws.com"]
    # Native resource: no custom-resource Lambda (and so no Lambda findings) for the provider.
    assert not _resources(template, "AWS::Lambda::Function")
    assert role.provider is not None


def test_only_the_four_bootstrap_roles_may_be_assumed_for_one_hour(built) -> None:
    _, role, template = built
    (resource,) = _resources(template, "AWS::IAM::Role")
    props = resource["Properties"]
    assert props["MaxSessionDuration"] == 3600
    assert "ManagedPolicyArns" not in props
    assert not _resources(template, "AWS::IAM::Policy") and not _resources(template, "AWS::IAM::ManagedPolicy")
    (policy,) = props["Policies"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRole" and statement["Effect"] == "Allow"
    arns = [Stack.of(role).resolve(arn) for arn in statement["Resource"]]
    flat = [a if isinstance(a, str) else "".join(p if isinstance(p, str) else "<partition>"
                                                   for p in a["Fn::Join"][1]) for a in arns]
    assert flat == [
        f"arn:<partition>:iam::123456789012:role/cdk-hnb659fds-{kind}-123456789012-us-west-2"
        for kind in ("deploy-role", "file-publishing-role", "image-publishing-role", "lookup-role")
    ]
    assert all("*" not in arn for arn in flat)


def test_role_arn_is_known_before_deploy_when_named(built) -> None:
    stack, role, _ = built
    assert stack.resolve(role.role_arn) == {"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":iam::123456789012:role/platform-github-deploy"]]}


def test_other_environment_qualifier_and_regions() -> None:
    stack = _stack()
    GitHubDeployRole(stack, "GitHub", owner="octo", repository="infra.platform", environment="prod-eu",
                     qualifier="abc123", regions=["eu-west-1", "eu-central-1"])
    template = Template.from_stack(stack).to_json()
    (resource,) = _resources(template, "AWS::IAM::Role")
    condition = resource["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]
    assert condition["StringEquals"]["token.actions.githubusercontent.com:sub"] == \
        "repo:octo/infra.platform:environment:prod-eu"
    text = json.dumps(resource["Properties"]["Policies"])
    assert text.count("cdk-abc123-") == 8
    assert "eu-west-1" in text and "eu-central-1" in text and "us-west-2" not in text


def test_an_existing_provider_is_imported_not_created() -> None:
    stack = _stack()
    GitHubDeployRole(stack, "GitHub", owner="octo-org", repository="platform", provider_arn=PROVIDER_ARN)
    template = Template.from_stack(stack).to_json()
    assert not _resources(template, "AWS::IAM::OIDCProvider")
    (resource,) = _resources(template, "AWS::IAM::Role")
    assert resource["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Federated": PROVIDER_ARN}


def test_env_agnostic_stack_names_its_own_account_and_region() -> None:
    stack = _stack(env=None)
    role = GitHubDeployRole(stack, "GitHub", owner="octo-org", repository="platform")
    resolved = json.dumps([stack.resolve(a) for a in role.bootstrap_role_arns])
    assert stack.resolve(Aws.ACCOUNT_ID) == {"Ref": "AWS::AccountId"}
    assert resolved.count('{"Ref": "AWS::AccountId"}') == 8 and resolved.count('{"Ref": "AWS::Region"}') == 4


@pytest.mark.parametrize(("props", "code"), [
    ({"owner": "octo/org"}, "GitHubDeployRole.BadOwner"),
    ({"owner": "*"}, "GitHubDeployRole.BadOwner"),
    ({"owner": "-octo"}, "GitHubDeployRole.BadOwner"),
    ({"owner": "o" * 40}, "GitHubDeployRole.BadOwner"),
    ({"repository": "*"}, "GitHubDeployRole.BadRepository"),
    ({"repository": "octo-org/platform"}, "GitHubDeployRole.BadRepository"),
    ({"repository": ".."}, "GitHubDeployRole.BadRepository"),
    ({"repository": ""}, "GitHubDeployRole.BadRepository"),
    ({"environment": "*"}, "GitHubDeployRole.BadEnvironment"),
    ({"environment": "prod*"}, "GitHubDeployRole.BadEnvironment"),
    ({"environment": "prod:ref:refs/heads/main"}, "GitHubDeployRole.BadEnvironment"),
    ({"environment": "my env"}, "GitHubDeployRole.BadEnvironment"),
    ({"environment": ""}, "GitHubDeployRole.BadEnvironment"),
    ({"qualifier": "waytoolongqualifier"}, "GitHubDeployRole.BadQualifier"),
    ({"qualifier": "a*"}, "GitHubDeployRole.BadQualifier"),
    ({"account": "12345"}, "GitHubDeployRole.BadAccount"),
    ({"regions": []}, "GitHubDeployRole.NoRegion"),
    ({"regions": ["us-west-2", "*"]}, "GitHubDeployRole.BadRegion"),
    ({"provider_arn": "arn:aws:iam::123456789012:oidc-provider/example.com"}, "GitHubDeployRole.BadProviderArn"),
    ({"role_name": "no spaces allowed"}, "GitHubDeployRole.BadRoleName"),
])
def test_each_rule_has_its_code(props: dict[str, Any], code: str) -> None:
    base = {"owner": "octo-org", "repository": "platform"}
    with pytest.raises(ConfigError) as error:
        GitHubDeployRole(_stack(), "GitHub", **{**base, **props})
    assert error.value.codes == [code]


def test_every_problem_at_once_under_the_readers_names() -> None:
    problems = Problems()
    mod.check_github_deploy_role(problems, KeyPaths("ci.github", {"repository": "repo"}),
                                 owner="a b", repository="*", environment="*")
    assert [(p.code, p.path) for p in problems] == [
        ("GitHubDeployRole.BadOwner", "ci.github.owner"),
        ("GitHubDeployRole.BadRepository", "ci.github.repo"),
        ("GitHubDeployRole.BadEnvironment", "ci.github.environment"),
    ]


def test_a_deploy_time_subject_is_refused() -> None:
    stack = _stack()
    with pytest.raises(ConfigError) as error:
        GitHubDeployRole(stack, "GitHub", owner="octo-org", repository=Aws.STACK_NAME)
    assert error.value.codes == ["GitHubDeployRole.BadRepository"]
    assert "synth time" in str(error.value)


@pytest.mark.parametrize("provider_arn", [None, PROVIDER_ARN])
def test_cdk_nag_clean(provider_arn: str | None) -> None:
    stack = _stack()
    GitHubDeployRole(stack, "GitHub", owner="octo-org", repository="platform", provider_arn=provider_arn)
    report = AwsSolutionsChecks(stack.node.root).validate_scope(stack)
    assert [(v.rule_name, [r.resource_name for r in v.violating_resources]) for v in report.violations] == []


def _allowed_actions(template: dict[str, Any]) -> set[str]:
    """Every action the managed policies attached to the one role allow."""
    (role_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"]
    actions: set[str] = set()
    for policy in _resources(template, "AWS::IAM::ManagedPolicy"):
        if {"Ref": role_id} in policy["Properties"].get("Roles", []):
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                assert statement["Effect"] == "Allow"
                found = statement["Action"]
                actions |= {found} if isinstance(found, str) else set(found)
    return actions


def test_with_its_preflight_policy_the_role_may_make_every_call_the_preflight_makes() -> None:
    from tests.unit.test_preflight_policy import CALLS, FULL  # the preflight's calls, each stubbed in its tests
    stack = _stack()
    policy = PreflightPolicy(stack, "Preflight", **FULL)
    role = GitHubDeployRole(stack, "GitHub", owner="octo-org", repository="platform", preflight=policy)
    assert role.preflight_policy is policy
    assert set(CALLS.values()) <= _allowed_actions(Template.from_stack(stack).to_json())


def test_by_default_the_role_may_read_what_the_preflight_reads_of_every_account() -> None:
    from tests.unit.test_preflight_policy import CALLS
    stack = _stack()
    role = GitHubDeployRole(stack, "GitHub", owner="octo-org", repository="platform", qualifier="abc123")
    template = Template.from_stack(stack).to_json()
    scoped = {"lambda:GetLayerVersion", "route53:GetHostedZone", "acm:DescribeCertificate", "eks:DescribeCluster",
              "ecr:DescribeImages"}  # granted only for the resources a PreflightPolicy names
    assert set(CALLS.values()) - scoped <= _allowed_actions(template)
    assert role.preflight_policy is not None
    assert "/cdk-bootstrap/abc123/version" in json.dumps(template)
    report = AwsSolutionsChecks(stack.node.root).validate_scope(stack)
    assert [v.rule_name for v in report.violations] == []


def test_preflight_off_attaches_nothing() -> None:
    stack = _stack()
    role = GitHubDeployRole(stack, "GitHub", owner="octo-org", repository="platform", preflight=False)
    assert role.preflight_policy is None
    assert not _resources(Template.from_stack(stack).to_json(), "AWS::IAM::ManagedPolicy")

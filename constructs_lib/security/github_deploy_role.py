"""The role a GitHub Actions deployment assumes through OIDC: one repository, one environment, CDK only.

GitHub issues each job a signed OIDC token; AWS STS exchanges it for a role session
(``sts:AssumeRoleWithWebIdentity``) when the role's trust policy accepts the token's claims. This role
accepts exactly one subject, with ``StringEquals`` (never ``StringLike``, never a wildcard):

* ``token.actions.githubusercontent.com:aud = sts.amazonaws.com``
* ``token.actions.githubusercontent.com:sub = repo:<owner>/<repository>:environment:<environment>``

So only a job that runs in that repository *and* in that GitHub environment (whose required reviewers
and branch rule the repository settings enforce) gets a session; a pull request, another branch's
job without the environment, or a fork does not. The session lasts at most one hour and may do one
thing: assume the four roles of the CDK bootstrap stack (deploy, file publishing, image publishing,
lookup) of the named account and regions. CloudFormation then deploys with the bootstrap's execution
role; this role itself can create or change nothing, and reads only what the preflight reads (its
``PreflightPolicy``, unless ``preflight=False``).

The token's issuer is GitHub's OIDC provider ``token.actions.githubusercontent.com``: an account has at
most one, so a second stack (or another tool) that already created it passes its ARN instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from hyperpod_inference_iac.foundation.patterns import (
    ACCOUNT_ID,
    IAM_ROLE_NAME,
    IAM_ROLE_NAME_MAX,
    REGION,
    iam_role_arn,
)
from hyperpod_inference_iac.foundation.props import Props, listed, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved
from hyperpod_inference_iac.security.preflight_policy import PreflightPolicy

__all__ = [
    "CDK_BOOTSTRAP_ROLES",
    "CDK_DEFAULT_QUALIFIER",
    "GITHUB_OIDC_AUDIENCE",
    "GITHUB_OIDC_ISSUER",
    "GitHubDeployRole",
    "GitHubDeployRoleProps",
    "bootstrap_role_arns",
    "check_github_deploy_role",
    "github_subject",
]

GITHUB_OIDC_ISSUER = "token.actions.githubusercontent.com"
GITHUB_OIDC_AUDIENCE = "sts.amazonaws.com"
CDK_DEFAULT_QUALIFIER = "hnb659fds"
# The roles `cdk bootstrap` creates and the CDK CLI assumes (cdk-<qualifier>-<kind>-<account>-<region>).
CDK_BOOTSTRAP_ROLES = ("deploy-role", "file-publishing-role", "image-publishing-role", "lookup-role")
MAX_SESSION = Duration.hours(1)

# GitHub's own rules: a user or organization name is 1-39 letters, digits and inner hyphens (older
# names may hold two in a row; '_' appears in Enterprise Managed Users' names); a repository name is
# 1-100 letters, digits, '.', '_' and '-' (never "." or ".."). Environment names may hold more than
# that, but a subject claim is compared character for character, so this library admits only the
# unambiguous ones: no ':' (the claim's separator), no wildcard characters, no spaces.
GITHUB_OWNER = re.compile(r"^(?=.{1,39}$)[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
GITHUB_REPOSITORY = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._-]{1,100}$")
GITHUB_ENVIRONMENT = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
# The bootstrap template's own AllowedPattern for the qualifier.
CDK_QUALIFIER = re.compile(r"^[A-Za-z0-9_-]{1,10}$")
GITHUB_PROVIDER_ARN = re.compile(rf"^arn:aws[a-z-]*:iam::\d{{12}}:oidc-provider/{re.escape(GITHUB_OIDC_ISSUER)}$")


def github_subject(owner: str, repository: str, environment: str) -> str:
    """The ``sub`` claim of a job in ``environment`` of ``owner/repository`` (GitHub's default claim template)."""
    return f"repo:{owner}/{repository}:environment:{environment}"


def bootstrap_role_arns(*, partition: str, account: str, regions: Sequence[str],
                        qualifier: str = CDK_DEFAULT_QUALIFIER) -> list[str]:
    """The ARNs of the CDK bootstrap roles in ``account`` for each of ``regions``, each named in full."""
    return [iam_role_arn(partition, account, f"cdk-{qualifier}-{kind}-{account}-{region}")
            for region in regions for kind in CDK_BOOTSTRAP_ROLES]


@dataclass(frozen=True, kw_only=True)
class GitHubDeployRoleProps(Props):
    """:class:`GitHubDeployRole`'s properties (only Python code passes them: the role is a consumer's CI construct,
    not part of the app)."""

    CONSTRUCT: ClassVar[str] = "GitHubDeployRole"

    owner: str = prop(config=False, doc="The GitHub user or organization that owns the repository (`octo-org`).")
    repository: str = prop(config=False, doc="The repository's name, without the owner (`hyperpod-platform`).")
    environment: str = prop("production", config=False,
                            doc="The GitHub environment the deploy job runs in. Protect it with required reviewers "
                                "and a `main`-only deployment branch rule in the repository settings.")
    qualifier: str = prop(CDK_DEFAULT_QUALIFIER, config=False, default_doc="CDK's default",
                          doc="The CDK bootstrap qualifier of the target account (`cdk bootstrap --qualifier`).")
    account: str | None = prop(None, config=False, default_doc="this stack's account",
                               doc="The account whose bootstrap roles may be assumed.")
    regions: Sequence[str] | None = prop(None, config=False, default_doc="this stack's region",
                                         doc="The regions the app deploys to; one set of bootstrap roles each.")
    provider_arn: str | None = prop(None, config=False, default_doc="a new provider in this stack",
                                    doc="ARN of the account's existing `token.actions.githubusercontent.com` OIDC "
                                        "provider (an account has at most one), imported instead of created.")
    role_name: str | None = prop(None, config=False, default_doc="generated",
                                 doc="Fixed role name, so the ARN (the workflow's `DEPLOY_ROLE_ARN` variable) is known "
                                     "before deploy.")
    preflight: bool | PreflightPolicy = prop(
        True, config=False, default_doc="a PreflightPolicy of the account reads and the bootstrap version",
        doc="Attach the preflight's read-only [PreflightPolicy](preflight-policy.md), so the deploy job can run "
            "`python -m hyperpod_inference_iac.preflight` with this role: `True` creates one with the bootstrap "
            "version and the account reads (this stack's region); pass your own `PreflightPolicy` to add the scoped "
            "reads of the cluster, hosted zone, certificate, layer and sidecar repository; `False` attaches none.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        # A subject is compared character for character when STS checks the token, so it must be known now:
        # a deploy-time value (a token) could not be checked, and a trust policy must say whom it trusts.
        for name, value, pattern, code, rule in (
            ("owner", self.owner, GITHUB_OWNER, "GitHubDeployRole.BadOwner",
             "must be a GitHub user or organization name (1-39 letters, digits, '-', '_')"),
            ("repository", self.repository, GITHUB_REPOSITORY, "GitHubDeployRole.BadRepository",
             "must be the repository's name without its owner (1-100 letters, digits, '.', '_', '-')"),
            ("environment", self.environment, GITHUB_ENVIRONMENT, "GitHubDeployRole.BadEnvironment",
             "must be a GitHub environment name of 1-255 letters, digits, '.', '_', '-' (no wildcard, no ':')"),
        ):
            if is_unresolved(value):
                problems.add(code, at.at(name), "must be known at synth time, not a deploy-time value", value)
            elif not isinstance(value, str) or not pattern.match(value):
                problems.add(code, at.at(name), rule, value)
        qualifier, account, regions = self.qualifier, self.account, self.regions
        if is_unresolved(qualifier) or not CDK_QUALIFIER.match(qualifier):
            problems.add("GitHubDeployRole.BadQualifier", at.at("qualifier"),
                         "must be the CDK bootstrap qualifier (1-10 letters, digits, '_', '-')", qualifier)
        if account is not None and not is_unresolved(account) and not ACCOUNT_ID.match(account):
            problems.add("GitHubDeployRole.BadAccount", at.at("account"), "must be a 12-digit AWS account id",
                         account)
        if regions is not None:
            if not regions:
                problems.add("GitHubDeployRole.NoRegion", at.at("regions"),
                             "must name at least one region the CDK deploys to", list(regions))
            for index, region in enumerate(regions):
                if not is_unresolved(region) and not REGION.match(region):
                    problems.add("GitHubDeployRole.BadRegion", at.at("regions", index), "must be an AWS region",
                                 region)
        provider_arn, role_name = self.provider_arn, self.role_name
        if provider_arn is not None and not is_unresolved(provider_arn) \
                and not GITHUB_PROVIDER_ARN.match(provider_arn):
            problems.add("GitHubDeployRole.BadProviderArn", at.at("provider_arn"),
                         f"must be the ARN of the IAM OIDC provider {GITHUB_OIDC_ISSUER}", provider_arn)
        if role_name is not None and not is_unresolved(role_name) and not IAM_ROLE_NAME.match(role_name):
            problems.add("GitHubDeployRole.BadRoleName", at.at("role_name"),
                         f"must be 1-{IAM_ROLE_NAME_MAX} ASCII letters, digits and '+=,.@_-'", role_name)


def check_github_deploy_role(problems: Problems, at: KeyPaths = PROPS, **props: Any) -> None:
    """:meth:`GitHubDeployRoleProps.check` of these properties (kept for callers of 0.2.0)."""
    GitHubDeployRoleProps(**props).check(problems, at)


@real_signature
class GitHubDeployRole(Construct):
    """A role for ``cdk deploy`` from GitHub Actions, trusted by one repository's one environment only.

    Properties: :class:`GitHubDeployRoleProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``role`` (the :class:`aws_iam.Role`), ``provider`` (the :class:`aws_iam.IOidcProvider`),
    ``role_arn`` (deterministic when ``role_name`` is given), ``subject`` (the one trusted ``sub`` claim),
    ``bootstrap_role_arns`` (what the role may assume) and ``preflight_policy`` (the attached
    :class:`PreflightPolicy`, or ``None``).

    Grants: ``sts:AssumeRole`` on the bootstrap roles, each ARN named in full, and (with ``preflight``, the default)
    the preflight's read-only ``preflight_policy``; the role's sessions last at most one hour.
    """

    PROPS: ClassVar[type[Props]] = GitHubDeployRoleProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        owner: str,
        repository: str,
        environment: str = GitHubDeployRoleProps.environment,
        qualifier: str = GitHubDeployRoleProps.qualifier,
        account: str | None = GitHubDeployRoleProps.account,
        regions: Sequence[str] | None = GitHubDeployRoleProps.regions,
        provider_arn: str | None = GitHubDeployRoleProps.provider_arn,
        role_name: str | None = GitHubDeployRoleProps.role_name,
        preflight: bool | PreflightPolicy = GitHubDeployRoleProps.preflight,
    ) -> None:
        """Create the construct. Its properties (:class:`GitHubDeployRoleProps`, kept as ``self.props``):

        :param owner: The GitHub user or organization that owns the repository (`octo-org`). Default: required.
        :param repository: The repository's name, without the owner (`hyperpod-platform`). Default: required.
        :param environment: The GitHub environment the deploy job runs in. Protect it with required reviewers
            and a `main`-only deployment branch rule in the repository settings. Default: ``'production'``.
        :param qualifier: The CDK bootstrap qualifier of the target account (`cdk bootstrap --qualifier`).
            Default: ``'hnb659fds'`` (CDK's default).
        :param account: The account whose bootstrap roles may be assumed. Default: ``None`` (this stack's
            account).
        :param regions: The regions the app deploys to; one set of bootstrap roles each. Default: ``None`` (this
            stack's region).
        :param provider_arn: ARN of the account's existing `token.actions.githubusercontent.com` OIDC provider
            (an account has at most one), imported instead of created. Default: ``None`` (a new provider in this
            stack).
        :param role_name: Fixed role name, so the ARN (the workflow's `DEPLOY_ROLE_ARN` variable) is known
            before deploy. Default: ``None`` (generated).
        :param preflight: Attach the preflight's read-only [PreflightPolicy](preflight-policy.md), so the deploy
            job can run `python -m hyperpod_inference_iac.preflight` with this role: `True` creates one with the
            bootstrap version and the account reads (this stack's region); pass your own `PreflightPolicy` to
            add the scoped reads of the cluster, hosted zone, certificate, layer and sidecar repository; `False`
            attaches none. Default: ``True`` (a PreflightPolicy of the account reads and the bootstrap version).
        """
        super().__init__(scope, id)
        self.props = props = GitHubDeployRoleProps(
            owner=owner, repository=repository, environment=environment, qualifier=qualifier, account=account,
            regions=None if regions is None else listed(regions), provider_arn=provider_arn, role_name=role_name,
            preflight=preflight)
        props.raise_if_invalid(f"GitHubDeployRole {self.node.path}")
        stack = Stack.of(self)
        owner, repository, environment, qualifier = props.owner, props.repository, props.environment, props.qualifier
        provider_arn, role_name = props.provider_arn, props.role_name
        account = props.account if props.account is not None else stack.account
        regions = list(props.regions) if props.regions is not None else [stack.region]

        if provider_arn is None:
            self.provider: iam.IOidcProvider = iam.OidcProviderNative(
                self, "Provider", url=f"https://{GITHUB_OIDC_ISSUER}", client_ids=[GITHUB_OIDC_AUDIENCE])
        else:
            self.provider = iam.OidcProviderNative.from_oidc_provider_arn(self, "Provider", provider_arn)

        self.subject = github_subject(owner, repository, environment)
        principal = iam.FederatedPrincipal(
            self.provider.oidc_provider_arn,
            conditions={"StringEquals": {
                f"{GITHUB_OIDC_ISSUER}:aud": GITHUB_OIDC_AUDIENCE,
                f"{GITHUB_OIDC_ISSUER}:sub": self.subject,
            }},
            assume_role_action="sts:AssumeRoleWithWebIdentity",
        )
        self.bootstrap_role_arns = bootstrap_role_arns(partition=stack.partition, account=account,
                                                       regions=regions, qualifier=qualifier)
        self.role = iam.Role(
            self, "Role", role_name=role_name, assumed_by=principal, max_session_duration=MAX_SESSION,
            description=f"cdk deploy from GitHub Actions: {owner}/{repository}, environment {environment}",
            inline_policies={"AssumeCdkBootstrapRoles": iam.PolicyDocument(statements=[iam.PolicyStatement(
                actions=["sts:AssumeRole"], resources=self.bootstrap_role_arns,
            )])},
        )
        self.role_arn = iam_role_arn(stack.partition, stack.account, role_name) if role_name \
            else self.role.role_arn
        self.preflight_policy: PreflightPolicy | None = None
        if props.preflight is not False:
            self.preflight_policy = props.preflight if isinstance(props.preflight, PreflightPolicy) \
                else PreflightPolicy(self, "Preflight", bootstrap_qualifier=qualifier)
            self.preflight_policy.policy.attach_to_role(self.role)

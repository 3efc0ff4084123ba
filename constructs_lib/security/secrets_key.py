"""Who may decrypt the platform's secrets: a customer managed key for Secrets Manager whose key policy is rendered
from the secrets it encrypts and the roles that read them, in the style of the data perimeter
(:mod:`~hyperpod_inference_iac.security.data_perimeter`).

Secrets Manager encrypts each secret version under a data key that it has the KMS key generate, and decrypts it
on ``GetSecretValue``, always with the caller's permissions and the encryption context
``{"SecretARN": <the secret's ARN>, "SecretVersionId": <the version>}``. A secret's resource policy and IAM decide
who may *call* ``GetSecretValue``; with this key, the key policy decides independently who may *decrypt*, and
CloudTrail records every decrypt with the caller. The key policy:

* lets the account administer the key (the data perimeter's ``KEY_ADMIN_ACTIONS``: no ``kms:CreateGrant``, no use
  of the key);
* lets principals of the account that IAM allows write secret values (``kms:GenerateDataKey``, ``kms:Encrypt``),
  only through Secrets Manager in this Region (``kms:ViaService``) and only for the secrets registered here
  (``kms:EncryptionContext:SecretARN``). Writing a value reveals none: ``put-secret-value`` of the Hugging Face
  token and the API key runbook need it;
* lets the deployer (the CloudFormation execution role of CDK's default synthesizer, or the roles given) also
  decrypt, under the same conditions: the Secrets Manager API reference requires ``kms:GenerateDataKey`` and
  ``kms:Decrypt`` for ``CreateSecret`` with a customer managed key, and ``kms:GenerateDataKey``, ``kms:Encrypt``
  and ``kms:Decrypt`` for ``UpdateSecret`` (which re-encrypts the current versions when the key changes). That
  role can rewrite this policy anyway (docs/security.md);
* lets each secret's readers decrypt, through Secrets Manager, that secret only: the library's reader roles by
  ``aws:PrincipalArn`` under the account principal (their IAM policy, which the same grant writes, must allow too),
  roles whose IAM policies are managed elsewhere (API key clients) named by the policy itself.

Nobody else decrypts, whatever IAM allows: an administrator's ``kms:*`` and ``secretsmanager:*`` read no value.

Secrets are registered by name (:meth:`SecretsKeyGuard.admit_secret`): the key policy matches the ARN Secrets
Manager gives them, ``<name>-`` and six characters, so the key needs no reference to the secret (which refers to
the key: a reference back would be a cycle).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aws_cdk import Annotations, DefaultStackSynthesizer, Lazy, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct, IConstruct

from hyperpod_inference_iac.foundation.cdk_types import (
    cfn_child,
)
from hyperpod_inference_iac.foundation.patterns import (
    account_root_arn,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.security.data_perimeter import (
    _accounts,
    _Produce,
    key_administration,
    principal_arn,
)

SECRET_ARN_CONTEXT = "kms:EncryptionContext:SecretARN"
#: what writing a secret value needs of the key (a new version; the re-encryption when a secret changes key)
SECRET_WRITE_ACTIONS = ("kms:Encrypt", "kms:GenerateDataKey")
#: what CloudFormation needs: CreateSecret and UpdateSecret with a customer managed key also decrypt
DEPLOYER_ACTIONS = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey")
SECRET_READ_ACTIONS = ("kms:Decrypt",)


def secret_arn_pattern(scope: IConstruct, secret_name: str) -> str:
    """The ARN Secrets Manager gives the secret ``secret_name`` in ``scope``'s stack (``-`` and six random
    characters after the name), as a ``StringLike`` pattern."""
    stack = Stack.of(scope)
    return f"arn:{stack.partition}:secretsmanager:{stack.region}:{stack.account}:secret:{secret_name}-??????"


def kms_through_secrets_manager(region: str, secret_arns: Sequence[str], *,
                                in_key_policy: bool = False) -> dict[str, Any]:
    """Conditions that limit use of a key to Secrets Manager in ``region`` working on ``secret_arns`` (patterns).

    In an identity policy the key must also be in the caller's account (as :func:`kms_through_s3`)."""
    conditions: dict[str, Any] = {
        "StringEquals": {"kms:ViaService": f"secretsmanager.{region}.amazonaws.com"},
        "StringLike": {SECRET_ARN_CONTEXT: list(secret_arns)},
    }
    if not in_key_policy:
        conditions["StringEquals"]["aws:ResourceAccount"] = "${aws:PrincipalAccount}"
    return conditions


@dataclass
class _SecretReaders:
    name: str
    readers: list[str] = field(default_factory=list)  # IAM enabled: the library writes their IAM policy
    named: list[str] = field(default_factory=list)  # named by the key policy itself


class SecretsKeyGuard:
    """The key policy of one customer managed key for Secrets Manager, rendered from the secrets and readers
    registered on it (see the module docstring).

    :param key: the key (created in this app: its policy is rendered at synthesis).
    :param deployer_role_arns: the roles CloudFormation deploys the secrets with. @default the CloudFormation
        execution role of the stack's ``DefaultStackSynthesizer``
    """

    def __init__(self, key: kms.Key, *, deployer_role_arns: Sequence[str] | None = None) -> None:
        self.key = key
        self._secrets: dict[str, _SecretReaders] = {}
        self._deployers = list(deployer_role_arns) if deployer_role_arns is not None \
            else default_deployer_role_arns(key)
        _GUARDS.setdefault(key.node.root, {})[key.key_arn] = self
        cfn_key = cfn_child(key, kms.CfnKey)
        cfn_key.add_property_override("KeyPolicy", Lazy.any(_Produce(self.policy)))

    @property
    def deployer_role_arns(self) -> tuple[str, ...]:
        return tuple(self._deployers)

    def secrets(self) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """Each registered secret's name: (readers, named readers)."""
        return {name: (tuple(s.readers), tuple(s.named)) for name, s in self._secrets.items()}

    def admit_secret(self, secret_name: str) -> None:
        """Let the secret ``secret_name`` (of the key's stack) be written with the key and deployed."""
        self._secrets.setdefault(secret_name, _SecretReaders(secret_name))

    def admit_reader(self, secret_name: str, principal: str, *, named: bool = False) -> None:
        """Let ``principal`` (a role ARN) decrypt ``secret_name`` through Secrets Manager.

        By default the statement's principal is the account with an ``aws:PrincipalArn`` condition: it only
        enables the principal's IAM policy, which the library's grant wrote, and may name a role that does not
        exist yet. ``named``: the key policy names the role itself and grants on its own, for roles whose IAM
        policies are managed elsewhere; such a role must exist when the policy is set."""
        self.admit_secret(secret_name)
        entry = self._secrets[secret_name]
        members = entry.named if named else entry.readers
        if principal not in members:
            members.append(principal)

    def policy(self) -> dict[str, Any]:
        stack = Stack.of(self.key)
        root = account_root_arn(stack.partition, stack.account)
        statements: list[dict[str, Any]] = [key_administration(stack)]
        every_secret = [secret_arn_pattern(self.key, name) for name in self._secrets]
        if every_secret:
            statements.append({
                "Sid": "WriteSecretsThroughSecretsManager", "Effect": "Allow", "Principal": {"AWS": root},
                "Action": list(SECRET_WRITE_ACTIONS), "Resource": "*",
                "Condition": kms_through_secrets_manager(stack.region, every_secret, in_key_policy=True)})
            if self._deployers:
                conditions = kms_through_secrets_manager(stack.region, every_secret, in_key_policy=True)
                conditions["ArnLike"] = {"aws:PrincipalArn": list(self._deployers)}
                statements.append({
                    "Sid": "DeployerCreatesAndReencryptsSecrets", "Effect": "Allow",
                    "Principal": {"AWS": _accounts(stack, self._deployers)}, "Action": list(DEPLOYER_ACTIONS),
                    "Resource": "*", "Condition": conditions})
        seen: dict[str, int] = {}
        for entry in self._secrets.values():
            label = _label(entry.name)
            seen[label] = seen.get(label, 0) + 1
            label = label if seen[label] == 1 else f"{label}{seen[label]}"
            secret = [secret_arn_pattern(self.key, entry.name)]
            if entry.readers:
                conditions = kms_through_secrets_manager(stack.region, secret, in_key_policy=True)
                conditions["ArnLike"] = {"aws:PrincipalArn": list(entry.readers)}
                statements.append({
                    "Sid": f"Read{label}ThroughSecretsManager", "Effect": "Allow",
                    "Principal": {"AWS": _accounts(stack, entry.readers)}, "Action": list(SECRET_READ_ACTIONS),
                    "Resource": "*", "Condition": conditions})
            if entry.named:
                statements.append({
                    "Sid": f"Read{label}ThroughSecretsManagerForNamedRoles", "Effect": "Allow",
                    "Principal": {"AWS": entry.named if len(entry.named) > 1 else entry.named[0]},
                    "Action": list(SECRET_READ_ACTIONS), "Resource": "*",
                    "Condition": kms_through_secrets_manager(stack.region, secret, in_key_policy=True)})
        return {"Version": "2012-10-17", "Statement": statements}


@dataclass(frozen=True, kw_only=True)
class SecretsKeyProps(Props):
    """:class:`SecretsKey`'s properties (only Python code passes them: the app's ``secrets.customerManagedKey``
    decides whether it makes one, with the alias ``alias/<project>/secrets``)."""

    CONSTRUCT: ClassVar[str] = "SecretsKey"

    alias: str | None = prop(None, config=False, default_doc="no alias",
                             doc="The key's alias, e.g. `alias/llm-platform/secrets`.")
    deployer_role_arns: Sequence[str] | None = prop(
        None, config=False,
        default_doc="the CloudFormation execution role of the stack's `DefaultStackSynthesizer`: "
                    "`cdk-<qualifier>-cfn-exec-role-<account>-<region>`",
        doc="The roles CloudFormation creates and updates the secrets with (they may also decrypt through Secrets "
            "Manager, which `CreateSecret` and `UpdateSecret` require). With another synthesizer, name the deploying "
            "role, or the first deploy fails creating the secrets (warned: `SecretsKey:noDeployer`).")
    removal_policy: RemovalPolicy = prop(
        RemovalPolicy.RETAIN, config=False,
        doc="What happens to the key when removed from the stack. The secrets are retained, and a secret without its "
            "key cannot be read.")


@real_signature
class SecretsKey(Construct):
    """A customer managed key for Secrets Manager secrets, with rotation, whose key policy names who may decrypt
    which secret (:class:`SecretsKeyGuard`). Pass ``key`` as the ``encryption_key`` of
    :class:`~hyperpod_inference_iac.HuggingFaceTokenSync` and :class:`~hyperpod_inference_iac.ApiKeySync`: they
    register their secrets, readers and clients on it.

    Properties: :class:`SecretsKeyProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``key``, ``guard``.
    """

    PROPS: ClassVar[type[Props]] = SecretsKeyProps

    def __init__(self, scope: Construct, id: str, *, alias: str | None = SecretsKeyProps.alias,
                 deployer_role_arns: Sequence[str] | None = SecretsKeyProps.deployer_role_arns,
                 removal_policy: RemovalPolicy = SecretsKeyProps.removal_policy) -> None:
        """Create the construct. Its properties (:class:`SecretsKeyProps`, kept as ``self.props``):

        :param alias: The key's alias, e.g. `alias/llm-platform/secrets`. Default: ``None`` (no alias).
        :param deployer_role_arns: The roles CloudFormation creates and updates the secrets with (they may also
            decrypt through Secrets Manager, which `CreateSecret` and `UpdateSecret` require). With another
            synthesizer, name the deploying role, or the first deploy fails creating the secrets (warned:
            `SecretsKey:noDeployer`). Default: ``None`` (the CloudFormation execution role of the stack's
            ``DefaultStackSynthesizer``: ``cdk-<qualifier>-cfn-exec-role-<account>-<region>``).
        :param removal_policy: What happens to the key when removed from the stack. The secrets are retained,
            and a secret without its key cannot be read. Default: ``RemovalPolicy.RETAIN``.
        """
        super().__init__(scope, id)
        self.props = props = SecretsKeyProps(
            alias=alias, deployer_role_arns=listed(deployer_role_arns),
            removal_policy=removal_policy)
        props.raise_if_invalid(f"SecretsKey {self.node.path}")
        self.key = kms.Key(self, "Key", alias=props.alias, enable_key_rotation=True,
                           removal_policy=props.removal_policy,
                           description="Encrypts the platform's Secrets Manager secrets (Hugging Face token, API keys)")
        self.guard = SecretsKeyGuard(self.key, deployer_role_arns=props.deployer_role_arns)
        if not self.guard.deployer_role_arns:
            Annotations.of(self).add_warning_v2(
                "@hyperpod-inference-iac/SecretsKey:noDeployer",
                "the stack does not use CDK's DefaultStackSynthesizer, so the role CloudFormation deploys with is "
                "unknown: name it in deployer_role_arns (CreateSecret with this key needs kms:GenerateDataKey and "
                "kms:Decrypt through Secrets Manager)")


def secrets_key_guard(key: kms.IKey) -> SecretsKeyGuard | None:
    """The guard of ``key`` if it is a :class:`SecretsKey`'s (or guarded by a :class:`SecretsKeyGuard`)."""
    return _GUARDS.get(key.node.root, {}).get(key.key_arn)


def encrypt_secret(scope: Construct, key: kms.IKey, secret_name: str, *, named_readers: Sequence[str] = ()) -> None:
    """Register the secret ``secret_name`` on ``key``'s policy, with the readers the policy names itself (their IAM
    policies are not ours). A key without a guard (imported, or a plain ``kms.Key``) is warned about: its own
    policy must allow what this library cannot write there."""
    guard = secrets_key_guard(key)
    if guard is not None:
        guard.admit_secret(secret_name)
        for arn in named_readers:
            guard.admit_reader(secret_name, arn, named=True)
        return
    Annotations.of(scope).add_warning_v2(
        "@hyperpod-inference-iac/SecretsKey:unmanagedKeyPolicy",
        "the secret's encryption_key is not a SecretsKey, so its key policy is not written here: it must let the "
        "reader role (and any client roles) kms:Decrypt through Secrets Manager, and the deploying role "
        "kms:GenerateDataKey and kms:Decrypt; a kms.Key of this app also gets CDK's own grant to the whole account "
        "through Secrets Manager, which leaves the key no gate of its own")


def grant_secret_read(grantee: iam.IGrantable, secret: secretsmanager.ISecret, secret_name: str,
                      key: kms.IKey | None) -> None:
    """What a reader needs: ``GetSecretValue`` and ``DescribeSecret`` on ``secret`` and, with a customer managed
    ``key``, ``kms:Decrypt`` only through Secrets Manager for that secret (listed on a guarded key's policy)."""
    if key is None:
        secret.grant_read(grantee)
        return
    # Not secret.grant_read: with a key it adds kms:Decrypt through Secrets Manager for every secret of the key.
    iam.Grant.add_to_principal(grantee=grantee, resource_arns=[secret.secret_arn],
                               actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"])
    scope = secret if isinstance(secret, Construct) else key
    iam.Grant.add_to_principal(
        grantee=grantee, actions=list(SECRET_READ_ACTIONS), resource_arns=[key.key_arn],
        conditions=kms_through_secrets_manager(Stack.of(scope).region, [secret_arn_pattern(scope, secret_name)]))
    guard = secrets_key_guard(key)
    if guard is not None:
        arn = principal_arn(grantee, key)
        if arn is None:
            Annotations.of(grantee if isinstance(grantee, Construct) else key).add_error(
                f"the secret {secret_name} is encrypted with {key.node.path}, whose policy must name this reader: "
                f"give the role a fixed role_name, or create it in the key's stack")
        else:
            guard.admit_reader(secret_name, arn)


# -- internals -------------------------------------------------------------------------------------------
_GUARDS: weakref.WeakKeyDictionary[Any, dict[str, SecretsKeyGuard]] = weakref.WeakKeyDictionary()


def default_deployer_role_arns(scope: IConstruct) -> list[str]:
    """The role CloudFormation deploys ``scope``'s stack with: the CloudFormation execution role of CDK's
    ``DefaultStackSynthesizer`` (``cdk-<qualifier>-cfn-exec-role-...``), none with another synthesizer."""
    stack = Stack.of(scope)
    synthesizer = stack.synthesizer
    if not isinstance(synthesizer, DefaultStackSynthesizer):
        return []
    arn = synthesizer.cloud_formation_execution_role_arn
    for placeholder, value in (("${AWS::Partition}", stack.partition), ("${AWS::AccountId}", stack.account),
                               ("${AWS::Region}", stack.region)):
        arn = arn.replace(placeholder, value)
    return [arn]


def _label(secret_name: str) -> str:
    """``llm-platform/huggingface-token`` -> ``LlmPlatformHuggingfaceToken`` (statement ids are alphanumeric)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", secret_name) if part) \
        or "Secret"

"""Who may touch captured prompts: bucket and key policies rendered from one allowlist.

A *guarded* bucket (the capture and TLS buckets of :class:`~hyperpod_inference_iac.CaptureStorage`) keeps
the list of principals that may read, write or delete its objects, each limited to key prefixes; a guarded
key keeps the list of principals that may use it through S3, per bucket. Every grant the library makes on a
guarded bucket or key (:mod:`hyperpod_inference_iac.security.s3_access`: ``grant_object_reads``,
``grant_object_writes``, ``grant_key_through_s3``, ``admit_objects``) records its principal here, so the
IAM grant and the resource policies that let it work are derived from the same call and cannot disagree.
At synthesis:

* the bucket policy denies object reads, writes and deletes to every principal that is not listed
  (``aws:PrincipalArn``) and, for each listed principal, every object access outside its own prefixes.
  An administrator's IAM policy alone reads nothing; a reader with a broad S3 policy still reads only
  ``curated/``. AWS services acting as themselves (S3 log delivery, ELB log delivery) are not subject to
  the allowlist: they can act only where a statement of this same policy allows them, by service principal;
* the key policy lets the account administer the key (explicit actions: no ``kms:CreateGrant``, no use of
  the key) and lets only the listed principals use it, only through S3 in this region
  (``kms:ViaService``), only for the objects of the bucket each was admitted on (the S3 encryption context).

Principals are named by ARN. A role in the bucket's own stack may be a token; a role in another stack must
have a fixed name (its ARN is then written as a plain string: no cross-stack export, no dependency cycle,
and the role need not exist when the policy is created), otherwise synthesis fails naming the role.

What this cannot stop (docs/security.md): a principal allowed ``s3:PutBucketPolicy`` or
``kms:PutKeyPolicy`` can rewrite the policies (the account root can always delete a bucket policy: that
is the break-glass path), and AWS CloudTrail records that it did.
"""

from __future__ import annotations

import enum
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsii
from aws_cdk import Annotations, Aspects, IAspect, IStableAnyProducer, Lazy, Stack, Token, region_info
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from hyperpod_inference_iac.foundation.cdk_types import cfn_child
from hyperpod_inference_iac.foundation.patterns import account_root_arn


def kms_through_s3(region: str, bucket_arn: str, *, in_key_policy: bool = False,
                   prefixes: Sequence[str] = ()) -> dict[str, Any]:
    """Conditions that limit use of a key to S3 in ``region`` working on ``bucket_arn``'s objects.

    In an identity policy the key must also be in the caller's account; in a key policy that is
    always true and ``kms:CallerAccount`` (set by the key policy's own statements) takes its place.

    ``prefixes`` (key prefixes such as ``curated/``) narrow the encryption context to the objects under them.
    S3 passes the object's ARN as the context only for objects written without an S3 Bucket Key; with a bucket
    key it passes the bucket's ARN, so a prefix condition refuses every object of a bucket that uses one (the
    capture bucket uses none, for this reason).
    """
    context = [f"{bucket_arn}/{prefix}*" for prefix in prefixes] or [bucket_arn, f"{bucket_arn}/*"]
    conditions: dict[str, Any] = {
        "StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"},
        "StringLike": {"kms:EncryptionContext:aws:s3:arn": context},
    }
    if not in_key_policy:
        conditions["StringEquals"]["aws:ResourceAccount"] = "${aws:PrincipalAccount}"
    return conditions


class ObjectAccess(enum.Enum):
    """What a principal may do with the objects under a prefix of a guarded bucket."""

    READ = "read"
    WRITE = "write"
    DELETE = "delete"


# The actions each kind of access covers in the bucket policy's denies: wildcards on purpose (a deny
# must also cover the variants: GetObjectVersion, GetObjectAttributes, PutObjectTagging, DeleteObjectVersion).
DENIED_ACTIONS: dict[ObjectAccess, tuple[str, ...]] = {
    ObjectAccess.READ: ("s3:GetObject*",),
    ObjectAccess.WRITE: ("s3:PutObject*", "s3:RestoreObject"),
    ObjectAccess.DELETE: ("s3:DeleteObject*",),
}
# Key administration without key use and without grants (kms:Create* would include kms:CreateGrant).
KEY_ADMIN_ACTIONS = (
    "kms:CancelKeyDeletion", "kms:CreateAlias", "kms:DeleteAlias", "kms:DescribeKey", "kms:DisableKey",
    "kms:DisableKeyRotation", "kms:EnableKey", "kms:EnableKeyRotation", "kms:GetKeyPolicy",
    "kms:GetKeyRotationStatus", "kms:ListAliases", "kms:ListGrants", "kms:ListKeyPolicies", "kms:ListKeyRotations",
    "kms:ListResourceTags", "kms:PutKeyPolicy", "kms:RevokeGrant", "kms:RotateKeyOnDemand",
    "kms:ScheduleKeyDeletion", "kms:TagResource", "kms:UntagResource", "kms:UpdateAlias",
    "kms:UpdateKeyDescription",
)
ELB_LOG_DELIVERY = "logdelivery.elasticloadbalancing.amazonaws.com"
SSE_HEADER = "s3:x-amz-server-side-encryption"
SSE_KEY_HEADER = "s3:x-amz-server-side-encryption-aws-kms-key-id"


class KeyRequirement(enum.Enum):
    """How a guarded bucket insists on its KMS key for writes."""

    #: the bucket's default encryption is the key: a write may omit the headers, but may not name another
    #: key or another kind of encryption.
    DEFAULT = "default"
    #: the bucket's default is SSE-S3 (ALB access logs can be delivered only to SSE-S3): every write except
    #: AWS log delivery must name the key (``x-amz-server-side-encryption-aws-kms-key-id``).
    EXPLICIT = "explicit"


@dataclass(frozen=True)
class Admission:
    principal: str  # role ARN (a string, or a token of the guarded bucket's own stack)
    access: ObjectAccess
    prefix: str  # key prefix; "" is the whole bucket; may hold '*'


class BucketGuard:
    """The allowlist of one bucket and the policy statements rendered from it (see the module docstring).

    :param bucket: the bucket (created in this app: its policy is rendered at synthesis).
    :param arn: the ARN grants name it by (a literal when the bucket has a fixed name).
    :param label: a word for the policies' statement ids, e.g. ``Captures``.
    """

    def __init__(self, bucket: s3.Bucket, *, arn: str, label: str) -> None:
        self.bucket = bucket
        self.arn = arn
        self.label = label
        self._admissions: list[Admission] = []
        self._listed_allows: list[iam.PolicyStatement] = []
        self._service_writes: list[tuple[str, str]] = []
        self._key_ids: tuple[str, ...] = ()
        self._key_requirement = KeyRequirement.DEFAULT
        self._exempt_writers: list[str] = []
        _registry(bucket).buckets[bucket.bucket_arn] = self
        _registry(bucket).buckets[arn] = self
        Aspects.of(bucket).add(_RenderBucketPolicy(self))

    @property
    def admissions(self) -> tuple[Admission, ...]:
        return tuple(self._admissions)

    def principals(self) -> list[str]:
        return list(dict.fromkeys(admission.principal for admission in self._admissions))

    def admit(self, principal: str, access: ObjectAccess, prefix: str = "") -> None:
        """Let ``principal`` (a role ARN) do ``access`` under ``prefix`` (its IAM policy must allow it too)."""
        admission = Admission(principal, access, prefix)
        if admission not in self._admissions:
            self._admissions.append(admission)

    def admit_all(self, principal: str) -> None:
        for access in ObjectAccess:
            self.admit(principal, access)

    def allow_in_bucket_policy(self, principal: str, prefix: str, *, write: bool = False) -> None:
        """Read access under ``prefix`` granted by the bucket policy itself (for roles whose IAM policies are
        managed elsewhere, e.g. analysts): ``GetObject`` there and ``ListBucket`` of keys under it. ``write``: also
        ``PutObject`` and ``AbortMultipartUpload`` there (Athena's query results, written with the caller's
        credentials)."""
        self.admit(principal, ObjectAccess.READ, prefix)
        actions = ["s3:GetObject", "s3:GetObjectVersion"]
        if write:
            self.admit(principal, ObjectAccess.WRITE, prefix)
            actions += ["s3:PutObject", "s3:AbortMultipartUpload"]
        self._listed_allows.append(iam.PolicyStatement(
            principals=[iam.ArnPrincipal(principal)], actions=actions,
            resources=[f"{self.bucket.bucket_arn}/{prefix}*"]))
        self._listed_allows.append(iam.PolicyStatement(
            principals=[iam.ArnPrincipal(principal)], actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix.rstrip("/"), f"{prefix}*"]}} if prefix else None))

    def accept_load_balancer_logs(self, prefix: str) -> None:
        """Let Elastic Load Balancing deliver access logs under ``prefix`` (which ends in
        ``AWSLogs/<account>/``): the log delivery service principal, and in Regions older than August 2022
        also the Region's ELB account, which is then listed as a writer of exactly that prefix."""
        stack = Stack.of(self.bucket)
        self._service_writes.append((ELB_LOG_DELIVERY, prefix))
        account = _elb_account(stack)
        if account is not None:
            principal = account_root_arn(stack.partition, account)
            self.admit(principal, ObjectAccess.WRITE, prefix)
            self._exempt_writers.append(principal)
            self._listed_allows.append(iam.PolicyStatement(
                sid=f"{self.label}RegionalElbAccountWritesAccessLogs", principals=[iam.ArnPrincipal(principal)],
                actions=["s3:PutObject"], resources=[f"{self.bucket.bucket_arn}/{prefix}*"]))

    def require_key(self, key_ids: Sequence[str], requirement: KeyRequirement) -> None:
        """Deny writes encrypted other than with one of ``key_ids`` (the key's ARN and its alias ARN: S3
        compares the header as sent)."""
        self._key_ids = tuple(key_ids)
        self._key_requirement = requirement

    @property
    def requires_named_key(self) -> bool:
        """Every write must name one of the key ids (``KeyRequirement.EXPLICIT``: the default is SSE-S3)."""
        return bool(self._key_ids) and self._key_requirement is KeyRequirement.EXPLICIT

    # -- rendering ----------------------------------------------------------------------------------
    def statements(self) -> list[iam.PolicyStatement]:
        objects = f"{self.bucket.bucket_arn}/*"
        everything = [action for actions in DENIED_ACTIONS.values() for action in actions]
        principals = self.principals()
        unlisted: dict[str, Any] = {"BoolIfExists": {"aws:PrincipalIsAWSService": "false"}}
        if principals:
            unlisted["ArnNotLike"] = {"aws:PrincipalArn": principals}
        statements = [iam.PolicyStatement(
            sid=f"{self.label}OnlyListedPrincipals", effect=iam.Effect.DENY, principals=[iam.StarPrincipal()],
            actions=everything, resources=[objects], conditions=unlisted)]
        for access in ObjectAccess:
            groups: dict[tuple[str, ...], list[str]] = {}
            for principal in principals:
                prefixes = tuple(sorted({a.prefix for a in self._admissions
                                         if a.principal == principal and a.access is access}))
                if "" not in prefixes:
                    groups.setdefault(prefixes, []).append(principal)
            numbered = 0
            for prefixes, members in groups.items():
                verb = access.value.capitalize()
                numbered += bool(prefixes)
                statement = iam.PolicyStatement(
                    sid=f"{self.label}{verb}OnlyUnderOwnPrefixes{numbered}" if prefixes else f"{self.label}No{verb}",
                    effect=iam.Effect.DENY, principals=[iam.StarPrincipal()], actions=list(DENIED_ACTIONS[access]),
                    conditions={"ArnLike": {"aws:PrincipalArn": members}})
                if prefixes:
                    statement.add_not_resources(*(f"{self.bucket.bucket_arn}/{prefix}*" for prefix in prefixes))
                else:
                    statement.add_resources(objects)
                statements.append(statement)
        statements += self._encryption_statements(objects)
        for service, prefix in self._service_writes:
            statements.append(iam.PolicyStatement(
                sid=f"{self.label}ElbDeliversAccessLogs", principals=[iam.ServicePrincipal(service)],
                actions=["s3:PutObject"], resources=[f"{self.bucket.bucket_arn}/{prefix}*"]))
        return statements + self._listed_allows

    def _encryption_statements(self, objects: str) -> list[iam.PolicyStatement]:
        if not self._key_ids:
            return []
        key_ids = list(self._key_ids)
        statements = [iam.PolicyStatement(
            sid=f"{self.label}NoOtherKey", effect=iam.Effect.DENY, principals=[iam.StarPrincipal()],
            actions=["s3:PutObject"], resources=[objects],
            # (A negated operator is true for a missing key: "present and different" needs the Null test.)
            conditions={"StringNotEquals": {SSE_KEY_HEADER: key_ids}, "Null": {SSE_KEY_HEADER: "false"}})]
        if self._key_requirement is KeyRequirement.DEFAULT:
            # No headers: the default (this key). Headers: aws:kms with this key, never aws/s3 or AES256.
            statements.append(iam.PolicyStatement(
                sid=f"{self.label}NoOtherEncryption", effect=iam.Effect.DENY, principals=[iam.StarPrincipal()],
                actions=["s3:PutObject"], resources=[objects],
                conditions={"StringNotEquals": {SSE_HEADER: "aws:kms"}, "Null": {SSE_HEADER: "false"}}))
            statements.append(iam.PolicyStatement(
                sid=f"{self.label}NoAwsManagedKey", effect=iam.Effect.DENY, principals=[iam.StarPrincipal()],
                actions=["s3:PutObject"], resources=[objects],
                conditions={"StringEquals": {SSE_HEADER: "aws:kms"}, "Null": {SSE_KEY_HEADER: "true"}}))
        else:
            conditions: dict[str, Any] = {"Null": {SSE_KEY_HEADER: "true"},
                                          "BoolIfExists": {"aws:PrincipalIsAWSService": "false"}}
            if self._exempt_writers:
                conditions["ArnNotLike"] = {"aws:PrincipalArn": list(self._exempt_writers)}
            statements.append(iam.PolicyStatement(
                sid=f"{self.label}WritesNameTheKey", effect=iam.Effect.DENY, principals=[iam.StarPrincipal()],
                actions=["s3:PutObject"], resources=[objects], conditions=conditions))
        return statements


class KeyGuard:
    """The key policy of one customer-managed key, rendered from the principals admitted to use it."""

    def __init__(self, key: kms.Key) -> None:
        self.key = key
        self._uses: dict[str, dict[str, _KeyUse]] = {}  # bucket ARN -> principal -> actions and prefixes
        self._named: set[str] = set()  # principals the key policy names themselves (no IAM policy of ours)
        self._grant_makers: list[str] = []
        _registry(key).keys[key.key_arn] = self
        cfn_key = cfn_child(key, kms.CfnKey)
        cfn_key.add_property_override("KeyPolicy", Lazy.any(_Produce(self.policy)))

    def admit(self, principal: str, actions: Iterable[str], bucket_arn: str, *, named: bool = False,
              prefixes: Sequence[str] = ()) -> None:
        """Let ``principal`` use the key with ``actions`` through S3 for ``bucket_arn``'s objects.

        By default the statement's principal is the account with an ``aws:PrincipalArn`` condition: it can
        name roles that do not exist yet (a key policy naming a missing role is rejected), and, like every
        account-principal statement, it only *enables* the principal's IAM policy, which the library's grant
        wrote. ``named``: the key policy names the role itself and grants on its own, for roles whose IAM
        policies are managed elsewhere (readers given by ARN); such a role must exist when the policy is set.

        ``prefixes``: only for the objects under these key prefixes (the encryption context is the object's ARN
        when the bucket uses no S3 Bucket Key: :func:`~hyperpod_inference_iac.security.s3_access.kms_through_s3`). A
        principal admitted for the whole bucket once keeps the whole bucket.
        """
        guard = _registry(self.key).buckets.get(bucket_arn)
        bucket_arn = guard.arn if guard is not None else bucket_arn  # one statement per bucket, however named
        use = self._uses.setdefault(bucket_arn, {}).setdefault(principal, _KeyUse(set(), set(prefixes)))
        use.actions.update(actions)
        if use.prefixes is not None:
            use.prefixes = use.prefixes | set(prefixes) if prefixes else None
        if named:
            self._named.add(principal)

    def allow_grants_for_aws_resources(self, principal: str) -> None:
        """``kms:CreateGrant`` for ``principal``, only when an AWS service creates the grant for a resource
        it manages (``kms:GrantIsForAWSResource``); no one else may create grants."""
        if principal not in self._grant_makers:
            self._grant_makers.append(principal)

    def principals(self, bucket_arn: str) -> dict[str, frozenset[str]]:
        return {p: frozenset(use.actions) for p, use in self._uses.get(bucket_arn, {}).items()}

    def prefixes(self, bucket_arn: str) -> dict[str, frozenset[str] | None]:
        """Each admitted principal's key prefixes (None: the whole bucket)."""
        return {p: None if use.prefixes is None else frozenset(use.prefixes)
                for p, use in self._uses.get(bucket_arn, {}).items()}

    def policy(self) -> dict[str, Any]:
        stack = Stack.of(self.key)
        statements: list[dict[str, Any]] = [key_administration(stack)]
        seen: dict[str, int] = {}
        for index, (bucket_arn, uses) in enumerate(self._uses.items(), start=1):
            guard = _registry(self.key).buckets.get(bucket_arn)
            label = guard.label if guard is not None else f"Bucket{index}"
            groups: dict[tuple[tuple[str, ...], bool, tuple[str, ...]], list[str]] = {}
            for principal, use in uses.items():
                prefixes = tuple(sorted(use.prefixes or ()))
                groups.setdefault((tuple(sorted(use.actions)), principal in self._named, prefixes), []).append(
                    principal)
            for (actions, named, prefixes), members in groups.items():
                kind = "Write" if any(a.startswith("kms:GenerateDataKey") for a in actions) else "Read"
                sid = f"{label}{kind}{_prefix_label(prefixes)}ThroughS3{'ForNamedRoles' if named else ''}"
                seen[sid] = seen.get(sid, 0) + 1
                sid = sid if seen[sid] == 1 else f"{sid}{seen[sid]}"
                conditions = kms_through_s3(stack.region, bucket_arn, in_key_policy=True, prefixes=prefixes)
                if named:
                    principal_block: Any = members if len(members) > 1 else members[0]
                else:
                    conditions["ArnLike"] = {"aws:PrincipalArn": members}
                    principal_block = _accounts(stack, members)
                statements.append({
                    "Sid": sid, "Effect": "Allow", "Principal": {"AWS": principal_block},
                    "Action": list(actions), "Resource": "*", "Condition": conditions})
        if self._grant_makers:
            statements.append({
                "Sid": "GrantsOnlyForAwsResources", "Effect": "Allow",
                "Principal": {"AWS": _accounts(stack, self._grant_makers)},
                "Action": ["kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"], "Resource": "*",
                "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"},
                              "ArnLike": {"aws:PrincipalArn": list(self._grant_makers)}}})
        return {"Version": "2012-10-17", "Statement": statements}


def key_administration(stack: Stack) -> dict[str, Any]:
    """The first statement of every key policy the library renders: the account administers the key
    (:data:`KEY_ADMIN_ACTIONS`: no ``kms:CreateGrant``, no use of the key)."""
    return {"Sid": "KeyAdministrationWithoutUse", "Effect": "Allow",
            "Principal": {"AWS": account_root_arn(stack.partition, stack.account)},
            "Action": list(KEY_ADMIN_ACTIONS), "Resource": "*"}


def bucket_guard(scope: IConstruct, bucket_arn: str) -> BucketGuard | None:
    """The guard of the bucket with this ARN in ``scope``'s app, if it is guarded."""
    return _registry(scope).buckets.get(bucket_arn)


def key_guard(key: kms.IKey) -> KeyGuard | None:
    return _registry(key).keys.get(key.key_arn)


def principal_arn(grantee: iam.IGrantable, guarded: IConstruct) -> str | None:
    """The ARN a guarded resource's policy names ``grantee`` by, or None when it has none it can use.

    A role of the guarded resource's own stack: its ARN (a token is fine). A role of another stack: built
    from its fixed name (a token would be a cross-stack reference from the data's stack to the role's, the
    wrong way round). An imported role or an ``ArnPrincipal``: its ARN when literal.
    """
    principal = grantee.grant_principal
    if isinstance(principal, iam.ArnPrincipal):
        return principal.arn if not Token.is_unresolved(principal.arn) else None
    role_arn = getattr(principal, "role_arn", None)
    if not isinstance(role_arn, str):
        return None
    if isinstance(principal, Construct) and Stack.of(principal) is Stack.of(guarded):
        return role_arn
    if not Token.is_unresolved(role_arn):
        return role_arn
    cfn_role = principal.node.default_child if isinstance(principal, Construct) else None
    if isinstance(cfn_role, iam.CfnRole) and isinstance(cfn_role.role_name, str) \
            and not Token.is_unresolved(cfn_role.role_name):
        stack = Stack.of(cfn_role)
        path = cfn_role.path if isinstance(cfn_role.path, str) else "/"
        return f"arn:{stack.partition}:iam::{stack.account}:role{path}{cfn_role.role_name}"
    return None


def unnamed_principal(grantee: iam.IGrantable, guarded: IConstruct, what: str) -> None:
    """Fail synthesis: a grant on a guarded resource to a principal its policies cannot name would be
    refused at run time by those policies. The error says how to name it: what :func:`how_to_name` recorded for
    a role a construct made (its property), else a fixed ``role_name``."""
    target = grantee if isinstance(grantee, Construct) else guarded
    fix = _registry(guarded).fixes.get(target.node.path) or (
        "give the role a fixed role_name (a role in another stack), or create it in the same stack as the bucket")
    Annotations.of(target).add_error(
        f"{what} is guarded by an allowlist in {guarded.node.path}, which must name this principal: {fix}")


def how_to_name(role: iam.IRole, fix: str) -> None:
    """What the error of :func:`unnamed_principal` tells the user of the construct that made ``role``, a role
    without a fixed name (``pass InferenceOperator(s3_csi_role_name=...)``): the property that names it, not the
    role's own ``role_name``, which the user never set."""
    _registry(role).fixes[role.node.path] = fix


# -- internals -------------------------------------------------------------------------------------------
@dataclass
class _KeyUse:
    actions: set[str]
    prefixes: set[str] | None  # None or empty: the whole bucket


def _prefix_label(prefixes: Sequence[str]) -> str:
    """``("curated/",)`` -> ``Curated`` (statement ids are alphanumeric); empty for the whole bucket."""
    words = (word for prefix in prefixes for word in re.split(r"[^A-Za-z0-9]+", prefix) if word)
    return "".join(word[:1].upper() + word[1:] for word in words)


@dataclass
class _Registry:
    buckets: dict[str, BucketGuard]
    keys: dict[str, KeyGuard]
    fixes: dict[str, str] = field(default_factory=dict)  # role path -> how to name it (how_to_name)


_REGISTRIES: weakref.WeakKeyDictionary[Any, _Registry] = weakref.WeakKeyDictionary()


def _registry(scope: IConstruct) -> _Registry:
    root = scope.node.root
    if root not in _REGISTRIES:
        _REGISTRIES[root] = _Registry({}, {})
    return _REGISTRIES[root]


def _accounts(stack: Stack, principals: Sequence[str]) -> list[str] | str:
    """The account roots the principals belong to (key policy principals; ``aws:PrincipalArn`` narrows)."""
    accounts = []
    for principal in principals:
        # An ARN built from a fixed role name holds a partition token unless the app sets
        # @aws-cdk/core:enablePartitionLiterals: its account is still literal, and read the same either way.
        parts = principal.split(":")
        account = parts[4] if len(parts) > 5 and parts[4] and not Token.is_unresolved(parts[4]) else stack.account
        partition = parts[1] if len(parts) > 5 else stack.partition
        accounts.append(account_root_arn(partition, account))
    unique = list(dict.fromkeys(accounts))
    return unique[0] if len(unique) == 1 else unique


def _elb_account(stack: Stack) -> str | None:
    """The Elastic Load Balancing account of Regions that predate its log delivery service principal."""
    if Token.is_unresolved(stack.region):
        Annotations.of(stack).add_warning_v2(
            "@hyperpod-inference-iac/data_perimeter:elbAccountUnknown",
            "ALB access logs: the stack has no Region at synth, so only the log delivery service principal is "
            "admitted (Regions launched before August 2022 need their ELB account too: give the stack a Region)")
        return None
    return region_info.RegionInfo.get(stack.region).elbv2_account


@jsii.implements(IAspect)
class _RenderBucketPolicy:
    def __init__(self, guard: BucketGuard) -> None:
        self._guard = guard
        self._done = False

    def visit(self, node: IConstruct) -> None:
        if node is self._guard.bucket and not self._done:
            self._done = True
            for statement in self._guard.statements():
                self._guard.bucket.add_to_resource_policy(statement)


@jsii.implements(IStableAnyProducer)
class _Produce:
    """A Lazy producer: the key policy is rendered when the template is, after every grant was made."""

    def __init__(self, render: Any) -> None:
        self._render = render

    def produce(self) -> Any:
        return self._render()

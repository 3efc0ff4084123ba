"""Where captured inference data lives: a customer-managed KMS key, the capture bucket, the
inference operator's TLS certificate bucket and the bucket their server access logs go to.

Who may read captured prompts is decided here, in one place. Both data buckets are *guarded*
(:mod:`~hyperpod_inference_iac.data_perimeter`): their bucket policies deny object access to every
principal that is not listed, and each listed principal everything outside its own prefixes; the key
policy lets only listed principals use the key, through S3, for one bucket's objects. Principals get
listed by the grants (``grant_write_captures``, ``grant_read_curated``, ``grant_read_raw``,
``grant_write_tls_certificates``, ``grant_read_tls_certificates``, and every grant of
:mod:`~hyperpod_inference_iac.s3_access` on these buckets) and by the reader properties; so a reviewer reads
every permission on captured prompts next to the thing it protects, and a role granted elsewhere by IAM
alone reads nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Names, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.data_perimeter import BucketGuard, KeyGuard, KeyRequirement, ObjectAccess
from hyperpod_inference_iac.hardened_bucket import hardened_bucket
from hyperpod_inference_iac.nag import acknowledge, resource_evidence
from hyperpod_inference_iac.patterns import IAM_ROLE_ARN, S3_BUCKET_NAME
from hyperpod_inference_iac.risks import RiskWarnings, role_account
from hyperpod_inference_iac.s3_access import (
    KMS_READ_ACTIONS,
    KMS_WRITE_ACTIONS,
    SAME_ACCOUNT,
    admit_objects,
    bucket_arn,
    grant_key_through_s3,
    grant_object_reads,
    grant_object_writes,
    objects_arn,
)
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved

# The AWS-managed AmazonSageMakerHyperPodInferenceAccess policy covers `hyperpod-tls*` buckets only.
TLS_BUCKET_PREFIX = "hyperpod-tls"
RETENTION_DAYS = (1, 3650)
NONCURRENT_RETENTION_DAYS = (1, 365)
DEFAULT_CAPTURE_PREFIX = "data-capture/"
DEFAULT_CURATED_PREFIX = "curated/"
DEFAULT_QUARANTINE_PREFIX = "quarantine/"
_ROLE_LISTS = ("reader_role_arns", "raw_reader_role_arns", "break_glass_role_arns")


def check_capture_storage(
    problems: Problems,
    at: KeyPaths = PROPS,
    *,
    capture_bucket_name: str | None = None,
    tls_bucket_name: str | None = None,
    access_log_bucket_name: str | None = None,
    retention_days: int = 30,
    noncurrent_version_retention_days: int = 7,
    access_log_retention_days: int = 365,
    reader_role_arns: Sequence[str] = (),
    raw_reader_role_arns: Sequence[str] = (),
    break_glass_role_arns: Sequence[str] = (),
    capture_prefix: str = DEFAULT_CAPTURE_PREFIX,
    curated_prefix: str = DEFAULT_CURATED_PREFIX,
    quarantine_prefix: str = DEFAULT_QUARANTINE_PREFIX,
    account: str | None = None,
) -> None:
    """Every rule of :class:`CaptureStorage`'s properties (a config loader calls it with its key paths).
    ``account``: the stack's account (None or a token: not known, not checked)."""
    if tls_bucket_name is not None and not is_unresolved(tls_bucket_name) \
            and not tls_bucket_name.startswith(TLS_BUCKET_PREFIX):
        problems.add("CaptureStorage.TlsBucketPrefix", at.at("tls_bucket_name"),
                     f"must start with '{TLS_BUCKET_PREFIX}' (the operator's AWS-managed policy covers only "
                     f"those buckets)", tls_bucket_name)
    for prop, name in (("capture_bucket_name", capture_bucket_name), ("tls_bucket_name", tls_bucket_name),
                       ("access_log_bucket_name", access_log_bucket_name)):
        if name is not None and not is_unresolved(name) and (not S3_BUCKET_NAME.match(name) or ".." in name):
            problems.add("CaptureStorage.BadBucketName", at.at(prop),
                         "must be an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-'", name)
    for prop, value, (low, high) in (
        ("retention_days", retention_days, RETENTION_DAYS),
        ("noncurrent_version_retention_days", noncurrent_version_retention_days, NONCURRENT_RETENTION_DAYS),
        ("access_log_retention_days", access_log_retention_days, RETENTION_DAYS),
    ):
        if not is_unresolved(value) and not low <= value <= high:
            problems.add("CaptureStorage.RetentionOutOfRange", at.at(prop),
                         f"must be an integer from {low} to {high} (days)", value)
    for prop, arns in zip(_ROLE_LISTS, (reader_role_arns, raw_reader_role_arns, break_glass_role_arns), strict=True):
        for index, arn in enumerate(arns):
            if not is_unresolved(arn) and not IAM_ROLE_ARN.match(arn):
                problems.add("CaptureStorage.BadReaderRoleArn", at.at(prop, index),
                             "must be an IAM role ARN such as arn:aws:iam::111122223333:role/analysts", arn)
    # A break-glass role is exempt from every deny of the data perimeter (read, write, delete, both buckets) and may
    # use the key: in another account, that account's administrators would decide who holds it and when, and its
    # trust policy and IAM changes would be recorded there, not here. Refused, not warned: the fix loses nothing.
    for index, arn in enumerate(break_glass_role_arns):
        other = _other_account(arn, account)
        if other is not None:
            problems.add("CaptureStorage.BreakGlassOtherAccount", at.at("break_glass_role_arns", index),
                         f"must be a role of this account ({account}), not of {other}: a break-glass role is exempt "
                         "from every deny of the data perimeter, so whoever governs its account would govern the "
                         "captures; create the incident-response role in this account (its trust policy may let the "
                         "other account's responders assume it)", arn)
    prefixes = {"capture_prefix": capture_prefix, "curated_prefix": curated_prefix,
                "quarantine_prefix": quarantine_prefix}
    for prop, prefix in prefixes.items():
        if not is_unresolved(prefix) and (not prefix.strip("/") or not prefix.endswith("/") or prefix.startswith("/")
                                          or "*" in prefix):
            problems.add("CaptureStorage.BadPrefix", at.at(prop),
                         "must be a key prefix such as data-capture/: not empty, ending in '/', not starting with '/', "
                         "no '*'", prefix)
    names = list(prefixes)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            a, b = prefixes[first], prefixes[second]
            if not is_unresolved(a) and not is_unresolved(b) and a and b and (a.startswith(b) or b.startswith(a)):
                problems.add("CaptureStorage.PrefixesOverlap", at.at(first),
                             f"must not contain or be contained in {second} ({b!r}): readers of one would read the "
                             f"other", a)


def warn_capture_storage(warnings: RiskWarnings, at: KeyPaths = PROPS, *, account: str | None = None,
                         reader_role_arns: Sequence[str] = (), raw_reader_role_arns: Sequence[str] = (),
                         break_glass_role_arns: Sequence[str] = (), imported_key: bool = False) -> None:
    """The risky but legal choices of :class:`CaptureStorage`'s properties (a config loader calls it with its key
    paths; the construct turns them into CDK warnings). ``account``: the stack's account (None or a token: reader
    roles are not compared with it)."""
    readers = (("reader_role_arns", reader_role_arns, "CaptureStorage:readerInOtherAccount",
                "read curated/ (redacted prompts and responses)"),
               ("raw_reader_role_arns", raw_reader_role_arns, "CaptureStorage:rawReaderInOtherAccount",
                "read the raw captures and quarantine/ (unredacted prompts and responses)"))
    for prop, arns, name, what in readers:
        for index, arn in enumerate(arns):
            other = _other_account(arn, account)
            if other is not None:
                warnings.add(name, at.at(prop, index),
                             f"{arn} is a role of account {other}, not of this one ({account}): the bucket and key "
                             f"policies let it {what}, and who may assume it is decided by that account's IAM, which "
                             "this account neither sees nor audits; use a role of this account (its trust policy may "
                             "admit the other account's principals), or acknowledge the share with its reason")
    if imported_key and (reader_role_arns or raw_reader_role_arns or break_glass_role_arns):
        warnings.add("CaptureStorage:readersNeedKeyPolicy", at.at("encryption_key"),
                     "reader roles with an imported encryption_key: the bucket policy admits them, but decrypting the "
                     "objects needs kms:Decrypt for these roles in that key's own policy (edit it where the key is "
                     "managed)")


def _other_account(arn: str, account: str | None) -> str | None:
    """The account of role ``arn`` when both it and ``account`` are known and differ, else None."""
    if account is None or is_unresolved(account) or is_unresolved(arn) or not IAM_ROLE_ARN.match(arn):
        return None
    other = role_account(arn)
    return other if other is not None and other != account else None


class CaptureStorage(Construct):
    """KMS key + capture bucket + TLS certificate bucket + server access log bucket, with the allowlists
    that decide who may read captured prompts.

    Bring your own key or log bucket, or let the construct create secure ones.

    :param capture_bucket_name: name of the capture bucket. @default
        ``capture-<account>-<region>-<8 characters of this construct's id>``: always a name known at synth,
        because the key policy names the bucket in its encryption-context condition (a name CloudFormation
        generated would make the key and the bucket depend on each other).
    :param tls_bucket_name: must start with ``hyperpod-tls``: the AWS-managed policy
        ``AmazonSageMakerHyperPodInferenceAccess`` grants the operator access to ``hyperpod-tls*``
        buckets only, so any other name silently breaks certificate output.
        @default ``hyperpod-tls-<account>-<region>-<8 characters of this construct's id>``
    :param access_log_bucket_name: name of the log bucket this construct creates. @default generated
    :param encryption_key: the capture and TLS buckets' key. @default a new customer-managed key with
        rotation whose key policy is rendered from the allowlists (an imported key's policy cannot be
        edited here: list the principals in it yourself; the bucket allowlists still apply).
    :param key_alias: alias of the key this construct creates, e.g. ``alias/llm-platform/capture``.
        @default no alias
    :param access_logs_bucket: an existing bucket for server access logs; its policy must admit
        ``logging.s3.amazonaws.com`` for these buckets. @default a new SSE-S3 log bucket
    :param retention_days: captured objects expire this many days after they are written (1..3650).
        @default 30
    :param noncurrent_version_retention_days: overwritten or deleted versions are purged after this
        (1..365). @default 7
    :param access_log_retention_days: how long S3 server access logs (who read what) are kept
        (1..3650). @default 365
    :param capture_prefix: where raw captures are written (unredacted prompts). @default ``data-capture/``
    :param curated_prefix: where the capture pipeline writes redacted Parquet. @default ``curated/``
    :param quarantine_prefix: where the pipeline puts lines it could not parse. @default ``quarantine/``
    :param reader_role_arns: roles (analysts, monitors) that may read ``curated_prefix`` only (redacted
        data), granted in the bucket and key policies. @default none
    :param raw_reader_role_arns: roles that may also read the raw captures and quarantined lines
        (unredacted prompts): name them one by one. @default none
    :param break_glass_role_arns: roles exempt from the allowlists on both buckets (read, write and
        delete), for incident response; they still need an IAM policy of their own, which is where the
        break-glass procedure grants access (docs/security.md). @default none
    :param load_balancer_logs: accept Tier 2 capture (ALB access logs) under ``capture_prefix``. Elastic Load
        Balancing delivers only to SSE-S3 buckets, so the bucket's default encryption becomes SSE-S3 and its
        policy requires every other write to name the capture key (``KeyRequirement.EXPLICIT``). @default False
    :param removal_policy: what happens to the buckets and key when removed from the stack.
        @default RETAIN

    Attributes: ``key``, ``capture_bucket``, ``tls_bucket``, ``access_log_bucket``; ``capture_bucket_arn``
    and ``tls_bucket_arn`` (deterministic strings when the names are given, so a grant in another
    stack needs no cross-stack export); ``capture_allowlist`` and ``tls_allowlist``
    (:class:`~hyperpod_inference_iac.data_perimeter.BucketGuard`), ``key_allowlist`` (a ``KeyGuard``, None for
    an imported key); ``key_ids``: the values a writer may name the key by (key ARN, alias ARN).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        capture_bucket_name: str | None = None,
        tls_bucket_name: str | None = None,
        access_log_bucket_name: str | None = None,
        encryption_key: kms.IKey | None = None,
        key_alias: str | None = None,
        access_logs_bucket: s3.IBucket | None = None,
        retention_days: int = 30,
        noncurrent_version_retention_days: int = 7,
        access_log_retention_days: int = 365,
        capture_prefix: str = DEFAULT_CAPTURE_PREFIX,
        curated_prefix: str = DEFAULT_CURATED_PREFIX,
        quarantine_prefix: str = DEFAULT_QUARANTINE_PREFIX,
        reader_role_arns: Sequence[str] = (),
        raw_reader_role_arns: Sequence[str] = (),
        break_glass_role_arns: Sequence[str] = (),
        load_balancer_logs: bool = False,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, id)
        problems = Problems()
        check_capture_storage(
            problems, capture_bucket_name=capture_bucket_name, tls_bucket_name=tls_bucket_name,
            access_log_bucket_name=access_log_bucket_name, retention_days=retention_days,
            noncurrent_version_retention_days=noncurrent_version_retention_days,
            access_log_retention_days=access_log_retention_days, reader_role_arns=reader_role_arns,
            raw_reader_role_arns=raw_reader_role_arns, break_glass_role_arns=break_glass_role_arns,
            capture_prefix=capture_prefix, curated_prefix=curated_prefix, quarantine_prefix=quarantine_prefix,
            account=Stack.of(self).account)
        problems.raise_if_any(f"CaptureStorage {self.node.path}")
        stack = Stack.of(self)
        suffix = Names.unique_id(self)[-8:].lower()
        if tls_bucket_name is None:
            tls_bucket_name = f"{TLS_BUCKET_PREFIX}-{stack.account}-{stack.region}-{suffix}"
        if capture_bucket_name is None:
            capture_bucket_name = f"capture-{stack.account}-{stack.region}-{suffix}"
        self.capture_prefix, self.curated_prefix, self.quarantine_prefix = capture_prefix, curated_prefix, \
            quarantine_prefix

        self.key: kms.IKey = encryption_key or kms.Key(
            self,
            "Key",
            alias=key_alias,
            description="Encrypts captured inference data and operator TLS certificates",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
        self.key_ids: tuple[str, ...] = (self.key.key_arn, *(
            [f"arn:{stack.partition}:kms:{stack.region}:{stack.account}:{key_alias}"] if key_alias and not
            encryption_key else []))
        if access_logs_bucket is None:
            self.access_log_bucket: s3.IBucket = hardened_bucket(
                self,
                "AccessLogBucket",
                bucket_name=access_log_bucket_name,
                # S3 server access logging can only deliver to SSE-S3 buckets.
                encryption_key=None,
                access_logs_bucket=None,
                lifecycle_rules=[
                    s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(access_log_retention_days),
                                     noncurrent_version_expiration=Duration.days(1)),
                ],
                removal_policy=removal_policy,
            )
            # Each bucket that logs here adds its own statement (hardened_bucket): S3's log delivery is
            # admitted for exactly those buckets and their prefixes, nothing else.
        else:
            self.access_log_bucket = access_logs_bucket
        self.capture_bucket = hardened_bucket(
            self,
            "CaptureBucket",
            bucket_name=capture_bucket_name,
            name_property="capture_bucket_name",
            # ALB access logs (Tier 2) can be delivered only with SSE-S3: the default then is SSE-S3 and the
            # bucket policy makes every other writer name the capture key.
            encryption_key=None if load_balancer_logs else self.key,
            # No S3 Bucket Key: S3 then gives KMS each object's ARN as the encryption context (with a bucket key,
            # the bucket's), so the key policy can let readers decrypt curated/ and nothing else.
            bucket_key=False,
            access_logs_bucket=self.access_log_bucket,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-captures",
                    expiration=Duration.days(retention_days),
                    noncurrent_version_expiration=Duration.days(noncurrent_version_retention_days),
                ),
            ],
            removal_policy=removal_policy,
        )
        self.tls_bucket = hardened_bucket(
            self,
            "TlsCertificateBucket",
            bucket_name=tls_bucket_name,
            name_property="tls_bucket_name",
            encryption_key=self.key,
            access_logs_bucket=self.access_log_bucket,
            lifecycle_rules=[
                s3.LifecycleRule(id="purge-old-certificate-versions",
                                 noncurrent_version_expiration=Duration.days(noncurrent_version_retention_days)),
            ],
            removal_policy=removal_policy,
        )
        # ARNs built from fixed names rather than from the bucket resources: other stacks that receive
        # a grant then need no cross-stack export, and reviewers read the real bucket name.
        self.capture_bucket_arn = bucket_arn(self.capture_bucket)
        self.tls_bucket_arn = bucket_arn(self.tls_bucket)

        self.key_allowlist = KeyGuard(self.key) if isinstance(self.key, kms.Key) else None
        self.capture_allowlist = BucketGuard(self.capture_bucket, arn=self.capture_bucket_arn, label="Captures")
        self.tls_allowlist = BucketGuard(self.tls_bucket, arn=self.tls_bucket_arn, label="TlsCertificates")
        self.capture_allowlist.require_key(
            self.key_ids, KeyRequirement.EXPLICIT if load_balancer_logs else KeyRequirement.DEFAULT)
        self.load_balancer_logs = load_balancer_logs
        if load_balancer_logs:
            # The operator gives each ALB the prefix <capture prefix><hash>/alb; ELB appends AWSLogs/<account>/.
            self.capture_allowlist.accept_load_balancer_logs(f"{capture_prefix}*/alb/AWSLogs/{stack.account}/")

        warnings = RiskWarnings()
        warn_capture_storage(warnings, account=stack.account, reader_role_arns=reader_role_arns,
                             raw_reader_role_arns=raw_reader_role_arns, break_glass_role_arns=break_glass_role_arns,
                             imported_key=self.key_allowlist is None)
        warnings.annotate(self)
        for arn in reader_role_arns:
            self._admit_reader(arn, (curated_prefix,))
        for arn in raw_reader_role_arns:
            self._admit_reader(arn, (capture_prefix, quarantine_prefix, curated_prefix))
        for arn in break_glass_role_arns:
            for guard, bucket in ((self.capture_allowlist, self.capture_bucket_arn),
                                  (self.tls_allowlist, self.tls_bucket_arn)):
                guard.admit_all(arn)
                if self.key_allowlist is not None:
                    self.key_allowlist.admit(arn, ("kms:Decrypt", "kms:GenerateDataKey"), bucket, named=True)

    def _admit_reader(self, arn: str, prefixes: Sequence[str]) -> None:
        for prefix in prefixes:
            self.capture_allowlist.allow_in_bucket_policy(arn, prefix)
        if self.key_allowlist is not None:  # named: their IAM policies are not ours to write
            self.key_allowlist.admit(arn, KMS_READ_ACTIONS, self.capture_bucket_arn, named=True, prefixes=prefixes)

    # -- grants -------------------------------------------------------------------------------
    def grant_write_captures(self, grantee: iam.IGrantable, prefix: str | None = None) -> iam.Grant:
        """PutObject under ``prefix`` (@default the capture prefix) of the capture bucket, with the KMS data
        key it needs; the grantee is listed as a writer of exactly that prefix."""
        return grant_object_writes(grantee, bucket_arn=self.capture_bucket_arn,
                                   prefix=self.capture_prefix if prefix is None else prefix, key=self.key)

    def grant_read_curated(self, grantee: iam.IGrantable) -> iam.Grant:
        """Get and list the redacted ``curated/`` objects, and decrypt them."""
        return self.grant_read_captures(grantee, self.curated_prefix)

    def grant_read_raw(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the raw captures and quarantined lines too (unredacted prompts): for the few who must."""
        for prefix in (self.capture_prefix, self.quarantine_prefix):
            self.grant_read_captures(grantee, prefix)
        return self.grant_read_curated(grantee)

    def grant_read_captures(self, grantee: iam.IGrantable, prefix: str) -> iam.Grant:
        """Get and list objects under ``prefix`` of the capture bucket, and decrypt them (only them: the key's
        encryption-context condition names the prefix too)."""
        return grant_object_reads(grantee, bucket_arn=self.capture_bucket_arn, prefix=prefix, key=self.key,
                                  actions=("s3:GetObject", "s3:GetObjectVersion"), decrypt_under_prefix_only=True)

    def grant_write_tls_certificates(self, grantee: iam.IGrantable) -> iam.Grant:
        """What the inference operator needs on its TLS output bucket: it reads, deletes and replaces its
        certificates; puts and tags must carry ``CreatedBy=HyperPodInference``."""
        grant_key_through_s3(grantee, self.key, KMS_WRITE_ACTIONS, self.tls_bucket_arn)
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:GetObject", "s3:DeleteObject"],
            resource_arns=[objects_arn(self.tls_bucket_arn)], conditions=SAME_ACCOUNT,
        )
        for access in ObjectAccess:
            admit_objects(grantee, self.tls_bucket_arn, access)
        if isinstance(grantee, Construct):
            acknowledge(grantee, "s3-object-wildcard-dedicated-bucket",
                        *resource_evidence(grantee, objects_arn(self.tls_bucket_arn)))
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:PutObject", "s3:PutObjectTagging"],
            resource_arns=[objects_arn(self.tls_bucket_arn)],
            conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}",
                                         "s3:RequestObjectTag/CreatedBy": "HyperPodInference"}},
        )

    def grant_read_tls_certificates(self, grantee: iam.IGrantable) -> iam.Grant:
        """List and read the TLS bucket (what Mountpoint for S3 needs to mount it)."""
        return grant_object_reads(grantee, bucket_arn=self.tls_bucket_arn, key=self.key)

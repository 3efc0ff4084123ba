"""Where captured inference data lives: a customer-managed KMS key, the capture bucket, the
inference operator's TLS certificate bucket and the bucket their server access logs go to.

Who may read captured prompts is decided here, in one place. Both data buckets are *guarded*
(:mod:`~hyperpod_inference_iac.security.data_perimeter`): their bucket policies deny object access to every
principal that is not listed, and each listed principal everything outside its own prefixes; the key
policy lets only listed principals use the key, through S3, for one bucket's objects. Principals get
listed by the grants (``grant_write_captures``, ``grant_read_curated``, ``grant_read_raw``,
``grant_write_tls_certificates``, ``grant_read_tls_certificates``, and every grant of
:mod:`~hyperpod_inference_iac.security.s3_access` on these buckets) and by the reader properties; so a reviewer reads
every permission on captured prompts next to the thing it protects, and a role granted elsewhere by IAM
alone reads nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Duration, Names, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.foundation.nag import (
    acknowledge,
    resource_evidence,
)
from hyperpod_inference_iac.foundation.patterns import (
    IAM_ROLE_ARN,
    S3_BUCKET_NAME,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.risks import (
    RiskWarnings,
    role_account,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)
from hyperpod_inference_iac.security.data_perimeter import (
    BucketGuard,
    KeyGuard,
    KeyRequirement,
    ObjectAccess,
)
from hyperpod_inference_iac.security.hardened_bucket import (
    hardened_bucket,
)
from hyperpod_inference_iac.security.s3_access import (
    KMS_READ_ACTIONS,
    KMS_WRITE_ACTIONS,
    SAME_ACCOUNT,
    admit_objects,
    grant_key_through_s3,
    grant_object_deletes,
    grant_object_reads,
    grant_object_writes,
    key_prefix_fault,
    objects_arn,
)

# The AWS-managed AmazonSageMakerHyperPodInferenceAccess policy covers `hyperpod-tls*` buckets only.
TLS_BUCKET_PREFIX = "hyperpod-tls"
RETENTION_DAYS = (1, 3650)
NONCURRENT_RETENTION_DAYS = (1, 365)
AUDIT_LOCK_DAYS = (1, 36500)
AUDIT_LOCK_MODES = ("GOVERNANCE", "COMPLIANCE")
AUDIT_TRAIL_PREFIX = "trail/"  # capture_core.trail.TRAIL_PREFIX (a test keeps them equal)
# What an erasure writes in the capture bucket (capture_core.erasure and capture_tables; a test keeps them equal).
ERASURE_REGISTER_PREFIX = "audit/erasure-register/"
ERASURE_RECORDS_PREFIX = "audit/erasures/"
TABLE_DELETIONS_PREFIX = "audit/table-deletions/"
DEFAULT_CAPTURE_PREFIX = "data-capture/"
DEFAULT_CURATED_PREFIX = "curated/"
DEFAULT_QUARANTINE_PREFIX = "quarantine/"
DEFAULT_ICEBERG_PREFIX = "curated-iceberg/"
DEFAULT_QUERY_RESULTS_PREFIX = "athena-results/"
_ROLE_LISTS = ("reader_role_arns", "raw_reader_role_arns", "break_glass_role_arns")


@dataclass(frozen=True, kw_only=True)
class CaptureStorageOptions(Props):
    """:class:`CaptureStorage`'s properties a config file can set (``capture.*`` in the app's), and the names and
    prefixes its rules read that only Python code sets (the app derives the bucket names from ``project``)."""

    CONSTRUCT: ClassVar[str] = "CaptureStorage"

    capture_prefix: str = prop(
        DEFAULT_CAPTURE_PREFIX, key="prefix",
        doc="Where raw captures are written (unredacted prompts), and so the prefix the capture pipeline processes. "
            "An S3 key prefix: S3's safe characters and `/`, ending in `/`, not starting with `/`, no `*`, not empty "
            "(that would be the whole bucket).")
    retention_days: int = prop(30, doc=f"Captured objects expire this many days after they are written "
                                       f"({RETENTION_DAYS[0]}..{RETENTION_DAYS[1]}).")
    noncurrent_version_retention_days: int = prop(
        7, doc=f"Overwritten or deleted versions of captures and certificates are purged after this many days "
               f"({NONCURRENT_RETENTION_DAYS[0]}..{NONCURRENT_RETENTION_DAYS[1]}).")
    access_log_retention_days: int = prop(
        365, doc=f"How long S3 server access logs (who read which capture) are kept, in days "
                 f"({RETENTION_DAYS[0]}..{RETENTION_DAYS[1]}). Applies to the log bucket this construct creates.")
    reader_role_arns: Sequence[str] = prop(
        (), doc="IAM role ARNs (analysts, monitors) that may read the redacted `curated_prefix` only, granted in the "
                "bucket and key policies; denied every other object access whatever their IAM policies say. A role of "
                "another account is warned (`CaptureStorage:readerInOtherAccount`).")
    raw_reader_role_arns: Sequence[str] = prop(
        (), doc="IAM role ARNs that may also read the raw captures and the quarantine (unredacted prompts): name each "
                "one. A role of another account is warned (`CaptureStorage:rawReaderInOtherAccount`).")
    break_glass_role_arns: Sequence[str] = prop(
        (), doc="Incident-response role ARNs exempt from both buckets' allowlists (read, write, delete) and allowed by "
                "the key policy; they still need an IAM policy of their own, granted when the break-glass procedure "
                "runs (docs/security.md). Each must be a role of the stack's account "
                "(`CaptureStorage.BreakGlassOtherAccount`).")
    curated_prefix: str = prop(DEFAULT_CURATED_PREFIX, config=False,
                               doc="Where the capture pipeline writes redacted Parquet.")
    quarantine_prefix: str = prop(DEFAULT_QUARANTINE_PREFIX, config=False,
                                  doc="Where the pipeline puts lines it could not parse.")
    iceberg_prefix: str = prop(
        DEFAULT_ICEBERG_PREFIX, config=False,
        doc="Where the capture Iceberg tables live (`CaptureTables`): no lifecycle expiry there (a table's metadata "
            "and manifests outlive the objects' age; rows expire as table operations), only its overwritten and "
            "deleted versions are purged after `noncurrent_version_retention_days`.")
    query_results_prefix: str = prop(
        DEFAULT_QUERY_RESULTS_PREFIX, config=False,
        doc="Where Athena writes query results (`CaptureTables`): they expire after `retention_days`, as captures "
            "do (a result may hold prompt text).")
    capture_bucket_name: str | None = prop(
        None, config=False,
        default_doc="`capture-<account>-<region>-<last 8 characters of the construct's unique id, lowercased>`",
        doc="Name of the capture bucket. Always known at synth: the key policy names the bucket in its "
            "encryption-context condition (a generated name would make the key and the bucket depend on each other).")
    tls_bucket_name: str | None = prop(
        None, config=False,
        default_doc="`hyperpod-tls-<account>-<region>-<last 8 characters of the construct's unique id, lowercased>`",
        doc=f"Name of the TLS certificate bucket. Must start with `{TLS_BUCKET_PREFIX}`: the AWS-managed "
            f"`AmazonSageMakerHyperPodInferenceAccess` policy only covers `{TLS_BUCKET_PREFIX}*` buckets.")
    access_log_bucket_name: str | None = prop(
        None, config=False, default_doc="generated",
        doc="Name of the log bucket this construct creates. Ignored when `access_logs_bucket` is given.")
    audit_lock_mode: str = prop(
        "GOVERNANCE",
        doc="S3 Object Lock mode of the audit bucket (`audit_bucket`: the hash-chained trail of erasures, retention "
            "runs and the tables' daily manifests, docs/capture-processor.md#the-audit-trail): `GOVERNANCE` (a "
            "principal allowed `s3:BypassGovernanceRetention` can still delete a link early) or `COMPLIANCE` (no "
            "one can, the root user included, until the retention ends; it cannot be shortened).")
    audit_lock_retention_days: int = prop(
        365, doc=f"Days each audit trail link is locked ({AUDIT_LOCK_DAYS[0]}..{AUDIT_LOCK_DAYS[1]}): the bucket's "
                 "default retention.")
    audit_bucket_name: str | None = prop(
        None, config=False,
        default_doc="`capture-audit-<account>-<region>-<last 8 characters of the construct's unique id, lowercased>`",
        doc="Name of the audit bucket (Object Lock, KMS, versioned, access-logged).")

    def check(self, problems: Problems, at: KeyPaths = PROPS, *, account: str | None = None) -> None:
        """Every rule of these properties. ``account``: the stack's account (None or a token: not known, not
        checked)."""
        if not is_unresolved(self.audit_lock_mode) and self.audit_lock_mode not in AUDIT_LOCK_MODES:
            problems.add("CaptureStorage.BadAuditLockMode", at.at("audit_lock_mode"),
                         f"must be one of {', '.join(AUDIT_LOCK_MODES)}", self.audit_lock_mode)
        days = self.audit_lock_retention_days
        if not is_unresolved(days) and (isinstance(days, bool) or not isinstance(days, int)
                                        or not AUDIT_LOCK_DAYS[0] <= days <= AUDIT_LOCK_DAYS[1]):
            problems.add("CaptureStorage.RetentionOutOfRange", at.at("audit_lock_retention_days"),
                         f"must be an integer from {AUDIT_LOCK_DAYS[0]} to {AUDIT_LOCK_DAYS[1]} (days)", days)
        tls_bucket_name = self.tls_bucket_name
        if tls_bucket_name is not None and not is_unresolved(tls_bucket_name) \
                and not tls_bucket_name.startswith(TLS_BUCKET_PREFIX):
            problems.add("CaptureStorage.TlsBucketPrefix", at.at("tls_bucket_name"),
                         f"must start with '{TLS_BUCKET_PREFIX}' (the operator's AWS-managed policy covers only "
                         f"those buckets)", tls_bucket_name)
        for prop_name, name in (("capture_bucket_name", self.capture_bucket_name),
                                ("tls_bucket_name", tls_bucket_name),
                                ("access_log_bucket_name", self.access_log_bucket_name)):
            if name is not None and not is_unresolved(name) and (not S3_BUCKET_NAME.match(name) or ".." in name):
                problems.add("CaptureStorage.BadBucketName", at.at(prop_name),
                             "must be an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-'", name)
        for prop_name, value, (low, high) in (
            ("retention_days", self.retention_days, RETENTION_DAYS),
            ("noncurrent_version_retention_days", self.noncurrent_version_retention_days, NONCURRENT_RETENTION_DAYS),
            ("access_log_retention_days", self.access_log_retention_days, RETENTION_DAYS),
        ):
            if not is_unresolved(value) and not low <= value <= high:
                problems.add("CaptureStorage.RetentionOutOfRange", at.at(prop_name),
                             f"must be an integer from {low} to {high} (days)", value)
        role_lists = (self.reader_role_arns, self.raw_reader_role_arns, self.break_glass_role_arns)
        for prop_name, arns in zip(_ROLE_LISTS, role_lists, strict=True):
            for index, arn in enumerate(arns):
                if not is_unresolved(arn) and not IAM_ROLE_ARN.match(arn):
                    problems.add("CaptureStorage.BadReaderRoleArn", at.at(prop_name, index),
                                 "must be an IAM role ARN such as arn:aws:iam::111122223333:role/analysts", arn)
        # A break-glass role is exempt from every deny of the data perimeter (read, write, delete, both buckets) and
        # may use the key: in another account, that account's administrators would decide who holds it and when, and
        # its trust policy and IAM changes would be recorded there, not here. Refused, not warned: the fix loses
        # nothing.
        for index, arn in enumerate(self.break_glass_role_arns):
            other = _other_account(arn, account)
            if other is not None:
                problems.add("CaptureStorage.BreakGlassOtherAccount", at.at("break_glass_role_arns", index),
                             f"must be a role of this account ({account}), not of {other}: a break-glass role is "
                             "exempt from every deny of the data perimeter, so whoever governs its account would "
                             "govern the captures; create the incident-response role in this account (its trust "
                             "policy may let the other account's responders assume it)", arn)
        prefixes = {"capture_prefix": self.capture_prefix, "curated_prefix": self.curated_prefix,
                    "quarantine_prefix": self.quarantine_prefix, "iceberg_prefix": self.iceberg_prefix,
                    "query_results_prefix": self.query_results_prefix}
        for prop_name, prefix in prefixes.items():
            fault = key_prefix_fault(prefix)  # (the pipeline's rule too: one rule for every prefix)
            if fault is not None:
                problems.add("CaptureStorage.BadPrefix", at.at(prop_name), fault, prefix)
        names = list(prefixes)
        for i, first in enumerate(names):
            for second in names[i + 1:]:
                a, b = prefixes[first], prefixes[second]
                if not is_unresolved(a) and not is_unresolved(b) and a and b and (a.startswith(b) or b.startswith(a)):
                    problems.add("CaptureStorage.PrefixesOverlap", at.at(first),
                                 f"must not contain or be contained in {second} ({b!r}): readers of one would read the "
                                 f"other", a)


@dataclass(frozen=True, kw_only=True)
class CaptureStorageProps(CaptureStorageOptions):
    """:class:`CaptureStorage`'s properties: its options, and the objects and choices only Python code passes."""

    encryption_key: kms.IKey | None = prop(
        None, config=False, default_doc="a new customer-managed key with rotation",
        doc="Key of the capture and TLS buckets. Its policy is rendered from the allowlists when the construct creates "
            "it; an imported key's policy cannot be edited here: list the principals in it yourself (the bucket "
            "allowlists still apply).")
    key_alias: str | None = prop(None, config=False, default_doc="no alias",
                                 doc="Alias of the key this construct creates, e.g. `alias/llm-platform/capture`.")
    access_logs_bucket: s3.IBucket | None = prop(
        None, config=False, default_doc="a new SSE-S3 log bucket",
        doc="An existing bucket for server access logs. When it is an `s3.Bucket` in the same stack, or a logging "
            "bucket has a literal name, the construct adds the statement that admits `logging.s3.amazonaws.com` for "
            "that bucket; otherwise the log bucket's own policy must admit it (warned).")
    load_balancer_logs: bool = prop(
        False, config=False,
        doc="Accept Tier 2 capture (ALB access logs) under `capture_prefix`: Elastic Load Balancing delivers only to "
            "SSE-S3 buckets, so the capture bucket's default becomes SSE-S3 and its policy requires every other write "
            "to name the key; ELB log delivery is admitted under `<capture_prefix>*/alb/AWSLogs/<account>/` (the app "
            "sets it when a workload captures ALB access logs).")
    removal_policy: RemovalPolicy = prop(RemovalPolicy.RETAIN, config=False,
                                         doc="What happens to the buckets and the key when removed from the stack.")


def check_capture_storage(problems: Problems, at: KeyPaths = PROPS, *, account: str | None = None,
                          **options: Any) -> None:
    """:meth:`CaptureStorageOptions.check` of these options (kept for callers of 0.2.0)."""
    CaptureStorageOptions(**options).check(problems, at, account=account)


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
    for prop_name, arns, name, what in readers:
        for index, arn in enumerate(arns):
            other = _other_account(arn, account)
            if other is not None:
                warnings.add(name, at.at(prop_name, index),
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


@real_signature
class CaptureStorage(Construct):
    """KMS key + capture bucket + TLS certificate bucket + server access log bucket, with the allowlists
    that decide who may read captured prompts.

    Bring your own key or log bucket, or let the construct create secure ones.

    Properties: :class:`CaptureStorageProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``key``, ``capture_bucket``, ``tls_bucket``, ``access_log_bucket``; ``capture_bucket_arn``
    and ``tls_bucket_arn`` (built from the bucket names, never from the buckets: literal in a stack with an
    account and Region, so a grant in another stack needs no cross-stack export; with the account and Region pseudo
    parameters in a stack without ``env``); ``capture_allowlist`` and ``tls_allowlist``
    (:class:`~hyperpod_inference_iac.security.data_perimeter.BucketGuard`), ``key_allowlist`` (a ``KeyGuard``, None for
    an imported key); ``key_ids``: the values a writer may name the key by (key ARN, alias ARN).
    """

    PROPS: ClassVar[type[Props]] = CaptureStorageProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        capture_prefix: str = CaptureStorageProps.capture_prefix,
        retention_days: int = CaptureStorageProps.retention_days,
        noncurrent_version_retention_days: int = CaptureStorageProps.noncurrent_version_retention_days,
        access_log_retention_days: int = CaptureStorageProps.access_log_retention_days,
        reader_role_arns: Sequence[str] = CaptureStorageProps.reader_role_arns,
        raw_reader_role_arns: Sequence[str] = CaptureStorageProps.raw_reader_role_arns,
        break_glass_role_arns: Sequence[str] = CaptureStorageProps.break_glass_role_arns,
        curated_prefix: str = CaptureStorageProps.curated_prefix,
        quarantine_prefix: str = CaptureStorageProps.quarantine_prefix,
        iceberg_prefix: str = CaptureStorageProps.iceberg_prefix,
        query_results_prefix: str = CaptureStorageProps.query_results_prefix,
        capture_bucket_name: str | None = CaptureStorageProps.capture_bucket_name,
        tls_bucket_name: str | None = CaptureStorageProps.tls_bucket_name,
        access_log_bucket_name: str | None = CaptureStorageProps.access_log_bucket_name,
        audit_lock_mode: str = CaptureStorageProps.audit_lock_mode,
        audit_lock_retention_days: int = CaptureStorageProps.audit_lock_retention_days,
        audit_bucket_name: str | None = CaptureStorageProps.audit_bucket_name,
        encryption_key: kms.IKey | None = CaptureStorageProps.encryption_key,
        key_alias: str | None = CaptureStorageProps.key_alias,
        access_logs_bucket: s3.IBucket | None = CaptureStorageProps.access_logs_bucket,
        load_balancer_logs: bool = CaptureStorageProps.load_balancer_logs,
        removal_policy: RemovalPolicy = CaptureStorageProps.removal_policy,
    ) -> None:
        """Create the construct. Its properties (:class:`CaptureStorageProps`, kept as ``self.props``):

        :param capture_prefix: Where raw captures are written (unredacted prompts), and so the prefix the
            capture pipeline processes. An S3 key prefix: S3's safe characters and `/`, ending in `/`, not
            starting with `/`, no `*`, not empty (that would be the whole bucket). Default: ``'data-capture/'``.
        :param retention_days: Captured objects expire this many days after they are written (1..3650). Default:
            ``30``.
        :param noncurrent_version_retention_days: Overwritten or deleted versions of captures and certificates
            are purged after this many days (1..365). Default: ``7``.
        :param access_log_retention_days: How long S3 server access logs (who read which capture) are kept, in
            days (1..3650). Applies to the log bucket this construct creates. Default: ``365``.
        :param reader_role_arns: IAM role ARNs (analysts, monitors) that may read the redacted `curated_prefix`
            only, granted in the bucket and key policies; denied every other object access whatever their IAM
            policies say. A role of another account is warned (`CaptureStorage:readerInOtherAccount`). Default:
            ``()``.
        :param raw_reader_role_arns: IAM role ARNs that may also read the raw captures and the quarantine
            (unredacted prompts): name each one. A role of another account is warned
            (`CaptureStorage:rawReaderInOtherAccount`). Default: ``()``.
        :param break_glass_role_arns: Incident-response role ARNs exempt from both buckets' allowlists (read,
            write, delete) and allowed by the key policy; they still need an IAM policy of their own, granted
            when the break-glass procedure runs (docs/security.md). Each must be a role of the stack's account
            (`CaptureStorage.BreakGlassOtherAccount`). Default: ``()``.
        :param curated_prefix: Where the capture pipeline writes redacted Parquet. Default: ``'curated/'``.
        :param quarantine_prefix: Where the pipeline puts lines it could not parse. Default: ``'quarantine/'``.
        :param iceberg_prefix: Where the capture Iceberg tables live (`CaptureTables`): no lifecycle expiry
            there (a table's metadata and manifests outlive the objects' age; rows expire as table operations),
            only its overwritten and deleted versions are purged after `noncurrent_version_retention_days`.
            Default: ``'curated-iceberg/'``.
        :param query_results_prefix: Where Athena writes query results (`CaptureTables`): they expire after
            `retention_days`, as captures do (a result may hold prompt text). Default: ``'athena-results/'``.
        :param capture_bucket_name: Name of the capture bucket. Always known at synth: the key policy names the
            bucket in its encryption-context condition (a generated name would make the key and the bucket
            depend on each other). Default: ``None`` (``capture-<account>-<region>-<last 8 characters of the
            construct's unique id, lowercased>``).
        :param tls_bucket_name: Name of the TLS certificate bucket. Must start with `hyperpod-tls`: the
            AWS-managed `AmazonSageMakerHyperPodInferenceAccess` policy only covers `hyperpod-tls*` buckets.
            Default: ``None`` (``hyperpod-tls-<account>-<region>-<last 8 characters of the construct's unique
            id, lowercased>``).
        :param access_log_bucket_name: Name of the log bucket this construct creates. Ignored when
            `access_logs_bucket` is given. Default: ``None`` (generated).
        :param audit_lock_mode: S3 Object Lock mode of the audit bucket (`audit_bucket`: the hash-chained trail
            of erasures, retention runs and the tables' daily manifests,
            docs/capture-processor.md#the-audit-trail): `GOVERNANCE` (a principal allowed
            `s3:BypassGovernanceRetention` can still delete a link early) or `COMPLIANCE` (no one can, the root
            user included, until the retention ends; it cannot be shortened). Default: ``'GOVERNANCE'``.
        :param audit_lock_retention_days: Days each audit trail link is locked (1..36500): the bucket's default
            retention. Default: ``365``.
        :param audit_bucket_name: Name of the audit bucket (Object Lock, KMS, versioned, access-logged).
            Default: ``None`` (``capture-audit-<account>-<region>-<last 8 characters of the construct's unique
            id, lowercased>``).
        :param encryption_key: Key of the capture and TLS buckets. Its policy is rendered from the allowlists
            when the construct creates it; an imported key's policy cannot be edited here: list the principals
            in it yourself (the bucket allowlists still apply). Default: ``None`` (a new customer-managed key
            with rotation).
        :param key_alias: Alias of the key this construct creates, e.g. `alias/llm-platform/capture`. Default:
            ``None`` (no alias).
        :param access_logs_bucket: An existing bucket for server access logs. When it is an `s3.Bucket` in the
            same stack, or a logging bucket has a literal name, the construct adds the statement that admits
            `logging.s3.amazonaws.com` for that bucket; otherwise the log bucket's own policy must admit it
            (warned). Default: ``None`` (a new SSE-S3 log bucket).
        :param load_balancer_logs: Accept Tier 2 capture (ALB access logs) under `capture_prefix`: Elastic Load
            Balancing delivers only to SSE-S3 buckets, so the capture bucket's default becomes SSE-S3 and its
            policy requires every other write to name the key; ELB log delivery is admitted under
            `<capture_prefix>*/alb/AWSLogs/<account>/` (the app sets it when a workload captures ALB access
            logs). Default: ``False``.
        :param removal_policy: What happens to the buckets and the key when removed from the stack. Default:
            ``RemovalPolicy.RETAIN``.
        """
        super().__init__(scope, id)
        self.props = props = CaptureStorageProps(
            capture_prefix=capture_prefix, retention_days=retention_days,
            noncurrent_version_retention_days=noncurrent_version_retention_days,
            access_log_retention_days=access_log_retention_days, reader_role_arns=listed(reader_role_arns),
            raw_reader_role_arns=listed(raw_reader_role_arns), break_glass_role_arns=listed(break_glass_role_arns),
            curated_prefix=curated_prefix, quarantine_prefix=quarantine_prefix, iceberg_prefix=iceberg_prefix,
            query_results_prefix=query_results_prefix, capture_bucket_name=capture_bucket_name,
            tls_bucket_name=tls_bucket_name,
            access_log_bucket_name=access_log_bucket_name, encryption_key=encryption_key, key_alias=key_alias,
            access_logs_bucket=access_logs_bucket, load_balancer_logs=load_balancer_logs,
            removal_policy=removal_policy, audit_lock_mode=audit_lock_mode,
            audit_lock_retention_days=audit_lock_retention_days, audit_bucket_name=audit_bucket_name)
        problems = Problems()
        props.check(problems, account=Stack.of(self).account)
        problems.raise_if_any(f"CaptureStorage {self.node.path}")
        stack = Stack.of(self)
        suffix = Names.unique_id(self)[-8:].lower()
        tls_bucket_name, capture_bucket_name = props.tls_bucket_name, props.capture_bucket_name
        if tls_bucket_name is None:
            tls_bucket_name = f"{TLS_BUCKET_PREFIX}-{stack.account}-{stack.region}-{suffix}"
        if capture_bucket_name is None:
            capture_bucket_name = f"capture-{stack.account}-{stack.region}-{suffix}"
        self.capture_prefix, self.curated_prefix = props.capture_prefix, props.curated_prefix
        self.quarantine_prefix = props.quarantine_prefix

        self.key: kms.IKey = props.encryption_key or kms.Key(
            self,
            "Key",
            alias=props.key_alias,
            description="Encrypts captured inference data and operator TLS certificates",
            enable_key_rotation=True,
            removal_policy=props.removal_policy,
        )
        self.key_ids: tuple[str, ...] = (self.key.key_arn, *(
            [f"arn:{stack.partition}:kms:{stack.region}:{stack.account}:{props.key_alias}"] if props.key_alias and not
            props.encryption_key else []))
        if props.access_logs_bucket is None:
            self.access_log_bucket: s3.IBucket = hardened_bucket(
                self,
                "AccessLogBucket",
                bucket_name=props.access_log_bucket_name,
                # S3 server access logging can only deliver to SSE-S3 buckets.
                encryption_key=None,
                access_logs_bucket=None,
                lifecycle_rules=[
                    s3.LifecycleRule(id="expire-access-logs",
                                     expiration=Duration.days(props.access_log_retention_days),
                                     noncurrent_version_expiration=Duration.days(1)),
                ],
                removal_policy=props.removal_policy,
            )
            # Each bucket that logs here adds its own statement (hardened_bucket): S3's log delivery is
            # admitted for exactly those buckets and their prefixes, nothing else.
        else:
            self.access_log_bucket = props.access_logs_bucket
        self.capture_bucket = hardened_bucket(
            self,
            "CaptureBucket",
            bucket_name=capture_bucket_name,
            name_property="capture_bucket_name",
            # ALB access logs (Tier 2) can be delivered only with SSE-S3: the default then is SSE-S3 and the
            # bucket policy makes every other writer name the capture key.
            encryption_key=None if props.load_balancer_logs else self.key,
            # No S3 Bucket Key: S3 then gives KMS each object's ARN as the encryption context (with a bucket key,
            # the bucket's), so the key policy can let readers decrypt curated/ and nothing else.
            bucket_key=False,
            access_logs_bucket=self.access_log_bucket,
            # Expiry by age per prefix, not for the whole bucket: the Iceberg tables' files must not expire under
            # them (their rows expire as table operations); every overwritten or deleted version, theirs included,
            # is purged after noncurrent_version_retention_days.
            lifecycle_rules=[
                *(s3.LifecycleRule(id=f"expire-{name}", prefix=prefix, expiration=Duration.days(props.retention_days),
                                   noncurrent_version_expiration=Duration.days(props.noncurrent_version_retention_days))
                  for name, prefix in (("captures", props.capture_prefix), ("curated", props.curated_prefix),
                                       ("quarantine", props.quarantine_prefix),
                                       ("query-results", props.query_results_prefix))),
                s3.LifecycleRule(id="purge-old-versions",
                                 noncurrent_version_expiration=Duration.days(props.noncurrent_version_retention_days),
                                 expired_object_delete_marker=True),
            ],
            removal_policy=props.removal_policy,
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
                                 noncurrent_version_expiration=Duration.days(props.noncurrent_version_retention_days)),
            ],
            removal_policy=props.removal_policy,
        )
        audit_bucket_name = props.audit_bucket_name or f"capture-audit-{stack.account}-{stack.region}-{suffix}"
        self.audit_bucket = self._audit_bucket(props, audit_bucket_name)
        # ARNs built from the names set here rather than from the bucket resources: other stacks that receive
        # a grant then need no cross-stack export, reviewers read the real bucket name, and the key policy (which
        # names the buckets) never refers to the buckets that use the key. In a stack without `env` the names hold
        # the AWS::AccountId and AWS::Region pseudo parameters, which every stack resolves; the buckets' own ARN
        # attributes there made the key and the buckets depend on each other (issue 26).
        self.capture_bucket_arn = f"arn:{stack.partition}:s3:::{capture_bucket_name}"
        self.tls_bucket_arn = f"arn:{stack.partition}:s3:::{tls_bucket_name}"
        self.audit_bucket_arn = f"arn:{stack.partition}:s3:::{audit_bucket_name}"

        self.key_allowlist = KeyGuard(self.key) if isinstance(self.key, kms.Key) else None
        self.capture_allowlist = BucketGuard(self.capture_bucket, arn=self.capture_bucket_arn, label="Captures")
        self.tls_allowlist = BucketGuard(self.tls_bucket, arn=self.tls_bucket_arn, label="TlsCertificates")
        self.audit_allowlist = BucketGuard(self.audit_bucket, arn=self.audit_bucket_arn, label="AuditTrail")
        self.audit_allowlist.require_key(self.key_ids, KeyRequirement.DEFAULT)
        self.capture_allowlist.require_key(
            self.key_ids, KeyRequirement.EXPLICIT if props.load_balancer_logs else KeyRequirement.DEFAULT)
        self.load_balancer_logs = props.load_balancer_logs
        if props.load_balancer_logs:
            # The operator gives each ALB the prefix <capture prefix><hash>/alb; ELB appends AWSLogs/<account>/.
            self.capture_allowlist.accept_load_balancer_logs(f"{props.capture_prefix}*/alb/AWSLogs/{stack.account}/")

        warnings = RiskWarnings()
        warn_capture_storage(warnings, account=stack.account, reader_role_arns=props.reader_role_arns,
                             raw_reader_role_arns=props.raw_reader_role_arns,
                             break_glass_role_arns=props.break_glass_role_arns, imported_key=self.key_allowlist is None)
        warnings.annotate(self)
        for arn in props.reader_role_arns:
            self._admit_reader(arn, (props.curated_prefix,))
        for arn in props.raw_reader_role_arns:
            self._admit_reader(arn, (props.capture_prefix, props.quarantine_prefix, props.curated_prefix))
        for arn in props.break_glass_role_arns:
            for guard, bucket in ((self.capture_allowlist, self.capture_bucket_arn),
                                  (self.tls_allowlist, self.tls_bucket_arn)):
                guard.admit_all(arn)
                if self.key_allowlist is not None:
                    self.key_allowlist.admit(arn, ("kms:Decrypt", "kms:GenerateDataKey"), bucket, named=True)

    def _audit_bucket(self, props: CaptureStorageProps, name: str) -> s3.Bucket:
        """The audit trail's bucket: hardened like the others (KMS, versioned, access-logged, TLS only), with S3
        Object Lock on and a default retention (every link written gets it); no lifecycle (a locked version cannot
        expire before its retention anyway, and a link removed later would break the chain verify-trail reads)."""
        bucket = hardened_bucket(self, "AuditBucket", bucket_name=name, name_property="audit_bucket_name",
                                 encryption_key=self.key, access_logs_bucket=self.access_log_bucket,
                                 removal_policy=props.removal_policy)
        cfn = bucket.node.default_child
        assert isinstance(cfn, s3.CfnBucket)
        cfn.object_lock_enabled = True
        cfn.object_lock_configuration = s3.CfnBucket.ObjectLockConfigurationProperty(
            object_lock_enabled="Enabled", rule=s3.CfnBucket.ObjectLockRuleProperty(
                default_retention=s3.CfnBucket.DefaultRetentionProperty(
                    mode=props.audit_lock_mode, days=props.audit_lock_retention_days)))
        return bucket

    def grant_append_audit_trail(self, grantee: iam.IGrantable) -> None:
        """Append links to the audit trail (``trail/`` of :attr:`audit_bucket`): put new objects (Object Lock applies
        the default retention), read and list the links' versions (to chain after the last), the key through S3.
        No delete, no retention or legal-hold change, no governance bypass."""
        grant_object_writes(grantee, bucket_arn=self.audit_bucket_arn, prefix=AUDIT_TRAIL_PREFIX, key=self.key,
                            actions=("s3:PutObject",))
        grant_object_reads(grantee, bucket_arn=self.audit_bucket_arn, prefix=AUDIT_TRAIL_PREFIX, key=self.key,
                           actions=("s3:GetObject", "s3:GetObjectVersion"))
        iam.Grant.add_to_principal(grantee=grantee, actions=["s3:ListBucketVersions"],
                                   resource_arns=[self.audit_bucket_arn],
                                   conditions={"StringLike": {"s3:prefix": [AUDIT_TRAIL_PREFIX.rstrip("/"),
                                                                            f"{AUDIT_TRAIL_PREFIX}*"]}})

    def grant_erase(self, grantee: iam.IGrantable) -> None:
        """What ``python -m hyperpod_inference_iac.capture_table_ops delete|verify|expire|verify-trail`` calls in these
        buckets (docs/capture-processor.md#erasure-everywhere-and-verify), and nothing else; the tables' part
        (``curated-iceberg/``, the catalog, Lake Formation) is ``CaptureTables.grant_erase``.

        - the raw captures, ``curated/`` and ``quarantine/``: list every version, read each version, write the
          rewrite, delete versions by id (``s3:DeleteObjectVersion``; no plain delete, which would only add a
          delete marker);
        - ``athena-results/``: list versions and delete them (results are deleted whole, never read);
        - ``audit/erasure-register/`` (write, read), ``audit/erasures/`` and ``audit/table-deletions/`` (write);
        - the capture key through S3 for exactly those prefixes (the register and the records name it);
        - the audit bucket's trail: append (``grant_append_audit_trail``) and read each link's lock
          (``s3:GetObjectRetention``, ``s3:GetObjectLegalHold``: S3 returns a link's Object Lock mode only to a
          caller allowed them). No delete there, no retention or legal-hold change, no governance bypass.

        Every grant is also an entry of the buckets' allowlists and the key policy for those prefixes."""
        bucket, key = self.capture_bucket_arn, self.key
        rewritten = (self.capture_prefix, self.curated_prefix, self.quarantine_prefix)
        results = self.props.query_results_prefix
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:ListBucketVersions"], resource_arns=[bucket],
            conditions={"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in (*rewritten, results)]}})
        for prefix in rewritten:
            grant_object_reads(grantee, bucket_arn=bucket, prefix=prefix,
                               actions=("s3:GetObject", "s3:GetObjectVersion"), list_bucket=False)
            grant_object_writes(grantee, bucket_arn=bucket, prefix=prefix, actions=("s3:PutObject",))
            grant_object_deletes(grantee, bucket, prefix)
        grant_object_deletes(grantee, bucket, results)
        grant_object_writes(grantee, bucket_arn=bucket, prefix=ERASURE_REGISTER_PREFIX, actions=("s3:PutObject",))
        grant_object_reads(grantee, bucket_arn=bucket, prefix=ERASURE_REGISTER_PREFIX, list_bucket=False)
        for prefix in (ERASURE_RECORDS_PREFIX, TABLE_DELETIONS_PREFIX):
            grant_object_writes(grantee, bucket_arn=bucket, prefix=prefix, actions=("s3:PutObject",))
        # The key for those prefixes only (grant_object_writes' own key statement is for the bucket: replaced here
        # by none, the writes above pass key=None).
        grant_key_through_s3(grantee, key, KMS_WRITE_ACTIONS, bucket, prefixes=(
            *rewritten, ERASURE_REGISTER_PREFIX, ERASURE_RECORDS_PREFIX, TABLE_DELETIONS_PREFIX))
        self.grant_append_audit_trail(grantee)
        grant_object_reads(grantee, bucket_arn=self.audit_bucket_arn, prefix=AUDIT_TRAIL_PREFIX,
                           actions=("s3:GetObjectRetention", "s3:GetObjectLegalHold"), list_bucket=False)

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

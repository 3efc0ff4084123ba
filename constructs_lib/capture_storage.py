"""Where captured inference data lives: a customer-managed KMS key, the capture bucket, the
inference operator's TLS certificate bucket and the bucket their server access logs go to.

Grants come from here (``grant_write_captures``, ``grant_read_captures``,
``grant_write_tls_certificates``, ``grant_read_tls_certificates``) so a reviewer reads every
permission on captured prompts next to the thing it protects. KMS use is always limited to S3 in
this region working on that bucket (:func:`~hyperpod_inference_iac.s3_access.kms_through_s3`).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Annotations, Duration, Names, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.hardened_bucket import hardened_bucket
from hyperpod_inference_iac.patterns import IAM_ROLE_ARN, S3_BUCKET_NAME
from hyperpod_inference_iac.s3_access import (
    KMS_READ_ACTIONS,
    KMS_WRITE_ACTIONS,
    SAME_ACCOUNT,
    bucket_arn,
    grant_key_through_s3,
    grant_object_reads,
    grant_object_writes,
    kms_through_s3,
    objects_arn,
)
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved

# Key administration without key use: using the key needs an explicit, conditioned statement.
_KEY_ADMIN_ACTIONS = [
    "kms:CancelKeyDeletion", "kms:Create*", "kms:Delete*", "kms:DescribeKey", "kms:Disable*", "kms:Enable*",
    "kms:Get*", "kms:List*", "kms:Put*", "kms:Revoke*", "kms:ScheduleKeyDeletion", "kms:TagResource",
    "kms:UntagResource", "kms:Update*",
]
_KEY_USE_ACTIONS = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"]
# The AWS-managed AmazonSageMakerHyperPodInferenceAccess policy covers `hyperpod-tls*` buckets only.
TLS_BUCKET_PREFIX = "hyperpod-tls"
RETENTION_DAYS = (1, 3650)
NONCURRENT_RETENTION_DAYS = (1, 365)


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
) -> None:
    """Every rule of :class:`CaptureStorage`'s properties (a config loader calls it with its key paths)."""
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
    for index, arn in enumerate(reader_role_arns):
        if not is_unresolved(arn) and not IAM_ROLE_ARN.match(arn):
            problems.add("CaptureStorage.BadReaderRoleArn", at.at("reader_role_arns", index),
                         "must be an IAM role ARN such as arn:aws:iam::111122223333:role/analysts", arn)


class CaptureStorage(Construct):
    """KMS key + capture bucket + TLS certificate bucket + server access log bucket.

    Bring your own key or log bucket, or let the construct create secure ones.

    :param capture_bucket_name: name of the capture bucket. @default a name CloudFormation generates;
        give one (deterministic) when manifests outside CDK (GitOps) must name the bucket.
    :param tls_bucket_name: must start with ``hyperpod-tls``: the AWS-managed policy
        ``AmazonSageMakerHyperPodInferenceAccess`` grants the operator access to ``hyperpod-tls*``
        buckets only, so any other name silently breaks certificate output.
        @default ``hyperpod-tls-<account>-<region>-<8 characters of this construct's id>``
    :param access_log_bucket_name: name of the log bucket this construct creates. @default generated
    :param encryption_key: the capture and TLS buckets' key. @default a new customer-managed key with
        rotation whose key policy allows administration to the account and use only through S3
        (an imported key's policy cannot be edited here: grant readers in it yourself).
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
    :param reader_role_arns: roles (analysts, monitors) that may read captures; granted through the
        bucket and key policies so they show up in review next to the data. @default none
    :param removal_policy: what happens to the buckets and key when removed from the stack.
        @default RETAIN

    Attributes: ``key``, ``capture_bucket``, ``tls_bucket``, ``access_log_bucket``; ``capture_bucket_arn``
    and ``tls_bucket_arn`` (deterministic strings when the names are given, so a grant in another
    stack needs no cross-stack export).
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
        reader_role_arns: Sequence[str] = (),
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, id)
        problems = Problems()
        check_capture_storage(
            problems, capture_bucket_name=capture_bucket_name, tls_bucket_name=tls_bucket_name,
            access_log_bucket_name=access_log_bucket_name, retention_days=retention_days,
            noncurrent_version_retention_days=noncurrent_version_retention_days,
            access_log_retention_days=access_log_retention_days, reader_role_arns=reader_role_arns)
        problems.raise_if_any(f"CaptureStorage {self.node.path}")
        stack = Stack.of(self)
        if tls_bucket_name is None:
            tls_bucket_name = f"{TLS_BUCKET_PREFIX}-{stack.account}-{stack.region}-{Names.unique_id(self)[-8:].lower()}"

        self.key: kms.IKey = encryption_key or kms.Key(
            self,
            "Key",
            alias=key_alias,
            description="Encrypts captured inference data and operator TLS certificates",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
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
            encryption_key=self.key,
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

        if isinstance(self.key, kms.Key):
            self._scope_key_policy(stack, reader_role_arns)
        elif reader_role_arns:
            Annotations.of(self).add_warning_v2(
                "@hyperpod-inference-iac/CaptureStorage:readersNeedKeyPolicy",
                "reader_role_arns with an imported encryption_key: the readers can list and get the objects, but "
                "decrypting them needs kms:Decrypt for these roles in that key's own policy (edit it where the "
                "key is managed)")
        if reader_role_arns:
            readers = [iam.ArnPrincipal(arn) for arn in reader_role_arns]
            self.capture_bucket.add_to_resource_policy(iam.PolicyStatement(
                sid="CaptureReadersGetObjects", principals=readers,
                actions=["s3:GetObject", "s3:GetObjectVersion"],
                resources=[self.capture_bucket.arn_for_objects("*")],
            ))
            self.capture_bucket.add_to_resource_policy(iam.PolicyStatement(
                sid="CaptureReadersList", principals=readers, actions=["s3:ListBucket"],
                resources=[self.capture_bucket.bucket_arn],
            ))

    # -- grants -------------------------------------------------------------------------------
    def grant_write_captures(self, grantee: iam.IGrantable, prefix: str = "") -> iam.Grant:
        """PutObject under ``prefix`` of the capture bucket, with the KMS data key it needs."""
        return grant_object_writes(grantee, bucket_arn=self.capture_bucket_arn, prefix=prefix, key=self.key)

    def grant_read_captures(self, grantee: iam.IGrantable, prefix: str = "") -> iam.Grant:
        """Get and list objects under ``prefix`` of the capture bucket, and decrypt them."""
        return grant_object_reads(grantee, bucket_arn=self.capture_bucket_arn, prefix=prefix, key=self.key,
                                  actions=("s3:GetObject", "s3:GetObjectVersion"))

    def grant_write_tls_certificates(self, grantee: iam.IGrantable) -> iam.Grant:
        """What the inference operator needs on its TLS output bucket: tagged writes only."""
        grant_key_through_s3(grantee, self.key, KMS_WRITE_ACTIONS, self.tls_bucket_arn)
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:GetObject", "s3:DeleteObject"],
            resource_arns=[objects_arn(self.tls_bucket_arn)], conditions=SAME_ACCOUNT,
        )
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:PutObject", "s3:PutObjectTagging"],
            resource_arns=[objects_arn(self.tls_bucket_arn)],
            conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}",
                                         "s3:RequestObjectTag/CreatedBy": "HyperPodInference"}},
        )

    def grant_read_tls_certificates(self, grantee: iam.IGrantable) -> iam.Grant:
        """List and read the TLS bucket (what Mountpoint for S3 needs to mount it)."""
        grant_key_through_s3(grantee, self.key, KMS_READ_ACTIONS, self.tls_bucket_arn)
        iam.Grant.add_to_principal(grantee=grantee, actions=["s3:ListBucket"], resource_arns=[self.tls_bucket_arn])
        return iam.Grant.add_to_principal(grantee=grantee, actions=["s3:GetObject"],
                                          resource_arns=[objects_arn(self.tls_bucket_arn)])

    def _scope_key_policy(self, stack: Stack, reader_role_arns: Sequence[str]) -> None:
        """Replace CDK's default key policy (account root: ``kms:*``) with a scoped one.

        The account keeps administration (so the key can never become unmanageable) but may use
        the key only through S3 in this region; IAM grants above narrow it further.
        """
        root = f"arn:{stack.partition}:iam::{stack.account}:root"
        statements: list[dict] = [
            {"Sid": "KeyAdministration", "Effect": "Allow", "Principal": {"AWS": root},
             "Action": _KEY_ADMIN_ACTIONS, "Resource": "*"},
            {"Sid": "UseThroughS3AndSqsInThisAccount", "Effect": "Allow", "Principal": {"AWS": root},
             "Action": _KEY_USE_ACTIONS, "Resource": "*",
             "Condition": {"StringEquals": {"kms:CallerAccount": stack.account},
                           "StringLike": {"kms:ViaService": [f"s3.{stack.region}.amazonaws.com",
                                                             f"sqs.{stack.region}.amazonaws.com"]}}},
        ]
        if reader_role_arns:
            statements.append(
                {"Sid": "CaptureReadersDecryptThroughS3", "Effect": "Allow",
                 "Principal": {"AWS": list(reader_role_arns)}, "Action": "kms:Decrypt", "Resource": "*",
                 "Condition": kms_through_s3(stack.region, self.capture_bucket_arn, in_key_policy=True)}
            )
        cfn_key: kms.CfnKey = self.key.node.default_child  # type: ignore[assignment]
        cfn_key.add_property_override("KeyPolicy", {"Version": "2012-10-17", "Statement": statements})

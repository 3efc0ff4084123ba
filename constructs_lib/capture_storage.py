"""Where captured inference data lives: a customer-managed KMS key, the capture bucket, the
inference operator's TLS certificate bucket and the bucket their access logs go to.

Grants come from here (``grant_write_captures``, ``grant_read_captures``,
``grant_write_tls_certificates``) so a reviewer reads every permission on captured prompts next
to the thing it protects. KMS use is always conditioned on S3 being the caller
(``kms:ViaService``) and on the bucket (``kms:EncryptionContext:aws:s3:arn``).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.hardened_bucket import hardened_bucket
from hyperpod_inference_iac.validation import Problems

# Key administration without key use: using the key needs an explicit, conditioned grant.
_KEY_ADMIN_ACTIONS = [
    "kms:CancelKeyDeletion", "kms:Create*", "kms:Delete*", "kms:DescribeKey", "kms:Disable*", "kms:Enable*",
    "kms:Get*", "kms:List*", "kms:Put*", "kms:Revoke*", "kms:ScheduleKeyDeletion", "kms:TagResource",
    "kms:UntagResource", "kms:Update*",
]
_KEY_USE_ACTIONS = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"]
TLS_BUCKET_PREFIX = "hyperpod-tls"


class CaptureStorage(Construct):
    """KMS key + capture bucket + TLS certificate bucket + access log bucket.

    :param capture_bucket_name: name of the capture bucket (deterministic, so manifests can name it).
    :param tls_bucket_name: must start with ``hyperpod-tls``: the AWS-managed policy
        ``AmazonSageMakerHyperPodInferenceAccess`` grants the operator access to ``hyperpod-tls*``
        buckets only, so any other name silently breaks certificate output.
    :param retention_days: captured objects expire this many days after they are written.
    :param noncurrent_version_retention_days: overwritten or deleted versions are purged after this.
    :param access_log_retention_days: how long S3 server access logs (who read what) are kept.
    :param key_alias: alias of the customer-managed key, e.g. ``alias/llm-platform/capture``.
    :param reader_role_arns: roles (analysts, monitors) that may read captures; granted through the
        bucket and key policies so they show up in review next to the data.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        capture_bucket_name: str,
        tls_bucket_name: str,
        access_log_bucket_name: str,
        key_alias: str,
        retention_days: int,
        noncurrent_version_retention_days: int = 7,
        access_log_retention_days: int = 365,
        reader_role_arns: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, id_)
        _validate(tls_bucket_name, retention_days, noncurrent_version_retention_days)
        stack = Stack.of(self)
        # ARNs built from the fixed names rather than from the bucket resources: other stacks that
        # receive a grant then need no cross-stack export, and reviewers read the real bucket name.
        self.capture_bucket_arn = f"arn:{stack.partition}:s3:::{capture_bucket_name}"
        self.tls_bucket_arn = f"arn:{stack.partition}:s3:::{tls_bucket_name}"

        self.key = kms.Key(
            self,
            "Key",
            alias=key_alias,
            description="Encrypts captured inference data and operator TLS certificates",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.access_log_bucket = hardened_bucket(
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
        )
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
        )
        # Buckets of other stacks (e.g. HyperPod lifecycle scripts) log here too; S3's log delivery is
        # limited to this account's buckets.
        self.access_log_bucket.add_to_resource_policy(iam.PolicyStatement(
            sid="S3ServerAccessLogsFromThisAccount", principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
            actions=["s3:PutObject"], resources=[self.access_log_bucket.arn_for_objects("*")],
            conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
        ))
        self._scope_key_policy(stack, reader_role_arns)
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
        self._grant_key(grantee, ["kms:GenerateDataKey", "kms:Decrypt"], self.capture_bucket_arn)
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:PutObject", "s3:AbortMultipartUpload"],
            resource_arns=[f"{self.capture_bucket_arn}/{prefix}*"],
            conditions=_SAME_ACCOUNT,
        )

    def grant_read_captures(self, grantee: iam.IGrantable, prefix: str = "") -> iam.Grant:
        """Get and list objects under ``prefix`` of the capture bucket, and decrypt them."""
        self._grant_key(grantee, ["kms:Decrypt"], self.capture_bucket_arn)
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:ListBucket"], resource_arns=[self.capture_bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}} if prefix else None,
        )
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:GetObject", "s3:GetObjectVersion"],
            resource_arns=[f"{self.capture_bucket_arn}/{prefix}*"],
        )

    def grant_write_tls_certificates(self, grantee: iam.IGrantable) -> iam.Grant:
        """What the inference operator needs on its TLS output bucket: tagged writes only."""
        self._grant_key(grantee, ["kms:GenerateDataKey", "kms:Decrypt"], self.tls_bucket_arn)
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:GetObject", "s3:DeleteObject"],
            resource_arns=[f"{self.tls_bucket_arn}/*"], conditions=_SAME_ACCOUNT,
        )
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:PutObject", "s3:PutObjectTagging"],
            resource_arns=[f"{self.tls_bucket_arn}/*"],
            conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}",
                                         "s3:RequestObjectTag/CreatedBy": "HyperPodInference"}},
        )

    def grant_read_tls_certificates(self, grantee: iam.IGrantable) -> None:
        """List and read the TLS bucket (what Mountpoint for S3 needs to mount it)."""
        self._grant_key(grantee, ["kms:Decrypt"], self.tls_bucket_arn)
        iam.Grant.add_to_principal(grantee=grantee, actions=["s3:ListBucket"], resource_arns=[self.tls_bucket_arn])
        iam.Grant.add_to_principal(grantee=grantee, actions=["s3:GetObject"],
                                   resource_arns=[f"{self.tls_bucket_arn}/*"])

    def _grant_key(self, grantee: iam.IGrantable, actions: list[str], bucket_arn: str) -> iam.Grant:
        stack = Stack.of(self)
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=actions, resource_arns=[self.key.key_arn],
            conditions={
                "StringLike": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com",
                               # Bucket keys use the bucket ARN as context; object keys the object ARN.
                               "kms:EncryptionContext:aws:s3:arn": [bucket_arn, f"{bucket_arn}/*"]},
                "StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"},
            },
        )

    def _scope_key_policy(self, stack: Stack, reader_role_arns: Sequence[str]) -> None:
        """Replace CDK's default key policy (account root: ``kms:*``) with a scoped one.

        The account keeps administration (so the key can never become unmanageable) but may use
        the key only through S3 and SQS in this region; IAM grants above narrow it further.
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
                 "Condition": {"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"}}}
            )
        cfn_key: kms.CfnKey = self.key.node.default_child  # type: ignore[assignment]
        cfn_key.add_property_override("KeyPolicy", {"Version": "2012-10-17", "Statement": statements})


_SAME_ACCOUNT = {"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}}


def _validate(tls_bucket_name: str, retention_days: int, noncurrent_days: int) -> None:
    problems = Problems()
    if not tls_bucket_name.startswith(TLS_BUCKET_PREFIX):
        problems.add("CaptureStorage.TlsBucketPrefix", "tls_bucket_name",
                     f"must start with '{TLS_BUCKET_PREFIX}' (the operator's AWS-managed policy covers only "
                     f"those buckets)", tls_bucket_name)
    if not 1 <= retention_days <= 3650:
        problems.add("CaptureStorage.RetentionOutOfRange", "retention_days", "must be 1..3650 days", retention_days)
    if not 1 <= noncurrent_days <= 365:
        problems.add("CaptureStorage.RetentionOutOfRange", "noncurrent_version_retention_days",
                     "must be 1..365 days", noncurrent_days)
    problems.raise_if_any("CaptureStorage")

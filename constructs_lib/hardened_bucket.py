"""An S3 bucket with the hardening every bucket of this library gets."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Annotations, Duration, Names, RemovalPolicy, Stack, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac import s3_access
from hyperpod_inference_iac.cdk_types import cfn_child


def hardened_bucket(
    scope: Construct,
    id: str,
    *,
    bucket_name: str | None,
    encryption_key: kms.IKey | None,
    access_logs_bucket: s3.IBucket | None,
    lifecycle_rules: Sequence[s3.LifecycleRule] = (),
    removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    bucket_key: bool = True,
) -> s3.Bucket:
    """SSE-KMS with a bucket key (or SSE-S3 when ``encryption_key`` is None, for log sinks that
    AWS services can only write with SSE-S3), versioning, every public access blocked, TLS 1.2+
    only, ACLs disabled (object ownership enforced), RETAIN by default (buckets hold captured prompts
    and certificates: they are never deleted with the stack).

    ``bucket_key=False``: SSE-KMS without an S3 Bucket Key, one KMS request per object written or read, so
    that the encryption context is each object's ARN and a key policy can tell prefixes apart.

    Server access logs go to ``access_logs_bucket`` under ``<bucket name>/`` (so one log bucket serves
    many), and the log bucket's policy admits the S3 logging service for exactly this bucket and prefix
    (``aws:SourceArn``). Both are set here, not through the CDK's ``serverAccessLogsBucket``, whose
    behaviour depends on an app's feature flags (with ``@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy``
    unset it puts a ``LogDeliveryWrite`` ACL on the log bucket, which ACL-less buckets refuse) and which
    references the source bucket from the log bucket's stack (a cross-stack cycle when they differ): the
    statement names this bucket by its literal ARN. A log bucket that is imported keeps its own policy
    (warned: it must admit this bucket).
    """
    bucket = s3.Bucket(
        scope,
        id,
        bucket_name=bucket_name,
        encryption=s3.BucketEncryption.KMS if encryption_key else s3.BucketEncryption.S3_MANAGED,
        encryption_key=encryption_key,
        # Bucket keys cut KMS requests (and cost) by ~99% for high-volume writes.
        bucket_key_enabled=bucket_key if encryption_key else None,
        versioned=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        lifecycle_rules=[
            *lifecycle_rules,
            s3.LifecycleRule(id="abort-incomplete-uploads",
                             abort_incomplete_multipart_upload_after=Duration.days(7)),
        ],
        removal_policy=removal_policy,
    )
    if access_logs_bucket is not None:
        _log_to(bucket, access_logs_bucket, prefix=f"{bucket_name or Names.unique_id(bucket).lower()}/")
    return bucket


def _log_to(bucket: s3.Bucket, logs: s3.IBucket, *, prefix: str) -> None:
    cfn_bucket = cfn_child(bucket, s3.CfnBucket)
    cfn_bucket.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
        destination_bucket_name=s3_access.bucket_name(logs), log_file_prefix=prefix)
    source = s3_access.bucket_arn(bucket)
    same_stack = Stack.of(logs) is Stack.of(bucket)
    if isinstance(logs, s3.Bucket) and (same_stack or not Token.is_unresolved(source)):
        logs.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")], actions=["s3:PutObject"],
            resources=[logs.arn_for_objects(f"{prefix}*")],
            conditions={"ArnLike": {"aws:SourceArn": source},
                        "StringEquals": {"aws:SourceAccount": Stack.of(bucket).account}}))
    else:
        Annotations.of(bucket).add_warning_v2(
            "@hyperpod-inference-iac/hardened_bucket:logBucketPolicy",
            f"server access logs go to an imported bucket: its policy must let logging.s3.amazonaws.com put "
            f"objects under {prefix} with aws:SourceArn of this bucket")

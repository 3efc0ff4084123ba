"""An S3 bucket with the hardening every bucket of this library gets."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Annotations, Duration, Names, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.foundation.cdk_types import cfn_child
from hyperpod_inference_iac.security import s3_access


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
    name_property: str = "bucket_name",
) -> s3.Bucket:
    """SSE-KMS with a bucket key (or SSE-S3 when ``encryption_key`` is None, for log sinks that
    AWS services can only write with SSE-S3), versioning, every public access blocked, TLS 1.2+
    only, ACLs disabled (object ownership enforced), RETAIN by default (buckets hold captured prompts
    and certificates: they are never deleted with the stack).

    ``bucket_key=False``: SSE-KMS without an S3 Bucket Key, one KMS request per object written or read, so
    that the encryption context is each object's ARN and a key policy can tell prefixes apart.

    ``name_property``: the calling construct's property that names this bucket, for the warning below.

    Server access logs go to ``access_logs_bucket`` under ``<bucket name>/`` (so one log bucket serves
    many), and the log bucket's policy admits the S3 logging service for exactly this bucket and prefix
    (``aws:SourceArn``). Both are set here, not through the CDK's ``serverAccessLogsBucket``, whose
    behaviour depends on an app's feature flags (with ``@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy``
    unset it puts a ``LogDeliveryWrite`` ACL on the log bucket, which ACL-less buckets refuse) and which
    references the source bucket from the log bucket's stack (a cross-stack cycle when they differ): the
    statement names this bucket by its literal ARN. Whether the statement is added depends on the buckets
    alone, never on an app's feature flags (the ARN holds a partition token without
    ``@aws-cdk/core:enablePartitionLiterals``, and is still this bucket's). A log bucket whose policy this
    function cannot write keeps its own (warned, ``hardened_bucket:logBucketPolicy``: it must admit this
    bucket): an imported one, or one of another stack when this bucket has no literal name (the statement
    would then reference this bucket from the log bucket's stack, a cycle).
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
        _log_to(bucket, access_logs_bucket, prefix=f"{bucket_name or Names.unique_id(bucket).lower()}/",
                name_property=name_property)
    return bucket


def _log_to(bucket: s3.Bucket, logs: s3.IBucket, *, prefix: str, name_property: str) -> None:
    cfn_bucket = cfn_child(bucket, s3.CfnBucket)
    cfn_bucket.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
        destination_bucket_name=s3_access.bucket_name(logs), log_file_prefix=prefix)
    source = s3_access.bucket_arn(bucket)
    same_stack = Stack.of(logs) is Stack.of(bucket)
    # A literal name, not a literal ARN: the ARN's partition is a token unless the app sets
    # @aws-cdk/core:enablePartitionLiterals, and it names this bucket either way (no cross-stack reference).
    named = s3_access.literal_bucket_name(bucket) is not None
    if isinstance(logs, s3.Bucket) and (same_stack or named):
        logs.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")], actions=["s3:PutObject"],
            resources=[logs.arn_for_objects(f"{prefix}*")],
            conditions={"ArnLike": {"aws:SourceArn": source},
                        "StringEquals": {"aws:SourceAccount": Stack.of(bucket).account}}))
        return
    if isinstance(logs, s3.Bucket):
        why = (f"server access logs go to {logs.node.path}, a bucket of another stack, and this bucket has no "
               "literal name (a statement naming it there would reference this stack from that one)")
        fix = f"give this bucket a name ({name_property}), or add to that bucket's policy a statement that lets"
    else:
        why = "server access logs go to an imported bucket, whose policy this construct cannot change"
        fix = "its policy must let"
    Annotations.of(bucket).add_warning_v2(
        "@hyperpod-inference-iac/hardened_bucket:logBucketPolicy",
        f"{why}: {fix} logging.s3.amazonaws.com put objects under {prefix} with aws:SourceArn of this bucket")

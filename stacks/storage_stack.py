"""Capture storage: the KMS key and the buckets for captured data and operator certificates."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from hyperpod_inference_iac.capture_pipeline import CapturePipeline
from hyperpod_inference_iac.capture_storage import CaptureStorage
from platform_config import PlatformConfig
from stacks.nag_acknowledgments import acknowledge, acknowledge_bucket_notifications_handler, logical_arn


class StorageStack(Stack):
    def __init__(self, scope: Construct, id_: str, *, config: PlatformConfig, **kwargs: Any) -> None:
        super().__init__(scope, id_, **kwargs)
        capture = config.capture
        self.storage = CaptureStorage(
            self,
            "CaptureStorage",
            capture_bucket_name=config.capture_bucket_name,
            tls_bucket_name=config.tls_bucket_name,
            access_log_bucket_name=config.access_log_bucket_name,
            key_alias=config.capture_key_alias,
            retention_days=capture.retention_days,
            noncurrent_version_retention_days=capture.noncurrent_version_retention_days,
            access_log_retention_days=capture.access_log_retention_days,
            reader_role_arns=capture.reader_role_arns,
        )
        self.pipeline = CapturePipeline(
            self, "CapturePipeline", bucket=self.storage.capture_bucket, encryption_key=self.storage.key,
            capture_prefixes=[capture.prefix], redact=capture.redact, pandas_layer_arn=capture.pandas_layer_arn,
            glue_database_name=f"{config.project.replace('-', '_')}_capture",
        )
        bucket = logical_arn(self.storage.capture_bucket)
        acknowledge(self.pipeline.function.role, "s3-object-wildcard-under-fixed-prefix",
                    *(f"Resource::{bucket}/{prefix}*" for prefix in (capture.prefix, "curated/", "quarantine/")))
        acknowledge(self.pipeline.function, "capture-processor-runtime")
        acknowledge_bucket_notifications_handler(self)
        CfnOutput(self, "CaptureBucketName", value=self.storage.capture_bucket.bucket_name)
        CfnOutput(self, "TlsCertificateBucketName", value=self.storage.tls_bucket.bucket_name)
        CfnOutput(self, "CaptureKeyArn", value=self.storage.key.key_arn)

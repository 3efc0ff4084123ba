"""Capture storage: the KMS key, the capture, TLS and access-log buckets, the capture pipeline, and (unless the
config turns alarms off) the alarm topic and the alarms on the pipeline."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from hyperpod_inference_iac import (
    AlarmTopic,
    CaptureAlarms,
    CaptureEraser,
    CapturePipeline,
    CaptureStorage,
    CaptureTables,
    PlatformValue,
)
from platform_config import PlatformConfig


class StorageStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: PlatformConfig, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        capture = config.capture
        # The config's capture options are the constructs' own; the app adds the names it derives from `project`.
        self.storage = CaptureStorage(
            self,
            "CaptureStorage",
            key_alias=config.capture_key_alias,
            # Tier 2 (ALB access logs) is delivered SSE-S3 only: accepted only when a workload asks for it.
            load_balancer_logs=config.workloads.captures_load_balancer_logs,
            **capture.storage.replace(capture_bucket_name=config.capture_bucket_name,
                                      tls_bucket_name=config.tls_bucket_name,
                                      access_log_bucket_name=config.access_log_bucket_name,
                                      audit_bucket_name=config.audit_bucket_name).kwargs(),
        )
        storage = self.storage
        self.pipeline = CapturePipeline(
            self, "CapturePipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
            log_retention=config.logging.retention, **capture.pipeline.kwargs(),
        )
        # The curated captures as Iceberg tables (the processor writes both layouts this release), their readers
        # by column through Lake Formation, and the Athena workgroups with the named queries.
        self.tables = CaptureTables(self, "CaptureTables", pipeline=self.pipeline, audit_trail=storage,
                                    **capture.tables.kwargs())
        # The erasure role (capture_table_ops delete, verify, expire, verify-trail), when the config names who may
        # assume it: exactly what the command calls (docs/capture-processor.md#erasure-everywhere-and-verify).
        self.eraser: CaptureEraser | None = None
        if capture.eraser.eraser_principals:
            self.eraser = CaptureEraser(self, "CaptureEraser", storage=storage, tables=self.tables,
                                        **capture.eraser.kwargs())
            CfnOutput(self, "CaptureEraserRoleArn", value=self.eraser.role.role_arn)
        alarms = config.alarms
        self.alarm_topic: AlarmTopic | None = None
        self.capture_alarms: CaptureAlarms | None = None
        if alarms.enabled:
            # In this stack: the pipeline's own alarms notify it, and the cluster stack's alarms reference it.
            self.alarm_topic = AlarmTopic(
                self, "AlarmTopic", topic_name=config.alarm_topic_name, display_name=f"{config.project} alarms",
                **alarms.subscribers.kwargs())
            self.capture_alarms = CaptureAlarms(
                self, "CaptureAlarms", pipeline=self.pipeline, topic=self.alarm_topic, alarm_name_prefix=config.project,
                runbook_url=alarms.runbook_url, notify_on_ok=alarms.notify_on_ok,
                expected_tiers=config.capture_tiers, **alarms.capture.kwargs())
            CfnOutput(self, "AlarmTopicArn", value=self.alarm_topic.topic_arn)
        CfnOutput(self, PlatformValue.CAPTURE_BUCKET.output_name, value=self.storage.capture_bucket.bucket_name)
        CfnOutput(self, PlatformValue.TLS_BUCKET.output_name, value=self.storage.tls_bucket.bucket_name)
        CfnOutput(self, "CaptureKeyArn", value=self.storage.key.key_arn)
        CfnOutput(self, "CaptureWorkGroups", value=",".join(w.name for w in self.tables.workgroups.values()))

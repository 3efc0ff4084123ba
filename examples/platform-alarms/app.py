#!/usr/bin/env python3
"""Told when capture stops or a certificate is about to break: an encrypted alarm topic with its subscribers, the
alarms on a capture pipeline and on a certificate, and one dashboard for the on-call engineer."""

from aws_cdk import App, Duration, Environment, Stack
from aws_cdk import aws_certificatemanager as acm

from hyperpod_inference_iac import (
    AlarmSettings,
    AlarmTopic,
    CaptureAlarms,
    CapturePipeline,
    CaptureStorage,
    CertificateAlarms,
    PlatformDashboard,
)

ACCOUNT, REGION = "111122223333", "us-west-2"
app = App()
stack = Stack(app, "PlatformAlarmsExample", env=Environment(account=ACCOUNT, region=REGION))

storage = CaptureStorage(stack, "Storage", capture_bucket_name=f"example-captures-{ACCOUNT}-{REGION}",
                         key_alias="alias/example/capture")
pipeline = CapturePipeline(
    stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
    capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
    quarantine_prefix=storage.quarantine_prefix,
)

# The topic has a key of its own that CloudWatch (this account's alarms only) may use; subscribers confirm by mail
# or through their paging service. An existing topic (the one your Chatbot channel lists) gets every alarm too.
topic = AlarmTopic(
    stack, "AlarmTopic", topic_name="example-alarms", display_name="example alarms",
    emails=["ml-platform-oncall@example.com"],
    https_endpoints=["https://events.pagerduty.com/integration/0123456789abcdef/enqueue"],
    forward_to_topic_arns=[f"arn:aws:sns:{REGION}:{ACCOUNT}:central-ops"],
)
capture = CaptureAlarms(
    stack, "CaptureAlarms", pipeline=pipeline, topic=topic, alarm_name_prefix="example",
    runbook_url="https://github.com/example-org/llm-platform/blob/main/docs/alarms.md",
    # Only Tier 3 (model pod) capture is on here; sampled at night, a quiet day still writes something.
    expected_tiers=["pod"],
    no_curated_output=AlarmSettings(threshold=1, period=Duration.hours(1), evaluation_periods=24),
)
certificate = acm.Certificate.from_certificate_arn(
    stack, "EndpointCertificate", f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f")
certificates = CertificateAlarms(stack, "CertificateAlarms", certificates={"endpoints": certificate}, topic=topic,
                                 alarm_name_prefix="example")
PlatformDashboard(
    stack, "Dashboard", dashboard_name="example-inference", pipeline=pipeline, tiers=["pod"],
    certificates={"endpoints": certificate}, alarms=[*capture.alarms.values(), *certificates.alarms.values()],
)

app.synth()

#!/usr/bin/env python3
"""Captured inference data: a customer-managed key, the capture bucket with retention and server access
logs, and the pipeline that turns captures into redacted Parquet, queryable in Athena."""

from aws_cdk import App, Environment, Stack
from aws_cdk import aws_iam as iam

from hyperpod_inference_iac import CapturePipeline, CaptureStorage, RedactionRule

app = App()
stack = Stack(app, "CaptureStorageExample", env=Environment(account="111122223333", region="us-west-2"))

storage = CaptureStorage(
    stack, "Storage",
    capture_bucket_name="example-captures-111122223333-us-west-2",
    key_alias="alias/example/capture",
    retention_days=30,
    # Analysts read the redacted curated/ data only; the raw captures (unredacted prompts) are for the
    # roles named here one by one; incident responders are exempt from the allowlists (IAM still applies).
    reader_role_arns=["arn:aws:iam::111122223333:role/ml-analysts"],
    raw_reader_role_arns=["arn:aws:iam::111122223333:role/ml-privacy-review"],
    break_glass_role_arns=["arn:aws:iam::111122223333:role/security-incident-response"],
)
CapturePipeline(
    stack, "Pipeline",
    bucket=storage.capture_bucket,
    encryption_key=storage.key,
    capture_prefixes=[storage.capture_prefix],
    output_prefix=storage.curated_prefix,
    quarantine_prefix=storage.quarantine_prefix,
    redact=[RedactionRule.EMAIL, RedactionRule.PHONE, RedactionRule.ACCESS_TOKEN],
)

# A service of your own that writes captures under its prefix: the grant comes from the storage, which also
# lists the role on the bucket's and the key's allowlists (a role granted by IAM alone reads and writes nothing).
writer = iam.Role(stack, "CaptureWriter", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
storage.grant_write_captures(writer, prefix="data-capture/my-service/")

app.synth()

"""GpuCost's sampler writes ``gpu_node_hours`` under the capture key, as the processor writes its tables.

With ALB access logs accepted (the default platform: Tier 2 with ``costs:``) the capture bucket's default is SSE-S3
and its policy refuses every write that does not name the capture key. The real sampler ``handler`` runs against
moto (server mode, on loopback) with Glue and S3 there and the EKS and SageMaker answers stubbed: every object its
commit puts (data file, manifests, manifest list, table metadata) is recorded as boto3 sends it and judged against
the synthesized bucket policy for the sampler's own role: allowed, stored under the key, and the same put without
the key refused. The control: the sampler's former plain file IO (pyarrow's S3 file system, no SSE-KMS headers:
what runs without ``OUTPUT_KMS_KEY_ID``) puts objects the same policy refuses.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from hyperpod_inference_iac import CapturePipeline, CaptureStorage, CaptureTables, GpuCost, InstancePrice
from hyperpod_inference_iac.capture.capture_tables import NODE_HOURS_COLUMNS, NODE_HOURS_TABLE, iceberg_schema
from tests.capture_processor.conftest import Pipeline
from tests.capture_processor.test_audit_encryption import BUCKET, judged, unencrypted
from tests.capture_processor.test_iceberg_tables import database  # noqa: F401 (fixture)
from tests.capture_processor.test_node_hours_sampler import GROUPS, PRICES, _clients
from tests.capture_processor.test_tables_encryption import TABLES, assert_under_the_key, recording_writes
from tests.unit.test_data_perimeter import ACCOUNT, REGION, resolve

SAMPLER_ROLE = "capture-gpu-node-hours"
PREFIX = f"{TABLES}{NODE_HOURS_TABLE}/"


@pytest.fixture(scope="module")
def policies() -> dict[str, Any]:
    """The default platform's storage (ALB access logs accepted) with GpuCost's sampler, synthesized: the capture
    bucket's policy and the key's ARN; the sampler's role and environment."""
    stack = Stack(App(), "Storage", env=Environment(account=ACCOUNT, region=REGION))
    storage = CaptureStorage(stack, "Storage", capture_bucket_name=BUCKET, load_balancer_logs=True)
    pipeline = CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                               capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
                               quarantine_prefix=storage.quarantine_prefix)
    tables = CaptureTables(stack, "Tables", pipeline=pipeline,
                           tables_layer_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:tables:1")
    GpuCost(stack, "GpuCost", tables=tables, instance_prices=[InstancePrice(instance_type="g6e.12xlarge",
                                                                            usd_per_node_hour=10.49)],
            eks_cluster_name="llm-platform", node_groups={"gpu-g6e": ["g6e.12xlarge"]}, role_name=SAMPLER_ROLE)
    resources = Template.from_stack(stack).to_json()["Resources"]
    policy = next(r for r in resources.values() if r["Type"] == "AWS::S3::BucketPolicy"
                  and "CaptureBucket" in str(r["Properties"]["Bucket"]))
    key_id = next(k for k, r in resources.items() if r["Type"] == "AWS::KMS::Key")
    sampler = next(r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"
                   and r["Properties"].get("Handler") == "node_hours_sampler.handler")
    return {"capture": resolve(policy["Properties"]["PolicyDocument"]["Statement"], resources),
            "key_arn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{key_id}",
            "sampler": f"arn:aws:iam::{ACCOUNT}:role/{SAMPLER_ROLE}",
            "environment": resolve(sampler["Properties"]["Environment"]["Variables"], resources)}


@pytest.fixture
def node_hours(pipeline: Pipeline, database: str, moto_endpoint: str,  # noqa: F811
               monkeypatch: pytest.MonkeyPatch) -> Any:
    """``gpu_node_hours`` in moto's Glue, as CloudFormation creates it (schema and day partitions), in the capture
    bucket's tables prefix; the sampler's environment as GpuCost renders it, less the key."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform

    from capture_core.iceberg_sink import catalog_for
    from capture_core.settings import IcebergSettings

    fields = [{**f, "type": json.loads(f["type"]) if f["type"].startswith("{") else f["type"]}
              for f in iceberg_schema(NODE_HOURS_COLUMNS)]
    hour_id = next(f["id"] for f in fields if f["name"] == "hour")
    catalog = catalog_for(IcebergSettings(database), moto_endpoint, "us-east-1")
    catalog.create_table(
        (database, NODE_HOURS_TABLE), schema=Schema.model_validate({"type": "struct", "schema-id": 0,
                                                                    "fields": fields}),
        location=f"s3://{pipeline.bucket}/{PREFIX.rstrip('/')}",
        partition_spec=PartitionSpec(PartitionField(source_id=hour_id, field_id=1000, transform=DayTransform(),
                                                    name="hour_day")))
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("ICEBERG_TABLE", NODE_HOURS_TABLE)
    monkeypatch.setenv("COST_GROUPS", json.dumps(GROUPS))
    monkeypatch.setenv("INSTANCE_PRICES", json.dumps(PRICES))
    monkeypatch.setenv("DEPLOYMENT_HASH", "abc")
    return catalog


@pytest.fixture
def moto_key(pipeline: Pipeline) -> str:
    return str(boto3.client("kms", endpoint_url=pipeline.s3.meta.endpoint_url, region_name="us-east-1")
               .create_key(Description="capture")["KeyMetadata"]["Arn"])


def sample(puts: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One hourly run of the real handler (its own catalog and file IO), every boto3 S3 write recorded."""
    import node_hours_sampler

    eks, sagemaker, _, _ = _clients()
    monkeypatch.setattr(boto3, "client", recording_writes(puts))
    return node_hours_sampler.handler({}, None, clients={"eks": eks, "sagemaker": sagemaker}.__getitem__)


def test_the_samplers_commit_names_the_capture_key_and_the_policy_admits_it(
    policies: dict[str, Any], pipeline: Pipeline, node_hours: Any, database: str, moto_key: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch
) -> None:
    assert policies["environment"]["OUTPUT_KMS_KEY_ID"] == policies["key_arn"]  # (GpuCost sets it here)
    monkeypatch.setenv("OUTPUT_KMS_KEY_ID", moto_key)  # moto's key stands for the synthesized one
    puts: list[dict[str, Any]] = []

    assert sample(puts, monkeypatch) == {"rows": 4}

    rows = node_hours.load_table((database, NODE_HOURS_TABLE)).scan().to_arrow().to_pylist()
    assert sorted((r["group_name"], r["nodes"]) for r in rows) == [
        ("gpu-g6e", 3), ("gpu-gone", 0), ("inference-g5", 2), ("reserved", 1)]
    assert puts and all(put["Key"].startswith(PREFIX) for put in puts), puts  # its own table's files only
    # data file, manifest and manifest list, table metadata: each named the key, was admitted, is stored under it
    assert_under_the_key(policies, pipeline, policies["sampler"], puts, moto_key)


def test_the_former_plain_file_io_is_refused_by_the_same_policy(
    policies: dict[str, Any], pipeline: Pipeline, node_hours: Any, database: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``OUTPUT_KMS_KEY_ID`` the sampler writes as it did before the fix (pyarrow's S3 file system, which
    cannot send SSE-KMS headers): moto, which enforces no bucket policy, stores the objects without the key, and
    the policy refuses each put as S3 received it. In AWS the commit fails and ``gpu_node_hours`` stays empty."""
    before = set(pipeline.keys(PREFIX))
    puts: list[dict[str, Any]] = []

    assert sample(puts, monkeypatch) == {"rows": 4}

    assert puts == []  # (nothing went through boto3: the plain file IO is pyarrow's)
    written = [key for key in pipeline.keys(PREFIX) if key not in before]
    assert {key.rsplit(".", 1)[-1] for key in written} >= {"parquet", "avro", "json"}, written
    for key in written:
        head = pipeline.s3.head_object(Bucket=pipeline.bucket, Key=key)
        assert "SSEKMSKeyId" not in head, key
        received = {"Key": key, **({"ServerSideEncryption": head["ServerSideEncryption"]}
                                   if "ServerSideEncryption" in head else {})}
        assert judged(policies, policies["sampler"], received, None) == "deny", key
        assert judged(policies, policies["sampler"], unencrypted(received), None) == "deny", key

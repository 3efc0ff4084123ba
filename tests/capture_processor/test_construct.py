"""CapturePipeline synthesized in a standalone stack (fixed account and region), asserted on
the template: what matters for security and for data never being silently dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pyarrow as pa
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from hyperpod_inference_iac.capture.capture_pipeline import (
    ALB_COLUMNS,
    CAPTURE_COLUMNS,
    GEN_AI_SEMCONV_VERSION,
    PANDAS_LAYER_VERSIONS,
    CapturePipeline,
)
from hyperpod_inference_iac.foundation.validation import ConfigError

ENV = cdk.Environment(account="123456789012", region="eu-north-1")  # no layer version mapped here
LAYER_ARN = "arn:aws:lambda:us-east-1:336392948345:layer:AWSSDKPandas-Python313-Arm64:7"
CAPTURE_PREFIXES = ("data-capture/", "sidecar-capture/")


def pipeline_stack(env: cdk.Environment = ENV, outdir: str | None = None, **props: Any) -> tuple[cdk.Stack, Any]:
    app = cdk.App(outdir=outdir, context={"aws:cdk:disable-analytics": True})
    stack = cdk.Stack(app, "CaptureTest", env=env)
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    bucket = s3.Bucket(stack, "Bucket", encryption_key=key, enforce_ssl=True)
    defaults = {"capture_prefixes": CAPTURE_PREFIXES, "pandas_layer_arn": LAYER_ARN, "reserved_concurrency": 4}
    pipeline = CapturePipeline(stack, "Capture", bucket=bucket, encryption_key=key, **(defaults | props))
    return stack, pipeline


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Template, Path]:
    outdir = tmp_path_factory.mktemp("cdk.out")
    stack, _ = pipeline_stack(outdir=str(outdir))
    template = Template.from_stack(stack)
    stack.node.root.synth()
    return template, outdir


@pytest.fixture(scope="module")
def template(synthesized: tuple[Template, Path]) -> Template:
    return synthesized[0]


def only(template: Template, resource_type: str) -> dict[str, Any]:
    [resource] = template.find_resources(resource_type).values()
    return resource["Properties"]


def test_function_is_arm64_python_313_with_the_pandas_layer(template: Template) -> None:
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Architectures": ["arm64"],
            "Runtime": "python3.13",
            "Handler": "handler.handler",
            "Layers": [LAYER_ARN],
            "MemorySize": 1024,
            "Timeout": 900,
            "ReservedConcurrentExecutions": 4,
            "EphemeralStorage": {"Size": 2048},
            "Environment": {
                "Variables": {
                    "OUTPUT_PREFIX": "curated/",
                    "QUARANTINE_PREFIX": "quarantine/",
                    "REDACT": "email,phone,access_token,aws_secret_key,private_key,payment_card,us_ssn,iban",
                    "MALLOC_ARENA_MAX": "2",
                }
            },
        },
    )


def test_asset_holds_only_runtime_code(synthesized: tuple[Template, Path]) -> None:
    _, outdir = synthesized
    [asset] = [path for path in outdir.glob("asset.*") if (path / "handler.py").exists()]
    names = {path.relative_to(asset).as_posix() for path in asset.rglob("*")}
    assert "capture_core/processor.py" in names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc") or "test" in name]


def test_sqs_event_source_reports_batch_item_failures(template: Template) -> None:
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"FunctionResponseTypes": ["ReportBatchItemFailures"], "BatchSize": 10, "MaximumBatchingWindowInSeconds": 30},
    )


def test_queue_redrives_to_dlq_after_five_receives_and_outlasts_six_timeouts(template: Template) -> None:
    queues = template.find_resources("AWS::SQS::Queue")
    [main] = [q["Properties"] for q in queues.values() if "RedrivePolicy" in q["Properties"]]
    [dlq_id] = [logical_id for logical_id, q in queues.items() if "RedrivePolicy" not in q["Properties"]]
    assert main["RedrivePolicy"] == {"deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]}, "maxReceiveCount": 5}
    assert main["VisibilityTimeout"] == 6 * 900


def test_both_queues_are_encrypted_and_refuse_plain_http(template: Template) -> None:
    queues = template.find_resources("AWS::SQS::Queue")
    assert all(q["Properties"]["SqsManagedSseEnabled"] is True for q in queues.values())
    policies = template.find_resources("AWS::SQS::QueuePolicy")
    ssl_denials = [
        statement
        for policy in policies.values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny" and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
    ]
    assert len(ssl_denials) == len(queues) == 2


def test_s3_notifications_filter_on_each_capture_prefix(template: Template) -> None:
    notifications = only(template, "Custom::S3BucketNotifications")["NotificationConfiguration"]
    assert [config["Events"] for config in notifications["QueueConfigurations"]] == [["s3:ObjectCreated:*"]] * 2
    assert [config["Filter"]["Key"]["FilterRules"] for config in notifications["QueueConfigurations"]] == [
        [{"Name": "prefix", "Value": prefix}] for prefix in CAPTURE_PREFIXES
    ]


def function_statements(template: Template) -> list[dict[str, Any]]:
    [role_id] = [
        logical_id
        for logical_id, role in template.find_resources("AWS::IAM::Role").items()
        if "lambda.amazonaws.com" in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
        and "Capture" in logical_id
    ]
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_s3_permissions_are_scoped_to_the_prefixes(template: Template) -> None:
    s3_statements = [s for s in function_statements(template) if any(a.startswith("s3:") for a in as_list(s["Action"]))]
    assert s3_statements
    for statement in s3_statements:
        assert "s3:*" not in as_list(statement["Action"])
        assert "*" not in as_list(statement["Resource"])
    assert {a for s in s3_statements for a in as_list(s["Action"])} == {
        "s3:GetObject",
        "s3:GetObjectVersion",
        "s3:PutObject",
        "s3:AbortMultipartUpload",
        "s3:ListBucket",  # the erasure register's keys only (below)
    }
    [listing] = [s for s in s3_statements if "s3:ListBucket" in as_list(s["Action"])]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["audit/erasure-register", "audit/erasure-register/*"]}}
    readable = [s for s in s3_statements if "s3:GetObject" in as_list(s["Action"])]
    writable = [s for s in s3_statements if "s3:PutObject" in as_list(s["Action"])]
    assert {p for s in readable for p in CAPTURE_PREFIXES if p + "*" in json.dumps(s["Resource"])} == set(
        CAPTURE_PREFIXES
    )
    assert {p for s in writable for p in ("curated/", "quarantine/") if p + "*" in json.dumps(s["Resource"])} == {
        "curated/",
        "quarantine/",
    }
    assert not [s for s in writable if "data-capture/" in json.dumps(s["Resource"])]  # never writes its input


def test_kms_grants_come_from_the_key(template: Template) -> None:
    kms_actions = {
        action
        for statement in function_statements(template)
        for action in as_list(statement["Action"])
        if action.startswith("kms:")
    }
    assert kms_actions == {"kms:Decrypt", "kms:GenerateDataKey"}
    statements = [s for s in function_statements(template) if "kms:Decrypt" in as_list(s["Action"])]
    assert statements
    for statement in statements:
        # Only through S3 in this region, only for this bucket's objects (bucket keys: the bucket ARN).
        conditions = statement["Condition"]
        assert conditions["StringEquals"] == {
            "kms:ViaService": "s3.eu-north-1.amazonaws.com",
            "aws:ResourceAccount": "${aws:PrincipalAccount}",
        }
        (bucket, objects) = conditions["StringLike"]["kms:EncryptionContext:aws:s3:arn"]
        assert "Fn::GetAtt" in bucket and objects["Fn::Join"][1][-1] == "/*"


def test_logs_go_to_an_own_group_with_retention_and_no_managed_policy(template: Template) -> None:
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 90})
    roles = template.find_resources("AWS::IAM::Role")
    function_roles = [r for logical_id, r in roles.items() if logical_id.startswith("CaptureRole")]
    assert function_roles and "ManagedPolicyArns" not in function_roles[0]["Properties"]


def glue_table(template: Template, name: str) -> dict[str, Any]:
    [table] = [
        t["Properties"]["TableInput"]
        for t in template.find_resources("AWS::Glue::Table").values()
        if t["Properties"]["TableInput"]["Name"] == name
    ]
    return table


@pytest.mark.parametrize(
    ("name", "tiers", "extra"),
    [("capture_records", "sme,pod", {"gen_ai_semconv_version": "1.36.0"}), ("alb_access_logs", "alb", {})],
)
def test_glue_tables_project_tier_date_and_hour(template: Template, name: str, tiers: str, extra: dict) -> None:
    table = glue_table(template, name)
    parameters = table["Parameters"]
    assert {key: value for key, value in parameters.items() if key != "storage.location.template"} == extra | {
        "classification": "parquet",
        "parquet.compression": "ZSTD",
        "projection.enabled": "true",
        "projection.tier.type": "enum",
        "projection.tier.values": tiers,
        "projection.dt.type": "date",
        "projection.dt.format": "yyyy-MM-dd",
        "projection.dt.range": "2025-01-01,NOW",
        "projection.dt.interval": "1",
        "projection.dt.interval.unit": "DAYS",
        "projection.hour.type": "integer",
        "projection.hour.range": "0,23",
        "projection.hour.digits": "2",
    }
    template_parts = parameters["storage.location.template"]["Fn::Join"][1]
    assert template_parts[0] == "s3://" and template_parts[2] == "/curated/tier=${tier}/dt=${dt}/hour=${hour}/"
    assert [key["Name"] for key in table["PartitionKeys"]] == ["tier", "dt", "hour"]
    assert table["StorageDescriptor"]["SerdeInfo"]["SerializationLibrary"].endswith("ParquetHiveSerDe")


_HIVE_TYPES = {
    pa.string(): "string",
    pa.bool_(): "boolean",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float64(): "double",
    pa.timestamp("us", tz="UTC"): "timestamp",
    pa.list_(pa.string()): "array<string>",
}


def test_glue_table_names_the_semantic_conventions_version_the_processor_follows() -> None:
    from capture_core import openai_format

    assert GEN_AI_SEMCONV_VERSION == openai_format.SEMCONV_VERSION


def test_glue_columns_match_the_parquet_the_lambda_writes() -> None:
    from capture_core import alb_format, capture_format

    for columns, schema in ((CAPTURE_COLUMNS, capture_format.CURATED_SCHEMA), (ALB_COLUMNS, alb_format.CURATED_SCHEMA)):
        assert [(c.name, c.type) for c in columns] == [(f.name, _HIVE_TYPES[f.type]) for f in schema]


def test_redaction_rule_names_are_the_ones_the_lambda_knows() -> None:
    """The Lambda is deployed standalone (no import of the library): its rule table and the construct's enum
    must name the same rules, in the same order."""
    from capture_core import redaction
    from hyperpod_inference_iac import RedactionRule

    assert list(redaction.RULES) == [str(rule) for rule in RedactionRule]


def test_alarms_on_dead_letters_and_function_errors(template: Template) -> None:
    template.resource_count_is("AWS::CloudWatch::Alarm", 2)
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Namespace": "AWS/SQS",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "Errors", "Namespace": "AWS/Lambda", "Threshold": 0, "Statistic": "Sum"},
    )


def test_children_are_exposed() -> None:
    _, pipeline = pipeline_stack()
    assert set(pipeline.tables) == {"capture_records", "alb_access_logs"}
    assert set(pipeline.alarms) == {"dead_letters", "function_errors"}
    assert pipeline.queue.dead_letter_queue.queue is pipeline.dead_letter_queue
    assert pipeline.function.runtime.name == "python3.13"
    assert pipeline.database.database_input.name == "inference_capture"


def test_mapped_region_uses_the_documented_layer_version() -> None:
    region = next(iter(PANDAS_LAYER_VERSIONS))
    stack, _ = pipeline_stack(cdk.Environment(account="123456789012", region=region), pandas_layer_arn=None)
    Template.from_stack(stack).has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Layers": [
                f"arn:aws:lambda:{region}:336392948345:layer:AWSSDKPandas-Python313-Arm64:"
                f"{PANDAS_LAYER_VERSIONS[region]}"
            ]
        },
    )


def test_redaction_can_be_switched_off() -> None:
    stack, _ = pipeline_stack(redact=())
    Template.from_stack(stack).has_resource_properties(
        "AWS::Lambda::Function", {"Environment": {"Variables": Match.object_like({"REDACT": "none"})}}
    )


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"pandas_layer_arn": None}, "[CapturePipeline.NoPandasLayerForRegion] pandas_layer_arn:"),
        ({"capture_prefixes": ()}, "[CapturePipeline.NoCapturePrefixes] capture_prefixes:"),
        ({"capture_prefixes": ("data",)}, "[CapturePipeline.InvalidPrefix] capture_prefixes[0]:"),
        ({"capture_prefixes": ("data/", "data/sme/")}, "[CapturePipeline.OverlappingPrefixes]"),
        ({"output_prefix": "data-capture/curated/"}, "[CapturePipeline.OverlappingPrefixes]"),
        ({"memory_size": 64}, "[CapturePipeline.MemoryOutOfRange] memory_size: must be 128..10240 MiB"),
        ({"reserved_concurrency": 0}, "[CapturePipeline.ConcurrencyOutOfRange] reserved_concurrency:"),
        ({"redact": ("email", "ssn")}, "[CapturePipeline.UnknownRedactionRule] redact[1]:"),
        ({"pandas_layer_arn": "pandas"}, "[CapturePipeline.InvalidLayerArn] pandas_layer_arn:"),
        ({"glue_database_name": "Capture-DB"}, "[CapturePipeline.InvalidGlueName] glue_database_name:"),
        ({"first_partition_date": "2025/01/01"}, "[CapturePipeline.InvalidDate] first_partition_date:"),
    ],
)
def test_each_validation_error_names_code_path_and_value(props: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        pipeline_stack(**props)
    assert expected in str(raised.value)
    assert "(got " in str(raised.value)


def test_a_bucket_of_another_stack_is_refused_before_synth() -> None:
    app = cdk.App()
    storage = cdk.Stack(app, "Storage", env=ENV)
    key = kms.Key(storage, "Key")
    bucket = s3.Bucket(storage, "Bucket", encryption_key=key)
    consumer = cdk.Stack(app, "Pipeline", env=ENV)

    with pytest.raises(ConfigError, match=r"\[CapturePipeline.BucketInOtherStack\] bucket: must belong"):
        CapturePipeline(
            consumer,
            "Capture",
            bucket=bucket,
            encryption_key=key,
            capture_prefixes=CAPTURE_PREFIXES,
            pandas_layer_arn=LAYER_ARN,
        )


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ValueError) as raised:
        pipeline_stack(memory_size=1, reserved_concurrency=-1, redact=("ssn",))
    assert raised.value.codes == [
        "CapturePipeline.MemoryOutOfRange",
        "CapturePipeline.ConcurrencyOutOfRange",
        "CapturePipeline.UnknownRedactionRule",
    ]


def test_the_processor_reads_the_erasure_register_where_the_erasure_command_writes_it(template: Template) -> None:
    """The processor must see every erasure (capture_core.erasure): it reads, and only reads, the register."""
    from capture_core.erasure import REGISTER_PREFIX
    from hyperpod_inference_iac.capture.capture_pipeline import ERASURE_REGISTER_PREFIX

    assert ERASURE_REGISTER_PREFIX == REGISTER_PREFIX
    register = [s for s in function_statements(template) if REGISTER_PREFIX in json.dumps(s["Resource"])]
    assert {a for s in register for a in as_list(s["Action"])} == {"s3:GetObject"}

"""GpuCost: the hourly node-hour sampler in the cluster's stack, writing the storage stack's ``gpu_node_hours``;
its role is least privilege (its own groups, its own cluster, its own table), the readers get the table's columns
by name, and the config's mistakes are refused at their key paths."""

from __future__ import annotations

import json
from typing import Any

import node_hours_sampler  # (the processor's folder is on sys.path: tests/capture_processor/conftest.py)
import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from hyperpod_inference_iac import (
    CapturePipeline,
    CaptureStorage,
    CaptureTables,
    ColumnAccess,
    ConfigError,
    CostGroup,
    GpuCost,
    GpuCostOptions,
    InstancePrice,
    TableReader,
)
from hyperpod_inference_iac.capture.capture_tables import NODE_HOURS_COLUMNS, USAGE_COLUMNS
from hyperpod_inference_iac.foundation.validation import Problems
from tests.capture_processor.test_tables import (
    FINOPS,
    PRIVACY,
    _grants,
    _list,
    _resolve,
    kms,
    of_type,
    policy_of,
    s3,
)
from tests.unit.test_data_perimeter import ACCOUNT, BUCKET, REGION, resolve

LAYER = f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:capture-tables:3"
HYPERPOD_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcd1234efgh"
PRICES = (InstancePrice(instance_type="g6e.12xlarge", usd_per_node_hour=10.49),
          InstancePrice(instance_type="ml.g5.12xlarge", usd_per_node_hour=7.09))
GROUPS = (CostGroup(name="gpu-g6e", models=["Qwen/Qwen3-8B"]),)


def build(**props: Any) -> tuple[App, Stack, Stack, GpuCost]:
    app = App()
    env = Environment(account=ACCOUNT, region=REGION)
    storage_stack = Stack(app, "Storage", env=env)
    storage = CaptureStorage(storage_stack, "Storage", capture_bucket_name=BUCKET)
    pipeline = CapturePipeline(storage_stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                               capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
                               quarantine_prefix=storage.quarantine_prefix)
    tables = CaptureTables(storage_stack, "Tables", pipeline=pipeline, tables_layer_arn=LAYER, table_readers=(
        TableReader(role_arn=FINOPS), TableReader(role_arn=PRIVACY, columns=ColumnAccess.ALL)))
    cluster_stack = Stack(app, "Cluster", env=env)
    cluster_stack.add_stack_dependency(storage_stack)
    cost = GpuCost(cluster_stack, "GpuCost", tables=tables, instance_prices=PRICES, groups=GROUPS,
                   eks_cluster_name="llm-platform", node_groups={"gpu-g6e": ["g6e.12xlarge"]},
                   hyperpod_cluster_name="llm-platform-hp", hyperpod_cluster_arn=HYPERPOD_ARN,
                   instance_groups={"inference-g5": "ml.g5.12xlarge"}, role_name="llm-platform-gpu-node-hours",
                   **props)
    return app, storage_stack, cluster_stack, cost


@pytest.fixture(scope="module")
def templates() -> tuple[dict[str, Any], dict[str, Any]]:
    app, storage_stack, cluster_stack, _ = build()
    app.synth()  # (no dependency cycle between the two stacks)
    return Template.from_stack(storage_stack).to_json(), Template.from_stack(cluster_stack).to_json()


def test_the_sampler_reads_its_own_groups_only_and_writes_its_own_table_only(
        templates: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, cluster = templates
    statements = policy_of(cluster, "GpuCostRole")
    actions = {a for s in statements for a in _list(s["Action"])}
    assert not any(a.endswith("*") or a.startswith(("iam:", "sts:")) for a in actions), actions
    (eks,) = [s for s in statements if "eks:DescribeNodegroup" in _list(s["Action"])]
    assert _list(eks["Action"]) == ["eks:DescribeNodegroup"]
    assert eks["Resource"] == f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/llm-platform/gpu-g6e/*"
    (sagemaker,) = [s for s in statements if "sagemaker:ListClusterNodes" in _list(s["Action"])]
    assert sagemaker["Resource"] == HYPERPOD_ARN
    for statement in (eks, sagemaker):
        assert statement["Condition"] == {"StringEquals": {"aws:RequestedRegion": REGION}}
    (glue,) = [s for s in statements if any(str(a).startswith("glue:") for a in _list(s["Action"]))]
    base = f"arn:aws:glue:{REGION}:{ACCOUNT}"
    assert sorted(glue["Resource"]) == sorted([f"{base}:catalog", f"{base}:database/inference_capture_iceberg",
                                               f"{base}:table/inference_capture_iceberg/gpu_node_hours"])
    for statement in statements:
        for resource in _list(statement["Resource"]):
            if str(resource).startswith("arn:aws:s3"):
                assert resource in (f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/curated-iceberg/gpu_node_hours/*")
    (listing,) = [s for s in statements if "s3:ListBucket" in _list(s["Action"])]
    assert listing["Condition"]["StringLike"]["s3:prefix"] == ["curated-iceberg/gpu_node_hours",
                                                               "curated-iceberg/gpu_node_hours/*"]
    grants = {(r["Properties"]["Resource"].get("Table") or r["Properties"]["Resource"]["Database"])["Name"]:
              r["Properties"]["Permissions"] for r in of_type(cluster, "AWS::LakeFormation::PrincipalPermissions")
              .values()}
    assert grants == {"gpu_node_hours": ["ALTER", "DELETE", "DESCRIBE", "INSERT", "SELECT"],
                      "inference_capture_iceberg": ["DESCRIBE"]}


def test_the_bucket_and_key_admit_the_sampler_by_name_under_its_tables_prefix_only(
        templates: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """The storage stack's bucket and key policies name the cluster stack's role by its fixed name: it may write its
    table's files and nothing else of the bucket (the evaluator runs the policies)."""
    storage, _ = templates
    resources = storage["Resources"]
    bucket_policy = next(r for r in of_type(storage, "AWS::S3::BucketPolicy").values()
                         if "CaptureBucket" in str(r["Properties"]["Bucket"]))
    key_id, key = next(iter(of_type(storage, "AWS::KMS::Key").items()))
    policies = {"bucket": resolve(bucket_policy["Properties"]["PolicyDocument"]["Statement"], resources),
                "key": resolve(key["Properties"]["KeyPolicy"]["Statement"], resources),
                "key_arn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{key_id}"}
    sampler = f"arn:aws:iam::{ACCOUNT}:role/llm-platform-gpu-node-hours"
    own = "curated-iceberg/gpu_node_hours/data/hour_day=2026-12-01/00000-0-a.parquet"
    for action in ("s3:PutObject", "s3:GetObject", "s3:DeleteObject"):
        assert s3(policies, sampler, action, own) == "neutral", action  # its IAM policy decides
    assert kms(policies, sampler, "kms:GenerateDataKey", own) == "iam"
    for other in ("curated-iceberg/capture_records/data/x.parquet", "data-capture/x.jsonl", "curated/x.parquet"):
        for action in ("s3:GetObject", "s3:PutObject"):
            assert s3(policies, sampler, action, other) == "deny", (action, other)
        assert kms(policies, sampler, "kms:Decrypt", other) == "neutral", other


def test_the_processor_no_longer_writes_a_table_it_does_not_own(
        templates: tuple[dict[str, Any], dict[str, Any]]) -> None:
    storage, _ = templates
    processor = _resolve(policy_of(storage, "PipelineRole"), storage["Resources"])
    assert "table/inference_capture_iceberg/gpu_node_hours" not in json.dumps(processor)
    optimizer = json.dumps(_resolve(policy_of(storage, "TablesOptimizerRole"), storage["Resources"]))
    assert "table/inference_capture_iceberg/gpu_node_hours" in optimizer  # (compacted like the others)


def test_readers_get_the_node_hour_columns_by_name(templates: tuple[dict[str, Any], dict[str, Any]]) -> None:
    storage, _ = templates
    usage = _grants(storage, FINOPS)["gpu_node_hours"]["Resource"]["TableWithColumns"]
    assert "ColumnWildcard" not in usage
    assert usage["ColumnNames"] == [c.name for c in NODE_HOURS_COLUMNS] == list(USAGE_COLUMNS["gpu_node_hours"])
    full = _grants(storage, PRIVACY)["gpu_node_hours"]["Resource"]["TableWithColumns"]
    assert full["ColumnWildcard"] == {"ExcludedColumnNames": []}
    (table,) = [r for r in of_type(storage, "AWS::Glue::Table").values()
                if r["Properties"].get("Name") == "gpu_node_hours"]
    iceberg = table["Properties"]["OpenTableFormatInput"]["IcebergInput"]["IcebergTableInput"]
    assert iceberg["PartitionSpec"]["Fields"][0]["Name"] == "hour_day"


def test_the_sampler_gets_every_group_with_its_models_and_prices_and_runs_hourly(
        templates: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, cluster = templates
    (function,) = [r for r in of_type(cluster, "AWS::Lambda::Function").values()
                   if r["Properties"].get("Handler") == "node_hours_sampler.handler"]
    env = function["Properties"]["Environment"]["Variables"]
    assert json.loads(env["COST_GROUPS"]) == [
        {"kind": "eks-nodegroup", "cluster": "llm-platform", "group": "gpu-g6e", "instanceTypes": ["g6e.12xlarge"],
         "models": ["Qwen/Qwen3-8B"], "usdPerNodeHour": None},
        {"kind": "hyperpod-instance-group", "cluster": "llm-platform-hp", "group": "inference-g5",
         "instanceTypes": ["ml.g5.12xlarge"], "models": [], "usdPerNodeHour": None}]
    assert json.loads(env["INSTANCE_PRICES"]) == {"g6e.12xlarge": 10.49, "ml.g5.12xlarge": 7.09}
    assert env["ICEBERG_TABLE"] == "gpu_node_hours" and env["ICEBERG_DATABASE"] == "inference_capture_iceberg"
    # what the sampler checks before it counts (a key imported from the storage stack is a token here)
    assert node_hours_sampler.settings_problems({k: v for k, v in env.items() if isinstance(v, str)}) == []
    # pyarrow (the AWS SDK for pandas layer, the processor's) and pyiceberg (the tables' layer)
    assert function["Properties"]["Layers"] == [
        f"arn:aws:lambda:{REGION}:336392948345:layer:AWSSDKPandas-Python313-Arm64:15", LAYER]
    assert function["Properties"]["ReservedConcurrentExecutions"] == 1
    (rule,) = of_type(cluster, "AWS::Events::Rule").values()
    assert rule["Properties"]["ScheduleExpression"] == "cron(5 * * * ? *)"


def _problems(options: GpuCostOptions) -> list[tuple[str, str]]:
    problems = Problems()
    options.check(problems, GpuCostOptions.key_paths("costs"), node_groups={"gpu-g6e": ["g6e.12xlarge"]},
                  instance_groups={"inference-g5": "ml.g5.12xlarge"})
    return [(p.code, p.path) for p in problems]


def test_config_mistakes_are_refused_at_their_key_paths() -> None:
    assert _problems(GpuCostOptions(instance_prices=PRICES, groups=GROUPS)) == []
    assert _problems(GpuCostOptions(instance_prices=(
        InstancePrice(instance_type="g6e.12xlarge", usd_per_node_hour=-1.0),
        InstancePrice(instance_type="g5.12xlarge", usd_per_node_hour=7.09)), groups=(
        CostGroup(name="gpu-g7", models=["m"]), CostGroup(name="gpu-g6e", models=[], usd_per_node_hour=1e6)))) == [
        ("GpuCost.PriceOutOfRange", "costs.instancePrices[0].usdPerNodeHour"),
        ("GpuCost.NoModels", "costs.groups[1].models"),
        ("GpuCost.PriceOutOfRange", "costs.groups[1].usdPerNodeHour"),
        ("GpuCost.UnknownGroup", "costs.groups[0].name"),
        ("GpuCost.UnknownInstancePrice", "costs.instancePrices"),
        ("GpuCost.UnusedInstancePrice", "costs.instancePrices[1].instanceType"),
    ]


def test_an_unpriced_type_is_named_and_a_group_of_its_own_price_needs_none() -> None:
    problems = Problems()
    GpuCostOptions(instance_prices=PRICES[:1]).check(
        problems, GpuCostOptions.key_paths("costs"), node_groups={"gpu-g6e": ["g6e.12xlarge"]},
        instance_groups={"inference-g5": "ml.g5.12xlarge"})
    (problem,) = problems
    assert "ml.g5.12xlarge (of the group inference-g5)" in str(problem)
    assert _problems(GpuCostOptions(instance_prices=PRICES[:1], groups=(
        CostGroup(name="inference-g5", models=["m"], usd_per_node_hour=5.0),))) == []


def test_without_the_tables_layer_the_sampler_is_refused() -> None:
    app = App()
    stack = Stack(app, "S", env=Environment(account=ACCOUNT, region=REGION))
    storage = CaptureStorage(stack, "Storage", capture_bucket_name=BUCKET)
    pipeline = CapturePipeline(stack, "Pipeline", bucket=storage.capture_bucket, encryption_key=storage.key,
                               capture_prefixes=[storage.capture_prefix], output_prefix=storage.curated_prefix,
                               quarantine_prefix=storage.quarantine_prefix)
    tables = CaptureTables(stack, "Tables", pipeline=pipeline)
    with pytest.raises(ConfigError, match=r"GpuCost.NoTablesLayer"):
        GpuCost(stack, "Cost", tables=tables, instance_prices=PRICES[:1], eks_cluster_name="c",
                node_groups={"gpu-g6e": ["g6e.12xlarge"]})


def test_cdk_nag_finds_nothing_unacknowledged() -> None:
    from cdk_nag import AwsSolutionsChecks

    app, _, cluster_stack, _ = build()
    report = AwsSolutionsChecks(app).validate_scope(cluster_stack)
    assert [v.rule_name for v in report.violations] == []


def _function(template: dict[str, Any], handler: str) -> dict[str, Any]:
    (function,) = [r["Properties"] for r in of_type(template, "AWS::Lambda::Function").values()
                   if r["Properties"].get("Handler") == handler]
    return function


def _imported(value: Any, exporter: dict[str, Any]) -> Any:
    """A cross-stack reference as the exporting stack's own value (``Fn::ImportValue`` of one of its outputs)."""
    if isinstance(value, dict) and "Fn::ImportValue" in value:
        return next(output["Value"] for output in exporter["Outputs"].values()
                    if output.get("Export", {}).get("Name") == value["Fn::ImportValue"])
    return value


def test_the_sampler_names_the_processors_key_and_ships_in_the_processors_asset(
        templates: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """One rule decides whether a writer of the tables names the capture key (``output_key_environment``): the
    sampler's ``OUTPUT_KMS_KEY_ID`` is the processor's (the storage stack's key, imported), and its code is the
    processor's asset (one hash: one upload), whose ``node_hours_sampler`` commits through the processor's file IO."""
    storage, cluster = templates
    processor, sampler = _function(storage, "handler.handler"), _function(cluster, "node_hours_sampler.handler")
    key = processor["Environment"]["Variables"]["OUTPUT_KMS_KEY_ID"]
    assert key == {"Fn::GetAtt": [next(iter(of_type(storage, "AWS::KMS::Key"))), "Arn"]}
    assert _imported(sampler["Environment"]["Variables"]["OUTPUT_KMS_KEY_ID"], storage) == key
    assert sampler["Code"]["S3Key"] == processor["Code"]["S3Key"]


def test_the_samplers_role_uses_the_key_through_s3_for_its_table_only_as_the_processor_does(
        templates: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """What S3 asks of a writer naming the key (GenerateDataKey for a put, Decrypt for a multipart upload's parts),
    with the processor's conditions (through S3 in the region, this account, the objects' ARN as the encryption
    context), narrowed to the sampler's table: one grant rule (``CaptureTables.grant_table_writer``)."""
    storage, cluster = templates
    (sampler,) = [s for s in policy_of(cluster, "GpuCostRole") if any(str(a).startswith("kms:")
                                                                      for a in _list(s["Action"]))]
    processor = [s for s in _resolve(policy_of(storage, "PipelineRole"), storage["Resources"])
                 if any(str(a).startswith("kms:") for a in _list(s["Action"]))]
    assert sorted(_list(sampler["Action"])) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert _imported(sampler["Resource"], storage) == {"Fn::GetAtt": [next(iter(of_type(storage, "AWS::KMS::Key"))),
                                                                      "Arn"]}
    assert sampler["Condition"]["StringEquals"] == {"kms:ViaService": f"s3.{REGION}.amazonaws.com",
                                                    "aws:ResourceAccount": "${aws:PrincipalAccount}"}
    assert sampler["Condition"]["StringLike"] == {
        "kms:EncryptionContext:aws:s3:arn": [f"arn:aws:s3:::{BUCKET}/curated-iceberg/gpu_node_hours/*"]}
    assert any(s["Condition"]["StringEquals"] == sampler["Condition"]["StringEquals"]
               and s["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"]
               == [f"arn:aws:s3:::{BUCKET}/curated-iceberg/*"] for s in processor), processor


def test_without_the_key_neither_the_processor_nor_the_sampler_names_one() -> None:
    """A pipeline given no key (a bucket whose default encryption is SSE-KMS with S3's own key): the processor
    writes without SSE headers, and so does the sampler (pyarrow's plain file IO: the bucket's default applies)."""
    from aws_cdk import aws_s3

    stack = Stack(App(), "S", env=Environment(account=ACCOUNT, region=REGION))
    bucket = aws_s3.Bucket(stack, "Captures", bucket_name=BUCKET, encryption=aws_s3.BucketEncryption.KMS_MANAGED,
                           enforce_ssl=True)
    pipeline = CapturePipeline(stack, "Pipeline", bucket=bucket, encryption_key=None)
    tables = CaptureTables(stack, "Tables", pipeline=pipeline, tables_layer_arn=LAYER)
    GpuCost(stack, "Cost", tables=tables, instance_prices=PRICES[:1], eks_cluster_name="c",
            node_groups={"gpu-g6e": ["g6e.12xlarge"]})
    template = Template.from_stack(stack).to_json()
    for handler in ("handler.handler", "node_hours_sampler.handler"):
        assert "OUTPUT_KMS_KEY_ID" not in _function(template, handler)["Environment"]["Variables"], handler
    assert not [s for s in policy_of(template, "CostRole") if any(str(a).startswith("kms:")
                                                                  for a in _list(s["Action"]))]

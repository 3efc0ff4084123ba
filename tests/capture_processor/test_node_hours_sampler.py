"""The node-hour sampler (lambda/capture_processor/node_hours_sampler.py): it counts every group through the real
boto3 clients (stubbed responses: the request shapes are botocore's), prices it, and appends rows that fit
``gpu_node_hours`` as CloudFormation creates it (pyiceberg's SQL catalog on a temporary folder stands in for Glue)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import node_hours_sampler as sampler  # (the processor's folder is on sys.path: tests/capture_processor/conftest.py)
import pytest
from botocore.stub import Stubber

from hyperpod_inference_iac.capture.capture_tables import NODE_HOURS_COLUMNS, iceberg_schema

NOW = datetime(2026, 12, 1, 10, 5, 7, tzinfo=UTC)
GROUPS = [
    {"kind": "eks-nodegroup", "cluster": "llm-platform", "group": "gpu-g6e", "instanceTypes": ["g6e.12xlarge"],
     "models": ["Qwen/Qwen3-8B"], "usdPerNodeHour": None},
    {"kind": "eks-nodegroup", "cluster": "llm-platform", "group": "gpu-gone", "instanceTypes": ["g6e.12xlarge"],
     "models": [], "usdPerNodeHour": None},
    {"kind": "hyperpod-instance-group", "cluster": "llm-platform-hp", "group": "inference-g5",
     "instanceTypes": ["ml.g5.12xlarge"], "models": ["mistral-7b-instruct"], "usdPerNodeHour": None},
    {"kind": "hyperpod-instance-group", "cluster": "llm-platform-hp", "group": "reserved",
     "instanceTypes": ["ml.g5.12xlarge"], "models": [], "usdPerNodeHour": 4.5},
]
PRICES = {"g6e.12xlarge": 10.49, "ml.g5.12xlarge": 7.09}


def _node(group: str, index: int, status: str = "Running") -> dict[str, Any]:
    return {"InstanceGroupName": group, "InstanceId": f"i-{group}-{index}", "InstanceType": "ml.g5.12xlarge",
            "LaunchTime": NOW, "InstanceStatus": {"Status": status}}


def _clients() -> tuple[Any, Any, Stubber, Stubber]:
    eks = boto3.client("eks", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    sagemaker = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    eks_stub, sagemaker_stub = Stubber(eks), Stubber(sagemaker)
    eks_stub.add_response("describe_nodegroup", {"nodegroup": {
        "nodegroupName": "gpu-g6e", "clusterName": "llm-platform", "instanceTypes": ["g6e.12xlarge"],
        "scalingConfig": {"minSize": 0, "maxSize": 4, "desiredSize": 3}}},
        {"clusterName": "llm-platform", "nodegroupName": "gpu-g6e"})
    eks_stub.add_client_error("describe_nodegroup", "ResourceNotFoundException", http_status_code=404,
                              expected_params={"clusterName": "llm-platform", "nodegroupName": "gpu-gone"})
    # two pages; a node being replaced still bills, so every status counts
    sagemaker_stub.add_response("list_cluster_nodes", {
        "ClusterNodeSummaries": [_node("inference-g5", 0), _node("reserved", 0)], "NextToken": "t1"},
        {"ClusterName": "llm-platform-hp"})
    sagemaker_stub.add_response("list_cluster_nodes", {
        "ClusterNodeSummaries": [_node("inference-g5", 1, "Pending")]},
        {"ClusterName": "llm-platform-hp", "NextToken": "t1"})
    eks_stub.activate()
    sagemaker_stub.activate()
    return eks, sagemaker, eks_stub, sagemaker_stub


def test_every_group_is_counted_and_priced_once_an_hour() -> None:
    eks, sagemaker, eks_stub, sagemaker_stub = _clients()
    rows = sampler.count_nodes(GROUPS, PRICES, eks, sagemaker, NOW, "abc")
    eks_stub.assert_no_pending_responses()
    sagemaker_stub.assert_no_pending_responses()  # (one listing for both instance groups of the cluster)
    got = {r["group_name"]: (r["nodes"], r["usd_per_node_hour"], r["instance_type"], r["models"]) for r in rows}
    assert got == {"gpu-g6e": (3, 10.49, "g6e.12xlarge", ["Qwen/Qwen3-8B"]),
                   "gpu-gone": (0, 10.49, "g6e.12xlarge", []),
                   "inference-g5": (2, 7.09, "ml.g5.12xlarge", ["mistral-7b-instruct"]),
                   "reserved": (1, 4.5, "ml.g5.12xlarge", [])}
    assert {r["hour"] for r in rows} == {datetime(2026, 12, 1, 10, tzinfo=UTC)}
    assert {r["sample_time"] for r in rows} == {NOW} and {r["deployment_hash"] for r in rows} == {"abc"}


def test_a_group_of_several_types_is_priced_at_the_dearest() -> None:
    eks = boto3.client("eks", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(eks) as stub:
        stub.add_response("describe_nodegroup", {"nodegroup": {
            "instanceTypes": ["g6e.12xlarge", "g6e.24xlarge"], "scalingConfig": {"desiredSize": 2}}})
        (row,) = sampler.count_nodes([{**GROUPS[0], "instanceTypes": ["g6e.12xlarge", "g6e.24xlarge"]}],
                                     {"g6e.12xlarge": 10.49, "g6e.24xlarge": 15.07}, eks, None, NOW)
    assert row["usd_per_node_hour"] == 15.07 and row["instance_type"] == "g6e.12xlarge,g6e.24xlarge"


def test_the_rows_append_to_the_table_cloudformation_creates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform

    fields = [{**f, "type": json.loads(f["type"]) if f["type"].startswith("{") else f["type"]}
              for f in iceberg_schema(NODE_HOURS_COLUMNS)]
    schema = Schema.model_validate({"type": "struct", "schema-id": 0, "fields": fields})
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("capture")
    hour_id = next(f["id"] for f in fields if f["name"] == "hour")
    table = catalog.create_table(("capture", "gpu_node_hours"), schema=schema, partition_spec=PartitionSpec(
        PartitionField(source_id=hour_id, field_id=1000, transform=DayTransform(), name="hour_day")))

    eks, sagemaker, _, _ = _clients()
    clients = {"eks": eks, "sagemaker": sagemaker}
    monkeypatch.setenv("COST_GROUPS", json.dumps(GROUPS))
    monkeypatch.setenv("INSTANCE_PRICES", json.dumps(PRICES))
    monkeypatch.setenv("DEPLOYMENT_HASH", "abc")
    assert sampler.handler({}, None, clients=clients.__getitem__, table=lambda: table) == {"rows": 4}
    read = table.scan().to_arrow().to_pylist()
    assert sorted((r["group_name"], r["nodes"], r["usd_per_node_hour"]) for r in read) == [
        ("gpu-g6e", 3, 10.49), ("gpu-gone", 0, 10.49), ("inference-g5", 2, 7.09), ("reserved", 1, 4.5)]
    assert {tuple(r["models"]) for r in read} >= {("Qwen/Qwen3-8B",), ()}


def test_every_wrong_setting_is_named_in_one_error_before_anything_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-edited function (GpuCost renders these): all the problems at once, each naming its variable, and no
    API call or write before them."""
    monkeypatch.setenv("COST_GROUPS", json.dumps([{"kind": "ec2", "cluster": "", "group": "g",
                                                   "usdPerNodeHour": -1}, "gpu-g6e"]))
    monkeypatch.setenv("INSTANCE_PRICES", json.dumps({"g6e.xlarge": "1.86", "p5.48xlarge": True}))
    monkeypatch.setenv("OUTPUT_KMS_KEY_ID", "alias/capture")  # a name, not the ARN every put must carry
    monkeypatch.delenv("ICEBERG_DATABASE", raising=False)
    monkeypatch.delenv("ICEBERG_TABLE", raising=False)

    def no_client(service: str) -> Any:
        raise AssertionError(f"{service} called before the settings were checked")

    with pytest.raises(sampler.SamplerSettingsError) as raised:
        sampler.handler({}, None, clients=no_client)
    assert str(raised.value).splitlines()[1:] == [
        "  - COST_GROUPS[0].kind must be one of eks-nodegroup, hyperpod-instance-group, got 'ec2'",
        "  - COST_GROUPS[0].cluster must be a non-empty string, got ''",
        "  - COST_GROUPS[0].usdPerNodeHour must be null or a positive number, got -1",
        "  - COST_GROUPS[1] must be an object, got str",
        "  - INSTANCE_PRICES['g6e.xlarge'] must be a positive number, got '1.86'",
        "  - INSTANCE_PRICES['p5.48xlarge'] must be a positive number, got True",
        "  - OUTPUT_KMS_KEY_ID must be a KMS key ARN or alias ARN, got 'alias/capture'",
        "  - ICEBERG_DATABASE must be set (the Glue database and table of gpu_node_hours)",
        "  - ICEBERG_TABLE must be set (the Glue database and table of gpu_node_hours)",
    ]


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("COST_GROUPS", None, "COST_GROUPS must be set"),
    ("COST_GROUPS", "[{", "COST_GROUPS must be JSON: "),
    ("COST_GROUPS", "{}", "COST_GROUPS must be a JSON list of groups, got dict"),
    ("INSTANCE_PRICES", "[]", "INSTANCE_PRICES must be a JSON object of instance type -> USD, got list"),
])
def test_a_missing_or_malformed_document_is_named(name: str, value: str | None, problem: str) -> None:
    environ = {"COST_GROUPS": json.dumps(GROUPS), "INSTANCE_PRICES": json.dumps(PRICES)}
    if value is None:
        del environ[name]
    else:
        environ[name] = value
    [found] = sampler.settings_problems(environ, reads_glue=False)
    assert found.startswith(problem)


def test_the_rendered_settings_have_no_problem() -> None:
    """What GpuCost renders (tests/capture_processor/test_gpu_cost_construct.py checks the rendering) passes."""
    environ = {"COST_GROUPS": json.dumps(GROUPS), "INSTANCE_PRICES": json.dumps(PRICES), "ICEBERG_DATABASE": "d",
               "ICEBERG_TABLE": "gpu_node_hours",
               "OUTPUT_KMS_KEY_ID": "arn:aws:kms:us-west-2:111122223333:key/1a2b3c4d-0000-1111-2222-333344445555"}
    assert sampler.settings_problems(environ) == []

"""Rehearsal of GpuCost's GPU node-hour sampler (``node_hours_sampler.handler`` of the staged asset in cdk.out, the
code the template deploys) under its own synthesized role, with the function's environment from the template
(``COST_GROUPS``, ``INSTANCE_PRICES``, the table, ``OUTPUT_KMS_KEY_ID``): one hourly run against moto holding the
configured EKS node group and HyperPod cluster, appending to ``gpu_node_hours`` through its Glue catalog.

moto authorizes EKS, SageMaker and Glue against resource ``*`` only, so every boto3 call of the run (S3 included:
its commit's file IO is boto3 with the capture key) is decided in its own process by `CallGate` (moto's evaluator
on the resource each call names, as the template's policy names it), enforcement paused for the run; the S3
requests moto logged are checked against the role once more. Proves: the role allows what one hour's run really
calls, on its node group, its HyperPod cluster, its table and its table's prefix; pointed at another node group or
another table it fails naming the call. Cannot prove: the ``aws:RequestedRegion``, ``aws:ResourceAccount``,
``s3:prefix``, ``kms:ViaService`` and encryption-context conditions (not evaluated), the bucket policy (moto
grants nothing through it; tests/capture_processor/test_node_hours_encryption.py judges the sampler's writes
against it), the HyperPod cluster's real ARN (its id is SageMaker's; the rehearsal makes one up for the template's
``ClusterArn``), EventBridge's invocation (trust), CloudWatch Logs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.rehearsal.conftest import base_environment, invoke_gated, record_timing
from tests.support.rehearsal import CallGate, FunctionRuntime, Rehearsal, function_runtimes
from tests.support.synth import Assembly

pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]

NODES = {"eks-nodegroup": 2, "hyperpod-instance-group": 3}  # how many nodes each kind of group has in moto

# gpu_node_hours as CloudFormation creates it (GpuCost's table: the tables' schema, day partitions of `hour`).
CREATE_TABLE = """import json, sys
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from capture_core.iceberg_sink import catalog_for
from capture_core.settings import IcebergSettings
database, table, location, endpoint, region, fields = sys.argv[1:7]
fields = json.loads(fields)
catalog = catalog_for(IcebergSettings(database), endpoint, region)
hour = next(f["id"] for f in fields if f["name"] == "hour")
catalog.create_table((database, table), location=location,
                     schema=Schema.model_validate({"type": "struct", "schema-id": 0, "fields": fields}),
                     partition_spec=PartitionSpec(PartitionField(source_id=hour, field_id=1000,
                                                                 transform=DayTransform(), name="hour_day")))
"""


@pytest.fixture(scope="module")
def sampler(rehearsal: Rehearsal) -> FunctionRuntime:
    [function] = [f for f in function_runtimes(rehearsal.resolver) if f.handler == "node_hours_sampler.handler"]
    return function


def capture_bucket(rehearsal: Rehearsal, sampler: FunctionRuntime) -> str:
    """The bucket of the sampler's table (its role's only bucket)."""
    [bucket] = {resource.split(":::")[1].split("/")[0] for document in rehearsal.role(sampler.role_arn).inline.values()
                for statement in document["Statement"] for resource in
                (statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]])
                if resource.startswith("arn:aws:s3:::")}
    return bucket


@pytest.fixture(scope="module")
def capacity(rehearsal: Rehearsal, assembly: Assembly, sampler: FunctionRuntime,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The configured groups in moto (EKS node groups, HyperPod clusters and their instance groups) and the table;
    what the run names -> the ARN the template's policy names. (Enforcement paused: moto's signature check fails
    its own EKS requests, SignatureDoesNotMatch, even the admin's.)"""
    with rehearsal.server.enforcement_paused():
        return _capacity(rehearsal, assembly, sampler, tmp_path_factory)


def _capacity(rehearsal: Rehearsal, assembly: Assembly, sampler: FunctionRuntime,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from hyperpod_inference_iac.capture.capture_tables import NODE_HOURS_COLUMNS, iceberg_schema

    resolver, env = rehearsal.resolver, sampler.environment
    eks, sagemaker, glue = (rehearsal.client(name) for name in ("eks", "sagemaker", "glue"))
    some_role = next(iter(rehearsal.created.roles))
    names: dict[str, str] = {}
    hyperpod: dict[str, list[dict[str, Any]]] = {}
    for group in json.loads(env["COST_GROUPS"]):
        if group["kind"] == "eks-nodegroup":
            if group["cluster"] not in eks.list_clusters()["clusters"]:
                eks.create_cluster(name=group["cluster"], roleArn=some_role, resourcesVpcConfig={})
            created = eks.create_nodegroup(
                clusterName=group["cluster"], nodegroupName=group["group"], nodeRole=some_role,
                subnets=["subnet-0rehearsal"], instanceTypes=group["instanceTypes"],
                scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": NODES["eks-nodegroup"]})
            names[f"{group['cluster']}/{group['group']}"] = created["nodegroup"]["nodegroupArn"]
        else:
            hyperpod.setdefault(group["cluster"], []).append(group)
    clusters = {resolver.name(stack, logical_id): resolver.get_att(stack, logical_id, "ClusterArn")
                for stack, logical_id, _ in resolver.resources("AWS::SageMaker::Cluster")}
    # moto 5.2's CreateCluster reads TargetCount and ThreadsPerCore (KeyError without them); botocore refuses
    # TargetCount, so it is added to the request's body after validation.
    sagemaker.meta.events.register("before-call.sagemaker.CreateCluster", _with_target_counts)
    for cluster, groups in hyperpod.items():
        sagemaker.create_cluster(ClusterName=cluster, InstanceGroups=[{
            "InstanceGroupName": group["group"], "InstanceType": group["instanceTypes"][0],
            "InstanceCount": NODES["hyperpod-instance-group"], "ExecutionRole": some_role, "ThreadsPerCore": 1,
            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/", "OnCreate": "on_create.sh"}}
            for group in groups])
        names[cluster] = clusters[cluster]  # the template's ClusterArn (the policy's resource)
    database, table = env["ICEBERG_DATABASE"], env["ICEBERG_TABLE"]
    if database not in {db["Name"] for db in glue.get_databases()["DatabaseList"]}:
        glue.create_database(DatabaseInput={"Name": database})
    fields = [{**f, "type": json.loads(f["type"]) if f["type"].startswith("{") else f["type"]}
              for f in iceberg_schema(NODE_HOURS_COLUMNS)]
    workdir = tmp_path_factory.mktemp("node-hours-table")
    admin = {**base_environment(workdir), **rehearsal.environment(rehearsal.admin)}
    created = subprocess.run(
        [sys.executable, "-c", CREATE_TABLE, database, table,
         f"s3://{capture_bucket(rehearsal, sampler)}/curated-iceberg/{table}", rehearsal.server.url,
         rehearsal.region, json.dumps(fields)], cwd=sampler.code_folder(assembly.directory), env=admin,
        capture_output=True, text=True, timeout=120, check=False)
    assert created.returncode == 0, created.stderr
    return names


def _with_target_counts(params: dict[str, Any], **_: Any) -> None:
    body = json.loads(params["body"])
    for group in body["InstanceGroups"]:
        group["TargetCount"] = group["InstanceCount"]
    params["body"] = json.dumps(body).encode()


def gate(rehearsal: Rehearsal, sampler: FunctionRuntime, capacity: dict[str, str], record: Path) -> CallGate:
    return CallGate(principal_arn=sampler.role_arn, account=rehearsal.account, region=rehearsal.region,
                    identity=rehearsal.role_policies(sampler.role_arn.rsplit("/", 1)[-1]), resources=capacity,
                    record=str(record))


SCHEDULED = {"version": "0", "source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}


@pytest.fixture(scope="module")
def sampled(rehearsal: Rehearsal, assembly: Assembly, sampler: FunctionRuntime, capacity: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    started = time.monotonic()
    workdir = tmp_path_factory.mktemp("node-hours")
    offset = rehearsal.server.log_offset()
    code, log, calls = invoke_gated(rehearsal, sampler, assembly, gate(rehearsal, sampler, capacity,
                                                                       workdir / "calls"), SCHEDULED, workdir)
    requests = rehearsal.server.requests_since(offset)
    record_timing("GPU node-hour sampler: one hourly run", time.monotonic() - started)
    return {"code": code, "log": log, "calls": calls, "requests": requests}


def test_one_hourly_run_under_its_role_appends_every_group(sampled: dict[str, Any],
                                                           sampler: FunctionRuntime) -> None:
    assert sampled["code"] == 0, sampled["log"]
    groups = json.loads(sampler.environment["COST_GROUPS"])
    assert f'ANSWER {json.dumps({"rows": len(groups)})}' in sampled["log"], sampled["log"]
    counted = json.loads(next(line for line in sampled["log"].splitlines() if line.startswith('{"rows"')))["nodes"]
    assert counted == {f"{g['cluster']}/{g['group']}": NODES[g["kind"]] for g in groups}


def test_every_call_of_the_run_is_allowed_on_its_own_resources(sampled: dict[str, Any], capacity: dict[str, str],
                                                               sampler: FunctionRuntime) -> None:
    calls = sampled["calls"]
    assert all(call["refused"] is None for call in calls), [call for call in calls if call["refused"]]
    made = {call["action"] for call in calls}
    assert {"eks:DescribeNodegroup", "sagemaker:ListClusterNodes", "glue:GetTable", "glue:UpdateTable",
            "s3:PutObject"} <= made, made
    table = sampler.environment["ICEBERG_TABLE"]
    for call in calls:
        if call["action"].startswith("s3:"):
            assert f"/curated-iceberg/{table}/" in call["resource"], call
        elif call["action"].startswith(("eks:", "sagemaker:")):
            assert call["resource"] in capacity.values(), call


def test_what_moto_logged_of_s3_was_allowed_and_encrypted_with_the_key(
    rehearsal: Rehearsal, sampler: FunctionRuntime, sampled: dict[str, Any]
) -> None:
    """Every S3 request of the run as the server saw it (whatever client made it), judged against the role; the
    objects it wrote are under the key the template names, whose use by S3 the role allows."""
    bucket = capture_bucket(rehearsal, sampler)
    method_action = {"PUT": "s3:PutObject", "POST": "s3:PutObject", "GET": "s3:GetObject", "HEAD": "s3:GetObject",
                     "DELETE": "s3:DeleteObject"}
    objects = [(method, path.split("?")[0]) for method, path, _ in sampled["requests"]
               if path.startswith(f"/{bucket}/")]
    assert objects
    for method, path in objects:
        assert rehearsal.identity_allows(sampler.role_arn, method_action[method], f"arn:aws:s3:::{path[1:]}"), path
    s3 = rehearsal.client("s3")
    written = {path[len(bucket) + 2:] for method, path in objects if method == "PUT"}
    key_arn = sampler.environment["OUTPUT_KMS_KEY_ID"]  # (the capture key's ARN, through the storage's export)
    assert {s3.head_object(Bucket=bucket, Key=key).get("SSEKMSKeyId") for key in written} == {key_arn}
    assert rehearsal.identity_allows(sampler.role_arn, "kms:GenerateDataKey", key_arn)
    assert rehearsal.identity_allows(sampler.role_arn, "kms:Decrypt", key_arn)


def test_pointed_at_another_node_group_it_fails_naming_the_call(
    rehearsal: Rehearsal, assembly: Assembly, sampler: FunctionRuntime, capacity: dict[str, str],
    sampled: dict[str, Any], tmp_path: Path
) -> None:
    """The negative: COST_GROUPS naming a node group of the cluster that is not the configured GPU group."""
    groups = json.loads(sampler.environment["COST_GROUPS"])
    eks_group = next(g for g in groups if g["kind"] == "eks-nodegroup")
    other = {**eks_group, "group": "system-nodes"}
    with rehearsal.server.enforcement_paused():
        created = rehearsal.client("eks").create_nodegroup(
            clusterName=other["cluster"], nodegroupName=other["group"], nodeRole=next(iter(rehearsal.created.roles)),
            subnets=["subnet-0rehearsal"], scalingConfig={"minSize": 0, "maxSize": 1, "desiredSize": 1})
    the_gate = gate(rehearsal, sampler, {**capacity, f"{other['cluster']}/{other['group']}":
                                         created["nodegroup"]["nodegroupArn"]}, tmp_path / "calls")
    code, log, calls = invoke_gated(rehearsal, sampler, assembly, the_gate, SCHEDULED, tmp_path / "run",
                                    COST_GROUPS=json.dumps([other]))
    assert code != 0 and "AccessDeniedException" in log and "eks:DescribeNodegroup" in log, log
    assert [call["action"] for call in calls if call["refused"]] == ["eks:DescribeNodegroup"]


def test_pointed_at_another_table_it_fails_naming_the_call(
    rehearsal: Rehearsal, assembly: Assembly, sampler: FunctionRuntime, capacity: dict[str, str],
    sampled: dict[str, Any], tmp_path: Path
) -> None:
    """The negative: ICEBERG_TABLE naming the capture records' table: its catalog read is refused."""
    code, log, calls = invoke_gated(rehearsal, sampler, assembly, gate(rehearsal, sampler, capacity,
                                                                       tmp_path / "calls"), SCHEDULED,
                                    tmp_path / "run", ICEBERG_TABLE="capture_records")
    assert code != 0 and "AccessDeniedException" in log and "glue:GetTable" in log, log
    refused = [call for call in calls if call["refused"]]
    assert [call["action"] for call in refused] == ["glue:GetTable"]
    assert refused[0]["resource"].endswith("/capture_records")

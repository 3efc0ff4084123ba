"""The GPU node-hour sampler (GpuCost, issue 29.4): once an hour, count the nodes of every EKS node group and HyperPod
instance group the platform prices, and append one row per group to the Iceberg table ``gpu_node_hours``.

It ships in the capture processor's code asset (one asset, one upload: GpuCost's handler is
``node_hours_sampler.handler``) and writes the table through the processor's own catalog
(:func:`capture_core.iceberg_sink.catalog_for`): with ``OUTPUT_KMS_KEY_ID`` every object of its commits (data file,
manifest, manifest list, table metadata) names the capture key (:mod:`capture_core.sse_kms_io`), which the capture
bucket's policy requires where its default is SSE-S3 (ALB access logs accepted); without it, the bucket's default
encryption applies. GpuCost sets the variable exactly when the processor's is set (the same pipeline's key).

Runs in Lambda with boto3, pyiceberg (the capture tables' layer) and pyarrow (the AWS SDK for pandas layer), both
imported when a row is written (the counting is testable without them). Settings (GpuCost renders them from the
config):

- ``COST_GROUPS``: JSON list of ``{"kind": "eks-nodegroup"|"hyperpod-instance-group", "cluster": ..., "group": ...,
  "instanceTypes": [...], "models": [...], "usdPerNodeHour": null|float}``
- ``INSTANCE_PRICES``: JSON object, instance type -> USD per node-hour (``costs.instancePrices``)
- ``ICEBERG_CATALOG_ID``, ``ICEBERG_DATABASE``, ``ICEBERG_TABLE``, ``DEPLOYMENT_HASH``
- ``OUTPUT_KMS_KEY_ID`` (optional): the capture key's ARN, named by every write (as the processor's variable of the
  same name); ``AWS_ENDPOINT_URL`` (tests only: moto on loopback)

A node group's count is its desired size (``eks:DescribeNodegroup``: what EKS is asked to run, and bills for once
launched); an instance group's is its nodes as ``sagemaker:ListClusterNodes`` lists them (any status: HyperPod bills
an instance from launch to termination). A group with several instance types is priced at the dearest of them
unless the config gives the group its own price. A group that is gone counts 0 nodes (and costs nothing).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

LOG = logging.getLogger(__name__)
LOG.setLevel(logging.INFO)

EKS_NODEGROUP = "eks-nodegroup"
HYPERPOD_GROUP = "hyperpod-instance-group"


def count_nodes(groups: Sequence[Mapping[str, Any]], prices: Mapping[str, float], eks: Any, sagemaker: Any,
                now: datetime, deployment_hash: str = "") -> list[dict[str, Any]]:
    """One row per configured group: its node count now, the hour it stands for and its price per node-hour."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    hyperpod: dict[str, dict[str, list[str]]] = {}  # cluster -> group -> instance types of its nodes
    rows = []
    for group in groups:
        kind, cluster, name = group["kind"], group["cluster"], group["group"]
        if kind == EKS_NODEGROUP:
            nodes, types = _eks_nodes(eks, cluster, name)
        elif kind == HYPERPOD_GROUP:
            if cluster not in hyperpod:
                hyperpod[cluster] = _hyperpod_nodes(sagemaker, cluster)
            types = hyperpod[cluster].get(name, [])
            nodes = len(types)
        else:
            raise ValueError(f"unknown capacity kind {kind!r} of {cluster}/{name}")
        types = types or list(group.get("instanceTypes", []))  # (none listed: the configured ones)
        price = group.get("usdPerNodeHour")
        if price is None:
            missing = sorted({t for t in types if t not in prices})
            if missing:  # (the config check prices every configured type: a type changed outside the config)
                LOG.warning("no price for %s of %s/%s: priced by the others", missing, cluster, name)
            price = max((prices[t] for t in types if t in prices), default=0.0)
        rows.append({"sample_time": now, "hour": hour, "capacity_kind": kind, "cluster_name": cluster,
                     "group_name": name, "instance_type": ",".join(sorted(set(types))), "nodes": nodes,
                     "usd_per_node_hour": float(price), "models": list(group.get("models", [])),
                     "deployment_hash": deployment_hash})
    return rows


def _eks_nodes(eks: Any, cluster: str, name: str) -> tuple[int, list[str]]:
    try:
        nodegroup = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
    except eks.exceptions.ResourceNotFoundException:
        LOG.warning("node group %s/%s not found: 0 nodes", cluster, name)
        return 0, []
    desired = int(nodegroup.get("scalingConfig", {}).get("desiredSize", 0))
    return desired, list(nodegroup.get("instanceTypes") or [])


def _hyperpod_nodes(sagemaker: Any, cluster: str) -> dict[str, list[str]]:
    """Instance group -> the instance type of each of its nodes."""
    groups: dict[str, list[str]] = {}
    arguments: dict[str, Any] = {"ClusterName": cluster}
    try:
        while True:
            page = sagemaker.list_cluster_nodes(**arguments)
            for node in page.get("ClusterNodeSummaries", []):
                groups.setdefault(node["InstanceGroupName"], []).append(node["InstanceType"])
            if not page.get("NextToken"):
                return groups
            arguments["NextToken"] = page["NextToken"]
    except sagemaker.exceptions.ResourceNotFound:
        LOG.warning("HyperPod cluster %s not found: 0 nodes", cluster)
        return {}


def arrow_rows(rows: Sequence[Mapping[str, Any]]) -> Any:
    """The rows as the table's Arrow schema (every field optional, timestamps in UTC microseconds)."""
    import pyarrow as pa

    schema = pa.schema([
        ("sample_time", pa.timestamp("us", tz="UTC")), ("hour", pa.timestamp("us", tz="UTC")),
        ("capacity_kind", pa.string()), ("cluster_name", pa.string()), ("group_name", pa.string()),
        ("instance_type", pa.string()), ("nodes", pa.int32()), ("usd_per_node_hour", pa.float64()),
        ("models", pa.list_(pa.string())), ("deployment_hash", pa.string())])
    return pa.Table.from_pylist([dict(row) for row in rows], schema=schema)


def append(table: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """One commit of the hour's rows (pyiceberg retries a conflicting commit by reloading)."""
    table.append(arrow_rows(rows))


def _glue_table() -> Any:
    """The table, through the processor's Glue catalog: the same file IO rule as its appends (the key, or none)."""
    from capture_core.iceberg_sink import catalog_for
    from capture_core.settings import IcebergSettings

    settings = IcebergSettings(os.environ["ICEBERG_DATABASE"], catalog_id=os.environ.get("ICEBERG_CATALOG_ID") or None)
    catalog = catalog_for(settings, os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_REGION"),
                          os.environ.get("OUTPUT_KMS_KEY_ID") or None)
    return catalog.load_table((settings.database, os.environ["ICEBERG_TABLE"]))


class SamplerSettingsError(ValueError):
    """The sampler's environment is wrong (GpuCost renders it, so this is a hand edit or a stale function)."""


_KINDS = (EKS_NODEGROUP, HYPERPOD_GROUP)


def settings_problems(environ: Mapping[str, str], *, reads_glue: bool = True) -> list[str]:
    """Every problem of the sampler's environment, each naming its variable, what is allowed and what it got (one
    run reports them all, before any node is counted or any row written)."""
    problems: list[str] = []
    groups: Any = _json_setting(environ, "COST_GROUPS", None, problems)
    if groups is not None:
        if not isinstance(groups, list):
            problems.append(f"COST_GROUPS must be a JSON list of groups, got {type(groups).__name__}")
        else:
            for index, group in enumerate(groups):
                where = f"COST_GROUPS[{index}]"
                if not isinstance(group, dict):
                    problems.append(f"{where} must be an object, got {type(group).__name__}")
                    continue
                if group.get("kind") not in _KINDS:
                    problems.append(f"{where}.kind must be one of {', '.join(_KINDS)}, got {group.get('kind')!r}")
                for key in ("cluster", "group"):
                    if not isinstance(group.get(key), str) or not group.get(key):
                        problems.append(f"{where}.{key} must be a non-empty string, got {group.get(key)!r}")
                price = group.get("usdPerNodeHour")
                if price is not None and not _price(price):
                    problems.append(f"{where}.usdPerNodeHour must be null or a positive number, got {price!r}")
    prices: Any = _json_setting(environ, "INSTANCE_PRICES", {}, problems)
    if not isinstance(prices, dict):
        problems.append(f"INSTANCE_PRICES must be a JSON object of instance type -> USD, got {type(prices).__name__}")
    else:
        problems += [f"INSTANCE_PRICES[{name!r}] must be a positive number, got {value!r}"
                     for name, value in prices.items() if not _price(value)]
    key_id = environ.get("OUTPUT_KMS_KEY_ID") or None
    if key_id is not None and not _kms_key_arn().match(key_id):
        problems.append(f"OUTPUT_KMS_KEY_ID must be a KMS key ARN or alias ARN, got {key_id!r}")
    if reads_glue:
        problems += [f"{name} must be set (the Glue database and table of gpu_node_hours)"
                     for name in ("ICEBERG_DATABASE", "ICEBERG_TABLE") if not environ.get(name)]
    return problems


def _kms_key_arn() -> re.Pattern[str]:
    """The processor's own rule for the key, imported only when a key is named (capture_core.settings loads
    pyarrow, which the counting does not need)."""
    from capture_core.settings import KMS_KEY_ARN

    return KMS_KEY_ARN


def _price(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _json_setting(environ: Mapping[str, str], name: str, default: Any, problems: list[str]) -> Any:
    raw = environ.get(name)
    if raw is None:
        if default is None:
            problems.append(f"{name} must be set")
        return default
    try:
        return json.loads(raw)
    except ValueError as error:
        problems.append(f"{name} must be JSON: {error}")
        return default


def handler(event: Mapping[str, Any], context: Any, *, clients: Callable[[str], Any] | None = None,
            table: Callable[[], Any] = _glue_table) -> dict[str, Any]:
    """The hourly run (EventBridge): check the settings (all problems in one error), count, then append."""
    problems = settings_problems(os.environ, reads_glue=table is _glue_table)
    if problems:
        raise SamplerSettingsError("GPU node-hour sampler configuration is invalid:\n"
                                   + "\n".join(f"  - {problem}" for problem in problems))
    if clients is None:
        import boto3

        clients = boto3.client
    groups = json.loads(os.environ["COST_GROUPS"])
    prices = json.loads(os.environ.get("INSTANCE_PRICES", "{}"))
    rows = count_nodes(groups, prices, clients("eks"), clients("sagemaker"), datetime.now(UTC),
                       os.environ.get("DEPLOYMENT_HASH", ""))
    append(table(), rows)
    LOG.info(json.dumps({"rows": len(rows), "nodes": {f"{r['cluster_name']}/{r['group_name']}": r["nodes"]
                                                     for r in rows}}))
    return {"rows": len(rows)}

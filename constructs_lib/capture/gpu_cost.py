"""GpuCost: the cost per team (issue 29.4). An hourly sampler counts the nodes of every GPU node group and HyperPod
instance group and appends them, priced from the config, to the Iceberg table ``gpu_node_hours``
(:class:`~hyperpod_inference_iac.CaptureTables` makes it); the named query ``gpu-cost-per-caller-model-day`` shares
each group-hour among the callers by their tokens on the models it serves, idle hours as their own row. No extra
compute beyond one short Lambda run an hour: the daily table is an Athena query. docs/usage-and-budgets.md#cost-per-team
says where the node-hours come from and why, and what it costs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from hyperpod_inference_iac.capture.capture_pipeline import LAMBDA_RUNTIME, output_key_environment, processor_code
from hyperpod_inference_iac.capture.capture_tables import NODE_HOURS_TABLE, CaptureTables
from hyperpod_inference_iac.foundation.nag import acknowledge, resource_evidence
from hyperpod_inference_iac.foundation.props import Props, listed, mapped, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved

# The most a node-hour may be priced at (USD): the dearest GPU instances are under $120/hour; the ceiling only keeps
# a typo (a monthly price, cents) out.
PRICE_RANGE = (0.0, 1000.0)
EKS_NODEGROUP = "eks-nodegroup"
HYPERPOD_GROUP = "hyperpod-instance-group"
# The sampler's run: five minutes past each hour (a scale-up at the hour has settled), retried twice.
SAMPLE_MINUTE = "5"


@dataclass(frozen=True, kw_only=True)
class InstancePrice(Props):
    """The price of one instance type (``costs.instancePrices[]``)."""

    CONSTRUCT: ClassVar[str] = "GpuCost"

    instance_type: str = prop(doc="An instance type as its group names it: EC2's for a node group (`g6e.12xlarge`), "
                                  "SageMaker's for a HyperPod instance group (`ml.g5.12xlarge`).")
    usd_per_node_hour: float = prop(doc=f"USD per node-hour ({PRICE_RANGE[0]:g}..{PRICE_RANGE[1]:g}): your price "
                                        "(on-demand list price, or net of a Savings Plan or a reservation).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        _check_price(problems, at.at("usd_per_node_hour"), self.usd_per_node_hour)


@dataclass(frozen=True, kw_only=True)
class CostGroup(Props):
    """The models one group of nodes serves, and optionally its own price (``costs.groups[]``)."""

    CONSTRUCT: ClassVar[str] = "GpuCost"

    name: str = prop(doc="A GPU node group's name (`cluster.gpuNodeGroups[].name`) or a HyperPod instance group's "
                         "(`hyperpod.instanceGroups[].name`).")
    models: Sequence[str] = prop(
        doc="The models the group serves, as the usage table names them (`coalesce(gen_ai_response_model, "
            "gen_ai_request_model)`: the name the server reports, e.g. `Qwen/Qwen3-8B`): each hour of the group is "
            "shared among the callers by their tokens on these models.")
    usd_per_node_hour: float | None = prop(
        None, default_doc="the price of its instance type (`instancePrices`)",
        doc="This group's own price per node-hour (a reservation of its own), over `instancePrices`.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if not self.models:
            problems.add("GpuCost.NoModels", at.at("models"),
                         "must name at least one model (a group serving none is all idle: leave it out instead)",
                         list(self.models))
        for index, model in enumerate(self.models):
            if model in self.models[:index]:
                problems.add("GpuCost.DuplicateModel", at.at("models", index), "a model at most once", model)
        if self.usd_per_node_hour is not None:
            _check_price(problems, at.at("usd_per_node_hour"), self.usd_per_node_hour)


def _check_price(problems: Problems, path: str, price: float) -> None:
    if not is_unresolved(price) and not PRICE_RANGE[0] <= price <= PRICE_RANGE[1]:
        problems.add("GpuCost.PriceOutOfRange", path,
                     f"must be a number of USD per node-hour from {PRICE_RANGE[0]:g} to {PRICE_RANGE[1]:g}", price)


@dataclass(frozen=True, kw_only=True)
class GpuCostOptions(Props):
    """:class:`GpuCost`'s properties a config file sets (``costs.*``)."""

    CONSTRUCT: ClassVar[str] = "GpuCost"

    instance_prices: Sequence[InstancePrice] = prop(
        doc="The price of every instance type of the GPU node groups and HyperPod instance groups (`InstancePrice`, "
            "below), each type once; a group with its own `usdPerNodeHour` needs none. Prices are config, not "
            "looked up: the synth stays offline (docs/usage-and-budgets.md#prices says how to fill them from the AWS "
            "Price List).")
    groups: Sequence[CostGroup] = prop(
        (), doc="Which models each group serves (`CostGroup`, below). Every GPU node group and HyperPod instance "
                "group is sampled and priced; one not listed here serves no model, so all its hours are idle.")

    def check(self, problems: Problems, at: KeyPaths = PROPS, *,
              node_groups: Mapping[str, Sequence[str]] | None = None,
              instance_groups: Mapping[str, str] | None = None) -> None:
        """Every rule; with the platform's groups (``node_groups``: name -> instance types, ``instance_groups``:
        name -> instance type), that each group's type has a price, each price a group and each entry a group."""
        prices = self.instance_prices
        types = [price.instance_type for price in prices]
        for index, price in enumerate(prices):
            price.check(problems, at.child("instance_prices", index))
            if price.instance_type in types[:index]:
                problems.add("GpuCost.DuplicatePrice", at.child("instance_prices", index).at("instance_type"),
                             "an instance type at most once", price.instance_type)
        names = [group.name for group in self.groups]
        for index, group in enumerate(self.groups):
            group.check(problems, at.child("groups", index))
            if group.name in names[:index]:
                problems.add("GpuCost.DuplicateGroup", at.child("groups", index).at("name"), "a group at most once",
                             group.name)
        if node_groups is None or instance_groups is None:
            return
        known = {**{name: tuple(t) for name, t in node_groups.items()},
                 **{name: (t,) for name, t in instance_groups.items()}}
        for index, group in enumerate(self.groups):
            if not is_unresolved(group.name) and group.name not in known:
                problems.add("GpuCost.UnknownGroup", at.child("groups", index).at("name"),
                             f"must be a GPU node group or a HyperPod instance group of this platform "
                             f"({', '.join(sorted(known)) or 'none'})", group.name)
        own_price = {group.name for group in self.groups if group.usd_per_node_hour is not None}
        # (a price without its type has a problem of its own: its type may be the one missing)
        missing = sorted({(t, name) for name, group_types in known.items() if name not in own_price
                          for t in group_types if t not in types and not is_unresolved(t)}) if all(types) else []
        for instance_type, name in missing:
            problems.add("GpuCost.UnknownInstancePrice", at.at("instance_prices"),
                         f"has no price for {instance_type} (of the group {name}): add "
                         f"{{instanceType: {instance_type}, usdPerNodeHour: <USD>}}, or give the group its own "
                         "usdPerNodeHour in groups", instance_type)
        used = {t for group_types in known.values() for t in group_types}
        for index, price in enumerate(prices):
            if not is_unresolved(price.instance_type) and price.instance_type not in used:
                hint = (" (a HyperPod instance group's type starts with ml.)" if f"ml.{price.instance_type}" in used
                        else " (a node group's type has no ml. prefix)"
                        if price.instance_type.removeprefix("ml.") in used else "")
                problems.add("GpuCost.UnusedInstancePrice", at.child("instance_prices", index).at("instance_type"),
                             f"is the type of no GPU node group or HyperPod instance group ({', '.join(sorted(used))})"
                             f"{hint}", price.instance_type)

    def price_of(self, instance_type: str) -> float | None:
        return next((p.usd_per_node_hour for p in self.instance_prices if p.instance_type == instance_type), None)


@dataclass(frozen=True, kw_only=True)
class GpuCostProps(GpuCostOptions):
    """:class:`GpuCost`'s properties: its options, the platform's groups and the tables."""

    tables: CaptureTables = prop(
        config=False, doc="The capture tables: the sampler appends to their `gpu_node_hours` (their pyiceberg layer, "
                          "`tables_layer_arn`, is required).")
    eks_cluster_name: str | None = prop(None, config=False, default_doc="none: no node group",
                                        doc="The EKS cluster of `node_groups`.")
    node_groups: Mapping[str, Sequence[str]] | None = prop(
        None, config=False, default_doc="none", doc="The GPU node groups to sample: name -> instance types.")
    hyperpod_cluster_name: str | None = prop(None, config=False, default_doc="none: no instance group",
                                             doc="The HyperPod cluster of `instance_groups`.")
    hyperpod_cluster_arn: str | None = prop(
        None, config=False, default_doc="none: no instance group",
        doc="Its ARN (a token is fine): the only resource `sagemaker:ListClusterNodes` is allowed on.")
    instance_groups: Mapping[str, str] | None = prop(
        None, config=False, default_doc="none", doc="The HyperPod instance groups to sample: name -> instance type.")
    role_name: str | None = prop(
        None, config=False, default_doc="generated by CloudFormation",
        doc="A fixed name for the sampler's role: needed when the tables' bucket is guarded in another stack "
            "(its policy names the role by ARN).")
    log_retention: logs.RetentionDays = prop(logs.RetentionDays.THREE_MONTHS, config=False,
                                             doc="How long the sampler's logs are kept.")

    def check(self, problems: Problems, at: KeyPaths = PROPS, **_: Any) -> None:
        super().check(problems, at, node_groups=self.node_groups or {}, instance_groups=self.instance_groups or {})
        if self.tables.props.tables_layer_arn is None:
            problems.add("GpuCost.NoTablesLayer", at.at("tables"),
                         "the sampler writes gpu_node_hours with pyiceberg: give the capture tables their layer "
                         "(tables_layer_arn, capture.tablesLayerArn)", None)
        if self.node_groups and self.eks_cluster_name is None:
            problems.add("GpuCost.NoCluster", at.at("eks_cluster_name"), "is required with node_groups", None)
        if self.instance_groups and (self.hyperpod_cluster_name is None or self.hyperpod_cluster_arn is None):
            problems.add("GpuCost.NoCluster", at.at("hyperpod_cluster_arn"),
                         "hyperpod_cluster_name and hyperpod_cluster_arn are required with instance_groups", None)


@real_signature
class GpuCost(Construct):
    """The hourly node-hour sampler of the cost per team and its least-privilege role.

    Properties: :class:`GpuCostProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``function`` (the sampler), ``role``, ``rule`` (the hourly schedule), ``settings`` (the groups and
    prices the sampler is given, as it reads them).
    """

    PROPS: ClassVar[type[Props]] = GpuCostProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        tables: CaptureTables,
        instance_prices: Sequence[InstancePrice],
        groups: Sequence[CostGroup] = GpuCostProps.groups,
        eks_cluster_name: str | None = GpuCostProps.eks_cluster_name,
        node_groups: Mapping[str, Sequence[str]] | None = GpuCostProps.node_groups,
        hyperpod_cluster_name: str | None = GpuCostProps.hyperpod_cluster_name,
        hyperpod_cluster_arn: str | None = GpuCostProps.hyperpod_cluster_arn,
        instance_groups: Mapping[str, str] | None = GpuCostProps.instance_groups,
        role_name: str | None = GpuCostProps.role_name,
        log_retention: logs.RetentionDays = GpuCostProps.log_retention,
    ) -> None:
        """Create the construct. Its properties (:class:`GpuCostProps`, kept as ``self.props``):

        :param instance_prices: The price of every instance type of the GPU node groups and HyperPod instance
            groups (`InstancePrice`, below), each type once; a group with its own `usdPerNodeHour` needs none.
            Prices are config, not looked up: the synth stays offline (docs/usage-and-budgets.md#prices says how
            to fill them from the AWS Price List). Default: required.
        :param groups: Which models each group serves (`CostGroup`, below). Every GPU node group and HyperPod
            instance group is sampled and priced; one not listed here serves no model, so all its hours are
            idle. Default: ``()``.
        :param tables: The capture tables: the sampler appends to their `gpu_node_hours` (their pyiceberg layer,
            `tables_layer_arn`, is required). Default: required.
        :param eks_cluster_name: The EKS cluster of `node_groups`. Default: ``None`` (none: no node group).
        :param node_groups: The GPU node groups to sample: name -> instance types. Default: ``None`` (none).
        :param hyperpod_cluster_name: The HyperPod cluster of `instance_groups`. Default: ``None`` (none: no
            instance group).
        :param hyperpod_cluster_arn: Its ARN (a token is fine): the only resource `sagemaker:ListClusterNodes`
            is allowed on. Default: ``None`` (none: no instance group).
        :param instance_groups: The HyperPod instance groups to sample: name -> instance type. Default: ``None``
            (none).
        :param role_name: A fixed name for the sampler's role: needed when the tables' bucket is guarded in
            another stack (its policy names the role by ARN). Default: ``None`` (generated by CloudFormation).
        :param log_retention: How long the sampler's logs are kept. Default: ``RetentionDays.THREE_MONTHS``.
        """
        super().__init__(scope, id)
        self.props = props = GpuCostProps(
            tables=tables, instance_prices=listed(instance_prices), groups=listed(groups),
            eks_cluster_name=eks_cluster_name, node_groups=mapped(node_groups),
            hyperpod_cluster_name=hyperpod_cluster_name, hyperpod_cluster_arn=hyperpod_cluster_arn,
            instance_groups=mapped(instance_groups), role_name=role_name, log_retention=log_retention)
        props.raise_if_invalid(f"GpuCost {self.node.path}")
        stack = Stack.of(self)
        self.settings = settings = cost_settings(props)
        settings_hash = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]

        log_group = logs.LogGroup(self, "Logs", retention=props.log_retention)
        # Its own role: the default one attaches AWSLambdaBasicExecutionRole (every log group of the account).
        self.role = role = iam.Role(self, "Role", role_name=props.role_name,
                                    assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                                    description="Counts GPU nodes hourly into gpu_node_hours (GpuCost)")
        log_group.grant_write(role)
        region_only = {"StringEquals": {"aws:RequestedRegion": stack.region}}
        if props.node_groups:
            node_group_arns = [f"arn:{stack.partition}:eks:{stack.region}:{stack.account}:nodegroup/"
                               f"{props.eks_cluster_name}/{name}/*" for name in props.node_groups]
            iam.Grant.add_to_principal(grantee=role, actions=["eks:DescribeNodegroup"], conditions=region_only,
                                       resource_arns=node_group_arns)
            acknowledge(role, "eks-node-group-id", *resource_evidence(role, *node_group_arns))
        if props.instance_groups:
            assert props.hyperpod_cluster_arn is not None  # (checked)
            iam.Grant.add_to_principal(grantee=role, actions=["sagemaker:ListClusterNodes"], conditions=region_only,
                                       resource_arns=[props.hyperpod_cluster_arn])
        # Its own table only: files under its prefix, the catalog calls of a commit, its Lake Formation permissions.
        tables.grant_table_writer(self, "Sampler", role, NODE_HOURS_TABLE)
        assert tables.props.tables_layer_arn is not None  # (checked)
        self.function = lambda_.Function(
            self, "Function", runtime=LAMBDA_RUNTIME, architecture=lambda_.Architecture.ARM_64,
            handler="node_hours_sampler.handler", role=role, log_group=log_group, memory_size=512,
            timeout=Duration.minutes(2), reserved_concurrent_executions=1,  # (one commit at a time)
            # The processor's asset (one upload): the sampler commits through the processor's catalog and file IO.
            code=processor_code(),
            # pyarrow from the AWS SDK for pandas layer, pyiceberg from the tables' layer: the processor's two
            layers=[lambda_.LayerVersion.from_layer_version_arn(self, "PandasLayer",
                                                                tables.props.pipeline.pandas_layer_arn),
                    lambda_.LayerVersion.from_layer_version_arn(self, "TablesLayer",
                                                                tables.props.tables_layer_arn)],
            environment={
                **cost_environment(settings),
                "ICEBERG_CATALOG_ID": stack.account, "ICEBERG_DATABASE": tables.props.database_name,
                "ICEBERG_TABLE": NODE_HOURS_TABLE, "DEPLOYMENT_HASH": settings_hash,
                # Its writes name the capture key exactly when the processor's do (the same pipeline's key):
                # with ALB access logs accepted the bucket refuses any write that does not.
                **output_key_environment(tables.props.pipeline.props.encryption_key)},
            description="GPU node-hours per group, hourly, for the cost per team (docs/usage-and-budgets.md)")
        acknowledge(self.function, "capture-tables-layer-runtime")
        self.rule = events.Rule(self, "Hourly", schedule=events.Schedule.cron(minute=SAMPLE_MINUTE),
                                description="Counts the GPU nodes of every group into gpu_node_hours (GpuCost)")
        self.rule.add_target(targets.LambdaFunction(self.function, retry_attempts=2,
                                                    max_event_age=Duration.minutes(50)))


def cost_settings(props: GpuCostProps) -> dict[str, Any]:
    """What the sampler is given: every group (kind, cluster, name, configured types, models, own price) and the
    prices by instance type."""
    listed_groups = {group.name: group for group in props.groups}
    capacity = [*((EKS_NODEGROUP, props.eks_cluster_name, name, list(types))
                  for name, types in (props.node_groups or {}).items()),
                *((HYPERPOD_GROUP, props.hyperpod_cluster_name, name, [instance_type])
                  for name, instance_type in (props.instance_groups or {}).items())]
    groups: list[dict[str, Any]] = []
    for kind, cluster, name, types in capacity:
        entry = listed_groups.get(name)
        groups.append({"kind": kind, "cluster": cluster, "group": name, "instanceTypes": types,
                       "models": list(entry.models) if entry is not None else [],
                       "usdPerNodeHour": entry.usd_per_node_hour if entry is not None else None})
    return {"groups": groups, "prices": {p.instance_type: p.usd_per_node_hour for p in props.instance_prices}}


def cost_environment(settings: dict[str, Any]) -> dict[str, str]:
    """The sampler's ``COST_GROUPS`` and ``INSTANCE_PRICES`` (what `make review` reads as prices and cost groups)."""
    return {"COST_GROUPS": json.dumps(settings["groups"], sort_keys=True, separators=(",", ":")),
            "INSTANCE_PRICES": json.dumps(settings["prices"], sort_keys=True, separators=(",", ":"))}

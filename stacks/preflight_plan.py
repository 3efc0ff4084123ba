"""The preflight's plan of this app (``cdk.out/preflight-plan.json``): what the synthesized platform will ask of the
account, read from the config and from the constructs the stacks built (node groups' sizes, the add-on's
configuration), so the preflight checks what is deployed and not a second reading of the file."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks

from hyperpod_inference_iac.cluster.inference_operator import OPERATOR_ADDON
from hyperpod_inference_iac.preflight import InstanceNeed, PreflightPlan, PriceNeed, deploy_time_placeholders
from platform_config import PlatformConfig
from stacks.platform import Platform


def _node_groups(platform: Platform) -> tuple[InstanceNeed, ...]:
    """Each EKS managed node group of the cluster stack at its maximum size, by its first instance type (the one it
    launches while that type has capacity)."""
    stack = platform.cluster
    needs = []
    for child in stack.node.find_all():
        if not isinstance(child, eks.CfnNodegroup):
            continue
        scaling: Any = stack.resolve(child.scaling_config) or {}
        types: Any = stack.resolve(child.instance_types) or []
        maximum = scaling.get("maxSize")
        if types and isinstance(types[0], str) and isinstance(maximum, int):
            needs.append(InstanceNeed("ec2", types[0], maximum, child.node.path))
    return tuple(needs)


def _prices(platform: Platform) -> tuple[PriceNeed, ...]:
    """Each price the cost sampler is given, as it reads them (GpuCost's settings): a configured instance price per
    group that uses the type, or the group's own price (several types of an own-priced group: not comparable to one
    list price, named together)."""
    gpu_cost = platform.cluster.gpu_cost
    if gpu_cost is None:
        return ()
    settings = gpu_cost.settings
    needs = []
    for group in settings["groups"]:
        service = "ec2" if group["kind"] == "eks-nodegroup" else "sagemaker"
        types = sorted(set(group["instanceTypes"]))
        if group["usdPerNodeHour"] is not None:
            needs.append(PriceNeed(service, ",".join(types), float(group["usdPerNodeHour"]), group["group"]))
        else:
            needs += [PriceNeed(service, t, float(settings["prices"][t]), group["group"])
                      for t in types if t in settings["prices"]]
    return tuple(needs)


def preflight_plan(config: PlatformConfig, platform: Platform) -> PreflightPlan:
    env = config.environment
    domain = config.domain
    operator = platform.cluster.operator
    configuration = deploy_time_placeholders(Stack.of(operator).resolve(dict(operator.configuration)))
    return PreflightPlan(
        account=env.account, region=env.region,
        # The capture tables' grants are Lake Formation permissions (CaptureTables, in the storage stack; GpuCost's
        # sampler's, in the cluster stack).
        lake_formation_admin=True,
        tables_layer_arn=config.capture.tables.tables_layer_arn,
        instances=(*_node_groups(platform),
                   *(InstanceNeed("sagemaker", group.instance_type, group.instance_count, group.name)
                     for group in config.hyperpod.instance_groups)),
        hosted_zone_id=domain.existing_hosted_zone_id, zone_name=domain.zone_name,
        certificate_arn=domain.existing_certificate_arn, certificate_names=tuple(domain.endpoint_domains),
        cluster_name=config.cluster.cluster_name, kubernetes_version=config.cluster.kubernetes_version,
        addon_name=OPERATOR_ADDON, addon_version=config.operator.addon_version, addon_configuration=configuration,
        sidecar_image=config.capture.sidecar_image,
        needs_sidecar_image=config.workloads.needs_sidecar_image or config.model_metrics_agent is not None,
        prices=_prices(platform),
    )

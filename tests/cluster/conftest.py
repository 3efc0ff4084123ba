"""Helpers for the GpuNodeGroup and HyperPodCluster tests.

Each test module synthesizes its stack once (module-scoped fixture); validation tests never synth:
the constructs validate before creating any child, so they share one scratch stack."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

REPO = Path(__file__).resolve().parents[2]
ENV = Environment(account="123456789012", region="us-west-2")


def cdk_context() -> dict[str, Any]:
    """The app's feature flags (cdk.json), so tests synthesize what `cdk synth` does."""
    return json.loads((REPO / "cdk.json").read_text())["context"]


@dataclass
class Base:
    """A standalone stack with a VPC and an aws_eks_v2 cluster without default capacity."""

    app: App
    stack: Stack
    vpc: ec2.Vpc
    cluster: eks.Cluster


def make_base(stack_name: str = "ClusterTest") -> Base:
    app = App(context=cdk_context(), analytics_reporting=False)
    stack = Stack(app, stack_name, env=ENV)
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    cluster = eks.Cluster(
        stack,
        "Eks",
        version=eks.KubernetesVersion.V1_34,
        vpc=vpc,
        default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
        default_capacity=0,
        # (HyperPodCluster applies HyperPod's dependency components through it)
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV34Layer(stack, "Kubectl")),
    )
    return Base(app, stack, vpc, cluster)


@pytest.fixture(scope="session")
def scratch() -> Base:
    """Never synthesized: validation tests add (failing) constructs to it under unique ids."""
    return make_base("Scratch")


@pytest.fixture
def unique_id(request: pytest.FixtureRequest) -> Callable[[], str]:
    counter = iter(range(1000))
    name = request.node.nodeid.replace("/", "_")
    return lambda: f"{name}-{next(counter)}"


def resources_of(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


def only(template: dict[str, Any], resource_type: str, logical_id_prefix: str = "") -> tuple[str, dict[str, Any]]:
    matches = {k: v for k, v in resources_of(template, resource_type).items() if k.startswith(logical_id_prefix)}
    assert len(matches) == 1, f"expected one {resource_type} starting with {logical_id_prefix!r}: {list(matches)}"
    return next(iter(matches.items()))

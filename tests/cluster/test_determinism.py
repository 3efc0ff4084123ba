"""Two synths of the same app are byte-identical (no random MIME boundary, no timestamps), so a
template diff only ever shows real changes."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_ec2 as ec2

from hyperpod_inference_iac.cluster.gpu_nodegroup import GpuNodeGroup
from hyperpod_inference_iac.cluster.hyperpod_cluster import HyperPodCluster, InstanceGroup
from tests.cluster.conftest import make_base


def _synth() -> bytes:
    base = make_base()
    GpuNodeGroup(base.stack, "Gpu", cluster=base.cluster, name="gpu", instance_types=["g6e.12xlarge"],
                 min_size=0, desired_size=1, max_size=2)
    HyperPodCluster(
        base.stack, "HyperPod", cluster_name="hp", eks_cluster=base.cluster, subnets=base.vpc.private_subnets,
        security_groups=[ec2.SecurityGroup(base.stack, "Sg", vpc=base.vpc)],
        instance_groups=[InstanceGroup(name="gpu", instance_type="ml.g6e.12xlarge", instance_count=1)],
        lifecycle_bucket_name="hp-lifecycle-123456789012",
    )
    assembly = base.app.synth()
    return Path(assembly.get_stack_by_name(base.stack.stack_name).template_full_path).read_bytes()


def test_two_synths_are_identical() -> None:
    first, second = _synth(), _synth()
    assert first == second
    assert b"+AWS+CDK+User+Data+Separator==" in first  # the fixed MIME boundary, not a random one

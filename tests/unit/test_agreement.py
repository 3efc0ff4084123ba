"""Parts a consumer wires separately agree, or one error names both (issue 26, 6).

Each mistake issue 26 found by wiring the wheel as a new user would, tried against the public API: first as the
consumer makes it (it must now be one :class:`ConfigError` naming both properties, whichever part is created
second), then the same parts wired right (a control: nothing is refused)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

from hyperpod_inference_iac import (
    CapturePipeline,
    CaptureStorage,
    ConfigError,
    GpuNodeGroup,
    HyperPodCluster,
    InferenceOperator,
    InferenceWorkloads,
    InstanceGroup,
    PlatformValue,
    S3Location,
)
from hyperpod_inference_iac.charts import (
    InferenceEndpointConfig,
    InferenceEndpointSpec,
    InferenceGateway,
    JwtAuthentication,
    ModelDeployment,
    ModelInvocationPort,
    ModelSourceConfig,
    ModelVolumeMount,
    NodeGroupPlacement,
    PlatformContext,
    Worker,
    plan_workloads,
)
from hyperpod_inference_iac.cluster.eks_cluster import kubectl_layer_for
from tests.cluster.conftest import ENV, cdk_context

ACCOUNT = "123456789012"
CERTIFICATE = f"arn:aws:acm:us-west-2:{ACCOUNT}:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def _problems(build: Callable[[], object]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as raised:
        build()
    return [(p.code, p.path) for p in raised.value.problems]


def _model(name: str = "qwen", instance_type: str = "ml.g5.12xlarge") -> InferenceEndpointConfig:
    return InferenceEndpointConfig(name=name, spec=InferenceEndpointSpec(
        model_name=name, instance_type=instance_type,
        model_source_config=ModelSourceConfig.s3(bucket_name="weights-bucket", region="us-west-2",
                                                 model_location="qwen"),
        worker=Worker(image="vllm/vllm-openai:v0.11.0",
                      model_invocation_port=ModelInvocationPort(container_port=8000),
                      model_volume_mount=ModelVolumeMount(name="model-weights"),
                      resources={"limits": {"nvidia.com/gpu": "1"}})))


def _plan(capture_prefix: str = "data-capture/", *, gateway: bool = False, instance_type: str = "ml.g5.12xlarge",
          **context: Any) -> Any:
    base: dict[str, Any] = {
        "cluster_name": "c", "namespace": "inference", "account": ACCOUNT, "role_name_prefix": "t",
        "capture": S3Location(PlatformValue.CAPTURE_BUCKET, capture_prefix),
        "endpoint_domains": ("models.example.com",), "custom_service_accounts_enabled": True,
        "operator_addon_version": "v2.0.0-eksbuild.2"}
    gateways = [InferenceGateway(name="team", endpoint_domain="models.example.com", jwt=JwtAuthentication(
        issuer="https://idp.example.com/team", jwks_uri="https://idp.example.com/team/keys", audiences=("team",)))
                ] if gateway else []
    models = [ModelDeployment(_model(instance_type=instance_type), gateway="team" if gateway else None,
                              path="models[0]")]
    return plan_workloads(PlatformContext(**{**base, **context}), models=models, gateways=gateways)


class Platform:
    """One app with a cluster and capture storage; the parts under test are added in the order a test chooses."""

    def __init__(self) -> None:
        self.stack = stack = Stack(App(context=cdk_context(), analytics_reporting=False), "Agreement", env=ENV)
        self.vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
        self.cluster = eks.Cluster(
            stack, "Eks", version=eks.KubernetesVersion.V1_34, vpc=self.vpc, default_capacity=0,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=kubectl_layer_for(stack, "1.34")))
        self.storage = CaptureStorage(self.stack, "Storage")

    def operator(self, capture_prefix: str = "data-capture/", **more: Any) -> InferenceOperator:
        return InferenceOperator(self.stack, "Operator", cluster=self.cluster, hyperpod_cluster_arn="arn",
                                 tls_bucket=self.storage.tls_bucket, capture_bucket=self.storage.capture_bucket,
                                 capture_key=self.storage.key, capture_prefix=capture_prefix, **more)

    def pipeline(self, *prefixes: str) -> CapturePipeline:
        return CapturePipeline(self.stack, "Pipeline", bucket=self.storage.capture_bucket,
                               encryption_key=self.storage.key, capture_prefixes=prefixes or ("data-capture/",))

    def workloads(self, plan: Any, id: str = "Workloads") -> InferenceWorkloads:
        return InferenceWorkloads(self.stack, id, cluster=self.cluster, plan=plan,
                                  capture_bucket=self.storage.capture_bucket, capture_key=self.storage.key,
                                  known_values={PlatformValue.CERTIFICATE_ARN: CERTIFICATE})

    def hyperpod(self, *instance_types: str) -> HyperPodCluster:
        return HyperPodCluster(
            self.stack, "HyperPod", cluster_name="hp", eks_cluster=self.cluster,
            subnets=self.vpc.private_subnets, security_groups=[self.cluster.cluster_security_group],
            instance_groups=[InstanceGroup(name=f"group-{i}", instance_type=t) for i, t in enumerate(instance_types)])


@pytest.fixture
def platform() -> Platform:
    return Platform()


# -- one capture prefix ------------------------------------------------------------------------------------------
def test_the_issue_s_prefixes_are_refused_naming_the_plan_s_and_the_operator_s(platform: Platform) -> None:
    """``captures/`` in the PlatformContext, ``data-capture/`` in the operator and the pipeline: synthesized, then
    every capture was denied and nothing processed. One problem: the plan's prefix, naming the operator's."""
    platform.pipeline("data-capture/")
    platform.operator("data-capture/")
    with pytest.raises(ConfigError) as raised:
        platform.workloads(_plan("captures/"))
    assert [(p.code, p.path) for p in raised.value.problems] == [
        ("InferenceWorkloads.CapturePrefixNotOperators", "PlatformContext.capture.prefix")]
    message = str(raised.value)
    assert "InferenceOperator.capture_prefix ('data-capture/', InferenceOperator Agreement/Operator)" in message
    assert "(got 'captures/')" in message


def test_the_same_mistake_is_found_whichever_part_comes_second(platform: Platform) -> None:
    platform.workloads(_plan("captures/"))
    assert _problems(lambda: platform.operator("data-capture/")) == [
        ("InferenceWorkloads.CapturePrefixNotOperators", "PlatformContext.capture.prefix")]


def test_an_operator_prefix_the_pipeline_does_not_process_is_refused(platform: Platform) -> None:
    platform.operator("data-capture/")
    assert _problems(lambda: platform.pipeline("captures/")) == [
        ("CapturePipeline.OperatorPrefixNotProcessed", "InferenceOperator.capture_prefix")]


def test_a_plan_prefix_the_pipeline_does_not_process_is_refused_without_an_operator(platform: Platform) -> None:
    platform.pipeline("data-capture/")
    assert _problems(lambda: platform.workloads(_plan("captures/"))) == [
        ("CapturePipeline.PlanPrefixNotProcessed", "PlatformContext.capture.prefix")]


def test_one_prefix_for_all_three_is_accepted_and_a_prefix_inside_it_too(platform: Platform) -> None:
    platform.pipeline("data-capture/")
    platform.operator("data-capture/")
    platform.workloads(_plan("data-capture/team-a/"))


# -- node group names ------------------------------------------------------------------------------------------
def test_two_gpu_node_groups_of_one_name_in_one_cluster_are_refused(platform: Platform) -> None:
    GpuNodeGroup(platform.stack, "First", cluster=platform.cluster, name="gpu", instance_types=["g6e.12xlarge"])
    with pytest.raises(ConfigError) as raised:
        GpuNodeGroup(platform.stack, "Second", cluster=platform.cluster, name="gpu", instance_types=["g6e.xlarge"])
    assert [(p.code, p.path) for p in raised.value.problems] == [("GpuNodeGroup.DuplicateName", "GpuNodeGroup.name")]
    assert "GpuNodeGroup Agreement/First is named 'gpu' too" in str(raised.value)


def test_one_name_in_two_clusters_and_two_names_in_one_are_accepted(platform: Platform) -> None:
    other = eks.Cluster.from_cluster_attributes(platform.stack, "Other", cluster_name="other", vpc=platform.vpc)
    GpuNodeGroup(platform.stack, "First", cluster=platform.cluster, name="gpu", instance_types=["g6e.12xlarge"])
    GpuNodeGroup(platform.stack, "Second", cluster=platform.cluster, name="gpu-2", instance_types=["g6e.12xlarge"])
    GpuNodeGroup(platform.stack, "Third", cluster=other, name="gpu", instance_types=["g6e.12xlarge"])


# -- instance types --------------------------------------------------------------------------------------------
def test_a_model_on_an_instance_type_no_hyperpod_group_has_is_refused(platform: Platform) -> None:
    platform.hyperpod("ml.g5.12xlarge")
    with pytest.raises(ConfigError) as raised:
        platform.workloads(_plan(instance_type="ml.g6e.12xlarge"))
    assert [(p.code, p.path) for p in raised.value.problems] == [
        ("InferenceWorkloads.InstanceTypeNotInCluster", "models[0].spec.instanceType")]
    assert "HyperPodCluster.instance_groups (group-0: ml.g5.12xlarge; HyperPodCluster Agreement/HyperPod)" in str(
        raised.value)


def test_a_model_on_a_hyperpod_group_s_type_is_accepted(platform: Platform) -> None:
    platform.hyperpod("ml.g5.12xlarge", "ml.g6e.12xlarge")
    platform.workloads(_plan(instance_type="ml.g6e.12xlarge"))


def test_the_plan_refuses_a_type_none_of_its_node_groups_has() -> None:
    groups = (NodeGroupPlacement(name="inference", instance_type="ml.g5.12xlarge"),)
    assert _problems(lambda: _plan(instance_type="ml.g6e.12xlarge", node_groups=groups)) == [
        ("Model.InstanceTypeNotInCluster", "models[0].spec.instanceType")]
    _plan(instance_type="ml.g5.12xlarge", node_groups=groups)


# -- gateways ----------------------------------------------------------------------------------------------------
def test_gateways_are_refused_when_the_operator_does_not_run_the_gateway(platform: Platform) -> None:
    platform.operator(inference_gateway=False)
    with pytest.raises(ConfigError) as raised:
        platform.workloads(_plan(gateway=True))
    assert [(p.code, p.path) for p in raised.value.problems] == [
        ("InferenceWorkloads.GatewayNotRunByOperator", "gateways[0]")]
    assert "InferenceOperator.inference_gateway=True" in str(raised.value)


def test_a_plan_without_gateways_needs_no_gateway_controller(platform: Platform) -> None:
    platform.operator(inference_gateway=False)
    platform.workloads(_plan())

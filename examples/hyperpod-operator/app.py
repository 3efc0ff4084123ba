#!/usr/bin/env python3
"""Your own aws_eks_v2 cluster, with a GPU node group on instance-store NVMe, the HyperPod cluster attached
to it and the HyperPod inference operator installed with scoped roles."""

from aws_cdk import App, Aspects, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

from hyperpod_inference_iac import (
    CaptureStorage,
    GpuNodeGroup,
    HyperPodCluster,
    InferenceOperator,
    InstanceGroup,
    LambdaLogRetention,
    deploy_time_availability_zones,
)


class InferenceStack(Stack):
    @property
    def availability_zones(self) -> list[str]:
        # Answered here, so ec2.Vpc needs no account lookup at synth (CloudFormation resolves them).
        return deploy_time_availability_zones(2)


app = App()
stack = InferenceStack(app, "HyperPodOperatorExample", env=Environment(account="111122223333", region="us-west-2"))

# Explicit, not left to @aws-cdk/aws-ec2:restrictDefaultSecurityGroup in cdk.json: the default security group
# admits nothing.
vpc = ec2.Vpc(stack, "Vpc", max_azs=2, restrict_default_security_group=True)
cluster = eks.Cluster(
    stack, "Eks", version=eks.KubernetesVersion.V1_34, vpc=vpc,
    default_capacity_type=eks.DefaultCapacityType.NODEGROUP, default_capacity=0,
    kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV34Layer(stack, "Kubectl")),
)
GpuNodeGroup(stack, "Gpu", cluster=cluster, name="gpu", instance_types=["g6e.12xlarge"], max_size=2)

storage = CaptureStorage(stack, "Storage")  # the operator's TLS certificate bucket and the capture bucket
hyperpod = HyperPodCluster(
    stack, "HyperPod",
    cluster_name="example-hyperpod",
    eks_cluster=cluster,
    subnets=vpc.private_subnets,
    security_groups=[cluster.cluster_security_group],
    instance_groups=[InstanceGroup(name="inference", instance_type="ml.g5.12xlarge", instance_count=1)],
    access_logs_bucket=storage.access_log_bucket,
)
InferenceOperator(
    stack, "Operator",
    cluster=cluster,
    hyperpod_cluster_arn=hyperpod.cluster_arn,
    tls_bucket=storage.tls_bucket,
    tls_bucket_key=storage.key,
    capture_bucket=storage.capture_bucket,
    capture_key=storage.key,
    enable_custom_service_accounts=True,
)
# CDK's own helper Lambdas (kubectl provider, SDK calls, bucket notifications) log with a retention too.
Aspects.of(app).add(LambdaLogRetention())

app.synth()

#!/usr/bin/env python3
"""A vLLM server on plain EKS (no operator): weights cached on node-local NVMe with an S3 fallback, and the
capture sidecar writing the operator's model-pod layout. Its role may read exactly the weights prefix and
write exactly its capture prefix, because both come from the same plan."""

from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from hyperpod_inference_iac import InferenceWorkloads, PlatformValue, S3Location
from hyperpod_inference_iac.charts import (
    DataCapture,
    ModelPodCapture,
    ModelServerRuntime,
    NvmeModelCache,
    PlatformContext,
    PortableModelServer,
    plan_workloads,
)

ACCOUNT, REGION = "111122223333", "us-west-2"
app = App()
stack = Stack(app, "PortableServerExample", env=Environment(account=ACCOUNT, region=REGION))

cluster = eks.Cluster.from_cluster_attributes(
    stack, "Cluster", cluster_name="gpu-cluster",
    kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Kubectl", service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:gpu-cluster-kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/gpu-cluster-kubectl")),
    open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
        stack, "Oidc", f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/EXAMPLE0123456789"),
)
captures = s3.Bucket.from_bucket_name(stack, "Captures", f"gpu-captures-{ACCOUNT}")
capture_key = kms.Key.from_key_arn(
    stack, "CaptureKey", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1a2b3c4d-0000-1111-2222-3333")

server = PortableModelServer(
    name="qwen3-8b",
    runtime=ModelServerRuntime.VLLM,
    model_cache=NvmeModelCache(model_key="qwen3-8b", source_s3_uri=f"s3://model-weights-{ACCOUNT}/qwen3-8b/"),
    gpu_count=1,
    data_capture=DataCapture(model_pod=ModelPodCapture(initial_sampling_percentage=10)),
)
plan = plan_workloads(
    PlatformContext(
        cluster_name="gpu-cluster", namespace="inference", account=ACCOUNT, role_name_prefix="gpu-cluster",
        capture=S3Location(PlatformValue.CAPTURE_BUCKET, "data-capture/"), capture_key=PlatformValue.CAPTURE_KEY_ID,
        vpc_cidr="10.42.0.0/16",  # the sidecar's metrics port (scrapers, kubelet probes) is open to the VPC only
    ),
    portable=[server],
)
InferenceWorkloads(stack, "Workloads", cluster=cluster, plan=plan, capture_bucket=captures, capture_key=capture_key)

app.synth()

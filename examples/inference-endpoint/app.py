#!/usr/bin/env python3
"""One InferenceEndpointConfig from the Hugging Face Hub, pinned to a commit, with model-pod data capture,
deployed by an application team onto a cluster the platform team runs (imported by its attributes)."""

from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from hyperpod_inference_iac import InferenceWorkloads, PlatformValue, S3Location
from hyperpod_inference_iac.charts import (
    DataCapture,
    InferenceEndpointConfig,
    InferenceEndpointSpec,
    KubernetesCustomization,
    ModelInvocationPort,
    ModelPodCapture,
    ModelSourceConfig,
    ModelVolumeMount,
    PlatformContext,
    SecretKeyRef,
    Worker,
    plan_workloads,
)

ACCOUNT, REGION = "111122223333", "us-west-2"
app = App()
stack = Stack(app, "InferenceEndpointExample", env=Environment(account=ACCOUNT, region=REGION))

# What the platform team hands over: the cluster, its kubectl provider and OIDC provider, the capture bucket.
cluster = eks.Cluster.from_cluster_attributes(
    stack, "Cluster", cluster_name="shared-inference",
    kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Kubectl", service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:shared-inference-kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/shared-inference-kubectl")),
    open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
        stack, "Oidc", f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/EXAMPLE0123456789"),
)
captures = s3.Bucket.from_bucket_name(stack, "Captures", f"shared-captures-{ACCOUNT}")
capture_key = kms.Key.from_key_arn(
    stack, "CaptureKey", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1a2b3c4d-0000-1111-2222-3333")

mistral = InferenceEndpointConfig(
    name="mistral-7b",
    spec=InferenceEndpointSpec(
        model_name="mistral-7b-instruct",
        instance_type="ml.g5.12xlarge",
        model_source_config=ModelSourceConfig.hugging_face(
            model_id="mistralai/Mistral-7B-Instruct-v0.3",
            commit_sha="e0bc86c23ce5aae1db576c8cca6f06f1f73af2db",
            token_secret=SecretKeyRef(name="hf-token", key="token")),
        worker=Worker(
            image="vllm/vllm-openai:v0.11.0",
            model_invocation_port=ModelInvocationPort(container_port=8000),
            model_volume_mount=ModelVolumeMount(name="model-weights"),
            resources={"limits": {"nvidia.com/gpu": "1"}}),
        kubernetes=KubernetesCustomization(service_account_name="mistral-7b"),
        data_capture=DataCapture(model_pod=ModelPodCapture(initial_sampling_percentage=5)),
    ),
)
plan = plan_workloads(
    PlatformContext(
        cluster_name="shared-inference", namespace="team-a", account=ACCOUNT, role_name_prefix="team-a",
        capture=S3Location(PlatformValue.CAPTURE_BUCKET, "data-capture/"), capture_key=PlatformValue.CAPTURE_KEY_ID,
        custom_service_accounts_enabled=True, synced_secrets={"hf-token": ("token",)},
    ),
    models=[mistral],
)
InferenceWorkloads(stack, "Workloads", cluster=cluster, plan=plan, capture_bucket=captures, capture_key=capture_key)

app.synth()

#!/usr/bin/env python3
"""Two models behind one JWT-authenticated Inference Gateway, deployed by an application team onto a cluster the
platform team runs (imported by its attributes).

The platform team's side (not in this app): ``InferenceOperator(..., addon_version="v2.0.0-eksbuild.2",
certificate=..., inference_gateway=True)`` turns the gateway's controller on, with a role that may only describe that
certificate (docs/gateway.md)."""

from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from hyperpod_inference_iac import InferenceWorkloads, PlatformValue
from hyperpod_inference_iac.charts import (
    InferenceEndpointConfig,
    InferenceEndpointSpec,
    InferenceGateway,
    JwtAuthentication,
    KubernetesCustomization,
    ModelDeployment,
    ModelInvocationPort,
    ModelSourceConfig,
    ModelVolumeMount,
    PlatformContext,
    RequiredClaim,
    SchedulerOptions,
    SecretKeyRef,
    Worker,
    plan_workloads,
)

ACCOUNT, REGION = "111122223333", "us-west-2"
CERTIFICATE = f"arn:aws:acm:{REGION}:{ACCOUNT}:certificate/6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
app = App()
stack = Stack(app, "InferenceGatewayExample", env=Environment(account=ACCOUNT, region=REGION))

# What the platform team hands over: the cluster, its kubectl provider and OIDC provider, and the certificate.
cluster = eks.Cluster.from_cluster_attributes(
    stack, "Cluster", cluster_name="shared-inference",
    kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Kubectl", service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:shared-inference-kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/shared-inference-kubectl")),
    open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
        stack, "Oidc", f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/EXAMPLE0123456789"),
)


def model(name: str, model_name: str, model_id: str, commit: str) -> InferenceEndpointConfig:
    return InferenceEndpointConfig(
        name=name,
        spec=InferenceEndpointSpec(
            model_name=model_name,
            instance_type="ml.g5.12xlarge",
            model_source_config=ModelSourceConfig.hugging_face(
                model_id=model_id, commit_sha=commit, token_secret=SecretKeyRef(name="hf-token", key="token")),
            worker=Worker(
                image="vllm/vllm-openai:v0.11.0",  # >= 0.9.2: the gateway's schedulers read its metrics
                model_invocation_port=ModelInvocationPort(container_port=8000),
                model_volume_mount=ModelVolumeMount(name="model-weights"),
                resources={"limits": {"nvidia.com/gpu": "1"}}),
            kubernetes=KubernetesCustomization(service_account_name=name),
        ),
    )


gateway = InferenceGateway(
    name="team-a-models",
    endpoint_domain="models.inference.example.com",  # one of the platform certificate's names
    jwt=JwtAuthentication(
        issuer="https://idp.example.com/oauth2/team-a",
        jwks_uri="https://idp.example.com/oauth2/team-a/v1/keys",
        audiences=("team-a-inference",),
        required_claims=(RequiredClaim(name="scope", values=("inference:invoke",), value_type="StringArray"),)),
    schedulers={"qwen3-8b": SchedulerOptions(weights={"queue": 2, "kvCache": 2, "prefix": 3})},
)
plan = plan_workloads(
    PlatformContext(
        cluster_name="shared-inference", namespace="team-a", account=ACCOUNT, role_name_prefix="team-a",
        custom_service_accounts_enabled=True, synced_secrets={"hf-token": ("token",)},
        endpoint_domains=("models.inference.example.com",), operator_addon_version="v2.0.0-eksbuild.2",
    ),
    models=[
        ModelDeployment(model("mistral-7b", "mistral-7b-instruct", "mistralai/Mistral-7B-Instruct-v0.3",
                              "e0bc86c23ce5aae1db576c8cca6f06f1f73af2db"), gateway="team-a-models"),
        ModelDeployment(model("qwen3-8b", "Qwen3-8B", "Qwen/Qwen3-8B", "9c925d64d72725edaf899c6cb9c377fd0709d9c5"),
                        gateway="team-a-models"),
    ],
    gateways=[gateway],
)
InferenceWorkloads(stack, "Workloads", cluster=cluster, plan=plan,
                   known_values={PlatformValue.CERTIFICATE_ARN: CERTIFICATE})

app.synth()

#!/usr/bin/env python3
"""The capture sidecars' Prometheus counters in CloudWatch, on a cluster another team runs: a CloudWatch agent in the
workloads' namespace (its role may only write its own log group), and alarms on lost captures and failing uploads
that notify an existing topic."""

from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns

from hyperpod_inference_iac import CaptureSidecarMetrics

ACCOUNT, REGION = "111122223333", "us-west-2"
app = App()
stack = Stack(app, "SidecarMetricsExample", env=Environment(account=ACCOUNT, region=REGION))

cluster = eks.Cluster.from_cluster_attributes(
    stack, "Cluster", cluster_name="gpu-cluster",
    kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Kubectl", service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:gpu-cluster-kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/gpu-cluster-kubectl")),
    open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
        stack, "Oidc", f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/EXAMPLE0123456789"),
)
# An existing alarm topic (its policy and key must admit CloudWatch, as AlarmTopic's do).
topic = sns.Topic.from_topic_arn(stack, "Alarms", f"arn:aws:sns:{REGION}:{ACCOUNT}:gpu-cluster-alarms")

CaptureSidecarMetrics(
    stack, "SidecarMetrics", cluster=cluster, namespace="inference", cluster_name="gpu-cluster",
    role_name="gpu-cluster-capture-metrics-agent", topic=topic, alarm_name_prefix="gpu-cluster",
)

app.synth()

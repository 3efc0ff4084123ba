"""The EKS cluster HyperPod attaches to, built on ``aws_eks_v2`` (native ``AWS::EKS::Cluster``,
access entries only, no nested-stack cluster provider).

Kubernetes-side objects (Helm charts, manifests) go through the kubectl Lambda, which needs a
kubectl layer matching the cluster's minor version; :func:`kubectl_layer_for` maps the version to
its PyPI package and fails with the package name when it is not installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from aws_cdk import RemovalPolicy, Size
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from hyperpod_inference_iac.validation import ConfigError, Problem

NVIDIA_DEVICE_PLUGIN_VERSION = "0.17.1"
GPU_TAINT_KEY = "nvidia.com/gpu"


def kubectl_layer_for(scope: Construct, kubernetes_version: str) -> lambda_.ILayerVersion:
    minor = kubernetes_version.split(".")[-1]
    package = f"aws-cdk.lambda-layer-kubectl-v{minor}"
    module_name = f"aws_cdk.lambda_layer_kubectl_v{minor}"
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise ConfigError([Problem(
            "InferenceCluster.MissingKubectlLayer", "kubernetes_version",
            f"needs the kubectl layer of that minor version: add '{package}' to the project's dependencies "
            f"(pip install '{package}')", kubernetes_version)], source="InferenceCluster") from None
    return getattr(module, f"KubectlV{minor}Layer")(scope, "KubectlLayer")


class InferenceCluster(Construct):
    """:param endpoint_access: ``private`` (default: the API server is reachable only from the VPC;
        CI deploys through CloudFormation and the kubectl Lambda, which runs in the VPC) or
        ``public_and_private``.
    :param admin_role_arns: roles given cluster admin through EKS access entries; the role that
        deploys the stack gets no implicit admin rights.
    :param system_instance_type: a small on-demand node group for controllers (operator,
        cert-manager, load balancer controller), so GPU nodes only run models.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster_name: str,
        kubernetes_version: str,
        vpc: ec2.IVpc,
        endpoint_access: str = "private",
        admin_role_arns: Sequence[str] = (),
        system_instance_type: str = "m6i.large",
    ) -> None:
        super().__init__(scope, id_)
        kubectl_layer = kubectl_layer_for(self, kubernetes_version)
        self.secrets_key = kms.Key(self, "SecretsKey", enable_key_rotation=True,
                                   description=f"Envelope encryption of Kubernetes secrets in {cluster_name}",
                                   removal_policy=RemovalPolicy.RETAIN)
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(kubernetes_version),
            vpc=vpc,
            vpc_subnets=[private],
            endpoint_access=eks.EndpointAccess.PRIVATE if endpoint_access == "private"
            else eks.EndpointAccess.PUBLIC_AND_PRIVATE,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            bootstrap_cluster_creator_admin_permissions=False,
            secrets_encryption_key=self.secrets_key,
            cluster_logging=[eks.ClusterLoggingTypes.API, eks.ClusterLoggingTypes.AUDIT,
                             eks.ClusterLoggingTypes.AUTHENTICATOR, eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                             eks.ClusterLoggingTypes.SCHEDULER],
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=kubectl_layer,
                                                                memory=Size.gibibytes(1)),
        )
        self.system_nodegroup = self.cluster.add_nodegroup_capacity(
            "SystemNodes", nodegroup_name="system", ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            instance_types=[ec2.InstanceType(system_instance_type)], min_size=2, desired_size=2, max_size=4,
            subnets=private, labels={"node-role": "system"},
        )
        for index, arn in enumerate(admin_role_arns):
            self.cluster.grant_access(f"Admin{index}", arn, [eks.AccessPolicy.from_access_policy_name(
                "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)])
        # AL2023 NVIDIA AMIs carry the driver but not the Kubernetes device plugin.
        self.device_plugin = self.cluster.add_helm_chart(
            "NvidiaDevicePlugin", chart="nvidia-device-plugin", repository="https://nvidia.github.io/k8s-device-plugin",
            version=NVIDIA_DEVICE_PLUGIN_VERSION, namespace="kube-system", release="nvidia-device-plugin",
            values={
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            },
        )

"""The cluster platform: VPC, EKS with GPU node groups on local NVMe, the HyperPod cluster attached
to it, the inference operator and the Hugging Face token sync. One `cdk deploy` creates everything
the operator needs."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, DefaultStackSynthesizer, Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.capture_storage import CaptureStorage
from hyperpod_inference_iac.eks_cluster import InferenceCluster
from hyperpod_inference_iac.endpoint_domain import EndpointDomain
from hyperpod_inference_iac.gpu_nodegroup import GpuNodeGroup
from hyperpod_inference_iac.hugging_face_token import HuggingFaceTokenSync
from hyperpod_inference_iac.hyperpod_cluster import HyperPodCluster, InstanceGroup
from hyperpod_inference_iac.inference_operator import InferenceOperator
from hyperpod_inference_iac.network import PlatformVpc, existing_vpc
from platform_config import PlatformConfig
from platform_config.model import NewVpc
from stacks.nag_acknowledgments import (
    acknowledge,
    acknowledge_bucket_deployment,
    acknowledge_kubectl_provider,
    logical_arn,
    managed_policy,
)
from stacks.workloads import InferenceWorkloads


class ClusterStack(Stack):
    def __init__(self, scope: Construct, id_: str, *, config: PlatformConfig, storage: CaptureStorage,
                 **kwargs: Any) -> None:
        self._zones = _zones(config)
        super().__init__(scope, id_, **kwargs)
        self.vpc = self._vpc(config)
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        cluster_config = config.cluster
        self.cluster = InferenceCluster(
            self, "Eks", cluster_name=cluster_config.name, kubernetes_version=cluster_config.kubernetes_version,
            vpc=self.vpc, endpoint_access=cluster_config.endpoint_access,
            admin_role_arns=cluster_config.admin_role_arns, system_instance_type=cluster_config.system_instance_type,
        )
        eks_cluster = self.cluster.cluster
        self.gpu_node_groups = [
            GpuNodeGroup(self, f"Gpu-{group.name}", cluster=eks_cluster, name=group.name,
                         instance_types=group.instance_types, min_size=group.min_size,
                         desired_size=group.desired_size, max_size=group.max_size,
                         root_volume_gib=group.root_volume_gib, labels=group.labels, subnets=private)
            for group in cluster_config.gpu_node_groups
        ]
        for node_group in self.gpu_node_groups:
            self.cluster.device_plugin.node.add_dependency(node_group)

        hyperpod = config.hyperpod
        self.hyperpod = HyperPodCluster(
            self, "HyperPod", cluster_name=hyperpod.cluster_name, eks_cluster=eks_cluster,
            subnets=self.vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets,
            security_groups=[eks_cluster.cluster_security_group],
            instance_groups=[InstanceGroup(name=g.name, instance_type=g.instance_type, instance_count=g.instance_count,
                                           threads_per_core=g.threads_per_core, ebs_volume_gib=g.ebs_volume_gib,
                                           deep_health_checks=g.deep_health_checks)
                             for g in hyperpod.instance_groups],
            node_recovery=hyperpod.node_recovery,
            lifecycle_bucket_name=config.hyperpod_lifecycle_bucket_name,
            access_logs_bucket=s3.Bucket.from_bucket_name(self, "AccessLogBucket", config.access_log_bucket_name),
            encryption_key=storage.key,
        )
        domain_config = config.domain
        self.domain = domain = EndpointDomain(
            self, "EndpointDomain", zone_name=domain_config.zone_name, endpoint_domains=domain_config.endpoint_domains,
            existing_hosted_zone_id=domain_config.existing_hosted_zone_id,
            existing_certificate_arn=domain_config.existing_certificate_arn,
        )
        self.operator = InferenceOperator(
            self, "InferenceOperator", cluster=eks_cluster, hyperpod_cluster_arn=self.hyperpod.cluster_arn,
            storage=storage, capture_prefix=config.capture.prefix,
            certificate_arn=domain.certificate.certificate_arn, hosted_zone_id=domain.hosted_zone.hosted_zone_id,
            execution_role_name=config.operator_execution_role_name,
            addon_version=config.operator.addon_version,
            enable_custom_service_accounts=config.operator.enable_custom_service_accounts,
        )
        self.workloads = InferenceWorkloads(
            self, "Workloads", config=config, cluster=eks_cluster, certificate_arn=domain.certificate.certificate_arn,
            hosted_zone=domain.hosted_zone,
            depends_on=[self.operator.addon, self.cluster.device_plugin, *self.gpu_node_groups],
        )
        namespace = config.operator.namespace
        self.hugging_face_token = HuggingFaceTokenSync(
            self, "HuggingFaceToken", cluster=eks_cluster, secret_name=config.hugging_face_secret_name,
            namespace=namespace,
        )
        self.hugging_face_token.manifest.node.add_dependency(self.workloads.namespace_manifest)
        for manifest in self.workloads.manifests.values():
            manifest.node.add_dependency(self.hugging_face_token.manifest)

        outputs = {
            "ClusterName": eks_cluster.cluster_name,
            "ClusterArn": eks_cluster.cluster_arn,
            "HostedZoneId": domain.hosted_zone.hosted_zone_id,
            "CertificateArn": domain.certificate.certificate_arn,
            "HyperPodClusterArn": self.hyperpod.cluster_arn,
            "HyperPodExecutionRoleArn": self.hyperpod.execution_role.role_arn,
            "OperatorExecutionRoleArn": self.operator.execution_role.role_arn,
            "HuggingFaceTokenSecretArn": self.hugging_face_token.secret.secret_arn,
            "HuggingFaceTokenKubernetesSecret": f"{namespace}/{self.hugging_face_token.kubernetes_secret_name}",
        }
        for name, value in outputs.items():
            CfnOutput(self, name, value=value)
        self._acknowledge_reviewed_findings(config)

    def _acknowledge_reviewed_findings(self, config: PlatformConfig) -> None:
        eks_cluster = self.cluster.cluster
        acknowledge(eks_cluster.role, "eks-service-managed-policies", managed_policy("AmazonEKSClusterPolicy"))
        node_roles = [self.cluster.system_nodegroup.role, *(g.nodegroup.role for g in self.gpu_node_groups)]
        for role in node_roles:
            acknowledge(role, "eks-service-managed-policies", *(managed_policy(name) for name in (
                "AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy")))
        acknowledge_kubectl_provider(eks_cluster.kubectl_provider)
        operator = self.operator
        acknowledge(operator.execution_role, "operator-managed-policy",
                    managed_policy("AmazonSageMakerHyperPodInferenceAccess"))
        partition = config.environment.partition
        capture_objects = f"arn:{partition}:s3:::{config.capture_bucket_name}/{config.capture.prefix}*"
        tls_objects = f"arn:{partition}:s3:::{config.tls_bucket_name}/*"
        acknowledge(operator.execution_role, "s3-object-wildcard-under-fixed-prefix",
                    f"Resource::{capture_objects}", f"Resource::{tls_objects}")
        acknowledge(operator.s3_csi_role, "s3-object-wildcard-under-fixed-prefix", f"Resource::{tls_objects}")
        region, account = self.region, self.account
        elb = f"arn:{partition}:elasticloadbalancing:{region}:{account}"
        acknowledge(operator.alb_controller_role, "alb-controller-policy", "Resource::*",
                    f"Resource::arn:{partition}:ec2:{region}:{account}:security-group/*",
                    *(f"Resource::{elb}:{kind}" for kind in (
                        "loadbalancer/app/*/*", "loadbalancer/net/*/*", "targetgroup/*/*", "listener/app/*/*/*",
                        "listener/net/*/*/*", "listener-rule/app/*/*/*", "listener-rule/net/*/*/*")))
        acknowledge(operator.keda_role, "keda-metric-reads", "Resource::*",
                    f"Resource::arn:{partition}:aps:{region}:{account}:workspace/*")
        acknowledge(self.hugging_face_token.secret, "hugging-face-token-rotation")
        hyperpod = self.hyperpod
        acknowledge(hyperpod.lifecycle_bucket, "log-bucket-in-another-stack")
        lifecycle_objects = f"Resource::{logical_arn(hyperpod.lifecycle_bucket)}"
        acknowledge(hyperpod.execution_role, "hyperpod-managed-policy",
                    managed_policy("AmazonSageMakerClusterInstanceRolePolicy"))
        acknowledge(hyperpod.execution_role, "s3-object-wildcard-under-fixed-prefix",
                    f"{lifecycle_objects}/lifecycle/*")
        acknowledge(hyperpod.execution_role, "hyperpod-node-permissions", "Resource::*",
                    f"Resource::arn:{partition}:ec2:{region}:{account}:network-interface/*",
                    f"Resource::arn:{partition}:ecr:{region}:*:repository/*",
                    f"Resource::arn:{partition}:logs:{region}:{account}:log-group:/aws/sagemaker/Clusters/*",
                    f"Resource::arn:{partition}:logs:{region}:{account}:log-group:/aws/sagemaker/Clusters/*:log-stream:*")
        assets = f"cdk-{DefaultStackSynthesizer.DEFAULT_QUALIFIER}-assets-{account}-{region}"
        acknowledge_bucket_deployment(hyperpod.lifecycle_deployment, hyperpod.lifecycle_deployment.handler_role,
                                      f"Resource::arn:{partition}:s3:::{assets}/*", f"{lifecycle_objects}/*")
        for identity in self.workloads.identities.values():
            plan = next(p for p in self.workloads.plan.identities if p.service_account == identity.service_account)
            if plan.weights_s3_uri:
                acknowledge(identity.role, "s3-object-wildcard-under-fixed-prefix",
                            f"Resource::arn:{partition}:s3:::{plan.weights_s3_uri.removeprefix('s3://').rstrip('/')}/*")
        if self.workloads.external_dns is not None:
            acknowledge(self.workloads.external_dns_role, "external-dns-zone-discovery", "Resource::*")

    @property
    def availability_zones(self) -> list[str]:
        """Known without asking the account (no lookups): explicit zones of an existing VPC, else the
        first zones CloudFormation resolves at deploy time (``Fn::GetAZs``), never hard-coded names."""
        return self._zones

    def _vpc(self, config: PlatformConfig) -> ec2.IVpc:
        if isinstance(config.vpc, NewVpc):
            return PlatformVpc(self, "Network", cidr=config.vpc.cidr, nat_gateways=config.vpc.nat_gateways,
                               availability_zones=self._zones).vpc
        return existing_vpc(self, "Network", vpc_id=config.vpc.vpc_id, vpc_cidr=config.vpc.vpc_cidr,
                            availability_zones=config.vpc.availability_zones,
                            private_subnet_ids=config.vpc.private_subnet_ids)


def _zones(config: PlatformConfig) -> list[str]:
    if isinstance(config.vpc, NewVpc):
        return [Fn.select(index, Fn.get_azs()) for index in range(config.vpc.max_azs)]
    return list(config.vpc.availability_zones)

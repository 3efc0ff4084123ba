"""The SageMaker HyperPod inference operator, installed as the EKS add-on
``amazon-sagemaker-hyperpod-inference``, with the add-ons it depends on and scoped roles.

The operator's CRDs (the largest is ~460 KB) arrive with the add-on, so they never pass through
the kubectl Lambda (262 KB request limit). Roles:

* execution role ``SageMakerHyperPodInference-*`` (the add-on requires that name prefix), trusted
  by ``sagemaker.amazonaws.com`` from this account and by the operator's one service account;
  capture, KMS, ACM, TLS bucket and Route 53 permissions scoped to the real bucket, key,
  certificate and hosted zone;
* the AWS Load Balancer Controller and KEDA roles the add-on runs with, each bound to its one
  service account;
* the Mountpoint for S3 CSI driver role, read-only on the buckets the operator mounts.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.alb_controller_policy import alb_controller_statements
from hyperpod_inference_iac.capture_storage import CaptureStorage
from hyperpod_inference_iac.validation import Problems
from hyperpod_inference_iac.workload_identity import service_account_principal

OPERATOR_ADDON = "amazon-sagemaker-hyperpod-inference"
OPERATOR_NAMESPACE = "hyperpod-inference-system"
OPERATOR_SERVICE_ACCOUNT = "hyperpod-inference-controller-manager"
EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference"
# EKS add-ons the operator's manager checks for before it starts (CSI drivers, cert-manager CRDs),
# plus metrics-server for autoscaling and the Pod Identity agent for workload identities.
DEPENDENCY_ADDONS = ("eks-pod-identity-agent", "cert-manager", "metrics-server", "aws-mountpoint-s3-csi-driver")
FSX_CSI_ADDON = "aws-fsx-csi-driver"


class InferenceOperator(Construct):
    """Install the operator and everything it needs on ``cluster``.

    :param execution_role_name: must start with ``SageMakerHyperPodInference`` (checked).
    :param capture_prefix: key prefix in the capture bucket the operator may write captures to.
    :param certificate_arn: the ACM certificate of the endpoint domains (describe/get only it).
    :param hosted_zone_id: the Route 53 zone whose records the operator manages (only it).
    :param mounted_buckets: buckets the operator mounts through Mountpoint for S3 (model weights);
        the TLS bucket is always included.
    :param addon_version: pinned add-on version; dependency add-ons take EKS's default for the
        cluster's Kubernetes minor (pinning those too would break on each EKS release).
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.Cluster,
        hyperpod_cluster_arn: str,
        storage: CaptureStorage,
        capture_prefix: str,
        certificate_arn: str,
        hosted_zone_id: str,
        execution_role_name: str,
        addon_version: str,
        enable_custom_service_accounts: bool = False,
        mounted_buckets: Sequence[s3.IBucket] = (),
        install_fsx_csi_driver: bool = False,
    ) -> None:
        super().__init__(scope, id_)
        _validate(execution_role_name)
        stack = Stack.of(self)
        self._cluster_name = cluster.cluster_name
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            role_name=execution_role_name,
            description="HyperPod inference operator: deploys models, certificates, DNS and data capture",
            assumed_by=iam.CompositePrincipal(
                iam.ServicePrincipal("sagemaker.amazonaws.com").with_conditions(
                    {"StringEquals": {"aws:SourceAccount": stack.account}}),
                service_account_principal(self, "OperatorTrust", cluster=cluster, namespace=OPERATOR_NAMESPACE,
                                          service_account=OPERATOR_SERVICE_ACCOUNT),
            ),
            # AWS's policy for the operator (SageMaker endpoints, load balancers, ECR); maintained by AWS
            # as the operator evolves. Everything touching our data is granted below, scoped.
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(
                "AmazonSageMakerHyperPodInferenceAccess")],
        )
        storage.grant_write_captures(self.execution_role, prefix=capture_prefix)
        storage.grant_write_tls_certificates(self.execution_role)
        self.execution_role.add_to_principal_policy(iam.PolicyStatement(
            sid="UseEndpointCertificate", resources=[certificate_arn],
            actions=["acm:DescribeCertificate", "acm:GetCertificate", "acm:AddTagsToCertificate"]))
        self.execution_role.add_to_principal_policy(iam.PolicyStatement(
            sid="ManageEndpointRecords", resources=[f"arn:{stack.partition}:route53:::hostedzone/{hosted_zone_id}"],
            actions=["route53:GetHostedZone", "route53:ListResourceRecordSets", "route53:ChangeResourceRecordSets"]))

        self.alb_controller_role = self._irsa_role(
            cluster, "AlbControllerRole", "aws-load-balancer-controller",
            alb_controller_statements(partition=stack.partition, region=stack.region, account=stack.account))
        self.keda_role = self._irsa_role(cluster, "KedaRole", "keda-operator", [
            # CloudWatch metric reads support no resource-level permissions.
            iam.PolicyStatement(sid="ReadScalingMetrics", resources=["*"], actions=[
                "cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics"]),
            iam.PolicyStatement(sid="QueryPrometheusWorkspaces", actions=[
                "aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries", "aps:GetMetricMetadata"],
                resources=[f"arn:{stack.partition}:aps:{stack.region}:{stack.account}:workspace/*"]),
        ])
        self.s3_csi_role = iam.Role(
            self, "S3CsiDriverRole",
            assumed_by=service_account_principal(self, "S3CsiTrust", cluster=cluster, namespace="kube-system",
                                                 service_account="s3-csi-driver-sa"),
            description="Mountpoint for S3 CSI driver: read-only on the buckets the operator mounts",
        )
        storage.grant_read_tls_certificates(self.s3_csi_role)
        for bucket in mounted_buckets:
            self.s3_csi_role.add_to_principal_policy(iam.PolicyStatement(
                actions=["s3:ListBucket"], resources=[bucket.bucket_arn]))
            self.s3_csi_role.add_to_principal_policy(iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[bucket.arn_for_objects("*")]))

        self.dependency_addons = [self._addon(name) for name in DEPENDENCY_ADDONS]
        if install_fsx_csi_driver:
            self.dependency_addons.append(self._addon(FSX_CSI_ADDON))
        mountpoint = next(a for a in self.dependency_addons if a.addon_name == "aws-mountpoint-s3-csi-driver")
        mountpoint.service_account_role_arn = self.s3_csi_role.role_arn

        self.configuration = {
            "executionRoleArn": self.execution_role.role_arn,
            "tlsCertificateS3Bucket": storage.tls_bucket.bucket_name,
            "hyperpodClusterArn": hyperpod_cluster_arn,
            "enableCustomServiceAccounts": enable_custom_service_accounts,
            "alb": {"enabled": True, "serviceAccount": {"create": True, "roleArn": self.alb_controller_role.role_arn}},
            "keda": {"enabled": True, "auth": {"aws": {"irsa": {"enabled": True, "roleArn": self.keda_role.role_arn}}}},
        }
        self.addon = eks_l1.CfnAddon(
            self, "Addon", cluster_name=cluster.cluster_name, addon_name=OPERATOR_ADDON, addon_version=addon_version,
            configuration_values=stack.to_json_string(self.configuration),
            resolve_conflicts="OVERWRITE",
        )
        for dependency in self.dependency_addons:
            self.addon.node.add_dependency(dependency)

    def _irsa_role(self, cluster: eks.Cluster, id_: str, service_account: str,
                   statements: list[iam.PolicyStatement]) -> iam.Role:
        role = iam.Role(
            self, id_,
            assumed_by=service_account_principal(self, f"{id_}Trust", cluster=cluster,
                                                 namespace=OPERATOR_NAMESPACE, service_account=service_account),
            description=f"{OPERATOR_NAMESPACE}/{service_account} of the inference operator add-on",
        )
        for statement in statements:
            role.add_to_principal_policy(statement)
        return role

    def _addon(self, name: str) -> eks_l1.CfnAddon:
        return eks_l1.CfnAddon(self, _construct_id(name), cluster_name=self._cluster_name, addon_name=name,
                               resolve_conflicts="OVERWRITE")


def _construct_id(addon_name: str) -> str:
    return "".join(part.capitalize() for part in addon_name.split("-")) + "Addon"


def _validate(execution_role_name: str) -> None:
    problems = Problems()
    if not execution_role_name.startswith(EXECUTION_ROLE_PREFIX):
        problems.add("InferenceOperator.ExecutionRoleName", "execution_role_name",
                     f"must start with {EXECUTION_ROLE_PREFIX} (the add-on refuses other names)", execution_role_name)
    if len(execution_role_name) > 64:
        problems.add("InferenceOperator.ExecutionRoleName", "execution_role_name", "must be at most 64 characters",
                     execution_role_name)
    problems.raise_if_any("InferenceOperator")


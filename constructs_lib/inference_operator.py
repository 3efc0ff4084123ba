"""The SageMaker HyperPod inference operator, installed as the EKS add-on
``amazon-sagemaker-hyperpod-inference``, with the add-ons it depends on and scoped roles.

The operator's CRDs (the largest is ~460 KB) arrive with the add-on, so they never pass through
the kubectl Lambda (262 KB request limit). Roles:

* execution role ``SageMakerHyperPodInference-*`` (the add-on requires that name prefix), trusted
  by ``sagemaker.amazonaws.com`` for SageMaker resources of this account and region
  (``aws:SourceAccount`` and ``aws:SourceArn``) and by the operator's one service account;
  capture, KMS, ACM, TLS bucket and Route 53 permissions scoped to the real bucket, key,
  certificate and hosted zone;
* the AWS Load Balancer Controller and KEDA roles the add-on runs with, each bound to its one
  service account; KEDA's may read exactly the metrics the workloads' autoscaling triggers name;
* with gated JumpStart models, the gated-model download role (``jumpstartGatedModelDownloadRoleArn``);
* the Mountpoint for S3 CSI driver role, read-only on the buckets the operator mounts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import CfnJson, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.addons import cfn_addon, managed_addon
from hyperpod_inference_iac.alb_controller_policy import alb_controller_statements
from hyperpod_inference_iac.cdk_types import ClusterLike
from hyperpod_inference_iac.data_perimeter import ObjectAccess
from hyperpod_inference_iac.nag import acknowledge, managed_policy, resource_evidence
from hyperpod_inference_iac.operator_versions import DEFAULT_ADDON_VERSION
from hyperpod_inference_iac.patterns import EKS_ADDON_VERSION, iam_role_name
from hyperpod_inference_iac.s3_access import (
    KMS_READ_ACTIONS,
    KMS_WRITE_ACTIONS,
    SAME_ACCOUNT,
    admit_objects,
    bucket_arn,
    grant_key_through_s3,
    grant_object_reads,
    grant_object_writes,
    objects_arn,
)
from hyperpod_inference_iac.scaling_metrics import ScalingMetrics
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved
from hyperpod_inference_iac.workload_identity import service_account_principal

OPERATOR_ADDON = "amazon-sagemaker-hyperpod-inference"
OPERATOR_NAMESPACE = "hyperpod-inference-system"
OPERATOR_SERVICE_ACCOUNT = "hyperpod-inference-controller-manager"
EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference"
OPERATOR_MANAGED_POLICY = "AmazonSageMakerHyperPodInferenceAccess"
# EKS add-ons the operator's manager checks for before it starts (CSI drivers, cert-manager CRDs),
# plus metrics-server for autoscaling and the Pod Identity agent for workload identities.
DEPENDENCY_ADDONS = ("eks-pod-identity-agent", "cert-manager", "metrics-server", "aws-mountpoint-s3-csi-driver")
FSX_CSI_ADDON = "aws-fsx-csi-driver"
S3_CSI_SERVICE_ACCOUNT = ("kube-system", "s3-csi-driver-sa")
# The service accounts the operator runs JumpStart model pods under (the AWS setup guide's gated-model trust).
JUMPSTART_SERVICE_ACCOUNT_PREFIX = "hyperpod-inference-service-account"


def sagemaker_source_conditions(stack: Stack) -> dict[str, dict[str, str]]:
    """Confused-deputy guard of the execution role's SageMaker trust: SageMaker may assume it only on behalf
    of SageMaker resources of this account and region.

    What SageMaker assumes the role for is what the operator creates with it: models, endpoint
    configurations, endpoints (Tier 1 capture, endpoint registration) and inference components, and the
    operator is bound to one HyperPod cluster. Which of these ARNs SageMaker presents as ``aws:SourceArn``
    is not documented, and a narrower list that missed one would break deployments only on a real
    account, so the pattern is every SageMaker resource of this account and region
    (``arn:<partition>:sagemaker:<region>:<account>:*``), the pattern of the operator's own published
    trust policy. It still refuses SageMaker acting for another account (``aws:SourceAccount``) or from
    another region. The pod trust (IRSA) is a separate statement and keeps its exact ``sub``/``aud``."""
    return {
        "StringEquals": {"aws:SourceAccount": stack.account},
        "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}:*"},
    }


def check_inference_operator(problems: Problems, at: KeyPaths = PROPS, *, execution_role_name: str,
                             addon_version: str = DEFAULT_ADDON_VERSION) -> None:
    """Every rule of :class:`InferenceOperator`'s properties."""
    if not is_unresolved(execution_role_name):
        if not execution_role_name.startswith(EXECUTION_ROLE_PREFIX):
            problems.add("InferenceOperator.ExecutionRoleName", at.at("execution_role_name"),
                         f"must start with {EXECUTION_ROLE_PREFIX} (the add-on refuses other names)",
                         execution_role_name)
        elif len(execution_role_name) > 64:
            problems.add("InferenceOperator.ExecutionRoleName", at.at("execution_role_name"),
                         "must be at most 64 characters (IAM role names)", execution_role_name)
    if not is_unresolved(addon_version) and not EKS_ADDON_VERSION.match(addon_version):
        problems.add("InferenceOperator.AddonVersion", at.at("addon_version"),
                     "must be an EKS add-on version such as v1.0.0-eksbuild.1", addon_version)


class InferenceOperator(Construct):
    """Install the operator and everything it needs on ``cluster``.

    :param cluster: the ``aws_eks_v2`` cluster (with its OIDC provider, for the IRSA roles).
    :param hyperpod_cluster_arn: the HyperPod cluster the operator deploys onto.
    :param tls_bucket: the operator's TLS certificate output bucket (its name must start with
        ``hyperpod-tls``: the AWS-managed policy covers only those).
    :param tls_bucket_key: that bucket's KMS key. @default none (SSE-S3)
    :param capture_bucket: the bucket data capture writes to. @default none: no capture permissions
    :param capture_key: the capture bucket's KMS key. @default none (SSE-S3)
    :param capture_prefix: key prefix in the capture bucket the operator may write to. @default ``data-capture/``
    :param certificate: the ACM certificate of the endpoint domains (describe/get/tag only it).
        @default none: no custom domains
    :param hosted_zone: the Route 53 zone whose records the operator manages (only it). @default none
    :param execution_role_name: must start with ``SageMakerHyperPodInference`` (checked).
        @default ``SageMakerHyperPodInference-<stack name>``
    :param addon_version: pinned add-on version. Dependency add-ons take EKS's default for the cluster's
        Kubernetes minor (pinning those too would break on each EKS release). @default
        ``operator_versions.DEFAULT_ADDON_VERSION`` (``v1.4.0-eksbuild.1``, operator 3.3)
    :param enable_custom_service_accounts: lets workloads run under their own labelled service
        accounts (the add-on's ``enableCustomServiceAccounts``). @default False
    :param mounted_buckets: buckets the operator mounts through Mountpoint for S3 (model weights);
        the TLS bucket is always included. @default none
    :param install_fsx_csi_driver: also install the FSx for Lustre CSI add-on. @default False
    :param s3_csi_role_name: fixed name of the Mountpoint for S3 CSI driver's role: needed when the TLS
        bucket is guarded by :class:`CaptureStorage` in another stack (its allowlist names the role by ARN).
        @default generated
    :param scaling_metrics: what the workloads' autoscaling triggers read (``WorkloadPlan.scaling_metrics``);
        the KEDA role may read exactly that. @default none: the KEDA role may read no metrics
    :param gated_model_namespaces: namespaces with gated JumpStart models that download with the add-on's
        role (``WorkloadPlan.gated_model_namespaces``): creates that role, trusted by their JumpStart service
        accounts. @default none: no role
    :param gated_model_download_role: an existing gated-model download role to configure instead.
        @default none

    Attributes: ``execution_role``, ``alb_controller_role``, ``keda_role``, ``s3_csi_role``, ``gated_model_role``
    (created, passed in or ``None``), ``addon`` (an ``eks.Addon``), ``dependency_addons``, ``configuration`` (the
    add-on's configuration values).
    Its cdk-nag findings (AWS's operator policy, the load balancer controller's published policy, KEDA's
    metric reads, object wildcards under fixed prefixes) are acknowledged here.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        hyperpod_cluster_arn: str,
        tls_bucket: s3.IBucket,
        tls_bucket_key: kms.IKey | None = None,
        capture_bucket: s3.IBucket | None = None,
        capture_key: kms.IKey | None = None,
        capture_prefix: str = "data-capture/",
        certificate: acm.ICertificate | None = None,
        hosted_zone: route53.IHostedZone | None = None,
        execution_role_name: str | None = None,
        addon_version: str = DEFAULT_ADDON_VERSION,
        enable_custom_service_accounts: bool = False,
        mounted_buckets: Sequence[s3.IBucket] = (),
        install_fsx_csi_driver: bool = False,
        s3_csi_role_name: str | None = None,
        scaling_metrics: ScalingMetrics | None = None,
        gated_model_namespaces: Sequence[str] = (),
        gated_model_download_role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        execution_role_name = execution_role_name or iam_role_name(f"{EXECUTION_ROLE_PREFIX}-{stack.stack_name}")
        problems = Problems()
        check_inference_operator(problems, execution_role_name=execution_role_name, addon_version=addon_version)
        problems.raise_if_any(f"InferenceOperator {self.node.path}")
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            role_name=execution_role_name,
            description="HyperPod inference operator: deploys models, certificates, DNS and data capture",
            assumed_by=iam.CompositePrincipal(
                iam.ServicePrincipal("sagemaker.amazonaws.com").with_conditions(sagemaker_source_conditions(stack)),
                service_account_principal(self, "OperatorTrust", cluster=cluster, namespace=OPERATOR_NAMESPACE,
                                          service_account=OPERATOR_SERVICE_ACCOUNT),
            ),
            # AWS's policy for the operator (SageMaker endpoints, load balancers, ECR); maintained by AWS
            # as the operator evolves. Everything touching our data is granted below, scoped.
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(OPERATOR_MANAGED_POLICY)],
        )
        tls_arn = bucket_arn(tls_bucket)
        if capture_bucket is not None:  # (the grant acknowledges its own prefix wildcard)
            grant_object_writes(self.execution_role, bucket_arn=bucket_arn(capture_bucket), prefix=capture_prefix,
                                key=capture_key)
        self._grant_tls_output(tls_arn, tls_bucket_key)
        if certificate is not None:
            self.execution_role.add_to_principal_policy(iam.PolicyStatement(
                sid="UseEndpointCertificate", resources=[certificate.certificate_arn],
                actions=["acm:DescribeCertificate", "acm:GetCertificate", "acm:AddTagsToCertificate"]))
        if hosted_zone is not None:
            self.execution_role.add_to_principal_policy(iam.PolicyStatement(
                sid="ManageEndpointRecords", resources=[hosted_zone.hosted_zone_arn],
                actions=["route53:GetHostedZone", "route53:ListResourceRecordSets",
                         "route53:ChangeResourceRecordSets"]))

        self.alb_controller_role = self._irsa_role(
            cluster, "AlbControllerRole", "aws-load-balancer-controller",
            alb_controller_statements(partition=stack.partition, region=stack.region, account=stack.account))
        self.keda_role = self._irsa_role(cluster, "KedaRole", "keda-operator", [])
        self._grant_scaling_metrics(scaling_metrics or ScalingMetrics())
        self.gated_model_role = gated_model_download_role or (
            self._gated_model_role(cluster, gated_model_namespaces) if gated_model_namespaces else None)
        namespace, account_name = S3_CSI_SERVICE_ACCOUNT
        self.s3_csi_role = iam.Role(
            self, "S3CsiDriverRole", role_name=s3_csi_role_name,
            assumed_by=service_account_principal(self, "S3CsiTrust", cluster=cluster, namespace=namespace,
                                                 service_account=account_name),
            description="Mountpoint for S3 CSI driver: read-only on the buckets the operator mounts",
        )
        if tls_bucket_key is not None:
            grant_key_through_s3(self.s3_csi_role, tls_bucket_key, KMS_READ_ACTIONS, tls_arn)
        grant_object_reads(self.s3_csi_role, bucket_arn=tls_arn)
        for bucket in mounted_buckets:  # (read-only; the bucket's own key through S3; acknowledged per bucket)
            grant_object_reads(self.s3_csi_role, bucket_arn=bucket_arn(bucket), key=bucket.encryption_key)

        self.dependency_addons = [self._addon(cluster, name) for name in DEPENDENCY_ADDONS]
        if install_fsx_csi_driver:
            self.dependency_addons.append(self._addon(cluster, FSX_CSI_ADDON))
        mountpoint = self.dependency_addons[DEPENDENCY_ADDONS.index("aws-mountpoint-s3-csi-driver")]
        cfn_addon(mountpoint).service_account_role_arn = self.s3_csi_role.role_arn

        configuration: dict[str, Any] = {
            "executionRoleArn": self.execution_role.role_arn,
            "tlsCertificateS3Bucket": tls_bucket.bucket_name,
            "hyperpodClusterArn": hyperpod_cluster_arn,
            "enableCustomServiceAccounts": enable_custom_service_accounts,
            "alb": {"enabled": True, "serviceAccount": {"create": True, "roleArn": self.alb_controller_role.role_arn}},
            "keda": {"enabled": True, "auth": {"aws": {"irsa": {"enabled": True, "roleArn": self.keda_role.role_arn}}}},
        }
        if self.gated_model_role is not None:
            configuration["jumpstartGatedModelDownloadRoleArn"] = self.gated_model_role.role_arn
        self.configuration: Mapping[str, Any] = configuration
        self.addon = managed_addon(self, "Addon", cluster=cluster, name=OPERATOR_ADDON, version=addon_version,
                                   configuration_values=self.configuration)
        for dependency in self.dependency_addons:
            self.addon.node.add_dependency(dependency)
        self._acknowledge_reviewed_findings(stack, objects_arn(tls_arn))

    def _grant_tls_output(self, tls_arn: str, key: kms.IKey | None) -> None:
        """What the operator needs on its TLS output bucket: tagged writes only."""
        role = self.execution_role
        if key is not None:
            grant_key_through_s3(role, key, KMS_WRITE_ACTIONS, tls_arn)
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:GetObject", "s3:DeleteObject"], resources=[objects_arn(tls_arn)],
            conditions=SAME_ACCOUNT))
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:PutObject", "s3:PutObjectTagging"], resources=[objects_arn(tls_arn)],
            conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}",
                                         "s3:RequestObjectTag/CreatedBy": "HyperPodInference"}}))
        for access in ObjectAccess:  # (listed on a guarded bucket's allowlist: it reads, writes and deletes)
            admit_objects(role, tls_arn, access)

    def _grant_scaling_metrics(self, metrics: ScalingMetrics) -> None:
        """KEDA reads what the autoscaling triggers name, nothing else: CloudWatch only if a trigger is a
        CloudWatch one (``GetMetricData`` has no resource-level permissions, hence ``*``, acknowledged), and
        PromQL queries on the named Amazon Managed Service for Prometheus workspaces only."""
        stack = Stack.of(self)
        if metrics.cloudwatch:
            self.keda_role.add_to_principal_policy(iam.PolicyStatement(
                sid="ReadScalingMetrics", actions=["cloudwatch:GetMetricData"], resources=["*"]))
            acknowledge(self.keda_role, "keda-metric-reads", *resource_evidence(self, "*"))
        if metrics.prometheus_workspaces:
            self.keda_role.add_to_principal_policy(iam.PolicyStatement(
                sid="QueryPrometheusWorkspaces", actions=["aps:QueryMetrics"],
                resources=[w.arn(partition=stack.partition, account=stack.account)
                           for w in metrics.prometheus_workspaces]))

    def _gated_model_role(self, cluster: eks.Cluster, namespaces: Sequence[str]) -> iam.Role:
        """The role the operator's JumpStart pods download gated models with. Trust and permission as the AWS
        setup guide and its managed policy ``AmazonSageMakerHyperPodGatedModelAccess`` (v3) give them, narrowed:
        the JumpStart service accounts of the given namespaces only (the guide trusts every namespace), SageMaker
        from this account only, presigned hub-content URLs of the public hub in this region only."""
        stack = Stack.of(self)
        issuer = cluster.open_id_connect_provider.open_id_connect_provider_issuer
        audience = CfnJson(self, "GatedModelAudience", value={f"{issuer}:aud": "sts.amazonaws.com"})
        subjects = CfnJson(self, "GatedModelSubjects", value={f"{issuer}:sub": [
            f"system:serviceaccount:{namespace}:{JUMPSTART_SERVICE_ACCOUNT_PREFIX}*" for namespace in namespaces]})
        role = iam.Role(
            self, "GatedModelRole",
            description="Downloads gated JumpStart models for the inference operator's JumpStart pods",
            assumed_by=iam.CompositePrincipal(
                iam.OpenIdConnectPrincipal(cluster.open_id_connect_provider).with_conditions(
                    {"StringEquals": audience, "StringLike": subjects}),
                iam.ServicePrincipal("sagemaker.amazonaws.com").with_conditions(
                    {"StringEquals": {"aws:SourceAccount": stack.account}})))
        hub = f"arn:{stack.partition}:sagemaker:{stack.region}:*"
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="PresignGatedHubContent", actions=["sagemaker:CreateHubContentPresignedUrls"],
            resources=[f"{hub}:hub/SageMakerPublicHub", f"{hub}:hub-content/SageMakerPublicHub/*/*"],
            conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}}))
        acknowledge(role, "jumpstart-public-hub-content", *resource_evidence(
            self, f"{hub}:hub/SageMakerPublicHub", f"{hub}:hub-content/SageMakerPublicHub/*/*"))
        return role

    def _irsa_role(self, cluster: eks.Cluster, id: str, service_account: str,
                   statements: list[iam.PolicyStatement]) -> iam.Role:
        role = iam.Role(
            self, id,
            assumed_by=service_account_principal(self, f"{id}Trust", cluster=cluster,
                                                 namespace=OPERATOR_NAMESPACE, service_account=service_account),
            description=f"{OPERATOR_NAMESPACE}/{service_account} of the inference operator add-on",
        )
        for statement in statements:
            role.add_to_principal_policy(statement)
        return role

    def _addon(self, cluster: ClusterLike, name: str) -> eks.Addon:
        return managed_addon(self, _construct_id(name), cluster=cluster, name=name)

    def _acknowledge_reviewed_findings(self, stack: Stack, tls_objects: str) -> None:
        partition, region, account = stack.partition, stack.region, stack.account
        acknowledge(self.execution_role, "operator-managed-policy", managed_policy(OPERATOR_MANAGED_POLICY))
        acknowledge(self.execution_role, "s3-object-wildcard-dedicated-bucket", *resource_evidence(self, tls_objects))
        elb = f"arn:{partition}:elasticloadbalancing:{region}:{account}"
        acknowledge(self.alb_controller_role, "alb-controller-policy", *resource_evidence(self,
            "*", f"arn:{partition}:ec2:{region}:{account}:security-group/*",
            *(f"{elb}:{kind}" for kind in ("loadbalancer/app/*/*", "loadbalancer/net/*/*", "targetgroup/*/*",
                                           "listener/app/*/*/*", "listener/net/*/*/*", "listener-rule/app/*/*/*",
                                           "listener-rule/net/*/*/*"))))


def _construct_id(addon_name: str) -> str:
    return "".join(part.capitalize() for part in addon_name.split("-")) + "Addon"

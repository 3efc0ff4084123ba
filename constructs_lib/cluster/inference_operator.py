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
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import CfnJson, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_route53 as route53
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.charts.gateway import (
    CONTROLLER_SERVICE_ACCOUNT as GATEWAY_CONTROLLER_SERVICE_ACCOUNT,
)
from hyperpod_inference_iac.charts.gateway import (
    GATEWAY_MINIMUM_ADDON,
    gateway_available,
)
from hyperpod_inference_iac.cluster.addons import (
    cfn_addon,
    managed_addon,
)
from hyperpod_inference_iac.cluster.alb_controller_policy import (
    alb_controller_statements,
)
from hyperpod_inference_iac.foundation.agreement import (
    OperatorPart,
    agree,
)
from hyperpod_inference_iac.foundation.cdk_types import (
    ClusterLike,
    check_cluster_attributes,
)
from hyperpod_inference_iac.foundation.nag import (
    acknowledge,
    managed_policy,
    resource_evidence,
)
from hyperpod_inference_iac.foundation.operator_versions import (
    DEFAULT_ADDON_VERSION,
)
from hyperpod_inference_iac.foundation.patterns import (
    EKS_ADDON_VERSION,
    iam_role_name,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.scaling_metrics import (
    ScalingMetrics,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)
from hyperpod_inference_iac.security.data_perimeter import (
    ObjectAccess,
    how_to_name,
)
from hyperpod_inference_iac.security.s3_access import (
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
from hyperpod_inference_iac.security.workload_identity import (
    service_account_principal,
)

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
# The service account the operator runs JumpStart model pods under: the helm-era setup template's gated-model trust
# names it exactly (system:serviceaccount:*:hyperpod-inference-service-account, aws/sagemaker-hyperpod-cluster-setup
# inf-operator-iam-role-template.yaml @ b920fcf; the add-on era's guide trusts the name as a StringLike prefix).
JUMPSTART_SERVICE_ACCOUNT = "hyperpod-inference-service-account"
JUMPSTART_SERVICE_ACCOUNT_PREFIX = JUMPSTART_SERVICE_ACCOUNT  # the name 0.x exported


# The SageMaker resource types the operator creates with its execution role (models, endpoint configurations,
# endpoints for Tier 1 capture and endpoint registration, inference components): besides its HyperPod cluster, the only
# resources SageMaker may assume the role for.
OPERATOR_SAGEMAKER_RESOURCES = ("model", "endpoint-config", "endpoint", "inference-component")


def sagemaker_source_conditions(stack: Stack, hyperpod_cluster_arn: str | None = None) -> dict[str, dict[str, Any]]:
    """Confused-deputy guard of the execution role's SageMaker trust: SageMaker may assume it only on behalf
    of the resources that use it: the operator's HyperPod cluster (its exact ARN, which holds the cluster's
    generated id: ``cluster/<12 characters>``) and the SageMaker resource types the operator creates
    (:data:`OPERATOR_SAGEMAKER_RESOURCES`) in this account and region, never a notebook, a training or processing
    job, a pipeline or another HyperPod cluster of the account. Which of these ARNs SageMaker presents as
    ``aws:SourceArn`` is not documented (the operator's published trust allows every resource,
    ``arn:<partition>:sagemaker:<region>:<account>:*``), so the resource types the operator creates stay allowed
    by type, not by name. ``aws:SourceAccount`` refuses SageMaker acting for another account. The pod trust (IRSA)
    is a separate statement and keeps its exact ``sub``/``aud``.
    @default hyperpod_cluster_arn: every SageMaker resource of the account and region (the published trust)"""
    prefix = f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}"
    sources: str | list[str] = f"{prefix}:*"
    if hyperpod_cluster_arn is not None:
        sources = [hyperpod_cluster_arn, *(f"{prefix}:{kind}/*" for kind in OPERATOR_SAGEMAKER_RESOURCES)]
    return {"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": sources}}


@dataclass(frozen=True, kw_only=True)
class InferenceOperatorOptions(Props):
    """The inference operator's properties a config file can set (``operator`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "InferenceOperator"

    addon_version: str = prop(
        DEFAULT_ADDON_VERSION, default_doc="`DEFAULT_ADDON_VERSION`, operator 3.3",
        doc="Pinned version of the `amazon-sagemaker-hyperpod-inference` add-on; every workload may use only the "
            "features this version has (docs/operator-versions.md). The dependency add-ons take EKS's default for "
            "the cluster's Kubernetes minor (pinning those too would break on each EKS release).")
    enable_custom_service_accounts: bool = prop(
        False, doc="The add-on's `enableCustomServiceAccounts`: workloads may run under their own labelled service "
                   "accounts.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        if not is_unresolved(self.addon_version) and not EKS_ADDON_VERSION.match(self.addon_version):
            problems.add("InferenceOperator.AddonVersion", at.at("addon_version"),
                         "must be an EKS add-on version such as v1.0.0-eksbuild.1", self.addon_version)


@dataclass(frozen=True, kw_only=True)
class InferenceOperatorProps(InferenceOperatorOptions):
    """:class:`InferenceOperator`'s properties: its options, and what only Python code passes."""

    cluster: ClusterLike = prop(
        config=False, doc="The `aws_eks_v2` cluster, with its OIDC provider (for the IRSA roles): an `eks.Cluster` or "
                          "an imported `eks.ICluster` given its `open_id_connect_provider` "
                          "(`InferenceOperator.NoOidcProvider`). The add-ons need no kubectl provider.")
    hyperpod_cluster_arn: str = prop(doc="The HyperPod cluster the operator deploys onto.", config=False)
    tls_bucket: s3.IBucket = prop(
        config=False, doc="The operator's TLS certificate output bucket. Its name must start with `hyperpod-tls` "
                          "(the AWS-managed policy covers only those; not checked here, "
                          "[CaptureStorage](capture-storage.md) checks it).")
    tls_bucket_key: kms.IKey | None = prop(None, doc="The TLS bucket's key.", config=False, default_doc="SSE-S3")
    capture_bucket: s3.IBucket | None = prop(None, doc="The bucket data capture writes to.", config=False,
                                             default_doc="no capture permissions")
    capture_key: kms.IKey | None = prop(None, doc="The capture bucket's key.", config=False, default_doc="SSE-S3")
    capture_prefix: str = prop("data-capture/", doc="The key prefix in the capture bucket the operator may write "
                                                    "to.", config=False)
    certificate: acm.ICertificate | None = prop(
        None, doc="The ACM certificate of the endpoint domains (describe, get and tag only it).", config=False,
        default_doc="no custom domains")
    hosted_zone: route53.IHostedZone | None = prop(None, doc="The Route 53 zone whose records the operator manages "
                                                             "(only it).", config=False)
    execution_role_name: str | None = prop(
        None, config=False, default_doc="`SageMakerHyperPodInference-<stack name>`, cut to 64 characters",
        doc=f"The execution role's name; it must start with `{EXECUTION_ROLE_PREFIX}` (the add-on refuses other "
            "names) and have at most 64 characters.")
    mounted_buckets: Sequence[s3.IBucket] = prop(
        (), config=False, doc="Buckets the operator mounts through Mountpoint for S3 (model weights). The TLS bucket "
                              "is always included.")
    install_fsx_csi_driver: bool = prop(False, doc=f"Also install the `{FSX_CSI_ADDON}` add-on.", config=False)
    s3_csi_role_name: str | None = prop(
        None, config=False, default_doc="generated",
        doc="Fixed name of the Mountpoint for S3 CSI driver's role. Needed when the TLS bucket is guarded by a "
            "[CaptureStorage](capture-storage.md) in another stack: its allowlist names the role by ARN.")
    scaling_metrics: ScalingMetrics | None = prop(
        None, config=False, default_doc="no metric reads",
        doc="What the workloads' autoscaling triggers read (`WorkloadPlan.scaling_metrics`): `cloudwatch` and "
            "`prometheus_workspaces`; the KEDA role may read exactly that.")
    gated_model_namespaces: Sequence[str] = prop(
        (), config=False, default_doc="no gated-model role",
        doc="Namespaces whose gated JumpStart models download with the add-on's role "
            "(`WorkloadPlan.gated_model_namespaces`): creates that role, trusted by their JumpStart service "
            "accounts.")
    gated_model_download_role: iam.IRole | None = prop(
        None, doc="An existing gated-model download role to configure instead of creating one.", config=False)
    inference_gateway: bool = prop(
        False, config=False, default_doc="off",
        doc="Turn on the Inference Gateway's controller (add-on keys `inferenceGateway.enabled` and "
            "`inferenceGateway.serviceAccount.roleArn`) with a role of its own that may only describe `certificate`: "
            "gateways serve the platform's ACM certificate, never one the controller issues and imports "
            "(docs/gateway.md). Needs `certificate` and an add-on version with the gateway "
            f"({GATEWAY_MINIMUM_ADDON} or newer).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        check_cluster_attributes(problems, at, self.cluster,
                                 {"open_id_connect_provider": "InferenceOperator.NoOidcProvider"})
        _check_execution_role_name(problems, at, self.execution_role_name)
        super().check(problems, at)
        if self.inference_gateway:
            if self.certificate is None:
                problems.add("InferenceOperator.GatewayNeedsCertificate", at.at("certificate"),
                             "the Inference Gateway serves TLS with the platform's ACM certificate: pass certificate "
                             "(cert-manager auto-issue, which needs ACM import rights, is not offered)")
            if (not is_unresolved(self.addon_version) and EKS_ADDON_VERSION.match(self.addon_version)
                    and not gateway_available(self.addon_version)):
                problems.add("OperatorVersion.FeatureUnavailable", at.at("inference_gateway"),
                             f"the Inference Gateway needs the inference operator add-on {GATEWAY_MINIMUM_ADDON} or "
                             f"newer, and addon_version is {self.addon_version}: raise addon_version or turn "
                             "inference_gateway off", self.addon_version)


def _check_execution_role_name(problems: Problems, at: KeyPaths, execution_role_name: str | None) -> None:
    if execution_role_name is None or is_unresolved(execution_role_name):
        return
    if not execution_role_name.startswith(EXECUTION_ROLE_PREFIX):
        problems.add("InferenceOperator.ExecutionRoleName", at.at("execution_role_name"),
                     f"must start with {EXECUTION_ROLE_PREFIX} (the add-on refuses other names)", execution_role_name)
    elif len(execution_role_name) > 64:
        problems.add("InferenceOperator.ExecutionRoleName", at.at("execution_role_name"),
                     "must be at most 64 characters (IAM role names)", execution_role_name)


def check_inference_operator(problems: Problems, at: KeyPaths = PROPS, *, execution_role_name: str,
                             addon_version: str = DEFAULT_ADDON_VERSION) -> None:
    """The execution role name's rule and :meth:`InferenceOperatorOptions.check` (kept for callers of 0.2.0)."""
    _check_execution_role_name(problems, at, execution_role_name)
    InferenceOperatorOptions(addon_version=addon_version).check(problems, at)


@real_signature
class InferenceOperator(Construct):
    """Install the operator and everything it needs on ``cluster``.

    Properties: :class:`InferenceOperatorProps` (each with its type, default and meaning); ``props`` keeps them.

    Attributes: ``execution_role``, ``alb_controller_role``, ``keda_role``, ``s3_csi_role``, ``gated_model_role``
    (created, passed in or ``None``), ``gateway_controller_role`` (with ``inference_gateway``, else ``None``),
    ``addon`` (an ``eks.Addon``), ``dependency_addons``, ``configuration`` (the
    add-on's configuration values).
    Its cdk-nag findings (AWS's operator policy, the load balancer controller's published policy, KEDA's
    metric reads, object wildcards under fixed prefixes) are acknowledged here.
    """

    PROPS: ClassVar[type[Props]] = InferenceOperatorProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        hyperpod_cluster_arn: str,
        tls_bucket: s3.IBucket,
        tls_bucket_key: kms.IKey | None = InferenceOperatorProps.tls_bucket_key,
        capture_bucket: s3.IBucket | None = InferenceOperatorProps.capture_bucket,
        capture_key: kms.IKey | None = InferenceOperatorProps.capture_key,
        capture_prefix: str = InferenceOperatorProps.capture_prefix,
        certificate: acm.ICertificate | None = InferenceOperatorProps.certificate,
        hosted_zone: route53.IHostedZone | None = InferenceOperatorProps.hosted_zone,
        execution_role_name: str | None = InferenceOperatorProps.execution_role_name,
        addon_version: str = InferenceOperatorProps.addon_version,
        enable_custom_service_accounts: bool = InferenceOperatorProps.enable_custom_service_accounts,
        mounted_buckets: Sequence[s3.IBucket] = InferenceOperatorProps.mounted_buckets,
        install_fsx_csi_driver: bool = InferenceOperatorProps.install_fsx_csi_driver,
        s3_csi_role_name: str | None = InferenceOperatorProps.s3_csi_role_name,
        scaling_metrics: ScalingMetrics | None = InferenceOperatorProps.scaling_metrics,
        gated_model_namespaces: Sequence[str] = InferenceOperatorProps.gated_model_namespaces,
        gated_model_download_role: iam.IRole | None = InferenceOperatorProps.gated_model_download_role,
        inference_gateway: bool = InferenceOperatorProps.inference_gateway,
    ) -> None:
        """Create the construct. Its properties (:class:`InferenceOperatorProps`, kept as ``self.props``):

        :param addon_version: Pinned version of the `amazon-sagemaker-hyperpod-inference` add-on; every workload
            may use only the features this version has (docs/operator-versions.md). The dependency add-ons take
            EKS's default for the cluster's Kubernetes minor (pinning those too would break on each EKS
            release). Default: ``'v1.4.0-eksbuild.1'`` (``DEFAULT_ADDON_VERSION``, operator 3.3).
        :param enable_custom_service_accounts: The add-on's `enableCustomServiceAccounts`: workloads may run
            under their own labelled service accounts. Default: ``False``.
        :param cluster: The `aws_eks_v2` cluster, with its OIDC provider (for the IRSA roles): an `eks.Cluster`
            or an imported `eks.ICluster` given its `open_id_connect_provider`
            (`InferenceOperator.NoOidcProvider`). The add-ons need no kubectl provider. Default: required.
        :param hyperpod_cluster_arn: The HyperPod cluster the operator deploys onto. Default: required.
        :param tls_bucket: The operator's TLS certificate output bucket. Its name must start with `hyperpod-tls`
            (the AWS-managed policy covers only those; not checked here, [CaptureStorage](capture-storage.md)
            checks it). Default: required.
        :param tls_bucket_key: The TLS bucket's key. Default: ``None`` (SSE-S3).
        :param capture_bucket: The bucket data capture writes to. Default: ``None`` (no capture permissions).
        :param capture_key: The capture bucket's key. Default: ``None`` (SSE-S3).
        :param capture_prefix: The key prefix in the capture bucket the operator may write to. Default:
            ``'data-capture/'``.
        :param certificate: The ACM certificate of the endpoint domains (describe, get and tag only it).
            Default: ``None`` (no custom domains).
        :param hosted_zone: The Route 53 zone whose records the operator manages (only it). Default: ``None``.
        :param execution_role_name: The execution role's name; it must start with `SageMakerHyperPodInference`
            (the add-on refuses other names) and have at most 64 characters. Default: ``None``
            (``SageMakerHyperPodInference-<stack name>``, cut to 64 characters).
        :param mounted_buckets: Buckets the operator mounts through Mountpoint for S3 (model weights). The TLS
            bucket is always included. Default: ``()``.
        :param install_fsx_csi_driver: Also install the `aws-fsx-csi-driver` add-on. Default: ``False``.
        :param s3_csi_role_name: Fixed name of the Mountpoint for S3 CSI driver's role. Needed when the TLS
            bucket is guarded by a [CaptureStorage](capture-storage.md) in another stack: its allowlist names
            the role by ARN. Default: ``None`` (generated).
        :param scaling_metrics: What the workloads' autoscaling triggers read (`WorkloadPlan.scaling_metrics`):
            `cloudwatch` and `prometheus_workspaces`; the KEDA role may read exactly that. Default: ``None`` (no
            metric reads).
        :param gated_model_namespaces: Namespaces whose gated JumpStart models download with the add-on's role
            (`WorkloadPlan.gated_model_namespaces`): creates that role, trusted by their JumpStart service
            accounts. Default: ``()`` (no gated-model role).
        :param gated_model_download_role: An existing gated-model download role to configure instead of creating
            one. Default: ``None``.
        :param inference_gateway: Turn on the Inference Gateway's controller (add-on keys
            `inferenceGateway.enabled` and `inferenceGateway.serviceAccount.roleArn`) with a role of its own
            that may only describe `certificate`: gateways serve the platform's ACM certificate, never one the
            controller issues and imports (docs/gateway.md). Needs `certificate` and an add-on version with the
            gateway (v2.0.0-eksbuild.2 or newer). Default: ``False`` (off).
        """
        super().__init__(scope, id)
        self.props = props = InferenceOperatorProps(
            cluster=cluster, hyperpod_cluster_arn=hyperpod_cluster_arn, tls_bucket=tls_bucket,
            tls_bucket_key=tls_bucket_key, capture_bucket=capture_bucket, capture_key=capture_key,
            capture_prefix=capture_prefix, certificate=certificate, hosted_zone=hosted_zone,
            execution_role_name=execution_role_name, addon_version=addon_version,
            enable_custom_service_accounts=enable_custom_service_accounts, mounted_buckets=listed(mounted_buckets),
            install_fsx_csi_driver=install_fsx_csi_driver, s3_csi_role_name=s3_csi_role_name,
            scaling_metrics=scaling_metrics, gated_model_namespaces=listed(gated_model_namespaces),
            gated_model_download_role=gated_model_download_role, inference_gateway=inference_gateway)
        props.raise_if_invalid(f"InferenceOperator {self.node.path}")
        agree(self, OperatorPart(construct=f"InferenceOperator {self.node.path}", cluster=cluster,
                                 capture_bucket=capture_bucket, capture_prefix=props.capture_prefix,
                                 inference_gateway=props.inference_gateway))
        stack = Stack.of(self)
        # (The default always fits: the prefix, cut to IAM's 64 characters.)
        execution_role_name = props.execution_role_name or iam_role_name(f"{EXECUTION_ROLE_PREFIX}-{stack.stack_name}")
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            role_name=execution_role_name,
            description="HyperPod inference operator: deploys models, certificates, DNS and data capture",
            assumed_by=iam.CompositePrincipal(
                iam.ServicePrincipal("sagemaker.amazonaws.com").with_conditions(
                    sagemaker_source_conditions(stack, props.hyperpod_cluster_arn)),
                service_account_principal(self, "OperatorTrust", cluster=props.cluster, namespace=OPERATOR_NAMESPACE,
                                          service_account=OPERATOR_SERVICE_ACCOUNT),
            ),
            # AWS's policy for the operator (SageMaker endpoints, load balancers, ECR); maintained by AWS
            # as the operator evolves. Everything touching our data is granted below, scoped.
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(OPERATOR_MANAGED_POLICY)],
        )
        tls_arn = bucket_arn(props.tls_bucket)
        if props.capture_bucket is not None:  # (the grant acknowledges its own prefix wildcard)
            grant_object_writes(self.execution_role, bucket_arn=bucket_arn(props.capture_bucket),
                                prefix=props.capture_prefix, key=props.capture_key)
        self._grant_tls_output(tls_arn, props.tls_bucket_key)
        if props.certificate is not None:
            self.execution_role.add_to_principal_policy(iam.PolicyStatement(
                sid="UseEndpointCertificate", resources=[props.certificate.certificate_arn],
                actions=["acm:DescribeCertificate", "acm:GetCertificate", "acm:AddTagsToCertificate"]))
        if props.hosted_zone is not None:
            self.execution_role.add_to_principal_policy(iam.PolicyStatement(
                sid="ManageEndpointRecords", resources=[props.hosted_zone.hosted_zone_arn],
                actions=["route53:GetHostedZone", "route53:ListResourceRecordSets",
                         "route53:ChangeResourceRecordSets"]))

        self.alb_controller_role = self._irsa_role(
            props.cluster, "AlbControllerRole", "aws-load-balancer-controller",
            alb_controller_statements(partition=stack.partition, region=stack.region, account=stack.account))
        self.keda_role = self._irsa_role(props.cluster, "KedaRole", "keda-operator", [])
        self._grant_scaling_metrics(props.scaling_metrics or ScalingMetrics())
        namespaces = props.gated_model_namespaces
        self.gated_model_role = props.gated_model_download_role or (
            self._gated_model_role(props.cluster, namespaces) if namespaces else None)
        namespace, account_name = S3_CSI_SERVICE_ACCOUNT
        self.s3_csi_role = iam.Role(
            self, "S3CsiDriverRole", role_name=props.s3_csi_role_name,
            assumed_by=service_account_principal(self, "S3CsiTrust", cluster=props.cluster, namespace=namespace,
                                                 service_account=account_name),
            description="Mountpoint for S3 CSI driver: read-only on the buckets the operator mounts",
        )
        if props.s3_csi_role_name is None:  # a guarded bucket of another stack cannot name it: say which prop does
            how_to_name(self.s3_csi_role, f"pass InferenceOperator(s3_csi_role_name=...) to {self.node.path}, the "
                                          "Mountpoint for S3 CSI driver's role, which the allowlist then names")
        if props.tls_bucket_key is not None:
            grant_key_through_s3(self.s3_csi_role, props.tls_bucket_key, KMS_READ_ACTIONS, tls_arn)
        grant_object_reads(self.s3_csi_role, bucket_arn=tls_arn)
        for bucket in props.mounted_buckets:  # (read-only; the bucket's own key through S3; acknowledged per bucket)
            grant_object_reads(self.s3_csi_role, bucket_arn=bucket_arn(bucket), key=bucket.encryption_key)

        self.dependency_addons = [self._addon(props.cluster, name) for name in DEPENDENCY_ADDONS]
        if props.install_fsx_csi_driver:
            self.dependency_addons.append(self._addon(props.cluster, FSX_CSI_ADDON))
        mountpoint = self.dependency_addons[DEPENDENCY_ADDONS.index("aws-mountpoint-s3-csi-driver")]
        cfn_addon(mountpoint).service_account_role_arn = self.s3_csi_role.role_arn

        configuration: dict[str, Any] = {
            "executionRoleArn": self.execution_role.role_arn,
            "tlsCertificateS3Bucket": props.tls_bucket.bucket_name,
            "hyperpodClusterArn": props.hyperpod_cluster_arn,
            "enableCustomServiceAccounts": props.enable_custom_service_accounts,
            "alb": {"enabled": True, "serviceAccount": {"create": True, "roleArn": self.alb_controller_role.role_arn}},
            "keda": {"enabled": True, "auth": {"aws": {"irsa": {"enabled": True, "roleArn": self.keda_role.role_arn}}}},
        }
        if self.gated_model_role is not None:
            configuration["jumpstartGatedModelDownloadRoleArn"] = self.gated_model_role.role_arn
        self.gateway_controller_role: iam.Role | None = None
        if props.inference_gateway and props.certificate is not None:
            # The controller's own role (it must exist before the add-on installs the controller). It may read the
            # one certificate gateways serve; the AWS-managed policy's ACM import rights exist for cert-manager
            # auto-issue, which the platform never asks for (every gateway names the platform certificate).
            self.gateway_controller_role = self._irsa_role(
                props.cluster, "GatewayControllerRole", GATEWAY_CONTROLLER_SERVICE_ACCOUNT,
                [iam.PolicyStatement(sid="DescribeGatewayCertificate", actions=["acm:DescribeCertificate"],
                                     resources=[props.certificate.certificate_arn])])
            configuration["inferenceGateway"] = {
                "enabled": True, "serviceAccount": {"roleArn": self.gateway_controller_role.role_arn}}
        self.configuration: Mapping[str, Any] = configuration
        self.addon = managed_addon(self, "Addon", cluster=props.cluster, name=OPERATOR_ADDON,
                                   version=props.addon_version, configuration_values=self.configuration)
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

    def _gated_model_role(self, cluster: ClusterLike, namespaces: Sequence[str]) -> iam.Role:
        """The role the operator's JumpStart pods download gated models with. Trust and permission as the AWS
        setup guide and its managed policy ``AmazonSageMakerHyperPodGatedModelAccess`` (v3) give them, narrowed:
        the JumpStart service accounts of the given namespaces only (the guide trusts every namespace), SageMaker
        from this account only, presigned hub-content URLs of the public hub in this region only."""
        stack = Stack.of(self)
        issuer = cluster.open_id_connect_provider.open_id_connect_provider_issuer
        # Exact subjects (StringEquals): the one JumpStart service account of each namespace, never a name prefix
        # (the guide's StringLike on hyperpod-inference-service-account* trusts any account a pod creator names so).
        exact = CfnJson(self, "GatedModelSubjects", value={f"{issuer}:aud": "sts.amazonaws.com", f"{issuer}:sub": [
            f"system:serviceaccount:{namespace}:{JUMPSTART_SERVICE_ACCOUNT}" for namespace in namespaces]})
        role = iam.Role(
            self, "GatedModelRole",
            description="Downloads gated JumpStart models for the inference operator's JumpStart pods",
            assumed_by=iam.CompositePrincipal(
                iam.OpenIdConnectPrincipal(cluster.open_id_connect_provider).with_conditions(
                    {"StringEquals": exact}),
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

    def _irsa_role(self, cluster: ClusterLike, id: str, service_account: str,
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

"""The EKS cluster HyperPod attaches to, built on ``aws_eks_v2`` (native ``AWS::EKS::Cluster``,
access entries only, no nested-stack cluster provider).

Kubernetes-side objects (Helm charts, manifests) go through the kubectl Lambda, which needs a
kubectl layer matching the cluster's minor version; :data:`KUBECTL_LAYERS` maps each supported
minor to its package (all of them are dependencies of this library).
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Annotations, CfnResource, RemovalPolicy, Size, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from hyperpod_inference_iac.addons import managed_addon
from hyperpod_inference_iac.cdk_types import cfn_child
from hyperpod_inference_iac.data_perimeter import _accounts, key_administration
from hyperpod_inference_iac.helm import HelmRelease
from hyperpod_inference_iac.log_retention import DEFAULT_AUDIT_RETENTION
from hyperpod_inference_iac.nag import acknowledge, acknowledge_kubectl_provider, managed_policy
from hyperpod_inference_iac.node_launch_template import launch_template_spec, node_launch_template
from hyperpod_inference_iac.patterns import EC2_INSTANCE_TYPE, EKS_CLUSTER_NAME, IAM_ROLE_ARN
from hyperpod_inference_iac.risks import RiskWarnings
from hyperpod_inference_iac.secrets_key import default_deployer_role_arns
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved

GPU_TAINT_KEY = "nvidia.com/gpu"
# The AL2023 NVIDIA AMI carries the driver but not the Kubernetes device plugin; only on GPU nodes.
NVIDIA_DEVICE_PLUGIN = HelmRelease(
    release="nvidia-device-plugin", chart="nvidia-device-plugin", repository="https://nvidia.github.io/k8s-device-plugin",
    version="0.17.1", namespace="kube-system",
    values={"nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]},
    purpose="advertises nvidia.com/gpu on GPU nodes (workloads request GPUs through it)",
)
# Supported Kubernetes minors: each has an EKS release and a kubectl layer package (a dependency).
KUBECTL_LAYERS: Mapping[str, tuple[str, str]] = {
    "1.33": ("aws_cdk.lambda_layer_kubectl_v33", "KubectlV33Layer"),
    "1.34": ("aws_cdk.lambda_layer_kubectl_v34", "KubectlV34Layer"),
    "1.35": ("aws_cdk.lambda_layer_kubectl_v35", "KubectlV35Layer"),
}
DEFAULT_KUBERNETES_VERSION = "1.34"
CLUSTER_ROLE_MANAGED_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_ROLE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy")
SYSTEM_ROOT_VOLUME_GIB = 20  # EKS's default disk size for managed node groups, as before the launch template
VPC_CNI_ADDON = "vpc-cni"
# The VPC CNI add-on's configuration key that starts its network policy agent (a string in its schema).
VPC_CNI_NETWORK_POLICY = {"enableNetworkPolicy": "true"}
# What the cluster role does with the secrets key: the control plane's KMS provider encrypts and decrypts the
# data keys of Kubernetes secrets (the key policy allows Encrypt and Decrypt; DescribeKey and ListGrants are
# administration, which the key policy leaves to IAM). AmazonEKSClusterPolicy holds kms:DescribeKey only.
CLUSTER_ROLE_KEY_ACTIONS = ("kms:Encrypt", "kms:Decrypt")
CLUSTER_ROLE_KEY_IAM_ACTIONS = (*CLUSTER_ROLE_KEY_ACTIONS, "kms:DescribeKey", "kms:ListGrants")
# What the principal calling eks:CreateCluster (CloudFormation's role) needs of the key: EKS checks the key and
# creates the grant its control plane uses with the caller's permissions (aws-eks's cluster creation role gets
# exactly these), all through EKS.
DEPLOYER_KEY_ACTIONS = ("kms:Encrypt", "kms:Decrypt")


class ClusterEndpointAccess(enum.StrEnum):
    """Who can reach the Kubernetes API server."""

    PRIVATE = "private"  # only from inside the VPC (CI deploys through CloudFormation and the kubectl Lambda)
    PUBLIC_AND_PRIVATE = "public_and_private"  # also from the internet (warned: acknowledge it if you mean it)


def check_inference_cluster(
    problems: Problems,
    at: KeyPaths = PROPS,
    *,
    cluster_name: str,
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
    endpoint_access: str = ClusterEndpointAccess.PRIVATE,
    admin_role_arns: Sequence[str] = (),
    system_instance_type: str = "m6i.large",
    deployer_role_arns: Sequence[str] | None = None,
) -> None:
    """Every rule of :class:`InferenceCluster`'s properties (a config loader calls it with its key paths)."""
    if not is_unresolved(cluster_name) and not EKS_CLUSTER_NAME.match(cluster_name):
        problems.add("InferenceCluster.BadName", at.at("cluster_name"),
                     "must be 1-100 letters, digits, '-' and '_', starting with a letter or digit", cluster_name)
    if kubernetes_version not in KUBECTL_LAYERS:
        problems.add("InferenceCluster.UnsupportedKubernetesVersion", at.at("kubernetes_version"),
                     f"must be one of {', '.join(KUBECTL_LAYERS)} (an EKS release with a kubectl layer package "
                     f"this library depends on)", kubernetes_version)
    if endpoint_access not in ClusterEndpointAccess._value2member_map_:
        problems.add("InferenceCluster.EndpointAccess", at.at("endpoint_access"),
                     f"must be one of {', '.join(ClusterEndpointAccess)}", endpoint_access)
    for index, arn in enumerate(admin_role_arns):
        if not is_unresolved(arn) and not IAM_ROLE_ARN.match(arn):
            problems.add("InferenceCluster.BadAdminRoleArn", at.at("admin_role_arns", index),
                         "must be an IAM role ARN such as arn:aws:iam::111122223333:role/platform-admins", arn)
    if not is_unresolved(system_instance_type) and not EC2_INSTANCE_TYPE.match(system_instance_type):
        problems.add("InferenceCluster.BadInstanceType", at.at("system_instance_type"),
                     "must be an EC2 instance type such as m6i.large", system_instance_type)
    for index, arn in enumerate(deployer_role_arns or ()):
        if not is_unresolved(arn) and not IAM_ROLE_ARN.match(arn):
            problems.add("InferenceCluster.BadDeployerRoleArn", at.at("deployer_role_arns", index),
                         "must be an IAM role ARN such as arn:aws:iam::111122223333:role/cdk-deploy", arn)


def secrets_key_policy(stack: Stack, *, cluster_role_arn: str, deployer_role_arns: Sequence[str]) -> dict[str, Any]:
    """The key policy of the secrets envelope key, in the style of the data perimeter's: the account administers
    the key without using it, the cluster role encrypts and decrypts (the key policy enables the IAM statement
    :class:`InferenceCluster` gives the role), and the deployers may use it and create grants only through EKS
    (``kms:ViaService``), grants only for an AWS resource (``kms:GrantIsForAWSResource``)."""
    via_eks = {"kms:ViaService": f"eks.{stack.region}.amazonaws.com"}
    statements: list[dict[str, Any]] = [key_administration(stack), {
        "Sid": "ClusterRoleEncryptsSecrets", "Effect": "Allow",
        "Principal": {"AWS": _accounts(stack, [cluster_role_arn])}, "Action": list(CLUSTER_ROLE_KEY_ACTIONS),
        "Resource": "*",
        "Condition": {"ArnLike": {"aws:PrincipalArn": cluster_role_arn}}}]
    if deployer_role_arns:
        accounts = {"AWS": _accounts(stack, deployer_role_arns)}
        deployers = {"ArnLike": {"aws:PrincipalArn": list(deployer_role_arns)}}
        statements.append({
            "Sid": "DeployerCreatesTheClusterThroughEks", "Effect": "Allow", "Principal": accounts,
            "Action": list(DEPLOYER_KEY_ACTIONS), "Resource": "*",
            "Condition": {"StringEquals": via_eks, **deployers}})
        statements.append({
            "Sid": "DeployerGrantsOnlyToEks", "Effect": "Allow", "Principal": accounts,
            "Action": "kms:CreateGrant", "Resource": "*",
            "Condition": {"StringEquals": via_eks, "Bool": {"kms:GrantIsForAWSResource": "true"}, **deployers}})
    return {"Version": "2012-10-17", "Statement": statements}


def warn_inference_cluster(warnings: RiskWarnings, at: KeyPaths = PROPS, *, endpoint_access: str) -> None:
    """The risky but legal choices of :class:`InferenceCluster`'s properties (a config loader calls it with its key
    paths; the construct turns them into CDK warnings)."""
    if endpoint_access == ClusterEndpointAccess.PUBLIC_AND_PRIVATE:
        warnings.add("InferenceCluster:publicEndpoint", at.at("endpoint_access"),
                     "the Kubernetes API server is reachable from the internet (public_and_private); authentication "
                     "still applies, but private keeps it inside the VPC")


def kubectl_layer_for(scope: Construct, kubernetes_version: str) -> lambda_.ILayerVersion:
    module_name, class_name = KUBECTL_LAYERS[kubernetes_version]
    layer: lambda_.ILayerVersion = getattr(importlib.import_module(module_name), class_name)(scope, "KubectlLayer")
    return layer


class InferenceCluster(Construct):
    """An ``aws_eks_v2`` cluster for inference: private endpoint, no implicit creator admin, secrets
    envelope-encrypted with a customer key, every control-plane log into a log group with a retention,
    Kubernetes network policies enforced by the VPC CNI, a small system node group for controllers
    (IMDSv2 only, encrypted root volume), and the NVIDIA device plugin.

    :param cluster_name: EKS cluster name.
    :param kubernetes_version: a minor in :data:`KUBECTL_LAYERS`. @default ``1.34``
    :param vpc: the VPC; the cluster and nodes use its private subnets.
    :param endpoint_access: :class:`ClusterEndpointAccess`. ``PUBLIC_AND_PRIVATE`` adds an acknowledgeable
        warning (``@hyperpod-inference-iac/InferenceCluster:publicEndpoint``). @default PRIVATE
    :param admin_role_arns: roles given cluster admin through EKS access entries; the role that
        deploys the stack gets no implicit admin rights. @default none
    :param system_instance_type: the system node group's instance type (operator, cert-manager, load
        balancer controller), so GPU nodes only run models. @default ``m6i.large``
    :param kubectl_layer: the kubectl Lambda layer. @default the layer of ``kubernetes_version``
    :param install_device_plugin: install the NVIDIA device plugin (Helm) for GPU nodes: the AL2023
        NVIDIA AMI carries the driver but not the plugin. @default True
    :param enforce_network_policies: manage the ``vpc-cni`` EKS add-on (EKS's default version for the
        cluster's minor) with ``enableNetworkPolicy``, so Kubernetes ``NetworkPolicy`` objects are enforced
        (without them traffic stays open). False leaves the VPC CNI as EKS bootstrapped it. @default True
    :param control_plane_log_retention: how long the control-plane logs (API, audit, authenticator,
        controller manager, scheduler) are kept: the log group ``/aws/eks/<cluster_name>/cluster`` is created
        before the cluster, so EKS writes into it. @default one year
    :param deployer_role_arns: the roles CloudFormation deploys the cluster with: the secrets key's policy lets
        them encrypt, decrypt and create grants through EKS only (``eks:CreateCluster`` checks the key and creates
        the control plane's grant with the caller's permissions). @default the CloudFormation execution role of
        the stack's ``DefaultStackSynthesizer``; with another synthesizer, name the deploying role (warned), or
        creating the cluster fails

    The secrets key's policy names its principals (:func:`secrets_key_policy`): no ``kms:*`` for the account.

    Attributes: ``cluster`` (the ``eks.Cluster``), ``secrets_key``, ``control_plane_log_group``,
    ``system_nodegroup``, ``system_launch_template``, ``vpc_cni_addon`` and ``device_plugin`` (None when not
    installed). The cluster role's and system nodes' AWS managed policies and CDK's kubectl provider are
    acknowledged for cdk-nag here.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster_name: str,
        vpc: ec2.IVpc,
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        endpoint_access: ClusterEndpointAccess = ClusterEndpointAccess.PRIVATE,
        admin_role_arns: Sequence[str] = (),
        system_instance_type: str = "m6i.large",
        kubectl_layer: lambda_.ILayerVersion | None = None,
        install_device_plugin: bool = True,
        enforce_network_policies: bool = True,
        control_plane_log_retention: logs.RetentionDays = DEFAULT_AUDIT_RETENTION,
        deployer_role_arns: Sequence[str] | None = None,
    ) -> None:
        super().__init__(scope, id)
        problems = Problems()
        check_inference_cluster(problems, cluster_name=cluster_name, kubernetes_version=kubernetes_version,
                                endpoint_access=endpoint_access, admin_role_arns=admin_role_arns,
                                system_instance_type=system_instance_type, deployer_role_arns=deployer_role_arns)
        problems.raise_if_any(f"InferenceCluster {self.node.path}")
        endpoint_access = ClusterEndpointAccess(endpoint_access)
        warnings = RiskWarnings()
        warn_inference_cluster(warnings, endpoint_access=endpoint_access)
        warnings.annotate(self)
        self.secrets_key = kms.Key(self, "SecretsKey", enable_key_rotation=True,
                                   description=f"Envelope encryption of Kubernetes secrets in {cluster_name}",
                                   removal_policy=RemovalPolicy.RETAIN)
        self.control_plane_log_group = self._control_plane_log_group(cluster_name, control_plane_log_retention)
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(kubernetes_version),
            vpc=vpc,
            vpc_subnets=[private],
            endpoint_access=eks.EndpointAccess.PRIVATE if endpoint_access is ClusterEndpointAccess.PRIVATE
            else eks.EndpointAccess.PUBLIC_AND_PRIVATE,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            bootstrap_cluster_creator_admin_permissions=False,
            secrets_encryption_key=self.secrets_key,
            cluster_logging=[eks.ClusterLoggingTypes.API, eks.ClusterLoggingTypes.AUDIT,
                             eks.ClusterLoggingTypes.AUTHENTICATOR, eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                             eks.ClusterLoggingTypes.SCHEDULER],
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer or kubectl_layer_for(self, kubernetes_version),
                memory=Size.gibibytes(1)),
        )
        _cfn_cluster(self.cluster).node.add_dependency(self.control_plane_log_group)
        self._restrict_secrets_key(deployer_role_arns)
        self.system_launch_template = node_launch_template(self, "SystemNodesLaunchTemplate",
                                                           root_volume_gib=SYSTEM_ROOT_VOLUME_GIB)
        # No fixed nodegroup_name: EKS cannot add a launch template to a group created without one, and
        # CloudFormation replaces a group (new instance type, subnets, ...) only when it may name the new one.
        self.system_nodegroup = self.cluster.add_nodegroup_capacity(
            "SystemNodes", ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            instance_types=[ec2.InstanceType(system_instance_type)], min_size=2, desired_size=2, max_size=4,
            subnets=private, labels={"node-role": "system"},
            launch_template_spec=launch_template_spec(self.system_launch_template),
        )
        # preserve_on_delete: taking the add-on out of the stack must not remove the CNI from running nodes.
        self.vpc_cni_addon = managed_addon(
            self, "VpcCniAddon", cluster=self.cluster, name=VPC_CNI_ADDON, configuration_values=VPC_CNI_NETWORK_POLICY,
            preserve_on_delete=True) if enforce_network_policies else None
        for index, arn in enumerate(admin_role_arns):
            self.cluster.grant_access(f"Admin{index}", arn, [eks.AccessPolicy.from_access_policy_name(
                "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)])
        self.device_plugin = NVIDIA_DEVICE_PLUGIN.install(self.cluster, "NvidiaDevicePlugin") \
            if install_device_plugin else None
        acknowledge(self.cluster.role, "eks-service-managed-policies",
                    *(managed_policy(name) for name in CLUSTER_ROLE_MANAGED_POLICIES))
        acknowledge(self.system_nodegroup.role, "eks-service-managed-policies",
                    *(managed_policy(name) for name in NODE_ROLE_MANAGED_POLICIES))
        if self.cluster.kubectl_provider is not None:  # (always: kubectl_provider_options is given above)
            acknowledge_kubectl_provider(self.cluster.kubectl_provider)

    def _restrict_secrets_key(self, deployer_role_arns: Sequence[str] | None) -> None:
        """Replace CDK's default key policy (``kms:*`` for the account) with :func:`secrets_key_policy`, and give
        the cluster role the IAM statement that policy enables (aws_eks_v2 gives it none)."""
        deployers = list(deployer_role_arns) if deployer_role_arns is not None \
            else default_deployer_role_arns(self)
        if not deployers:
            Annotations.of(self).add_warning_v2(
                "@hyperpod-inference-iac/InferenceCluster:noDeployer",
                "the role CloudFormation deploys with is unknown (deployer_role_arns is empty, or the stack does not "
                "use CDK's DefaultStackSynthesizer): name it in deployer_role_arns (creating the cluster needs "
                "kms:Encrypt, kms:Decrypt and kms:CreateGrant on the secrets key through EKS)")
        role = self.cluster.role
        policy = secrets_key_policy(Stack.of(self), cluster_role_arn=role.role_arn, deployer_role_arns=deployers)
        cfn_key = cfn_child(self.secrets_key, kms.CfnKey)
        cfn_key.add_property_override("KeyPolicy", policy)
        role.add_to_principal_policy(iam.PolicyStatement(
            sid="EncryptKubernetesSecrets", actions=list(CLUSTER_ROLE_KEY_IAM_ACTIONS),
            resources=[self.secrets_key.key_arn]))
        # The control plane uses the key as soon as the cluster exists: its role's statement first.
        _cfn_cluster(self.cluster).node.add_dependency(role.node.find_child("DefaultPolicy"))

    def _control_plane_log_group(self, cluster_name: str, retention: logs.RetentionDays) -> logs.LogGroup:
        """The group EKS writes control-plane logs to, created first: EKS would otherwise create it itself
        with no retention (kept forever). Retained: audit logs outlive the stack. Not KMS-encrypted with
        ``secrets_key``: that key protects Kubernetes Secrets, and its policy would have to admit the
        CloudWatch Logs service (CloudWatch Logs encrypts the events at rest with its own keys)."""
        return logs.LogGroup(self, "ControlPlaneLogs", log_group_name=f"/aws/eks/{cluster_name}/cluster",
                             retention=retention, removal_policy=RemovalPolicy.RETAIN)


def _cfn_cluster(cluster: eks.Cluster) -> CfnResource:
    """The ``AWS::EKS::Cluster`` itself (dependencies on the L2 would hold back its kubectl provider too)."""
    return cfn_child(cluster, CfnResource)

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
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Annotations, CfnResource, RemovalPolicy, Size, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from hyperpod_inference_iac.cluster.addons import (
    cfn_addon,
    managed_addon,
)
from hyperpod_inference_iac.cluster.hyperpod_dependencies import (
    HYPERPOD_NVIDIA_INSTANCE_TYPES,
    NODE_HEALTH_TOLERATION,
)
from hyperpod_inference_iac.cluster.node_launch_template import (
    launch_template_spec,
    node_launch_template,
)
from hyperpod_inference_iac.foundation.cdk_types import (
    cfn_child,
)
from hyperpod_inference_iac.foundation.helm import (
    HelmRelease,
)
from hyperpod_inference_iac.foundation.log_retention import (
    DEFAULT_AUDIT_RETENTION,
)
from hyperpod_inference_iac.foundation.nag import (
    acknowledge,
    acknowledge_kubectl_provider,
    managed_policy,
)
from hyperpod_inference_iac.foundation.patterns import (
    EC2_INSTANCE_TYPE,
    EKS_CLUSTER_NAME,
    IAM_ROLE_ARN,
)
from hyperpod_inference_iac.foundation.props import (
    Props,
    listed,
    prop,
    real_signature,
)
from hyperpod_inference_iac.foundation.risks import (
    RiskWarnings,
)
from hyperpod_inference_iac.foundation.validation import (
    PROPS,
    KeyPaths,
    Problems,
    is_unresolved,
)
from hyperpod_inference_iac.security.data_perimeter import (
    _accounts,
    key_administration,
)
from hyperpod_inference_iac.security.secrets_key import (
    default_deployer_role_arns,
)
from hyperpod_inference_iac.security.workload_identity import (
    service_account_principal,
)

GPU_TAINT_KEY = "nvidia.com/gpu"
# The AL2023 NVIDIA AMI carries the driver but not the Kubernetes device plugin; only on GPU nodes: the EKS GPU node
# groups' nvidia.com/gpu.present=true, or a HyperPod NVIDIA instance type (HyperPod's AMI has no plugin either; the
# selection and the node-health toleration are those of the nvidia-device-plugin values of AWS's dependency chart).
NVIDIA_DEVICE_PLUGIN = HelmRelease(
    release="nvidia-device-plugin", chart="nvidia-device-plugin", repository="https://nvidia.github.io/k8s-device-plugin",
    version="0.17.1", namespace="kube-system",
    values={"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
                {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                       "values": list(HYPERPOD_NVIDIA_INSTANCE_TYPES)}]}]}}},
            "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
                            dict(NODE_HEALTH_TOLERATION)]},
    purpose="advertises nvidia.com/gpu on GPU nodes, EKS and HyperPod (workloads request GPUs through it)",
)
# Supported Kubernetes minors: each has an EKS release and a kubectl layer package (a dependency).
KUBECTL_LAYERS: Mapping[str, tuple[str, str]] = {
    "1.33": ("aws_cdk.lambda_layer_kubectl_v33", "KubectlV33Layer"),
    "1.34": ("aws_cdk.lambda_layer_kubectl_v34", "KubectlV34Layer"),
    "1.35": ("aws_cdk.lambda_layer_kubectl_v35", "KubectlV35Layer"),
}
DEFAULT_KUBERNETES_VERSION = "1.34"
# Without it, aws_eks_v2 makes the OIDC provider with a Lambda-backed custom resource: InferenceCluster sets it for
# its own subtree, so the provider is the same with and without the app's feature flags.
NATIVE_OIDC_PROVIDER_FLAG = "@aws-cdk/aws-eks:useNativeOidcProvider"
CLUSTER_ROLE_MANAGED_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_ROLE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy")
SYSTEM_ROOT_VOLUME_GIB = 20  # EKS's default disk size for managed node groups, as before the launch template
VPC_CNI_ADDON = "vpc-cni"
# The VPC CNI's pods (the aws-node DaemonSet, and its network policy agent) run under this service account; the
# add-on's own IRSA role (AWS's recommended set-up, "Configure the Amazon VPC CNI plugin to use IRSA") holds
# VPC_CNI_MANAGED_POLICY, so pods get IP addresses on every node, EKS or HyperPod, whatever the node's role grants.
VPC_CNI_SERVICE_ACCOUNT = ("kube-system", "aws-node")
VPC_CNI_MANAGED_POLICY = "AmazonEKS_CNI_Policy"
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


@dataclass(frozen=True, kw_only=True)
class InferenceClusterOptions(Props):
    """An inference cluster's properties a config file can set (``cluster`` in the app's)."""

    CONSTRUCT: ClassVar[str] = "InferenceCluster"

    cluster_name: str = prop(key="name", doc="The EKS cluster name: 1-100 letters, digits, `-` and `_`, starting "
                                             "with a letter or digit.")
    kubernetes_version: str = prop(
        DEFAULT_KUBERNETES_VERSION,
        doc=f"A Kubernetes minor of `KUBECTL_LAYERS` ({', '.join(KUBECTL_LAYERS)}), each synthesized with its kubectl "
            "layer. Quote it in YAML: `1.30` unquoted is the number 1.3.")
    endpoint_access: ClusterEndpointAccess = prop(
        ClusterEndpointAccess.PRIVATE,
        doc="Who reaches the Kubernetes API server: `private` (only from inside the VPC) or `public_and_private` "
            "(also from the internet; warned: `InferenceCluster:publicEndpoint`).")
    admin_role_arns: Sequence[str] = prop((), doc="Roles given cluster admin through EKS access entries; the role "
                                                  "that deploys the stack gets no implicit admin rights.")
    system_instance_type: str = prop("m6i.large", doc="The system node group's instance type (operator, "
                                                      "cert-manager, load balancer controller), so GPU nodes only "
                                                      "run models.")
    enforce_network_policies: bool = prop(
        True, doc="Manage the `vpc-cni` EKS add-on with `{\"enableNetworkPolicy\": \"true\"}`, so Kubernetes "
                  "`NetworkPolicy` objects (such as the portable servers') are enforced. Off, no add-on: the VPC CNI "
                  "stays as EKS bootstrapped it (self-managed, policies not enforced).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        cluster_name = self.cluster_name
        if not is_unresolved(cluster_name) and not EKS_CLUSTER_NAME.match(cluster_name):
            problems.add("InferenceCluster.BadName", at.at("cluster_name"),
                         "must be 1-100 letters, digits, '-' and '_', starting with a letter or digit", cluster_name)
        if self.kubernetes_version not in KUBECTL_LAYERS:
            problems.add("InferenceCluster.UnsupportedKubernetesVersion", at.at("kubernetes_version"),
                         f"must be one of {', '.join(KUBECTL_LAYERS)} (an EKS release with a kubectl layer package "
                         f"this library depends on)", self.kubernetes_version)
        if self.endpoint_access not in ClusterEndpointAccess._value2member_map_:
            problems.add("InferenceCluster.EndpointAccess", at.at("endpoint_access"),
                         f"must be one of {', '.join(ClusterEndpointAccess)}", self.endpoint_access)
        _check_role_arns(problems, at, "admin_role_arns", self.admin_role_arns, "InferenceCluster.BadAdminRoleArn",
                         "platform-admins")
        if not is_unresolved(self.system_instance_type) and not EC2_INSTANCE_TYPE.match(self.system_instance_type):
            problems.add("InferenceCluster.BadInstanceType", at.at("system_instance_type"),
                         "must be an EC2 instance type such as m6i.large", self.system_instance_type)


@dataclass(frozen=True, kw_only=True)
class InferenceClusterProps(InferenceClusterOptions):
    """:class:`InferenceCluster`'s properties: its options, and what only Python code passes."""

    vpc: ec2.IVpc = prop(doc="The VPC. The cluster and the system nodes use its `PRIVATE_WITH_EGRESS` subnets.",
                         config=False)
    kubectl_layer: lambda_.ILayerVersion | None = prop(None, doc="The kubectl Lambda layer.", config=False,
                                                       default_doc="the layer of `kubernetes_version` from "
                                                                   "`KUBECTL_LAYERS`")
    install_device_plugin: bool = prop(True, config=False,
                                       doc="Install the NVIDIA device plugin (`NVIDIA_DEVICE_PLUGIN`). The AL2023 "
                                           "NVIDIA AMI carries the driver but not the plugin.")
    control_plane_log_retention: logs.RetentionDays = prop(
        DEFAULT_AUDIT_RETENTION, config=False,
        doc="How long the control-plane log group `/aws/eks/<cluster_name>/cluster` keeps its events (audit logs: "
            "who called the Kubernetes API). The group is created before the cluster, so EKS writes into it.")
    deployer_role_arns: Sequence[str] | None = prop(
        None, config=False,
        default_doc="the CloudFormation execution role of the stack's `DefaultStackSynthesizer` "
                    "(`cdk-<qualifier>-cfn-exec-role-<account>-<region>`)",
        doc="The roles CloudFormation deploys the cluster with. The secrets key's policy lets them `kms:Encrypt`, "
            "`kms:Decrypt` and `kms:CreateGrant` (for an AWS resource) through EKS only: `eks:CreateCluster` checks "
            "the key and creates the grant its control plane uses with the caller's permissions. With another "
            "synthesizer and no roles named, the key policy names no deployer (warned) and creating the cluster "
            "fails.")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        super().check(problems, at)
        _check_role_arns(problems, at, "deployer_role_arns", self.deployer_role_arns or (),
                         "InferenceCluster.BadDeployerRoleArn", "cdk-deploy")


def _check_role_arns(problems: Problems, at: KeyPaths, name: str, arns: Sequence[str], code: str,
                     example: str) -> None:
    for index, arn in enumerate(arns):
        if not is_unresolved(arn) and not IAM_ROLE_ARN.match(arn):
            problems.add(code, at.at(name, index), f"must be an IAM role ARN such as "
                                                   f"arn:aws:iam::111122223333:role/{example}", arn)


def check_inference_cluster(problems: Problems, at: KeyPaths = PROPS, **options: Any) -> None:
    """:meth:`InferenceClusterOptions.check` of these options, and ``deployer_role_arns``'s rule (kept for callers
    of 0.2.0)."""
    deployer_role_arns = options.pop("deployer_role_arns", None)
    InferenceClusterOptions(**options).check(problems, at)
    _check_role_arns(problems, at, "deployer_role_arns", deployer_role_arns or (),
                     "InferenceCluster.BadDeployerRoleArn", "cdk-deploy")


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


@real_signature
class InferenceCluster(Construct):
    """An ``aws_eks_v2`` cluster for inference: private endpoint, no implicit creator admin, secrets
    envelope-encrypted with a customer key, every control-plane log into a log group with a retention,
    Kubernetes network policies enforced by the VPC CNI, a small system node group for controllers
    (IMDSv2 only, encrypted root volume), and the NVIDIA device plugin.

    Properties: :class:`InferenceClusterProps` (each with its type, default and meaning); ``props`` keeps them.
    ``endpoint_access=PUBLIC_AND_PRIVATE`` adds an acknowledgeable warning
    (``@hyperpod-inference-iac/InferenceCluster:publicEndpoint``), and so does a deploying role nobody knows
    (``...:noDeployer``).

    The secrets key's policy names its principals (:func:`secrets_key_policy`): no ``kms:*`` for the account.
    The cluster's IAM OIDC provider (``cluster.open_id_connect_provider``) is the native ``AWS::IAM::OIDCProvider``
    whatever the app's feature flags (``@aws-cdk/aws-eks:useNativeOidcProvider`` is set on this construct).

    Attributes: ``cluster`` (the ``eks.Cluster``), ``secrets_key``, ``control_plane_log_group``,
    ``system_nodegroup``, ``system_launch_template``, ``vpc_cni_addon`` and its IRSA role ``vpc_cni_role``
    (``AmazonEKS_CNI_Policy`` for ``kube-system/aws-node``), and ``device_plugin`` (None when not installed). The
    AWS managed policies of the cluster role, the system nodes and the VPC CNI, and CDK's kubectl provider are
    acknowledged for cdk-nag here.
    """

    PROPS: ClassVar[type[Props]] = InferenceClusterProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster_name: str,
        vpc: ec2.IVpc,
        kubernetes_version: str = InferenceClusterProps.kubernetes_version,
        endpoint_access: ClusterEndpointAccess = InferenceClusterProps.endpoint_access,
        admin_role_arns: Sequence[str] = InferenceClusterProps.admin_role_arns,
        system_instance_type: str = InferenceClusterProps.system_instance_type,
        kubectl_layer: lambda_.ILayerVersion | None = InferenceClusterProps.kubectl_layer,
        install_device_plugin: bool = InferenceClusterProps.install_device_plugin,
        enforce_network_policies: bool = InferenceClusterProps.enforce_network_policies,
        control_plane_log_retention: logs.RetentionDays = InferenceClusterProps.control_plane_log_retention,
        deployer_role_arns: Sequence[str] | None = InferenceClusterProps.deployer_role_arns,
    ) -> None:
        """Create the construct. Its properties (:class:`InferenceClusterProps`, kept as ``self.props``):

        :param cluster_name: The EKS cluster name: 1-100 letters, digits, `-` and `_`, starting with a letter or
            digit. Default: required.
        :param kubernetes_version: A Kubernetes minor of `KUBECTL_LAYERS` (1.33, 1.34, 1.35), each synthesized
            with its kubectl layer. Quote it in YAML: `1.30` unquoted is the number 1.3. Default: ``'1.34'``.
        :param endpoint_access: Who reaches the Kubernetes API server: `private` (only from inside the VPC) or
            `public_and_private` (also from the internet; warned: `InferenceCluster:publicEndpoint`). Default:
            ``ClusterEndpointAccess.PRIVATE``.
        :param admin_role_arns: Roles given cluster admin through EKS access entries; the role that deploys the
            stack gets no implicit admin rights. Default: ``()``.
        :param system_instance_type: The system node group's instance type (operator, cert-manager, load
            balancer controller), so GPU nodes only run models. Default: ``'m6i.large'``.
        :param enforce_network_policies: Manage the `vpc-cni` EKS add-on with `{"enableNetworkPolicy": "true"}`,
            so Kubernetes `NetworkPolicy` objects (such as the portable servers') are enforced. Off, no add-on:
            the VPC CNI stays as EKS bootstrapped it (self-managed, policies not enforced). Default: ``True``.
        :param vpc: The VPC. The cluster and the system nodes use its `PRIVATE_WITH_EGRESS` subnets. Default:
            required.
        :param kubectl_layer: The kubectl Lambda layer. Default: ``None`` (the layer of ``kubernetes_version``
            from ``KUBECTL_LAYERS``).
        :param install_device_plugin: Install the NVIDIA device plugin (`NVIDIA_DEVICE_PLUGIN`). The AL2023
            NVIDIA AMI carries the driver but not the plugin. Default: ``True``.
        :param control_plane_log_retention: How long the control-plane log group
            `/aws/eks/<cluster_name>/cluster` keeps its events (audit logs: who called the Kubernetes API). The
            group is created before the cluster, so EKS writes into it. Default: ``RetentionDays.ONE_YEAR``.
        :param deployer_role_arns: The roles CloudFormation deploys the cluster with. The secrets key's policy
            lets them `kms:Encrypt`, `kms:Decrypt` and `kms:CreateGrant` (for an AWS resource) through EKS only:
            `eks:CreateCluster` checks the key and creates the grant its control plane uses with the caller's
            permissions. With another synthesizer and no roles named, the key policy names no deployer (warned)
            and creating the cluster fails. Default: ``None`` (the CloudFormation execution role of the stack's
            ``DefaultStackSynthesizer`` (``cdk-<qualifier>-cfn-exec-role-<account>-<region>``)).
        """
        super().__init__(scope, id)
        # Decided here, not by the app's cdk.json: the cluster's IAM OIDC provider (which every IRSA role trusts) is
        # the native AWS::IAM::OIDCProvider. aws_eks_v2 reads this flag when the provider is first asked for, from
        # the cluster's scope up; set on this construct before any child exists, it holds for its subtree only.
        self.node.set_context(NATIVE_OIDC_PROVIDER_FLAG, True)
        self.props = props = InferenceClusterProps(
            cluster_name=cluster_name, vpc=vpc, kubernetes_version=kubernetes_version, endpoint_access=endpoint_access,
            admin_role_arns=listed(admin_role_arns), system_instance_type=system_instance_type,
            kubectl_layer=kubectl_layer, install_device_plugin=install_device_plugin,
            enforce_network_policies=enforce_network_policies,
            control_plane_log_retention=control_plane_log_retention,
            deployer_role_arns=listed(deployer_role_arns))
        props.raise_if_invalid(f"InferenceCluster {self.node.path}")
        endpoint_access = ClusterEndpointAccess(props.endpoint_access)
        warnings = RiskWarnings()
        warn_inference_cluster(warnings, endpoint_access=endpoint_access)
        warnings.annotate(self)
        self.secrets_key = kms.Key(self, "SecretsKey", enable_key_rotation=True,
                                   description=f"Envelope encryption of Kubernetes secrets in {props.cluster_name}",
                                   removal_policy=RemovalPolicy.RETAIN)
        self.control_plane_log_group = self._control_plane_log_group(props.cluster_name,
                                                                     props.control_plane_log_retention)
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=props.cluster_name,
            version=eks.KubernetesVersion.of(props.kubernetes_version),
            vpc=props.vpc,
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
                kubectl_layer=props.kubectl_layer or kubectl_layer_for(self, props.kubernetes_version),
                memory=Size.gibibytes(1)),
        )
        _cfn_cluster(self.cluster).node.add_dependency(self.control_plane_log_group)
        self._restrict_secrets_key(props.deployer_role_arns)
        self.system_launch_template = node_launch_template(self, "SystemNodesLaunchTemplate",
                                                           root_volume_gib=SYSTEM_ROOT_VOLUME_GIB)
        # No fixed nodegroup_name: EKS cannot add a launch template to a group created without one, and
        # CloudFormation replaces a group (new instance type, subnets, ...) only when it may name the new one.
        self.system_nodegroup = self.cluster.add_nodegroup_capacity(
            "SystemNodes", ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            instance_types=[ec2.InstanceType(props.system_instance_type)], min_size=2, desired_size=2, max_size=4,
            subnets=private, labels={"node-role": "system"},
            launch_template_spec=launch_template_spec(self.system_launch_template),
        )
        # preserve_on_delete: taking the add-on out of the stack must not remove the CNI from running nodes.
        self.vpc_cni_addon = managed_addon(
            self, "VpcCniAddon", cluster=self.cluster, name=VPC_CNI_ADDON, configuration_values=VPC_CNI_NETWORK_POLICY,
            preserve_on_delete=True) if props.enforce_network_policies else None
        self.vpc_cni_role = self._vpc_cni_role() if self.vpc_cni_addon is not None else None
        for index, arn in enumerate(props.admin_role_arns):
            self.cluster.grant_access(f"Admin{index}", arn, [eks.AccessPolicy.from_access_policy_name(
                "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)])
        self.device_plugin = NVIDIA_DEVICE_PLUGIN.install(self.cluster, "NvidiaDevicePlugin") \
            if props.install_device_plugin else None
        acknowledge(self.cluster.role, "eks-service-managed-policies",
                    *(managed_policy(name) for name in CLUSTER_ROLE_MANAGED_POLICIES))
        acknowledge(self.system_nodegroup.role, "eks-service-managed-policies",
                    *(managed_policy(name) for name in NODE_ROLE_MANAGED_POLICIES))
        if self.cluster.kubectl_provider is not None:  # (always: kubectl_provider_options is given above)
            acknowledge_kubectl_provider(self.cluster.kubectl_provider)

    def _vpc_cni_role(self) -> iam.Role:
        """The VPC CNI add-on's own identity: an IRSA role only ``kube-system/aws-node`` can assume, with
        ``AmazonEKS_CNI_Policy`` (what AWS documents for the add-on). Without it, aws-node on a HyperPod node would
        run with the HyperPod execution role and on a system node with the node role."""
        namespace, service_account = VPC_CNI_SERVICE_ACCOUNT
        role = iam.Role(self, "VpcCniRole", description=f"VPC CNI (aws-node) of {self.props.cluster_name}",
                        assumed_by=service_account_principal(self, "VpcCniTrust", cluster=self.cluster,
                                                             namespace=namespace, service_account=service_account),
                        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(VPC_CNI_MANAGED_POLICY)])
        assert self.vpc_cni_addon is not None
        cfn_addon(self.vpc_cni_addon).service_account_role_arn = role.role_arn
        acknowledge(role, "eks-service-managed-policies", managed_policy(VPC_CNI_MANAGED_POLICY))
        return role

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

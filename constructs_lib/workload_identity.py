"""Identities for pods: one IAM role per Kubernetes service account, never shared, never wildcarded.

Two bindings, both exact to one namespace and one service account:

* IRSA: the role trusts the cluster's OIDC provider with ``StringEquals`` on both
  ``<issuer>:sub = system:serviceaccount:<namespace>:<name>`` and ``<issuer>:aud = sts.amazonaws.com``.
  The issuer is only known at deploy time, and IAM condition *keys* cannot be intrinsic
  functions, so the condition block goes through ``CfnJson`` (what CDK's own ServiceAccount does).
* EKS Pod Identity: the role trusts ``pods.eks.amazonaws.com`` (``sts:AssumeRole`` +
  ``sts:TagSession``) limited to this account and cluster, and a ``CfnPodIdentityAssociation``
  binds it to the namespace and service account.
"""

from __future__ import annotations

from enum import Enum

from aws_cdk import CfnJson, Stack
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hyperpod_inference_iac.validation import DNS1123_LABEL, DNS1123_SUBDOMAIN, Problems, is_token

ROLE_NAME_MAX = 64


class IdentityBinding(Enum):
    IRSA = "irsa"
    POD_IDENTITY = "pod-identity"


def service_account_principal(scope: Construct, id_: str, *, cluster: eks.ICluster, namespace: str,
                              service_account: str) -> iam.IPrincipal:
    """An OIDC (IRSA) principal that only the one service account can assume."""
    provider = cluster.open_id_connect_provider
    issuer = provider.open_id_connect_provider_issuer
    conditions = CfnJson(scope, id_, value={
        f"{issuer}:aud": "sts.amazonaws.com",
        f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
    })
    return iam.OpenIdConnectPrincipal(provider).with_conditions({"StringEquals": conditions})


def deterministic_role_arn(stack: Stack, role_name: str) -> str:
    """The ARN a named role will have, known before deploy (no token), for manifests in dist/."""
    return f"arn:{stack.partition}:iam::{stack.account}:role/{role_name}"


class WorkloadIdentity(Construct):
    """The identity of one inference workload: a role bound to exactly one service account.

    :param role_name: fixed name, so the role ARN is known before deploy and can be written into
        a ServiceAccount annotation in ``dist/`` without CDK tokens.
    :param weights_bucket: the bucket holding this workload's model weights; read-only access is
        granted to ``weights_prefix`` only (``s3:ListBucket`` conditioned on ``s3:prefix``).
    :param weights_key: the KMS key of that bucket, if any: ``kms:Decrypt`` through S3 only.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        namespace: str,
        service_account: str,
        role_name: str,
        binding: IdentityBinding = IdentityBinding.IRSA,
        weights_bucket: s3.IBucket | None = None,
        weights_prefix: str = "",
        weights_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, id_)
        _validate(namespace, service_account, role_name, weights_bucket, weights_prefix)
        stack = Stack.of(self)
        self.namespace = namespace
        self.service_account = service_account
        self.binding = binding
        if binding is IdentityBinding.IRSA:
            principal: iam.IPrincipal = service_account_principal(
                self, "TrustConditions", cluster=cluster, namespace=namespace, service_account=service_account)
        else:
            principal = iam.ServicePrincipal("pods.eks.amazonaws.com").with_conditions({
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnEquals": {"aws:SourceArn": cluster.cluster_arn},
            })
        self.role = iam.Role(
            self, "Role", role_name=role_name, assumed_by=principal,
            description=f"Workload identity of {namespace}/{service_account}",
        )
        if binding is IdentityBinding.POD_IDENTITY:
            assert self.role.assume_role_policy is not None
            self.role.assume_role_policy.add_statements(iam.PolicyStatement(
                actions=["sts:TagSession"], principals=[iam.ServicePrincipal("pods.eks.amazonaws.com")],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            ))
            self.association: eks_l1.CfnPodIdentityAssociation | None = eks_l1.CfnPodIdentityAssociation(
                self, "Association", cluster_name=cluster.cluster_name, namespace=namespace,
                service_account=service_account, role_arn=self.role.role_arn,
            )
        else:
            self.association = None
        self.role_arn = deterministic_role_arn(stack, role_name)
        if weights_bucket is not None:
            self._grant_weights(weights_bucket, weights_prefix, weights_key)

    def _grant_weights(self, bucket: s3.IBucket, prefix: str, key: kms.IKey | None) -> None:
        prefix = prefix.strip("/")
        self.role.add_to_principal_policy(iam.PolicyStatement(
            sid="ListWeightsPrefix", actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}},
        ))
        self.role.add_to_principal_policy(iam.PolicyStatement(
            sid="ReadWeights", actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{prefix}/*")],
        ))
        if key is not None:
            stack = Stack.of(self)
            self.role.add_to_principal_policy(iam.PolicyStatement(
                sid="DecryptWeightsThroughS3", actions=["kms:Decrypt"], resources=[key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"},
                            "StringLike": {"kms:EncryptionContext:aws:s3:arn": [bucket.bucket_arn,
                                                                                bucket.arn_for_objects("*")]}},
            ))


def _validate(namespace: str, service_account: str, role_name: str, bucket: s3.IBucket | None,
              prefix: str) -> None:
    problems = Problems()
    if not is_token(namespace) and (len(namespace) > 63 or not DNS1123_LABEL.match(namespace)):
        problems.add("WorkloadIdentity.BadNamespace", "namespace", "must be a DNS-1123 label", namespace)
    if not is_token(service_account) and (len(service_account) > 253
                                          or not DNS1123_SUBDOMAIN.match(service_account)):
        problems.add("WorkloadIdentity.BadServiceAccount", "service_account", "must be a DNS-1123 subdomain",
                     service_account)
    if not is_token(role_name) and (len(role_name) > ROLE_NAME_MAX or not role_name.replace("-", "").isalnum()):
        problems.add("WorkloadIdentity.BadRoleName", "role_name",
                     f"must be 1-{ROLE_NAME_MAX} letters, digits and '-'", role_name)
    if bucket is not None and not prefix.strip("/"):
        problems.add("WorkloadIdentity.WholeBucket", "weights_prefix",
                     "must name the prefix of this workload's weights; a whole bucket is never granted", prefix)
    problems.raise_if_any("WorkloadIdentity")

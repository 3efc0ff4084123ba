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

import enum
from collections.abc import Sequence

from aws_cdk import CfnJson, Stack
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from hyperpod_inference_iac.cdk_types import ClusterLike
from hyperpod_inference_iac.charts.pod_credentials import STS_AUDIENCE
from hyperpod_inference_iac.patterns import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    IAM_ROLE_NAME,
    IAM_ROLE_NAME_MAX,
    iam_role_arn,
)
from hyperpod_inference_iac.s3_access import grant_object_reads, grant_object_writes
from hyperpod_inference_iac.validation import PROPS, KeyPaths, Problems, is_unresolved


class IdentityBinding(enum.StrEnum):
    IRSA = "irsa"
    POD_IDENTITY = "pod-identity"


def service_account_principal(scope: Construct, id: str, *, cluster: ClusterLike, namespace: str,
                              service_account: str | Sequence[str], audience: str = STS_AUDIENCE) -> iam.IPrincipal:
    """An OIDC (IRSA) principal that only the one service account (or only the service accounts listed, all of
    ``namespace``) can assume, with a token of ``audience``."""
    provider = cluster.open_id_connect_provider
    issuer = provider.open_id_connect_provider_issuer
    subjects = [f"system:serviceaccount:{namespace}:{name}" for name in
                ([service_account] if isinstance(service_account, str) else service_account)]
    conditions = CfnJson(scope, id, value={
        f"{issuer}:aud": audience,
        f"{issuer}:sub": subjects[0] if len(subjects) == 1 else subjects,
    })
    return iam.OpenIdConnectPrincipal(provider).with_conditions({"StringEquals": conditions})


def check_workload_identity(problems: Problems, at: KeyPaths = PROPS, *, namespace: str, service_account: str,
                            role_name: str | None = None, binding: object = IdentityBinding.IRSA) -> None:
    """Every rule of :class:`WorkloadIdentity`'s properties."""
    if not is_unresolved(namespace) and (len(namespace) > 63 or not DNS1123_LABEL.match(namespace)):
        problems.add("WorkloadIdentity.BadNamespace", at.at("namespace"), "must be a DNS-1123 label", namespace)
    if not is_unresolved(service_account) and (len(service_account) > 253
                                               or not DNS1123_SUBDOMAIN.match(service_account)):
        problems.add("WorkloadIdentity.BadServiceAccount", at.at("service_account"), "must be a DNS-1123 subdomain",
                     service_account)
    if role_name is not None and not is_unresolved(role_name) and not IAM_ROLE_NAME.match(role_name):
        problems.add("WorkloadIdentity.BadRoleName", at.at("role_name"),
                     f"must be 1-{IAM_ROLE_NAME_MAX} ASCII letters, digits and '+=,.@_-' (IAM role names)", role_name)
    if binding not in IdentityBinding._value2member_map_ and not isinstance(binding, IdentityBinding):
        problems.add("WorkloadIdentity.BadBinding", at.at("binding"),
                     f"must be one of {', '.join(b.value for b in IdentityBinding)} (IdentityBinding)", binding)


class WorkloadIdentity(Construct):
    """The identity of one inference workload: a role bound to exactly one service account.

    :param cluster: the cluster whose pods assume the role.
    :param namespace: the service account's namespace.
    :param service_account: the service account's name.
    :param role_name: fixed name, so the role ARN is known before deploy and can be written into a
        ServiceAccount annotation in GitOps manifests without CDK tokens. @default generated
    :param binding: :class:`IdentityBinding`. @default IRSA
    :param audience: the token audience the role's IRSA trust requires (``<issuer>:aud``): a container-scoped
        identity's own (``charts.pod_credentials``), which the cluster's OIDC provider must list as a client ID.
        @default ``sts.amazonaws.com`` (the EKS webhook's: every container of the pod)

    Grants: :meth:`grant_read_objects` and :meth:`grant_write_objects`, each on one prefix of one bucket
    (a whole bucket is never granted), with the bucket's key used through S3 only; each grant's object
    wildcard is acknowledged for cdk-nag with its exact resource. The identity is ``IGrantable``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        namespace: str,
        service_account: str,
        role_name: str | None = None,
        binding: IdentityBinding = IdentityBinding.IRSA,
        audience: str = STS_AUDIENCE,
    ) -> None:
        super().__init__(scope, id)
        problems = Problems()
        check_workload_identity(problems, namespace=namespace, service_account=service_account, role_name=role_name,
                                binding=binding)
        problems.raise_if_any(f"WorkloadIdentity {self.node.path}")
        binding = IdentityBinding(binding)  # the enum, also when given its value
        stack = Stack.of(self)
        self.namespace = namespace
        self.service_account = service_account
        self.binding = binding
        if binding is IdentityBinding.IRSA:
            principal: iam.IPrincipal = service_account_principal(
                self, "TrustConditions", cluster=cluster, namespace=namespace, service_account=service_account,
                audience=audience)
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
        # Deterministic when named (no token), for manifests outside CDK.
        self.role_arn = iam_role_arn(stack.partition, stack.account, role_name) if role_name \
            else self.role.role_arn

    @property
    def grant_principal(self) -> iam.IPrincipal:
        return self.role.grant_principal

    def grant_read_objects(self, *, bucket_arn: str, prefix: str, key: kms.IKey | None = None) -> None:
        """Read-only on ``prefix`` (e.g. model weights); ``s3:ListBucket`` conditioned on ``s3:prefix``."""
        _require_prefix(prefix)
        grant_object_reads(self.role, bucket_arn=bucket_arn, prefix=prefix, key=key)

    def grant_write_objects(self, *, bucket_arn: str, prefix: str, key: kms.IKey | None = None) -> None:
        """Write-only on ``prefix`` (e.g. one workload's capture prefix)."""
        _require_prefix(prefix)
        grant_object_writes(self.role, bucket_arn=bucket_arn, prefix=prefix, key=key)


def _require_prefix(prefix: str) -> None:
    if not prefix.strip("/"):
        problems = Problems()
        problems.add("WorkloadIdentity.WholeBucket", "prefix",
                     "must name the prefix of this workload's objects; a whole bucket is never granted", prefix)
        problems.raise_if_any("WorkloadIdentity")

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
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import CfnJson, Stack
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from hyperpod_inference_iac.charts.pod_credentials import STS_AUDIENCE
from hyperpod_inference_iac.foundation.cdk_types import ClusterLike
from hyperpod_inference_iac.foundation.patterns import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    IAM_ROLE_NAME,
    IAM_ROLE_NAME_MAX,
    iam_role_arn,
)
from hyperpod_inference_iac.foundation.props import Props, prop, real_signature
from hyperpod_inference_iac.foundation.validation import PROPS, KeyPaths, Problems, is_unresolved
from hyperpod_inference_iac.security.s3_access import grant_object_reads, grant_object_writes


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


@dataclass(frozen=True, kw_only=True)
class WorkloadIdentityProps(Props):
    """:class:`WorkloadIdentity`'s properties (only Python code passes them; the app's come from the workload
    plan)."""

    CONSTRUCT: ClassVar[str] = "WorkloadIdentity"

    cluster: ClusterLike = prop(config=False, doc="The cluster whose pods assume the role (an `eks.Cluster` or "
                                                  "`eks.ICluster`). IRSA needs its OIDC provider.")
    namespace: str = prop(config=False, doc="The service account's namespace, a DNS-1123 label.")
    service_account: str = prop(config=False, doc="The service account's name, a DNS-1123 subdomain.")
    role_name: str | None = prop(None, config=False, default_doc="generated",
                                 doc="Fixed role name, so the role ARN is known before deploy and can go into a "
                                     "ServiceAccount annotation in GitOps manifests without CDK tokens.")
    binding: IdentityBinding = prop(IdentityBinding.IRSA, config=False,
                                    doc="`IdentityBinding.IRSA` or `IdentityBinding.POD_IDENTITY` (or its value, "
                                        "`irsa` or `pod-identity`).")
    audience: str = prop(
        STS_AUDIENCE, config=False,
        doc="The token audience the IRSA trust requires (`<issuer>:aud`). The default is the EKS webhook's, which "
            "every container of the pod gets; a role for one container only (an NVMe loader, a capture sidecar) "
            "trusts an audience of its own (`hyperpod-inference-iac/weights-loader`, "
            "`hyperpod-inference-iac/capture-sidecar`), which the cluster's OIDC provider must list as a client ID "
            "and which only that container's projected token carries (`charts/pod_credentials.py`; "
            "[InferenceWorkloads](inference-workloads.md) does both).")

    def check(self, problems: Problems, at: KeyPaths = PROPS) -> None:
        namespace, service_account, role_name, binding = self.namespace, self.service_account, self.role_name, \
            self.binding
        if not is_unresolved(namespace) and (len(namespace) > 63 or not DNS1123_LABEL.match(namespace)):
            problems.add("WorkloadIdentity.BadNamespace", at.at("namespace"), "must be a DNS-1123 label", namespace)
        if not is_unresolved(service_account) and (len(service_account) > 253
                                                   or not DNS1123_SUBDOMAIN.match(service_account)):
            problems.add("WorkloadIdentity.BadServiceAccount", at.at("service_account"),
                         "must be a DNS-1123 subdomain", service_account)
        if role_name is not None and not is_unresolved(role_name) and not IAM_ROLE_NAME.match(role_name):
            problems.add("WorkloadIdentity.BadRoleName", at.at("role_name"),
                         f"must be 1-{IAM_ROLE_NAME_MAX} ASCII letters, digits and '+=,.@_-' (IAM role names)",
                         role_name)
        if binding not in IdentityBinding._value2member_map_ and not isinstance(binding, IdentityBinding):
            problems.add("WorkloadIdentity.BadBinding", at.at("binding"),
                         f"must be one of {', '.join(b.value for b in IdentityBinding)} (IdentityBinding)", binding)


def check_workload_identity(problems: Problems, at: KeyPaths = PROPS, **props: Any) -> None:
    """:meth:`WorkloadIdentityProps.check` of these properties (kept for callers of 0.2.0; ``cluster`` not
    needed)."""
    WorkloadIdentityProps(**{"cluster": None, **props}).check(problems, at)


@real_signature
class WorkloadIdentity(Construct):
    """The identity of one inference workload: a role bound to exactly one service account.

    Properties: :class:`WorkloadIdentityProps` (each with its type, default and meaning); ``props`` keeps them.

    Grants: :meth:`grant_read_objects` and :meth:`grant_write_objects`, each on one prefix of one bucket
    (a whole bucket is never granted), with the bucket's key used through S3 only; each grant's object
    wildcard is acknowledged for cdk-nag with its exact resource. The identity is ``IGrantable``.
    """

    PROPS: ClassVar[type[Props]] = WorkloadIdentityProps

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        namespace: str,
        service_account: str,
        role_name: str | None = WorkloadIdentityProps.role_name,
        binding: IdentityBinding = WorkloadIdentityProps.binding,
        audience: str = WorkloadIdentityProps.audience,
    ) -> None:
        """Create the construct. Its properties (:class:`WorkloadIdentityProps`, kept as ``self.props``):

        :param cluster: The cluster whose pods assume the role (an `eks.Cluster` or `eks.ICluster`). IRSA needs
            its OIDC provider. Default: required.
        :param namespace: The service account's namespace, a DNS-1123 label. Default: required.
        :param service_account: The service account's name, a DNS-1123 subdomain. Default: required.
        :param role_name: Fixed role name, so the role ARN is known before deploy and can go into a
            ServiceAccount annotation in GitOps manifests without CDK tokens. Default: ``None`` (generated).
        :param binding: `IdentityBinding.IRSA` or `IdentityBinding.POD_IDENTITY` (or its value, `irsa` or
            `pod-identity`). Default: ``IdentityBinding.IRSA``.
        :param audience: The token audience the IRSA trust requires (`<issuer>:aud`). The default is the EKS
            webhook's, which every container of the pod gets; a role for one container only (an NVMe loader, a
            capture sidecar) trusts an audience of its own (`hyperpod-inference-iac/weights-loader`,
            `hyperpod-inference-iac/capture-sidecar`), which the cluster's OIDC provider must list as a client
            ID and which only that container's projected token carries (`charts/pod_credentials.py`;
            [InferenceWorkloads](inference-workloads.md) does both). Default: ``'sts.amazonaws.com'``.
        """
        super().__init__(scope, id)
        self.props = props = WorkloadIdentityProps(
            cluster=cluster, namespace=namespace, service_account=service_account, role_name=role_name,
            binding=binding, audience=audience)
        props.raise_if_invalid(f"WorkloadIdentity {self.node.path}")
        binding = IdentityBinding(props.binding)  # the enum, also when given its value
        stack = Stack.of(self)
        self.namespace = props.namespace
        self.service_account = props.service_account
        self.binding = binding
        if binding is IdentityBinding.IRSA:
            principal: iam.IPrincipal = service_account_principal(
                self, "TrustConditions", cluster=props.cluster, namespace=props.namespace,
                service_account=props.service_account, audience=props.audience)
        else:
            principal = iam.ServicePrincipal("pods.eks.amazonaws.com").with_conditions({
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnEquals": {"aws:SourceArn": props.cluster.cluster_arn},
            })
        self.role = iam.Role(
            self, "Role", role_name=props.role_name, assumed_by=principal,
            description=f"Workload identity of {props.namespace}/{props.service_account}",
        )
        if binding is IdentityBinding.POD_IDENTITY:
            assert self.role.assume_role_policy is not None
            self.role.assume_role_policy.add_statements(iam.PolicyStatement(
                actions=["sts:TagSession"], principals=[iam.ServicePrincipal("pods.eks.amazonaws.com")],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            ))
            self.association: eks_l1.CfnPodIdentityAssociation | None = eks_l1.CfnPodIdentityAssociation(
                self, "Association", cluster_name=props.cluster.cluster_name, namespace=props.namespace,
                service_account=props.service_account, role_arn=self.role.role_arn,
            )
        else:
            self.association = None
        # Deterministic when named (no token), for manifests outside CDK.
        self.role_arn = iam_role_arn(stack.partition, stack.account, props.role_name) if props.role_name \
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

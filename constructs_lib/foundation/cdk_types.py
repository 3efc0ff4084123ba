"""Where the Python typing of aws-cdk-lib and its objects disagree, handled once for the library and its users.

**A created cluster is not an ``ICluster`` to a type checker.** The jsii-generated bindings declare
``aws_eks_v2.ICluster`` as a ``typing.Protocol`` with every member of the TypeScript interface, the optional
``kubectlProviderOptions`` included, while ``aws_eks_v2.Cluster`` implements the interface without that property
(TypeScript lets an implementation leave an optional member out; the options are a constructor property). So mypy
and pyright refuse the cluster you created where an ``ICluster`` is wanted::

    error: Argument "cluster" to "Addon" has incompatible type "Cluster"; expected "ICluster"  [arg-type]
    note: "Cluster" is missing following "ICluster" protocol member: kubectl_provider_options

At run time it is one (jsii checks the interface, not the Python protocol). Therefore every construct and function
of this library takes a :data:`ClusterLike`: an ``eks.Cluster`` you created or an ``eks.ICluster`` you imported
(``eks.Cluster.from_cluster_attributes``), without a cast. Where a cluster goes on to aws-cdk-lib itself, the library
says what it is with :func:`as_icluster`; your own code can do the same when it hands a created cluster to
``eks.Addon``, ``eks.HelmChart``, ``eks.KubernetesManifest`` and the like (docs/upgrading.md, "Type checking your app").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias, TypeVar, cast

from aws_cdk import aws_eks_v2 as eks
from constructs import IConstruct

from hyperpod_inference_iac.foundation.validation import KeyPaths, Problems

ClusterLike: TypeAlias = eks.ICluster | eks.Cluster
"""An ``aws_eks_v2`` cluster: created here (``eks.Cluster``) or imported (``eks.ICluster``)."""

_L1 = TypeVar("_L1")


def as_icluster(cluster: ClusterLike) -> eks.ICluster:
    """``cluster`` typed as the ``eks.ICluster`` it is at run time (no effect at run time: ``typing.cast``)."""
    return cast(eks.ICluster, cluster)


#: What an imported cluster (``eks.Cluster.from_cluster_attributes``) must be given for a construct to use it: the
#: attribute, what needs it and how to give it. A created ``eks.Cluster`` has the OIDC provider always (created on
#: first use) and the kubectl provider with ``kubectl_provider_options``.
CLUSTER_NEEDS: dict[str, str] = {
    "open_id_connect_provider": "its IAM roles for service accounts (IRSA) trust the cluster's OIDC provider: import "
                                "the cluster with open_id_connect_provider="
                                "iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(...)",
    "kubectl_provider": "it applies Kubernetes objects (Helm charts, manifests) through the cluster's kubectl "
                        "provider: import the cluster with kubectl_provider="
                        "eks.KubectlProvider.from_kubectl_provider_attributes(...) (or give an eks.Cluster "
                        "kubectl_provider_options)",
}


def check_cluster_attributes(problems: Problems, at: KeyPaths, cluster: ClusterLike, needs: Mapping[str, str]) -> None:
    """One problem at ``cluster`` per attribute of :data:`CLUSTER_NEEDS` that ``cluster`` lacks, of those ``needs``
    maps to their code. An imported cluster raises on reading a provider it was not given; a created one has its
    OIDC provider (reading it would create it early, so it is not read)."""
    for attribute, code in needs.items():
        why = CLUSTER_NEEDS[attribute]
        if attribute == "open_id_connect_provider":
            if isinstance(cluster, eks.Cluster):
                continue
            try:
                present = cluster.open_id_connect_provider is not None
            except RuntimeError:  # jsii: "openIdConnectProvider" is not defined for this imported cluster
                present = False
        else:
            present = getattr(cluster, attribute, None) is not None
        if not present:
            problems.add(code, at.at("cluster"), f"has no {attribute}: {why}")


def cfn_child(construct: IConstruct, cls: type[_L1]) -> _L1:
    """The L1 resource behind an L2 construct (``node.default_child``, typed as any ``IConstruct`` or ``None``),
    checked to be a ``cls``: for properties and overrides the L2 does not offer."""
    child = construct.node.default_child
    if not isinstance(child, cls):
        raise TypeError(f"{construct.node.path}: the default child is a {type(child).__name__}, not a {cls.__name__}")
    return child


__all__ = ["CLUSTER_NEEDS", "ClusterLike", "as_icluster", "cfn_child", "check_cluster_attributes"]

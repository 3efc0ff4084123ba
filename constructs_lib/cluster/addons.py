"""EKS managed add-ons as this library installs them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from hyperpod_inference_iac.foundation.cdk_types import ClusterLike, as_icluster, cfn_child


def managed_addon(scope: Construct, id: str, *, cluster: ClusterLike, name: str, version: str | None = None,
                  configuration_values: Mapping[str, Any] | None = None,
                  preserve_on_delete: bool | None = None) -> eks.Addon:
    """An ``aws_eks_v2.Addon`` that takes over what is already on the cluster (``resolveConflicts:
    OVERWRITE``): EKS bootstraps some add-ons (the VPC CNI) as self-managed, and a managed one that
    kept their settings would silently ignore its own configuration. ``version`` None takes EKS's
    default for the cluster's Kubernetes minor."""
    addon = eks.Addon(scope, id, cluster=as_icluster(cluster), addon_name=name, addon_version=version,
                      configuration_values=dict(configuration_values) if configuration_values is not None else None,
                      preserve_on_delete=preserve_on_delete)
    cfn_addon(addon).resolve_conflicts = "OVERWRITE"
    return addon


def cfn_addon(addon: eks.Addon) -> eks.CfnAddon:
    """The ``AWS::EKS::Addon`` of ``addon`` (for properties the L2 does not take)."""
    return cfn_child(addon, eks.CfnAddon)

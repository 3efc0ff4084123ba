"""A Helm release as a value: installed by a construct through the kubectl provider, and handed to GitOps
tools (``dist/``) from the same definition, so the two cannot name different charts, versions or values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from hyperpod_inference_iac.foundation.cdk_types import ClusterLike, as_icluster


class _ChartProps(TypedDict):
    """What :meth:`HelmRelease.install` passes to ``add_helm_chart`` and ``eks.HelmChart`` alike."""

    chart: str
    repository: str
    version: str
    namespace: str
    release: str
    values: dict[str, Any]
    create_namespace: bool | None
    wait: bool | None


@dataclass(frozen=True, kw_only=True)
class HelmRelease:
    """One chart at one pinned version, with its values."""

    release: str
    chart: str
    repository: str
    version: str
    namespace: str
    values: Mapping[str, Any] = field(default_factory=dict)
    create_namespace: bool = False
    purpose: str = ""

    def install(self, cluster: ClusterLike, id: str, *, wait: bool = False,
                scope: Construct | None = None) -> eks.HelmChart:
        """Install through the cluster's kubectl provider; the chart is a child of ``scope`` (@default the
        cluster)."""
        props: _ChartProps = {"chart": self.chart, "repository": self.repository, "version": self.version,
                              "namespace": self.namespace, "release": self.release, "values": dict(self.values),
                              "create_namespace": self.create_namespace or None, "wait": wait or None}
        if scope is None:
            return cluster.add_helm_chart(id, **props)
        return eks.HelmChart(scope, id, cluster=as_icluster(cluster), **props)

    def describe(self) -> dict[str, Any]:
        """The release as a GitOps tool's Helm source needs it (written to ``dist/helm/<release>.yaml``)."""
        return {"release": self.release, "chart": self.chart, "repository": self.repository, "version": self.version,
                "namespace": self.namespace, "createNamespace": self.create_namespace, "purpose": self.purpose,
                "values": dict(self.values)}

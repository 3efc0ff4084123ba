"""What KEDA reads to scale the inference workloads, so its role can be allowed exactly that.

The plan collects it from the workloads' autoscaling triggers
(:attr:`~hyperpod_inference_iac.charts.WorkloadPlan.scaling_metrics`) and
:class:`~hyperpod_inference_iac.InferenceOperator` turns it into the KEDA role's policy: CloudWatch metric
reads only when some trigger is a CloudWatch one, and Prometheus queries on the named Amazon Managed Service
for Prometheus workspaces only.
"""

from __future__ import annotations

import dataclasses
import re

# The CRD's serverAddress pattern without its empty alternative (an empty address queries nothing), with the
# region and workspace id captured.
AMP_WORKSPACE_URL = (r"^https:\/\/aps-workspaces\.(?P<region>[a-zA-Z0-9-]+)(?:\.[a-zA-Z0-9-]+)*\.amazonaws\.com"
                     r"\/workspaces\/(?P<workspace>ws-[a-zA-Z0-9-]+)$")


@dataclasses.dataclass(frozen=True, order=True)
class PrometheusWorkspace:
    """One Amazon Managed Service for Prometheus workspace, in the platform's account."""

    region: str
    workspace_id: str

    @classmethod
    def from_url(cls, url: str) -> PrometheusWorkspace | None:
        match = re.match(AMP_WORKSPACE_URL, url)
        return cls(match["region"], match["workspace"]) if match else None

    def arn(self, *, partition: str, account: str) -> str:
        return f"arn:{partition}:aps:{self.region}:{account}:workspace/{self.workspace_id}"


@dataclasses.dataclass(frozen=True)
class ScalingMetrics:
    """The metric sources of a set of autoscaling triggers. ``ScalingMetrics()``: none (no autoscaling)."""

    cloudwatch: bool = False
    prometheus_workspaces: tuple[PrometheusWorkspace, ...] = ()

    def merged(self, other: ScalingMetrics) -> ScalingMetrics:
        workspaces = tuple(sorted(set(self.prometheus_workspaces) | set(other.prometheus_workspaces)))
        return ScalingMetrics(cloudwatch=self.cloudwatch or other.cloudwatch, prometheus_workspaces=workspaces)


__all__ = ["AMP_WORKSPACE_URL", "PrometheusWorkspace", "ScalingMetrics"]

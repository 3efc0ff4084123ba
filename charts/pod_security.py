"""The inference namespace's Pod Security Admission levels, the same wherever the Namespace is made.

``enforce`` is ``privileged`` because of one exception: the node-local NVMe model cache is a
``hostPath`` volume, which the ``baseline`` level already forbids, and both the operator's
``kubernetesVolume`` workloads and the portable Deployments use it. ``warn`` and ``audit`` are
``restricted``, so every pod that falls short of the strictest level is named to whoever creates it
and in the API server's audit log: today the hostPath itself and the model servers that run as root
(docs/charts/portable-model-server-chart.md, *Pod security*), and anything new that slips in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

POD_SECURITY_LABELS: Mapping[str, str] = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}
POD_SECURITY_EXCEPTION_ANNOTATION = "hyperpod-inference-iac/pod-security-exception"
POD_SECURITY_EXCEPTION = (
    "enforce is privileged, not baseline: the node-local NVMe model cache is a hostPath volume, which baseline "
    "forbids; warn and audit report everything short of restricted"
)


def namespace_metadata(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Metadata of the inference Namespace: the Pod Security labels, then ``labels`` (which win: an
    explicit choice of the caller), and the exception named in an annotation."""
    return {
        "name": name,
        "labels": {**POD_SECURITY_LABELS, **(labels or {})},
        "annotations": {POD_SECURITY_EXCEPTION_ANNOTATION: POD_SECURITY_EXCEPTION},
    }

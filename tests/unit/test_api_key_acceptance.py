"""The two ends of the rotation's acceptance check agree (issue 28, rotation that never locks a caller out): the
metrics agent ships the sidecars' key gauges with the dimensions the rotation function queries, and the Workload
dimension is the server's name as the chart labels its pods (tests/sidecar/test_auth.py: the sidecar's fingerprint
of a key is the function's)."""

from __future__ import annotations

import json

import yaml

from hyperpod_inference_iac.observability.sidecar_metrics import (
    API_KEY_ACCEPTED,
    API_KEYS,
    METRICS_NAMESPACE,
    sidecar_metrics_manifests,
)
from hyperpod_inference_iac.serving.api_keys import SIDECAR_METRICS_NAMESPACE, RotationAcceptance
from tests.support.rotation import rotation


def _agent() -> tuple[list[dict], dict]:
    objects = sidecar_metrics_manifests(namespace="inference", cluster_name="llm", region="us-east-1",
                                        role_arn="arn:aws:iam::111122223333:role/agent", log_group_name="/g")
    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    agent = json.loads(next(m for m in maps if "cwagentconfig.json" in m["data"])["data"]["cwagentconfig.json"])
    scrape = yaml.safe_load(next(m for m in maps if "prometheus.yaml" in m["data"])["data"]["prometheus.yaml"])
    return agent["logs"]["metrics_collected"]["prometheus"]["emf_processor"]["metric_declaration"], scrape


def test_the_agent_ships_the_key_gauges_with_the_dimensions_the_rotation_queries() -> None:
    declarations, scrape = _agent()
    acceptance = rotation.Acceptance.from_json(
        RotationAcceptance(cluster_name="llm", namespace="inference", workload="qwen").environment())
    assert acceptance.namespace == SIDECAR_METRICS_NAMESPACE == METRICS_NAMESPACE
    assert rotation.KEYS_METRIC == API_KEYS and rotation.ACCEPTED_METRIC == API_KEY_ACCEPTED

    def dimensions_of(metric: str) -> list[list[str]]:
        return [d for declaration in declarations if f"^{metric}$" in declaration["metric_selectors"]
                for d in declaration["dimensions"]]

    assert dimensions_of(API_KEYS) == [sorted(acceptance.dimensions, key=list(acceptance.dimensions).index)]
    assert dimensions_of(API_KEY_ACCEPTED) == [[*acceptance.dimensions, "fingerprint"]]
    # Workload is the pod's app.kubernetes.io/name, which the portable chart sets to the server's name.
    (relabel,) = [r for r in scrape["scrape_configs"][0]["relabel_configs"] if r.get("target_label") == "Workload"]
    assert relabel["source_labels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]

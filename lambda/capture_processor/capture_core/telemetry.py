"""Structured JSON logs and CloudWatch metrics in embedded metric format (EMF).

Lambda sends stdout to CloudWatch Logs, which turns each EMF line into metrics: no API calls,
no extra permissions, nothing to batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

METRICS_NAMESPACE = "HyperPodInference/CaptureProcessor"


def log(level: str, message: str, **fields: Any) -> None:
    print(json.dumps({"level": level, "message": message, **fields}, default=str))


def emit_metrics(dimensions: Mapping[str, str], counts: Mapping[str, int]) -> None:
    if not counts:
        return
    document = {
        "_aws": {
            "Timestamp": int(time.time() * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": METRICS_NAMESPACE,
                    "Dimensions": [list(dimensions)],
                    "Metrics": [{"Name": name, "Unit": _unit(name)} for name in counts],
                }
            ],
        },
        **dimensions,
        **counts,
    }
    print(json.dumps(document))


def _unit(metric_name: str) -> str:
    return "Bytes" if metric_name.endswith("Bytes") else "Count"

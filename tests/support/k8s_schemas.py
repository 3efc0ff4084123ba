"""Judge Kubernetes objects with the schemas that will judge them on the cluster.

Operator objects: the CRD's own ``openAPIV3Schema`` (v1, chart 2.3.0), through the library's own check
(``hyperpod_inference_iac.charts.crd_schema``: unknown keys are errors instead of being pruned), so the
tests and the synth-time check cannot disagree.

Core objects: kubernetes-validate with the Kubernetes schemas in strict mode (unknown fields are errors),
for the cluster version (1.34 unless a test asks for another).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from hyperpod_inference_iac.charts.crd_schema import crd_schema, is_operator_object, schema_errors

KUBERNETES_VERSION = "1.34.0"
OPERATOR_PLURALS = {"InferenceEndpointConfig": "inferenceendpointconfigs", "JumpStartModel": "jumpstartmodels",
                    "ModelWeightsCacheConfig": "modelweightscacheconfigs"}

__all__ = ["crd_errors", "is_operator_object", "load_crd_schema", "validate_core"]


def load_crd_schema(plural: str) -> dict[str, Any]:
    kind = next(kind for kind, name in OPERATOR_PLURALS.items() if name == plural)
    return crd_schema(kind)


def crd_errors(manifest: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, path))}: {message}" for path, message, _ in schema_errors(manifest)]


def validate_core(manifest: dict[str, Any], version: str = KUBERNETES_VERSION) -> None:
    kubernetes_validate.validate(manifest, version, strict=True)

"""Judge Kubernetes objects with the schemas that will judge them on the cluster.

Operator objects: the CRD's own ``openAPIV3Schema`` (v1, chart 2.3.0) from charts/crds/, made
stricter in one way: objects that declare ``properties`` reject unknown keys. The API server
would silently prune them instead, so a misspelt field would otherwise pass here and vanish
on the cluster.

Core objects: kubernetes-validate with the Kubernetes 1.34 schemas in strict mode (unknown
fields are errors), matching the cluster version.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from hyperpod_inference_iac._package_data import package_dir

CRD_DIR = package_dir("hyperpod_inference_iac.charts", "crds")
KUBERNETES_VERSION = "1.34.0"
OPERATOR_PLURALS = {"InferenceEndpointConfig": "inferenceendpointconfigs", "JumpStartModel": "jumpstartmodels"}


def load_crd_schema(plural: str) -> dict[str, Any]:
    """``openAPIV3Schema`` of version v1 (the Helm ``{{ }}`` strings are quoted, so YAML parses)."""
    crd = yaml.safe_load((CRD_DIR / f"inference.sagemaker.aws.amazon.com_{plural}.yaml").read_text())
    (v1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]


def _closed(schema: Any) -> Any:
    """A copy where every object with declared properties forbids undeclared ones."""
    if isinstance(schema, dict):
        closed = {key: _closed(value) for key, value in schema.items()}
        declares = "properties" in schema and "additionalProperties" not in schema
        if declares and not schema.get("x-kubernetes-preserve-unknown-fields"):
            closed["additionalProperties"] = False
        return closed
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    return schema


@cache
def _crd_validator(kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_closed(load_crd_schema(OPERATOR_PLURALS[kind])))


def crd_errors(manifest: dict[str, Any]) -> list[str]:
    errors = _crd_validator(manifest["kind"]).iter_errors(manifest)
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in errors]


def validate_core(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def is_operator_object(manifest: dict[str, Any]) -> bool:
    return manifest["kind"] in OPERATOR_PLURALS

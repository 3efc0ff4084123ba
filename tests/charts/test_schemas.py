"""Every emitted object against the schema that will judge it on the cluster.

Operator objects: the CRD's own ``openAPIV3Schema`` (v1, chart 2.3.0) from charts/crds/, made
stricter in one way: objects that declare ``properties`` reject unknown keys. The API server
would silently prune them instead, so a misspelt field would otherwise pass here and vanish
on the cluster.

Core objects: kubernetes-validate with the Kubernetes 1.34 schemas in strict mode (unknown
fields are errors), matching the cluster version.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.charts.conftest import load_crd_schema

KUBERNETES_VERSION = "1.34.0"
_PLURALS = {"InferenceEndpointConfig": "inferenceendpointconfigs", "JumpStartModel": "jumpstartmodels"}


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
    return jsonschema.Draft7Validator(_closed(load_crd_schema(_PLURALS[kind])))


def _crd_errors(manifest: dict[str, Any]) -> list[str]:
    errors = _crd_validator(manifest["kind"]).iter_errors(manifest)
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in errors]


def _operator_objects(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] in _PLURALS]


def _core_objects(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] not in _PLURALS]


def test_every_operator_object_matches_its_crd(inference_manifests: list[dict[str, Any]]) -> None:
    objects = _operator_objects(inference_manifests)
    assert {m["kind"] for m in objects} == set(_PLURALS)
    for manifest in objects:
        assert _crd_errors(manifest) == [], manifest["metadata"]["name"]


def test_crd_check_rejects_a_field_the_crd_does_not_declare(inference_manifests: list[dict[str, Any]]) -> None:
    manifest = copy.deepcopy(_operator_objects(inference_manifests)[0])
    manifest["spec"]["worker"]["imagePullPolicy"] = "Always"  # a Pod field, not an IEC worker field
    assert any("imagePullPolicy" in error for error in _crd_errors(manifest))


def test_crd_check_rejects_a_value_outside_the_crd_range(inference_manifests: list[dict[str, Any]]) -> None:
    manifest = copy.deepcopy(_operator_objects(inference_manifests)[0])
    manifest["spec"]["dataCapture"]["modelPod"]["initialSamplingPercentage"] = 101
    assert _crd_errors(manifest) != []


def _validate_core(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_core_objects_of_the_inference_chart_match_kubernetes(inference_manifests: list[dict[str, Any]]) -> None:
    objects = _core_objects(inference_manifests)
    assert sorted(m["kind"] for m in objects) == ["Namespace", "ServiceAccount"]
    for manifest in objects:
        _validate_core(manifest)


@pytest.mark.parametrize("runtime", ["vllm", "tgi", "sglang"])
def test_portable_objects_match_kubernetes(portable_manifests: dict[str, list[dict[str, Any]]], runtime: str) -> None:
    kinds = set()
    for manifest in portable_manifests[runtime]:
        _validate_core(manifest)
        kinds.add(manifest["kind"])
    assert {"ServiceAccount", "Deployment", "Service"} <= kinds


def test_kubernetes_check_rejects_an_unknown_field(portable_manifests: dict[str, list[dict[str, Any]]]) -> None:
    (deployment,) = [m for m in portable_manifests["vllm"] if m["kind"] == "Deployment"]
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate_core(broken)

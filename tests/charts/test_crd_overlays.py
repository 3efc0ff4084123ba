"""The schema overlays (charts/crd_overlays/): each field carries its source, the merged schemas accept the new fields
and still refuse unknown ones, and an overlay that a vendored CRD contradicts or already covers fails here, naming
the file to delete (the one-step refresh of charts/crds/PROVENANCE.md)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hyperpod_inference_iac.charts.crd_schema import (
    VENDORED_PLURALS,
    crd_schema,
    overlays,
    schema_errors,
    validator,
    vendored_schema,
)
from hyperpod_inference_iac.foundation.operator_versions import (
    BEYOND_VENDORED_CRDS,
    INFERENCE_GATEWAY,
    UNPLACED_FIELDS,
    features_used,
)
from tests.support.synth import REPO

IGWC = {"apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1", "kind": "InferenceGatewayConfig",
        "metadata": {"name": "gateway", "namespace": "inference"},
        "spec": {"bbr": {"enabled": True},
                 "schedulers": [{"name": "qwen", "modelName": "Qwen3-8B",
                                 "modelSelector": {"matchLabels": {"app": "qwen3-8b"}}, "weights": {"prefix": 3}}]}}
# What a schema says about a field that an overlay must agree with.
_COMPARED = ("type", "enum", "pattern", "minimum", "maximum", "maxItems", "minItems", "maxLength", "format")


def _node(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    for key in path:
        schema = schema.get("properties", {}).get(key)
        if schema is None:
            return None
    return schema


def _required(schema: dict[str, Any], path: tuple[str, ...]) -> bool:
    parent = _node(schema, path[:-1])
    return parent is not None and path[-1] in parent.get("required", [])


def _contradictions(vendored: dict[str, Any], overlay: dict[str, Any], at: str) -> list[str]:
    """Where an overlay field's schema says otherwise than the vendored one (recursively through properties)."""
    found = [f"{at}: {key} {overlay.get(key)!r} here, {vendored.get(key)!r} in the CRD" for key in _COMPARED
             if key in overlay and overlay.get(key) != vendored.get(key)]
    if set(overlay.get("required", [])) != set(vendored.get("required", [])) and "properties" in overlay:
        found.append(f"{at}: required {overlay.get('required', [])} here, {vendored.get('required', [])} in the CRD")
    for key, child in overlay.get("properties", {}).items():
        if key in vendored.get("properties", {}):
            found += _contradictions(vendored["properties"][key], child, f"{at}.{key}")
    return found


def test_every_overlay_field_names_its_source() -> None:
    for overlay in overlays():
        assert overlay.source.strip(), overlay.file
        for field in overlay.fields:
            assert field.schema.get("x-source"), f"{overlay.file}: {'.'.join(field.path)}"
        if overlay.schema is not None:
            spec = overlay.schema["properties"]["spec"]["properties"]
            assert [key for key, value in spec.items() if not value.get("x-source")] == [], overlay.file


def _stale_overlays(schema_of: Any = vendored_schema) -> list[str]:
    stale = []
    for overlay in overlays():
        for kind in overlay.kinds:
            if kind not in VENDORED_PLURALS:
                continue  # a kind of its own: see test_no_overlay_kind_has_a_vendored_crd
            for field in overlay.fields:
                vendored = _node(schema_of(kind), field.path)
                if vendored is None:
                    continue
                detail = _contradictions(vendored, field.schema, ".".join(field.path))
                if _required(schema_of(kind), field.path):
                    detail.append("required in the CRD")
                stale.append(f"delete charts/crd_overlays/{overlay.file}: {kind} now has {'.'.join(field.path)}"
                             + (f" ({'; '.join(detail)})" if detail else ""))
    return stale


def test_no_vendored_crd_contradicts_or_already_has_an_overlay_field() -> None:
    """Fails once charts/crds/ carries a CRD with an overlay's field: the overlay is then stale, delete it (and its
    feature's entry in BEYOND_VENDORED_CRDS); if the CRD says otherwise than the overlay, the CRD is right."""
    assert _stale_overlays() == []


def test_a_refreshed_crd_that_contradicts_an_overlay_is_named_for_deletion() -> None:
    """The control: a vendored CRD that now has spec.inferenceGateway, with another type for its name, makes the
    check above fail and name the overlay file and the difference."""
    def refreshed(kind: str) -> dict[str, Any]:
        schema = copy.deepcopy(vendored_schema(kind))
        if kind == "InferenceEndpointConfig":
            schema["properties"]["spec"]["properties"]["inferenceGateway"] = {
                "type": "object", "properties": {"enabled": {"type": "boolean"}, "name": {"type": "integer"}}}
        return schema

    stale = _stale_overlays(refreshed)
    assert len(stale) == 1, stale
    assert stale[0].startswith("delete charts/crd_overlays/iec-jsm.inference-gateway.yaml: InferenceEndpointConfig "
                               "now has spec.inferenceGateway")
    assert "inferenceGateway.name: type 'string' here, 'integer' in the CRD" in stale[0]


def test_no_overlay_kind_has_a_vendored_crd() -> None:
    carried = {path.name for path in (REPO / "charts" / "crds").glob("*.yaml")}
    for overlay in overlays():
        if overlay.schema is not None:
            assert f"inference.sagemaker.aws.amazon.com_{overlay.plural}.yaml" not in carried, (
                f"delete charts/crd_overlays/{overlay.file}: charts/crds/ now carries the {overlay.kinds[0]} CRD")


def test_no_vendored_crd_places_a_refused_field() -> None:
    """The fields refused for want of a path (UNPLACED_FIELDS): once a vendored CRD has one, type it and drop the
    refusal (the CRD states the path now)."""
    def keys(schema: dict[str, Any], at: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        out = []
        for key, child in schema.get("properties", {}).items():
            out += [(*at, key), *keys(child, (*at, key))]
        return out
    placed = [f"{kind}: spec.{'.'.join(path)} is {field.code}'s field" for field in UNPLACED_FIELDS
              for kind in field.kinds for path in keys(vendored_schema(kind)["properties"]["spec"])
              if path[-1] == field.key and path[:len(field.within)] == field.within]
    assert placed == []


@pytest.mark.parametrize("kind", ["InferenceEndpointConfig", "JumpStartModel"])
def test_the_merged_schema_takes_the_new_fields_and_still_refuses_unknown_ones(kind: str) -> None:
    spec = crd_schema(kind)["properties"]["spec"]["properties"]
    assert {"inferenceGateway", "metricsSidecarResources", "metricsCollectorResources", "s3UploaderResources"} <= set(
        spec)
    assert ("podTemplateAnnotations" in spec["kubernetes"]["properties"]) if kind == "InferenceEndpointConfig" else (
        "kubernetes" not in spec)
    assert "tolerations" not in spec and "lmcache" not in spec  # no stated path: no overlay field
    assert "inferenceGateway" in crd_schema(kind)["properties"]["status"]["properties"]
    assert "inferenceGateway" not in vendored_schema(kind)["properties"]["spec"]["properties"]  # vendored untouched


def test_the_gateway_kind_validates_closed() -> None:
    assert list(schema_errors(IGWC)) == []
    assert validator("InferenceGatewayConfig").is_valid(IGWC)
    broken = copy.deepcopy(IGWC)
    broken["spec"]["schedulers"][0]["wieghts"] = {}
    broken["spec"]["schedulers"][0]["scheduler"] = "round-robin"
    del broken["spec"]["bbr"]
    errors = {(path, message) for path, message, _ in schema_errors(broken)}
    assert (("spec", "schedulers", 0, "wieghts"), "is not a field of this object in the CRD") in errors
    assert any(path == ("spec", "schedulers", 0, "scheduler") for path, _ in errors)
    assert any("'bbr' is a required property" in message for _, message in errors)


def test_weights_and_a_config_map_exclude_each_other() -> None:
    both = copy.deepcopy(IGWC)
    both["spec"]["schedulers"][0]["configMapRef"] = {"name": "plugins"}
    assert list(schema_errors(both)) != []


def test_the_gateway_kind_and_the_opt_in_need_the_gateway_build() -> None:
    assert [feature for feature, _ in features_used("InferenceGatewayConfig", IGWC["spec"])] == [INFERENCE_GATEWAY]
    assert [f for f, _ in features_used("JumpStartModel", {"inferenceGateway": {"enabled": True}})] == [
        INFERENCE_GATEWAY]
    assert INFERENCE_GATEWAY.minimum == "v2.0.0-eksbuild.2"
    assert INFERENCE_GATEWAY in BEYOND_VENDORED_CRDS

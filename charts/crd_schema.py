"""The operator CRDs' own ``openAPIV3Schema``, as the API server would apply it, checked at synth time.

The typed dataclasses cover the fields platform teams use most; ``extraSpec`` and JSON patches reach
every other field. Each emitted custom resource is therefore also checked against the CRD schema that
ships in this package (``crds/``, see ``crds/PROVENANCE.md``), made stricter in one way: objects that
declare ``properties`` reject keys they do not declare. The API server would silently prune those, so
a misspelt field would otherwise vanish on the cluster.

Operators newer than the vendored CRDs (chart 2.3.0) added fields and a kind whose CRD text is not available.
``crd_overlays/`` holds schema overlays written from the developer guide and the release notes, each field with
its source (``x-source``): a ``fields`` overlay adds fields at stated paths to a vendored kind, a ``kind`` overlay
is the whole schema of a kind no vendored CRD describes (``InferenceGatewayConfig``). :func:`crd_schema` is the
vendored schema with its overlays merged; a field the vendored CRD already has is never replaced (the overlay is
then stale, and ``tests/charts/test_crd_overlays.py`` says to delete it). Fields whose path no source states are
in no overlay: ``operator_versions.UNPLACED_FIELDS`` refuses them by name.

Entry points: :func:`validator` (a closed ``jsonschema`` validator of one kind), :func:`schema_errors` (every
violation of one manifest, for any kind here), :func:`crd_schema` (the merged schema).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema
import yaml

from hyperpod_inference_iac.foundation._package_data import package_dir

GROUP = "inference.sagemaker.aws.amazon.com"
# The kinds the vendored CRDs describe (charts/crds/), and the kinds only an overlay describes.
VENDORED_PLURALS = {"InferenceEndpointConfig": "inferenceendpointconfigs", "JumpStartModel": "jumpstartmodels",
                    "ModelWeightsCacheConfig": "modelweightscacheconfigs"}
PLURALS = {**VENDORED_PLURALS, "InferenceGatewayConfig": "inferencegatewayconfigs"}
SCHEMA_VERSION = "v1"
SCHEMA_VERSIONS = {kind: SCHEMA_VERSION for kind in VENDORED_PLURALS} | {"InferenceGatewayConfig": "v1alpha1"}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster on the 460 KB file


@dataclasses.dataclass(frozen=True)
class OverlayField:
    """One field an overlay adds: its dotted path from the object root (``spec.inferenceGateway``) and schema."""

    path: tuple[str, ...]
    schema: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Overlay:
    """One file of ``crd_overlays/``: fields added to vendored kinds, or a kind of its own (``schema``)."""

    file: str
    kinds: tuple[str, ...]
    version: str
    source: str
    fields: tuple[OverlayField, ...] = ()
    schema: dict[str, Any] | None = None
    plural: str | None = None


@cache
def overlays() -> tuple[Overlay, ...]:
    """Every overlay shipped in ``crd_overlays/``, by file name."""
    found = []
    for path in sorted(package_dir("hyperpod_inference_iac.charts", "crd_overlays").glob("*.yaml")):
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
        if data["overlay"] == "kind":
            found.append(Overlay(path.name, (data["kind"],), data["version"], data["x-source"],
                                 schema=data["openAPIV3Schema"], plural=data["plural"]))
        else:
            fields = tuple(OverlayField(tuple(item["path"].split(".")), item["schema"]) for item in data["fields"])
            found.append(Overlay(path.name, tuple(data["kinds"]), data["version"], data["x-source"], fields))
    return tuple(found)


@cache
def vendored_schema(kind: str) -> dict[str, Any]:
    """``openAPIV3Schema`` of version v1 of a vendored CRD, as carried (the Helm ``{{ }}`` strings are quoted, so
    the YAML parses)."""
    path = package_dir("hyperpod_inference_iac.charts", "crds") / f"{GROUP}_{VENDORED_PLURALS[kind]}.yaml"
    crd = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == SCHEMA_VERSION]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _parent(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """The object schema that holds ``path[-1]`` (None when a step on the way is not a declared object)."""
    node = schema
    for key in path[:-1]:
        child = node.get("properties", {}).get(key)
        if not isinstance(child, dict):
            return None
        node = child
    return node


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    """The schema a manifest of ``kind`` is judged by: the vendored CRD's with every overlay field of that kind added
    where the CRD lacks it, or the kind overlay's own schema. (Shared: do not change the returned mapping.)"""
    own = [overlay for overlay in overlays() if overlay.schema is not None and kind in overlay.kinds]
    if own:
        return own[0].schema  # type: ignore[return-value]
    merged = copy.deepcopy(vendored_schema(kind))
    for overlay in overlays():
        if kind not in overlay.kinds or overlay.version != SCHEMA_VERSIONS[kind]:
            continue
        for field in overlay.fields:
            parent = _parent(merged, field.path)
            if parent is None:
                raise ValueError(f"crd_overlays/{overlay.file}: {'.'.join(field.path)} has no parent object in the "
                                 f"{kind} CRD")
            # The vendored CRD wins: an overlay field it already has is stale (the overlay test names it).
            parent.setdefault("properties", {}).setdefault(field.path[-1], copy.deepcopy(field.schema))
    return merged


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
def validator(kind: str) -> jsonschema.Draft7Validator:
    """A validator of one kind (``InferenceEndpointConfig``, ``JumpStartModel``, ``ModelWeightsCacheConfig``,
    ``InferenceGatewayConfig``) by its merged schema, closed: a key the schema does not declare is an error."""
    return jsonschema.Draft7Validator(_closed(crd_schema(kind)))


_validator = validator  # (the name of 0.3.0)


def schema_errors(manifest: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """Each violation as (path in the manifest, message, the offending value). A key the schema does not
    declare is reported at that key (not at the object holding it), so the path names the typo."""
    for error in validator(manifest["kind"]).iter_errors(manifest):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            declared = set(error.schema.get("properties", {}))
            for key in sorted(set(error.instance) - declared):
                yield (*path, key), "is not a field of this object in the CRD", error.instance[key]
            continue
        yield path, error.message, error.instance


def is_operator_object(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") in PLURALS and str(manifest.get("apiVersion", "")).startswith(GROUP)


__all__ = ["GROUP", "PLURALS", "Overlay", "OverlayField", "crd_schema", "is_operator_object", "overlays",
           "schema_errors", "validator", "vendored_schema"]

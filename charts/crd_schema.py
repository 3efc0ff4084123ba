"""The operator CRDs' own ``openAPIV3Schema``, as the API server would apply it, checked at synth time.

The typed dataclasses cover the fields platform teams use most; ``extraSpec`` and JSON patches reach
every other field. Each emitted custom resource is therefore also checked against the CRD schema that
ships in this package (``crds/``, see ``crds/SOURCES.md``), made stricter in one way: objects that
declare ``properties`` reject keys they do not declare. The API server would silently prune those, so
a misspelt field would otherwise vanish on the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema
import yaml

from hyperpod_inference_iac._package_data import package_dir

GROUP = "inference.sagemaker.aws.amazon.com"
PLURALS = {"InferenceEndpointConfig": "inferenceendpointconfigs", "JumpStartModel": "jumpstartmodels",
           "ModelWeightsCacheConfig": "modelweightscacheconfigs"}
SCHEMA_VERSION = "v1"


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    """``openAPIV3Schema`` of version v1 (the Helm ``{{ }}`` strings are quoted, so the YAML parses)."""
    path = package_dir("hyperpod_inference_iac.charts", "crds") / f"{GROUP}_{PLURALS[kind]}.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster on the 460 KB file
    crd = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == SCHEMA_VERSION]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


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
def _validator(kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_closed(crd_schema(kind)))


def schema_errors(manifest: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """Each violation as (path in the manifest, message, the offending value). A key the schema does not
    declare is reported at that key (not at the object holding it), so the path names the typo."""
    for error in _validator(manifest["kind"]).iter_errors(manifest):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            declared = set(error.schema.get("properties", {}))
            for key in sorted(set(error.instance) - declared):
                yield (*path, key), "is not a field of this object in the CRD", error.instance[key]
            continue
        yield path, error.message, error.instance


def is_operator_object(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") in PLURALS and str(manifest.get("apiVersion", "")).startswith(GROUP)

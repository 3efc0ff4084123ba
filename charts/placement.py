"""Placement helpers: ``nodeAffinity`` for "these instance types, in this order of preference".

The operator's own ``instanceTypes`` field does exactly this ("in order of preference ... selecting the first
available type", its fallback when the preferred type lacks capacity) but is exclusive with ``nodeAffinity``.
:func:`preferred_instance_types` builds the same placement as a core/v1 NodeAffinity, so it can be combined
with other node rules in one affinity (exclude spot capacity, prefer a zone) where ``instanceTypes`` cannot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hyperpod_inference_iac.charts.endpoint_blocks import INSTANCE_TYPE_PATTERN
from hyperpod_inference_iac.foundation.patterns import SAGEMAKER_INSTANCE_TYPE
from hyperpod_inference_iac.foundation.validation import Problems, is_unresolved, join_path

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"  # HyperPod nodes carry the ml.* type here
TOP_WEIGHT = 100  # the largest weight a preferred scheduling term may have


def check_instance_type_preference(instance_types: Sequence[str], path: str, problems: Problems) -> None:
    """Every rule of :func:`preferred_instance_types`'s list."""
    if not instance_types:
        problems.add("NodeAffinity.NoInstanceTypes", path, "needs at least one instance type")
    if len(instance_types) > TOP_WEIGHT:
        problems.add("NodeAffinity.NoInstanceTypes", path, f"takes at most {TOP_WEIGHT} instance types (one weight "
                     "each, 100 down to 1)", len(instance_types))
    seen: set[str] = set()
    for index, instance_type in enumerate(instance_types):
        if is_unresolved(instance_type):
            continue
        if not SAGEMAKER_INSTANCE_TYPE.match(instance_type):
            problems.add("NodeAffinity.InstanceTypeInvalid", join_path(path, index),
                         f"must be a SageMaker instance type such as ml.g5.12xlarge ({INSTANCE_TYPE_PATTERN})",
                         instance_type)
        if instance_type in seen:
            problems.add("NodeAffinity.DuplicateInstanceType", join_path(path, index),
                         "is listed twice; each type has one place in the order", instance_type)
        seen.add(instance_type)


def preferred_instance_types(instance_types: Sequence[str], *,
                             extra_required: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A NodeAffinity that allows only ``instance_types`` and prefers them in the order given (weights 100, 99,
    ...). ``extra_required`` adds node selector requirements every node must meet as well (for example
    ``{"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]}``). Raises one
    :class:`~hyperpod_inference_iac.foundation.validation.ConfigError` listing every problem of the list."""
    problems = Problems()
    check_instance_type_preference(instance_types, "instance_types", problems)
    problems.raise_if_any("preferred_instance_types")
    allowed = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(instance_types)}
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [allowed, *(dict(r) for r in extra_required)]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": TOP_WEIGHT - rank,
             "preference": {"matchExpressions": [{"key": INSTANCE_TYPE_LABEL, "operator": "In",
                                                  "values": [instance_type]}]}}
            for rank, instance_type in enumerate(instance_types)],
    }


__all__ = ["INSTANCE_TYPE_LABEL", "check_instance_type_preference", "preferred_instance_types"]

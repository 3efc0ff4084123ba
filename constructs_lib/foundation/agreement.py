"""Parts a consumer wires separately agree, or one error names both (issue 26, 6).

A platform is assembled from constructs that each take their own copy of a shared fact: the capture prefix is
``PlatformContext.capture`` (where the workloads write), ``InferenceOperator.capture_prefix`` (where the operator's
role may write) and ``CapturePipeline.capture_prefixes`` (what gets processed); a cluster's node group names and
instance types are the node groups' own, while the plan's models name instance types; whether the operator runs the
Inference Gateway is the operator's, while the plan names gateways. Each construct checks its own properties; this
module checks them against each other's.

How: each of those constructs, once its own properties are good, records a :class:`Part` (the facts it holds, by
property) on its app, and checks it against every part already recorded there. So whichever of two parts is created
second reports a disagreement, at construction like every other problem, as one
:class:`~hyperpod_inference_iac.foundation.validation.ConfigError` naming both properties and both constructs, e.g.::

    [InferenceWorkloads.CapturePrefixNotOperators] PlatformContext.capture.prefix: must be
    InferenceOperator.capture_prefix ('data-capture/', InferenceOperator Cluster/Operator) or a prefix inside it: ...

Parts are compared only when they share what makes them comparable: the same EKS cluster (the object, or the same
name), the same capture bucket (the object, or the same name). A rule of a union ("a model's instance type is some
HyperPod group's") compares with the parts created before: create the cluster's node groups before the workloads
(the workloads depend on them anyway); the plan's own ``PlatformContext.node_groups`` are checked by the plan.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from constructs import Construct, IConstruct

from hyperpod_inference_iac.foundation.validation import Problems, is_unresolved

__all__ = ["GatewayPart", "HyperPodPart", "NodeGroupPart", "OperatorPart", "Part", "PipelinePart", "WorkloadsPart",
           "agree"]


@dataclass(frozen=True, kw_only=True)
class Part:
    """What one construct holds that another must agree with. ``construct``: its name and node path, as problems
    name it (``InferenceOperator Cluster/Operator``)."""

    construct: str


@dataclass(frozen=True, kw_only=True)
class OperatorPart(Part):
    """:class:`~hyperpod_inference_iac.InferenceOperator`: its cluster, where its role may write captures, and
    whether it runs the Inference Gateway."""

    cluster: Any
    capture_bucket: Any
    capture_prefix: str
    inference_gateway: bool


@dataclass(frozen=True, kw_only=True)
class PipelinePart(Part):
    """:class:`~hyperpod_inference_iac.CapturePipeline`: the bucket and prefixes it processes."""

    capture_bucket: Any
    capture_prefixes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class GatewayPart:
    """A gateway of a plan: its name and the path the plan names it by."""

    name: str
    path: str


@dataclass(frozen=True, kw_only=True)
class WorkloadsPart(Part):
    """:class:`~hyperpod_inference_iac.InferenceWorkloads`: its cluster, where its plan's workloads write captures
    (``capture_bucket``: the plan's literal bucket name, or the bucket object the platform's stands for), the
    instance types of its models (key path, type), and its gateways. ``capture_path``: how problems name the plan's
    capture prefix."""

    cluster: Any
    capture_bucket: Any
    capture_prefix: str | None
    capture_path: str
    instance_types: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # (model, ((key path, type), ...))
    gateways: tuple[GatewayPart, ...]
    node_groups_known: bool  # the plan's context lists its node groups (the plan checked the types against them)


@dataclass(frozen=True, kw_only=True)
class NodeGroupPart(Part):
    """:class:`~hyperpod_inference_iac.GpuNodeGroup`: its cluster and its name."""

    cluster: Any
    name: str


@dataclass(frozen=True, kw_only=True)
class HyperPodPart(Part):
    """:class:`~hyperpod_inference_iac.HyperPodCluster`: its EKS cluster and its instance groups (name, type)."""

    cluster: Any
    instance_groups: tuple[tuple[str, str], ...]


_PARTS: weakref.WeakKeyDictionary[IConstruct, list[Part]] = weakref.WeakKeyDictionary()


def agree(scope: Construct, part: Part) -> None:
    """Check ``part`` against every part recorded in ``scope``'s app, then record it: raises one
    :class:`~hyperpod_inference_iac.foundation.validation.ConfigError` with every disagreement, under
    ``part.construct``."""
    earlier = _PARTS.setdefault(scope.node.root, [])
    problems = Problems()
    parts = (*earlier, part)
    for other in earlier:
        _compare(part, other, problems, parts)
        _compare(other, part, problems, parts)
    _check_union(part, earlier, problems)
    problems.raise_if_any(part.construct)
    earlier.append(part)


def _same(a: Any, b: Any, attribute: str) -> bool:
    """Two clusters or buckets are one when they are the same object or have the same name (a token of the same
    object is the same string); a bucket may also be given by its name."""
    if a is None or b is None:
        return False
    if a is b:
        return True
    name_a = a if isinstance(a, str) else getattr(a, attribute, None)
    name_b = b if isinstance(b, str) else getattr(b, attribute, None)
    return isinstance(name_a, str) and name_a == name_b


def _known(*values: str | None) -> bool:
    return all(value is not None and not is_unresolved(value) for value in values)


def _within(prefix: str, prefixes: Sequence[str]) -> bool:
    return any(prefix.startswith(outer) for outer in prefixes)


def _compare(part: Part, other: Part, problems: Problems, parts: Sequence[Part]) -> None:
    """The rules of one ordered pair (each rule is stated for one order; both orders are tried). ``parts``: every
    part known, so a mistake two rules would see is reported by one."""
    if isinstance(part, WorkloadsPart) and isinstance(other, OperatorPart) \
            and _same(part.cluster, other.cluster, "cluster_name"):
        _workloads_and_operator(part, other, problems)
    elif isinstance(part, WorkloadsPart) and isinstance(other, PipelinePart) and not any(
            isinstance(operator, OperatorPart) and _same(part.cluster, operator.cluster, "cluster_name")
            for operator in parts):  # (with an operator, the plan is compared with it, and it with the pipeline)
        _workloads_and_pipeline(part, other, problems)
    elif isinstance(part, OperatorPart) and isinstance(other, PipelinePart) \
            and _same(part.capture_bucket, other.capture_bucket, "bucket_name") \
            and _known(part.capture_prefix, *other.capture_prefixes) \
            and not _within(part.capture_prefix, other.capture_prefixes):
        problems.add("CapturePipeline.OperatorPrefixNotProcessed", "InferenceOperator.capture_prefix",
                     f"must be inside one of CapturePipeline.capture_prefixes ({', '.join(other.capture_prefixes)}; "
                     f"{other.construct}), the same bucket's: what the operator captures ({part.construct}) would "
                     "never be processed; give both the same prefix", part.capture_prefix)
    elif isinstance(part, NodeGroupPart) and isinstance(other, NodeGroupPart) and part is not other \
            and _same(part.cluster, other.cluster, "cluster_name") and _known(part.name, other.name) \
            and part.name == other.name:
        problems.add("GpuNodeGroup.DuplicateName", "GpuNodeGroup.name",
                     f"must be unique in the cluster: {other.construct} is named {other.name!r} too (EKS refuses a "
                     "second node group of one name, and the nodegroup label would select both)", part.name)


def _workloads_and_operator(part: WorkloadsPart, operator: OperatorPart, problems: Problems) -> None:
    if part.capture_prefix is not None and _same(part.capture_bucket, operator.capture_bucket, "bucket_name") \
            and _known(part.capture_prefix, operator.capture_prefix) \
            and not part.capture_prefix.startswith(operator.capture_prefix):
        problems.add("InferenceWorkloads.CapturePrefixNotOperators", part.capture_path,
                     f"must be InferenceOperator.capture_prefix ({operator.capture_prefix!r}, {operator.construct}) "
                     "or a prefix inside it: the operator's role may write captures only there, so every capture "
                     "would be denied; give both the same prefix", part.capture_prefix)
    if part.gateways and not operator.inference_gateway:
        names = ", ".join(gateway.name for gateway in part.gateways)
        problems.add("InferenceWorkloads.GatewayNotRunByOperator", part.gateways[0].path,
                     f"the plan's gateways ({names}) need InferenceOperator.inference_gateway=True "
                     f"({operator.construct} has False): without the gateway's controller nothing serves them; "
                     "turn it on, or remove the gateways")


def _workloads_and_pipeline(part: WorkloadsPart, pipeline: PipelinePart, problems: Problems) -> None:
    if part.capture_prefix is None or not _same(part.capture_bucket, pipeline.capture_bucket, "bucket_name") \
            or not _known(part.capture_prefix, *pipeline.capture_prefixes) \
            or _within(part.capture_prefix, pipeline.capture_prefixes):
        return
    problems.add("CapturePipeline.PlanPrefixNotProcessed", part.capture_path,
                 f"must be inside one of CapturePipeline.capture_prefixes ({', '.join(pipeline.capture_prefixes)}; "
                 f"{pipeline.construct}), the same bucket's: what the workloads capture ({part.construct}) would "
                 "never be processed; give both the same prefix", part.capture_prefix)


def _check_union(part: Part, earlier: Sequence[Part], problems: Problems) -> None:
    """A model's instance type must be one of the HyperPod groups' of its cluster, when the cluster's groups are
    known (a HyperPodCluster on the same EKS cluster created before the workloads) and the plan did not check them
    itself (``PlatformContext.node_groups``). GpuNodeGroups do not count: the operator's models name SageMaker
    types (``ml.…``), which the nodes of an EKS node group are never labelled with."""
    if not isinstance(part, WorkloadsPart) or part.node_groups_known:
        return
    groups = [group for other in earlier if isinstance(other, HyperPodPart)
              and _same(part.cluster, other.cluster, "cluster_name") for group in other.instance_groups]
    if not groups:
        return
    types = {instance_type for _, instance_type in groups}
    owners = "; ".join(other.construct for other in earlier if isinstance(other, HyperPodPart)
                       and _same(part.cluster, other.cluster, "cluster_name"))
    for _model, model_types in part.instance_types:
        known = [(path, instance_type) for path, instance_type in model_types if _known(instance_type)]
        if known and not any(instance_type in types for _, instance_type in known):
            path, instance_type = known[0]
            listed = ", ".join(f"{name}: {kind}" for name, kind in groups)
            problems.add("InferenceWorkloads.InstanceTypeNotInCluster", path,
                         f"must be the instance type of one of HyperPodCluster.instance_groups ({listed}; {owners}): "
                         "no node of this type joins the cluster, so its pods would stay Pending; add an instance "
                         "group of this type or use one of theirs", instance_type)


def recorded(scope: Construct) -> tuple[Part, ...]:
    """The parts recorded in ``scope``'s app (for tests and tools)."""
    return tuple(_PARTS.get(scope.node.root, ()))

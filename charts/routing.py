"""``spec.kvCacheSpec`` and ``spec.intelligentRoutingSpec`` (both kinds): KV-cache tiers and the router.

KV cache: L1 in CPU memory (on by default), L2 shared through Redis or HyperPod's managed tiered storage.
Intelligent routing sends a request to the replica most likely to hold its KV cache, by one of four
strategies. The CRD says of it: "not supported for existing deployments. Adding this configuration to an
existing deployment will be rejected", and of ``enabled``: "Once set, the enabled field cannot be modified".
:func:`routing_replacement_reasons` finds such a change between two renderings of the same workload, so the
app warns before it reaches the cluster (the change needs the custom resource deleted and created again).
Source: the CRD (chart 2.3.0) and "KV caching and intelligent routing"
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-model-deployment-caching-routing.html).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.charts.autoscaling import AutoScalingSpec
from hyperpod_inference_iac.foundation.validation import Problems, is_unresolved, join_path

REDIS_URL_PATTERN = r"^rediss?://[^\s/]+"


class L2CacheBackend(enum.StrEnum):
    REDIS = "redis"
    TIERED_STORAGE = "tieredstorage"


class RoutingStrategy(enum.StrEnum):
    PREFIX_AWARE = "prefixaware"
    KV_AWARE = "kvaware"
    SESSION = "session"
    ROUND_ROBIN = "roundrobin"


@dataclasses.dataclass(frozen=True, kw_only=True)
class L2CacheSpec(SpecBlock):
    l2_cache_backend: L2CacheBackend = crd_field(code="KvCache.BackendInvalid", allowed=L2CacheBackend)
    l2_cache_local_url: str | None = crd_field(
        default=None, code="KvCache.RedisUrlInvalid", pattern=REDIS_URL_PATTERN, hint="redis://host:port")

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.l2_cache_backend == L2CacheBackend.REDIS and self.l2_cache_local_url is None:
            problems.add("KvCache.RedisUrlMissing", join_path(path, "l2CacheLocalUrl"),
                         "is required with the redis backend: the URL of the Redis the replicas share")


@dataclasses.dataclass(frozen=True, kw_only=True)
class KvCacheSpec(SpecBlock):
    """``None`` keeps the CRD defaults: L1 on, L2 off. L2 data is not encrypted at rest and the tiered storage is
    shared by every deployment of the cluster (the operator's documentation): mind what prompts it holds."""

    enable_l1_cache: bool | None = None
    enable_l2_cache: bool | None = None
    l2_cache_spec: L2CacheSpec | None = None
    cache_config_file: str | None = None

    def check_rules(self, path: str, problems: Problems) -> None:
        if self.enable_l2_cache and self.l2_cache_spec is None:
            problems.add("KvCache.L2BackendMissing", join_path(path, "l2CacheSpec"),
                         "is required with enableL2Cache: name the backend (redis or tieredstorage)")
        if self.l2_cache_spec is not None and not self.enable_l2_cache:
            problems.add("KvCache.L2BackendMissing", join_path(path, "enableL2Cache"),
                         "must be true when l2CacheSpec is given (the CRD default is false, so the spec is ignored)",
                         self.enable_l2_cache)


@dataclasses.dataclass(frozen=True, kw_only=True)
class IntelligentRoutingSpec(SpecBlock):
    """Set once, at creation: adding, removing or changing it later needs the deployment created again."""

    enabled: bool = True
    routing_strategy: RoutingStrategy | None = crd_field(
        default=None, code="IntelligentRouting.StrategyInvalid", allowed=RoutingStrategy)
    auto_scaling_spec: AutoScalingSpec | None = None


def routing_replacement_reasons(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """Why the change from the ``spec`` ``before`` to ``after`` cannot be applied in place (empty: it can)."""
    old, new = before.get("intelligentRoutingSpec"), after.get("intelligentRoutingSpec")
    if old == new or is_unresolved(str(old)) or is_unresolved(str(new)):
        return ()
    if old is None:
        return ("intelligentRoutingSpec is added to an existing deployment, which the operator rejects",)
    if new is None:
        return ("intelligentRoutingSpec is removed from an existing deployment (its enabled field cannot be "
                "modified once set)",)
    reasons = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key) and key != "autoScalingSpec":
            reasons.append(f"intelligentRoutingSpec.{key} changes from {old.get(key)!r} to {new.get(key)!r}")
    return tuple(reasons)


__all__ = [
    "IntelligentRoutingSpec",
    "KvCacheSpec",
    "L2CacheBackend",
    "L2CacheSpec",
    "RoutingStrategy",
    "routing_replacement_reasons",
]

"""Budgets and rate limits per caller of a portable server (``portable[i].usageLimits``), enforced by its capture
sidecar (docs/usage-and-budgets.md).

YAML::

    usageLimits:
      storeUrl: rediss://budgets-abc123.serverless.use1.cache.amazonaws.com:6379   # shared by every replica
      storeFailure: open          # the store unreachable: open (admit, counted) or closed (503)
      usageRecords: all           # a record of every metered exchange (its usage only when not sampled)
      callers:
        - {callerId: team-a, tokensPerMinute: 200000, tokensPerDay: 20000000}
        - {callerId: "*", tokensPerMonth: 100000000, concurrentRequestsPerReplica: 8}
      alertPercents: [80, 100]    # a caller's day or month budget handed out: reported once per level and window

The caller id is the one the sidecar records (``callerId``: the API key's caller id); ``*`` gives every caller not
named a budget of its own of that size. Tokens are input + output. Each limit is checked here, with its key path;
the sidecar checks the rendered ``CALLER_LIMITS`` again at start.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re

from hyperpod_inference_iac.charts._spec_fields import SpecBlock, crd_field
from hyperpod_inference_iac.foundation.validation import Problems, join_path

# The sidecar's own bound (capture_sidecar.settings.MAX_LIMIT_VALUE).
MAX_LIMIT = 10**15
CALLER_ID_PATTERN = r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$"
# TLS only (ElastiCache Serverless requires it); the port of ElastiCache's primary endpoint by default.
STORE_URL_PATTERN = r"^rediss://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[0-9]{1,2})?$"
DEFAULT_STORE_PORT = 6379
LIMIT_KEYS = ("tokensPerMinute", "tokensPerDay", "tokensPerMonth", "concurrentRequestsPerReplica")
# Budget alerts: the sidecar's BUDGET_ALERT_PERCENTS (its DEFAULT_ALERT_PERCENTS, MAX_ALERT_PERCENTS).
DEFAULT_ALERT_PERCENTS = (80, 100)
MAX_ALERT_PERCENTS = 5


class StoreFailure(enum.StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class UsageRecords(enum.StrEnum):
    SAMPLED = "sampled"
    ALL = "all"


def _limit(code: str = "UsageLimits.LimitOutOfRange") -> object:
    return crd_field(default=None, code=code, minimum=1, maximum=MAX_LIMIT)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CallerLimit(SpecBlock):
    """One caller's limits; at least one is set."""

    caller_id: str = crd_field(code="UsageLimits.CallerIdInvalid", pattern=CALLER_ID_PATTERN,
                               hint="a caller id like team-a (letters, digits, . _ -), or *")
    tokens_per_minute: int | None = _limit()  # type: ignore[assignment]
    tokens_per_day: int | None = _limit()  # type: ignore[assignment]
    tokens_per_month: int | None = _limit()  # type: ignore[assignment]
    concurrent_requests_per_replica: int | None = _limit()  # type: ignore[assignment]

    def limits(self) -> dict[str, int]:
        values = (self.tokens_per_minute, self.tokens_per_day, self.tokens_per_month,
                  self.concurrent_requests_per_replica)
        return {key: value for key, value in zip(LIMIT_KEYS, values, strict=True) if value is not None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class UsageLimits(SpecBlock):
    """Per-caller limits of one portable server, and the store its replicas share them through."""

    callers: tuple[CallerLimit, ...] = ()
    store_url: str | None = crd_field(
        default=None, code="UsageLimits.StoreUrlInvalid", pattern=STORE_URL_PATTERN,
        hint="rediss://<ElastiCache endpoint>:6379 (TLS)")
    store_failure: StoreFailure = crd_field(
        default=StoreFailure.OPEN, code="UsageLimits.StoreFailureInvalid", allowed=StoreFailure)
    usage_records: UsageRecords = crd_field(
        default=UsageRecords.SAMPLED, code="UsageLimits.UsageRecordsInvalid", allowed=UsageRecords)
    alert_percents: tuple[int, ...] = crd_field(
        default=DEFAULT_ALERT_PERCENTS, code="UsageLimits.AlertPercentsInvalid", max_items=MAX_ALERT_PERCENTS,
        hint="whole percents of a day or month budget, e.g. [80, 100]; [] for none")

    def check_rules(self, path: str, problems: Problems) -> None:
        seen: set[str] = set()
        for index, caller in enumerate(self.callers):
            at = join_path(join_path(path, "callers"), index)
            if not caller.limits():
                problems.add("UsageLimits.NoLimit", at, f"set at least one of {', '.join(LIMIT_KEYS)}",
                             caller.caller_id)
            if caller.caller_id in seen:
                problems.add("UsageLimits.DuplicateCaller", join_path(at, "callerId"),
                             "each caller is listed once", caller.caller_id)
            seen.add(caller.caller_id)
        percents_at = join_path(path, "alertPercents")
        for index, percent in enumerate(self.alert_percents):
            if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 100:
                problems.add("UsageLimits.AlertPercentsInvalid", join_path(percents_at, index),
                             "must be a whole percent from 1 to 100", percent)
            elif self.alert_percents.index(percent) != index:
                problems.add("UsageLimits.AlertPercentsInvalid", join_path(percents_at, index),
                             "each percent is listed once", percent)

    @property
    def needs_store(self) -> bool:
        """Whether these limits hold token budgets, which the replicas share through a store (concurrency limits are
        per replica)."""
        return any(caller.limits().keys() - {"concurrentRequestsPerReplica"} for caller in self.callers)

    def uses_platform_store(self, store: UsageStoreRef | None) -> UsageStoreRef | None:
        """The platform's store (``PlatformContext.usage_store``) when these limits share it: token budgets and no
        ``storeUrl`` of their own (a portable server's sidecar and a gateway entry alike)."""
        return store if self.needs_store and self.store_url is None else None

    def check_store(self, path: str, problems: Problems, *, platform_store: bool) -> None:
        """``UsageLimits.NoStore``: token budgets without a store, neither ``storeUrl`` nor the platform's
        (``platform_store``: the plan's context names one, :class:`UsageStoreRef`)."""
        if self.needs_store and self.store_url is None and not platform_store:
            problems.add("UsageLimits.NoStore", join_path(path, "storeUrl"),
                         "token budgets need the store the replicas share (an ElastiCache for Valkey endpoint, "
                         "rediss://..., or the platform's: PlatformContext.usage_store, which the app creates): "
                         "without it each replica would grant the whole budget")

    @property
    def store_port(self) -> int:
        match = re.match(r"^rediss://[^:/]+:(\d+)", self.store_url or "")
        return int(match.group(1)) if match else DEFAULT_STORE_PORT


@dataclasses.dataclass(frozen=True)
class UsageStoreRef:
    """The platform's budget store as a workload plan names it (``PlatformContext.usage_store``): the serverless
    cache and the ElastiCache user the sidecars authenticate as with an IAM token (both names known before deploy),
    and its port; its address is a deploy-time value (``PlatformValue.USAGE_STORE_ENDPOINT``).
    :class:`~hyperpod_inference_iac.UsageStore` creates it (its ``ref``)."""

    cache_name: str
    user_id: str
    port: int = DEFAULT_STORE_PORT

    @classmethod
    def of_cache(cls, cache_name: str) -> UsageStoreRef:
        """The store of the cache ``cache_name`` as ``UsageStore`` names its parts (its user ``<cache>-sidecar``)."""
        return cls(cache_name=cache_name, user_id=f"{cache_name}-sidecar"[:40])

    def environment(self, endpoint: str) -> dict[str, str]:
        """The sidecar's settings to reach it: TLS (``rediss://``, verified), IAM authentication as ``user_id``."""
        return {"LIMITS_STORE_URL": f"rediss://{endpoint}:{self.port}", "LIMITS_STORE_IAM_USER": self.user_id,
                "LIMITS_STORE_IAM_CACHE": self.cache_name}


def usage_limits_environment(limits: UsageLimits, *, key_prefix: str,
                             store: tuple[UsageStoreRef, str] | None = None) -> dict[str, str]:
    """The sidecar's settings for these limits (its CALLER_LIMITS and the store's). ``store``: the platform's store
    and its address, for limits without a ``store_url`` of their own."""
    env = {"USAGE_RECORDS": str(limits.usage_records)}
    if limits.callers:
        document = {caller.caller_id: caller.limits() for caller in limits.callers}
        env["CALLER_LIMITS"] = json.dumps(document, separators=(",", ":"), sort_keys=True)
        env["LIMITS_STORE_FAILURE"] = str(limits.store_failure)
        env["LIMITS_KEY_PREFIX"] = key_prefix
        env["BUDGET_ALERT_PERCENTS"] = ",".join(str(percent) for percent in sorted(limits.alert_percents))
    if limits.store_url is not None:
        env["LIMITS_STORE_URL"] = limits.store_url
    elif store is not None:
        ref, endpoint = store
        env.update(ref.environment(endpoint))
    return env

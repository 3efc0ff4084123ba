"""Budgets and rate limits per caller, shared by every replica through one store (docs/usage-and-budgets.md).

Model: each limit is a number of tokens (input + output) per window: a minute, a UTC day, a UTC month. A request
reserves an estimate of its tokens (stream_usage.estimate_tokens) from every limit of its caller before it is
forwarded, and settles the exact count when it ends (the difference goes back, or is taken).

Across replicas: the store (Valkey/Redis) holds, per caller, limit and window, the tokens handed out so far. A
replica never asks the store per request: it takes a *lease*, a slice of the remaining budget, with one atomic
script call (never more than the limit in total), serves requests from it locally, and takes the next slice in the
background when the lease runs low. A request waits on the store only when its caller's lease cannot cover it (the
first request of a window, or a burst larger than a slice), for at most ``store_timeout``; the store unreachable
then means the configured choice: fail open (admit, counted) or fail closed (503). Concurrency limits are per
replica (in memory).

Over-admission: a lease is never more than what the store still has, so the tokens admitted stay within the limit
as long as each request's estimate covers its real count; a request that uses more than it reserved takes the
difference from the lease, and what the store cannot give back is the only over-admission (measured in
benchmarks/budget_bench.py). Under-admission: slices left on other replicas when a window ends.

Alerts before a budget runs out: the same script call that grants a slice of a day or month budget tells whether the
tokens handed out crossed one of ``alert_percents`` of it, and marks each level once per caller, limit and window
(``INCRBY`` of a marker inside the script, the first to make it 1 marks it: no round trip of its own, once across
every replica; only the commands the platform store's user may run, ``UsageStore``'s access string, which has no
``SET``). The replica whose grant crossed
it counts it (``capture_sidecar_budget_alerts_total``), shows the caller for a while
(``capture_sidecar_budget_threshold_crossed``) and logs one ``budget_threshold_crossed`` event; nothing waits on
any of it.
"""

from __future__ import annotations

import asyncio
import calendar
import json
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

log = logging.getLogger("capture_sidecar.limits")

TOKENS_PER_MINUTE = "tokensPerMinute"
TOKENS_PER_DAY = "tokensPerDay"
TOKENS_PER_MONTH = "tokensPerMonth"
CONCURRENT_REQUESTS = "concurrentRequestsPerReplica"
TOKEN_LIMITS = (TOKENS_PER_MINUTE, TOKENS_PER_DAY, TOKENS_PER_MONTH)
LIMIT_KEYS = (*TOKEN_LIMITS, CONCURRENT_REQUESTS)
# The caller id of a request without one (no API keys configured), and the entry that applies to every caller not
# named (each with a budget of its own of that size).
ANONYMOUS_CALLER = "-"
EVERY_OTHER_CALLER = "*"
# A lease is this share of the limit (at most), and is refilled in the background below half of it.
LEASE_FRACTION = 0.02
# After a store failure, requests that need the store are decided at once by the failure mode for this long.
STORE_BACKOFF_SECONDS = 1.0
# A request whose lease ran short asks the store again this often at most (other waiters may take a slice first).
REFILL_ATTEMPTS = 5
FAIL_OPEN = "open"
FAIL_CLOSED = "closed"
# Budget alerts: the limits they watch (a minute's budget runs out every minute: its 429s say enough), the default
# levels (percent of the budget handed out), and how many recent crossings /metrics shows, for how long.
ALERT_LIMITS = (TOKENS_PER_DAY, TOKENS_PER_MONTH)
DEFAULT_ALERT_PERCENTS = (80, 100)
MAX_ALERT_PERCENTS = 5
BUDGET_CROSSED_EVENT = "budget_threshold_crossed"
RECENT_CROSSINGS_SHOWN = 200
RECENT_CROSSINGS_SECONDS = 900.0


@dataclass(frozen=True)
class CallerLimits:
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    concurrent_requests: int | None = None

    def token_limits(self) -> list[tuple[str, int]]:
        pairs = (
            (TOKENS_PER_MINUTE, self.tokens_per_minute),
            (TOKENS_PER_DAY, self.tokens_per_day),
            (TOKENS_PER_MONTH, self.tokens_per_month),
        )
        return [(kind, limit) for kind, limit in pairs if limit is not None]


def window_of(kind: str, now: float) -> tuple[str, float]:
    """(window id, seconds until it ends) of a limit at ``now`` (epoch seconds, UTC)."""
    if kind == TOKENS_PER_MINUTE:
        minute = int(now // 60)
        return f"m{minute}", (minute + 1) * 60 - now
    moment = datetime.fromtimestamp(now, UTC)
    if kind == TOKENS_PER_DAY:
        day = int(now // 86400)
        return f"d{moment:%Y%m%d}", (day + 1) * 86400 - now
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return f"M{moment:%Y%m}", calendar.timegm((year, month, 1, 0, 0, 0)) - now


@dataclass(frozen=True)
class Crossing:
    """A caller's tokens handed out crossed ``percent`` of a budget: reported once per caller, limit and window."""

    caller: str
    limit: str  # tokensPerDay or tokensPerMonth
    window: str  # d20261205, M202612
    percent: int
    budget: int
    at: float  # epoch seconds

    def event(self) -> dict[str, object]:
        """The structured event (one JSON log line; docs/usage-and-budgets.md names its fields)."""
        return {
            "event": BUDGET_CROSSED_EVENT,
            "callerId": self.caller,
            "limit": self.limit,
            "window": self.window,
            "percent": self.percent,
            "budget": self.budget,
        }


class TokenStore(Protocol):
    """The shared counter: tokens handed out per key (the store's own atomic operation)."""

    async def take(
        self, key: str, want: int, limit: int, ttl_seconds: int, alerts: Sequence[tuple[str, int]] = ()
    ) -> tuple[int, list[int]]:
        """Up to ``want`` tokens of ``limit`` for ``key`` (0 when none are left); never more than the limit in
        total across every caller of take. With ``alerts`` ((marker key, percent), ...): also the percents this
        grant made the total handed out reach for the first time (each marker set once, whoever takes)."""
        ...

    async def give_back(self, key: str, tokens: int) -> None: ...

    async def close(self) -> None: ...


# One round trip: what is left, and the grant, atomically (scripts run alone on the server). KEYS[2..] are the alert
# markers (same hash slot: the caller's {tag}), ARGV[4..] their percents: a level reached by this grant is marked
# by INCRBY 1 (expiring with the counter), and returned only if this call made the marker (it is 1 now). INCRBY, not
# SET NX: the store's user may not SET (UsageStore's ACCESS_STRING, tests/rehearsal/test_gateway_entry_budgets.py).
_TAKE_SCRIPT = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit = tonumber(ARGV[2])
local grant = math.min(tonumber(ARGV[1]), limit - used)
if grant <= 0 then return {0} end
redis.call('INCRBY', KEYS[1], grant)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
local result = {grant}
local after = used + grant
for i = 2, #KEYS do
  local percent = tonumber(ARGV[i + 2])
  if used * 100 < percent * limit and after * 100 >= percent * limit then
    if redis.call('INCRBY', KEYS[i], 1) == 1 then
      redis.call('EXPIRE', KEYS[i], tonumber(ARGV[3]))
      result[#result + 1] = percent
    end
  end
end
return result
"""


STORE_CONNECTIONS = 64  # per replica; ElastiCache Serverless takes 65,000 connections


class RedisTokenStore:
    """ElastiCache for Valkey (or any Redis-protocol server) through redis-py's asyncio client; TLS with
    ``rediss://``. One script call per lease, one DECRBY per unused lease given back."""

    def __init__(
        self, url: str, timeout_seconds: float, *, credentials: Any = None, ca_file: str | None = None
    ) -> None:
        """``credentials``: a redis-py credential provider (``store_auth.ElastiCacheIamAuth``: an IAM token per
        connection). ``ca_file``: the CA bundle a ``rediss://`` server's certificate is verified against (its host
        name too: redis-py's defaults, never turned off here); None: the system's."""
        import redis.asyncio as aioredis  # only with a store configured

        tls: dict[str, Any] = {"ssl_ca_certs": ca_file} if ca_file and url.startswith("rediss://") else {}
        # A blocking pool: past STORE_CONNECTIONS calls in flight, a call waits for a connection (within the same
        # store timeout) instead of failing at once. redis-py's default pool raised MaxConnectionsError past 100,
        # which the limiter counted as the store unreachable (back-off and the failure mode for every caller):
        # 1,000 callers of tiny budgets on one replica reached it 47 times (benchmarks/budget_alerts_bench.py).
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=STORE_CONNECTIONS,
            timeout=timeout_seconds,
            socket_timeout=timeout_seconds,
            socket_connect_timeout=timeout_seconds,
            retry_on_timeout=False,
            health_check_interval=0,
            credential_provider=credentials,
            **tls,
        )
        self.client = aioredis.Redis(connection_pool=pool)
        self.script = self.client.register_script(_TAKE_SCRIPT)
        self.round_trips = 0

    async def take(
        self, key: str, want: int, limit: int, ttl_seconds: int, alerts: Sequence[tuple[str, int]] = ()
    ) -> tuple[int, list[int]]:
        self.round_trips += 1
        reply = await self.script(
            keys=[key, *(marker for marker, _ in alerts)],
            args=[want, limit, ttl_seconds, *(percent for _, percent in alerts)],
        )
        return int(reply[0]), [int(percent) for percent in reply[1:]]

    async def give_back(self, key: str, tokens: int) -> None:
        self.round_trips += 1
        await self.client.decrby(key, tokens)

    async def close(self) -> None:
        await self.client.aclose()


class _Lease:
    """Tokens of one caller's limit and window held by this replica."""

    __slots__ = ("exhausted", "limit", "refill", "tokens", "waiting", "window")

    def __init__(self, window: str, limit: int) -> None:
        self.window = window
        self.limit = limit
        self.tokens = 0  # may go below 0: a request used more than it reserved
        self.exhausted = False  # the store has nothing left for this window
        self.waiting = 0  # tokens of the requests waiting for a refill (the next one asks for all of them)
        self.refill: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class Refusal:
    status: int  # 429 over a limit, 503 the store unreachable with FAIL_CLOSED
    limit: str  # which limit (one of LIMIT_KEYS), or "store" for the store
    retry_after: int  # seconds
    message: str


@dataclass
class Reservation:
    """What an admitted request holds until it ends (settle)."""

    caller: str
    tokens: int
    leases: list[_Lease]
    concurrent: bool


class Limiter:
    """Per-caller limits on one replica, sharing token budgets with the others through a TokenStore."""

    def __init__(
        self,
        limits: dict[str, CallerLimits],
        *,
        store: TokenStore | None,
        key_prefix: str,
        fail_mode: str,
        store_timeout_seconds: float,
        clock: Callable[[], float] = time.time,
        alert_percents: Sequence[int] = DEFAULT_ALERT_PERCENTS,
        on_crossing: Callable[[Crossing], None] | None = None,
    ) -> None:
        self.limits = limits
        self.store = store
        self.key_prefix = key_prefix
        self.fail_mode = fail_mode
        self.store_timeout = store_timeout_seconds
        self.clock = clock
        self.leases: dict[tuple[str, str], _Lease] = {}
        self.windows: dict[str, tuple[str, float]] = {}  # kind -> (window id, its end): computed once a window
        self.in_flight: dict[str, int] = {}
        self.store_down_until = 0.0
        # Metrics (read by SidecarMetrics).
        self.refused: dict[str, int] = {key: 0 for key in (*LIMIT_KEYS, "store")}
        self.store_errors = 0
        self.admitted_store_down = 0
        self.waits = 0  # requests that waited on the store
        # Budget alerts: the levels, crossings reported by this replica per (limit, percent), the recent ones.
        self.alert_percents = tuple(sorted(set(alert_percents)))
        self.on_crossing = on_crossing if on_crossing is not None else log_crossing
        self.alerts: Counter[tuple[str, int]] = Counter(
            {(kind, percent): 0 for kind in ALERT_LIMITS for percent in self.alert_percents}
        )
        self.crossings: deque[Crossing] = deque(maxlen=RECENT_CROSSINGS_SHOWN)

    def limits_of(self, caller: str) -> CallerLimits | None:
        return self.limits.get(caller) or self.limits.get(EVERY_OTHER_CALLER)

    def applies(self, caller: str | None) -> bool:
        return self.limits_of(caller or ANONYMOUS_CALLER) is not None

    # ----- admission -----

    def admit(self, caller_id: str | None, estimate: int) -> Reservation | Refusal | Awaitable[Reservation | Refusal]:
        """A reservation at once (the common case), a refusal at once, or an awaitable for a request that needs
        the store first (its lease cannot cover it)."""
        caller = caller_id or ANONYMOUS_CALLER
        limits = self.limits_of(caller)
        if limits is None:
            return Reservation(caller, 0, [], False)
        if limits.concurrent_requests is not None and self.in_flight.get(caller, 0) >= limits.concurrent_requests:
            return self._refuse(CONCURRENT_REQUESTS, 429, 1, "too many concurrent requests")
        now = self.clock()
        leases: list[_Lease] = []
        short = False
        for kind, limit in limits.token_limits():
            lease, ends_in = self._lease(caller, kind, limit, now)
            if lease.tokens >= estimate:
                leases.append(lease)
                continue
            if lease.exhausted or estimate > limit:
                return self._over(kind, limit, ends_in)
            short = True
            leases.append(lease)
        if short:
            return self._admit_after_refill(caller, limits, estimate, leases)
        return self._reserve(caller, limits, estimate, leases)

    async def _admit_after_refill(
        self, caller: str, limits: CallerLimits, estimate: int, leases: list[_Lease]
    ) -> Reservation | Refusal:
        self.waits += 1
        for _ in range(REFILL_ATTEMPTS):
            short = [lease for lease in leases if lease.tokens < estimate and not lease.exhausted]
            if not short:
                break
            for lease in short:
                lease.waiting += estimate
                try:
                    if self.clock() >= self.store_down_until:
                        self._start_refill(caller, lease_kind(lease), lease)
                    if lease.refill is not None:
                        await asyncio.shield(lease.refill)
                finally:
                    lease.waiting -= estimate
            if self.clock() < self.store_down_until:
                if self.fail_mode == FAIL_OPEN:
                    self.admitted_store_down += 1
                    return self._reserve(caller, limits, estimate, leases)
                return self._refuse("store", 503, 1, "the budget store is unreachable")
        now = self.clock()
        for lease in leases:
            if lease.tokens < estimate:
                kind = lease_kind(lease)
                _, ends_in = window_of(kind, now)
                return self._over(kind, lease.limit, ends_in)
        if limits.concurrent_requests is not None and self.in_flight.get(caller, 0) >= limits.concurrent_requests:
            return self._refuse(CONCURRENT_REQUESTS, 429, 1, "too many concurrent requests")
        return self._reserve(caller, limits, estimate, leases)

    def _over(self, kind: str, limit: int, ends_in: float) -> Refusal:
        return self._refuse(kind, 429, max(1, int(ends_in + 0.999)), f"{kind} budget of {limit} tokens used")

    def _reserve(self, caller: str, limits: CallerLimits, estimate: int, leases: list[_Lease]) -> Reservation:
        for lease in leases:
            lease.tokens -= estimate
            self._maybe_refill(caller, lease)
        concurrent = limits.concurrent_requests is not None
        if concurrent:
            self.in_flight[caller] = self.in_flight.get(caller, 0) + 1
        return Reservation(caller, estimate, leases, concurrent)

    def settle(self, reservation: Reservation, used: int) -> None:
        """The request ended having used ``used`` tokens: the rest of its reservation goes back to the leases (or
        the excess is taken from them)."""
        if reservation.concurrent:
            left = self.in_flight.get(reservation.caller, 1) - 1
            if left:
                self.in_flight[reservation.caller] = left
            else:
                self.in_flight.pop(reservation.caller, None)
            reservation.concurrent = False
        difference = reservation.tokens - used
        reservation.tokens = used
        if difference:
            for lease in reservation.leases:
                lease.tokens += difference
                if difference < 0:
                    self._maybe_refill(reservation.caller, lease)

    def _refuse(self, limit: str, status: int, retry_after: int, message: str) -> Refusal:
        self.refused[limit] += 1
        return Refusal(status, limit, retry_after, message)

    # ----- leases -----

    def _lease(self, caller: str, kind: str, limit: int, now: float) -> tuple[_Lease, float]:
        cached = self.windows.get(kind)
        if cached is None or now >= cached[1] or now < cached[1] - 31 * 86400:
            window, ends_in = window_of(kind, now)
            cached = self.windows[kind] = (window, now + ends_in)
        window, ends_in = cached[0], cached[1] - now
        lease = self.leases.get((caller, kind))
        if lease is None or lease.window != window or lease.limit != limit:
            lease = _Lease(window, limit)
            self.leases[(caller, kind)] = lease
            if self.store is None:
                lease.tokens = limit  # no store: this replica alone holds the whole budget
                lease.exhausted = True
        return lease, ends_in

    def _slice(self, lease: _Lease) -> int:
        return max(1, int(lease.limit * LEASE_FRACTION))

    def _maybe_refill(self, caller: str, lease: _Lease) -> None:
        if self.store is None or lease.exhausted or lease.refill is not None:
            return
        if lease.tokens < self._slice(lease) // 2 and self.clock() >= self.store_down_until:
            self._start_refill(caller, lease_kind(lease), lease)

    def _start_refill(self, caller: str, kind: str, lease: _Lease) -> None:
        if lease.refill is None and self.store is not None:
            lease.refill = asyncio.get_running_loop().create_task(self._refill(caller, kind, lease))

    async def _refill(self, caller: str, kind: str, lease: _Lease) -> None:
        """One slice, or what the waiting requests need if more (a burst is one round trip, not one per slice)."""
        store = self.store
        assert store is not None
        await asyncio.sleep(0)  # requests arriving in this same loop iteration join the demand
        want = max(self._slice(lease), lease.waiting) - min(0, lease.tokens)
        _, ends_in = window_of(kind, self.clock())
        key = f"{self.key_prefix}{{{caller}}}:{kind}:{lease.window}"
        # A marker per level and budget: a budget raised within the window is reported again at its own levels.
        alerts = (
            [(f"{key}:alert{percent}:{lease.limit}", percent) for percent in self.alert_percents]
            if kind in ALERT_LIMITS
            else []
        )
        try:
            granted, crossed = await asyncio.wait_for(
                store.take(key, want, lease.limit, int(ends_in) + 3600, alerts), self.store_timeout
            )
        except Exception as error:
            self.store_errors += 1
            self.store_down_until = self.clock() + STORE_BACKOFF_SECONDS
            log.warning("budget store unreachable (%s: %s), failing %s", type(error).__name__, error, self.fail_mode)
        else:
            lease.tokens += granted
            if granted < want:
                lease.exhausted = True
            for percent in crossed:
                self._crossed(Crossing(caller, kind, lease.window, percent, lease.limit, self.clock()))
        finally:
            lease.refill = None

    def _crossed(self, crossing: Crossing) -> None:
        """Count, keep and report a crossing this replica's grant made (in the background refill: no request waits)."""
        self.alerts[(crossing.limit, crossing.percent)] += 1
        self.crossings.append(crossing)
        try:
            self.on_crossing(crossing)
        except Exception:  # a reporting failure must not fail the refill
            log.exception("reporting a budget crossing failed")

    def recent_crossings(self) -> list[Crossing]:
        """The crossings of the last RECENT_CROSSINGS_SECONDS (at most RECENT_CROSSINGS_SHOWN), for /metrics."""
        since = self.clock() - RECENT_CROSSINGS_SECONDS
        return [crossing for crossing in self.crossings if crossing.at >= since]

    async def give_back(self) -> None:
        """Shutdown: the unused tokens of day and month leases go back to the store for the other replicas."""
        if self.store is None:
            return
        for (caller, kind), lease in list(self.leases.items()):
            if kind == TOKENS_PER_MINUTE or lease.tokens <= 0:
                continue
            key = f"{self.key_prefix}{{{caller}}}:{kind}:{lease.window}"
            try:
                await asyncio.wait_for(store_give_back(self.store, key, lease.tokens), self.store_timeout)
            except Exception:
                self.store_errors += 1
            lease.tokens = 0

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()


def log_crossing(crossing: Crossing) -> None:
    """The default report: one log line whose message is the event as JSON."""
    log.warning("%s", json.dumps(crossing.event(), separators=(",", ":")))


def lease_kind(lease: _Lease) -> str:
    return {"m": TOKENS_PER_MINUTE, "d": TOKENS_PER_DAY, "M": TOKENS_PER_MONTH}[lease.window[0]]


async def store_give_back(store: TokenStore, key: str, tokens: int) -> None:
    await store.give_back(key, tokens)

"""Budgets and rate limits per caller (docs/usage-and-budgets.md): limits at the boundary, leases shared through a
real Valkey/Redis store (Debian's redis-server on loopback), concurrent streams across replicas, a store outage
(fail open or closed, never a hang), and a refused request's answer and record. No timing is asserted."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest

from capture_sidecar.limits import (
    FAIL_CLOSED,
    FAIL_OPEN,
    STORE_CONNECTIONS,
    CallerLimits,
    Limiter,
    RedisTokenStore,
    Refusal,
    Reservation,
    window_of,
)
from capture_sidecar.settings import MAX_STORE_TIMEOUT_SECONDS, SettingsError, load_settings
from capture_sidecar.stream_usage import estimate_tokens
from tests.support.redis_server import redis_server
from tests.support.s3server import free_loopback_port
from tests.support.waiting import SIDECAR_STORE_SAFETY_TIMEOUT, STORE_SAFETY_TIMEOUT

from .conftest import read_records

JSON = {"Content-Type": "application/json"}
CHAT = "/vllm/v1/chat/completions"
TEAM_A_KEY = "team-a-key-0123456789abcdef"
TEAM_B_KEY = "team-b-key-fedcba9876543210"
MONDAY_NOON = datetime(2026, 12, 7, 12, 0, 30, tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def store_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def limiter(limits: dict[str, CallerLimits], *, clock=lambda: MONDAY_NOON, store=None, fail=FAIL_OPEN) -> Limiter:
    return Limiter(limits, store=store, key_prefix="t:", fail_mode=fail, store_timeout_seconds=0.2, clock=clock)


# ----- the limiter, in process -----


def test_a_request_whose_estimate_fits_exactly_is_admitted_and_one_token_more_is_refused() -> None:
    limits = limiter({"team-a": CallerLimits(tokens_per_minute=100)})
    first = limits.admit("team-a", 60)
    assert isinstance(first, Reservation)
    assert isinstance(limits.admit("team-a", 40), Reservation)  # 100 of 100
    refused = limits.admit("team-a", 1)
    assert isinstance(refused, Refusal)
    assert (refused.status, refused.limit, refused.retry_after) == (429, "tokensPerMinute", 30)
    limits.settle(first, 59)  # used one less than it reserved: that token is back
    assert isinstance(limits.admit("team-a", 1), Reservation)
    assert isinstance(limits.admit("team-a", 1), Refusal)


def test_a_new_window_starts_a_new_budget_and_other_callers_are_not_touched() -> None:
    now = [MONDAY_NOON]
    limits = limiter({"team-a": CallerLimits(tokens_per_minute=10)}, clock=lambda: now[0])
    assert isinstance(limits.admit("team-a", 10), Reservation)
    assert isinstance(limits.admit("team-a", 1), Refusal)
    assert isinstance(limits.admit("team-b", 10_000), Reservation)  # no limits of its own, no "*"
    now[0] += 30
    assert isinstance(limits.admit("team-a", 10), Reservation)


def test_every_limit_of_a_caller_applies_and_the_first_one_short_says_why() -> None:
    limits = limiter({"*": CallerLimits(tokens_per_minute=1000, tokens_per_day=50)})
    assert isinstance(limits.admit("anyone", 50), Reservation)
    refused = limits.admit("anyone", 1)
    assert isinstance(refused, Refusal) and refused.limit == "tokensPerDay"
    assert refused.retry_after == 12 * 3600 - 30  # until midnight UTC
    assert isinstance(limits.admit("someone-else", 50), Reservation)  # "*": a budget per caller


def test_concurrency_is_counted_until_the_request_settles() -> None:
    limits = limiter({"team-a": CallerLimits(concurrent_requests=2)})
    first, second = limits.admit("team-a", 5), limits.admit("team-a", 5)
    assert isinstance(first, Reservation) and isinstance(second, Reservation)
    refused = limits.admit("team-a", 5)
    assert isinstance(refused, Refusal) and (refused.limit, refused.retry_after) == ("concurrentRequestsPerReplica", 1)
    limits.settle(first, 3)
    assert isinstance(limits.admit("team-a", 5), Reservation)


def test_windows_end_at_the_minute_midnight_and_the_first_of_the_month_utc() -> None:
    new_year_eve = datetime(2026, 12, 31, 23, 59, 30, tzinfo=UTC).timestamp()
    assert window_of("tokensPerMinute", new_year_eve)[1] == pytest.approx(30)
    assert window_of("tokensPerDay", new_year_eve) == ("d20261231", pytest.approx(30))
    assert window_of("tokensPerMonth", new_year_eve) == ("M202612", pytest.approx(30))
    assert window_of("tokensPerMonth", MONDAY_NOON)[1] == pytest.approx(25 * 86400 - 12 * 3600 - 30)


def test_replicas_sharing_the_store_never_hand_out_more_than_the_budget(store_url: str) -> None:
    async def scenario() -> tuple[int, int, int]:
        stores = [RedisTokenStore(store_url, STORE_SAFETY_TIMEOUT) for _ in range(3)]
        replicas = [
            Limiter(
                {"team-a": CallerLimits(tokens_per_day=30_000)},
                store=store,
                key_prefix="share:",
                fail_mode=FAIL_CLOSED,
                store_timeout_seconds=STORE_SAFETY_TIMEOUT,
            )
            for store in stores
        ]
        admitted = 0

        async def one(replica: Limiter) -> None:
            nonlocal admitted
            decision = replica.admit("team-a", 7)
            if not isinstance(decision, Reservation | Refusal):
                decision = await decision
            if isinstance(decision, Reservation):
                admitted += 1
                await asyncio.sleep(0)
                replica.settle(decision, 7)

        await asyncio.gather(*(one(replicas[index % 3]) for index in range(6_000)))
        round_trips = sum(store.round_trips for store in stores)
        window = replicas[0].leases[("team-a", "tokensPerDay")].window
        handed_out = int(await stores[0].client.get(f"share:{{team-a}}:tokensPerDay:{window}"))
        for store in stores:
            await store.close()
        return admitted, round_trips, handed_out

    admitted, round_trips, handed_out = asyncio.run(scenario())
    assert handed_out <= 30_000
    assert admitted * 7 <= 30_000
    assert admitted * 7 > 30_000 - 3 * 600 * 2  # at most a few slices stranded on the replicas
    assert round_trips < admitted / 10  # leases: the store is not asked per request


def unreachable_store_url() -> str:
    return f"redis://127.0.0.1:{free_loopback_port()}/0"  # nothing listens there


@pytest.fixture
def silent_store_url() -> Iterator[str]:
    """A store that accepts connections and never answers (a network black hole)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


@pytest.mark.parametrize("reachable", [False, True], ids=["refused", "silent"])
@pytest.mark.parametrize("fail_mode", [FAIL_OPEN, FAIL_CLOSED])
def test_a_store_outage_means_the_configured_choice_within_the_timeout(fail_mode, reachable, silent_store_url) -> None:
    url = silent_store_url if reachable else unreachable_store_url()

    async def scenario() -> tuple[object, object, Limiter]:
        store = RedisTokenStore(url, 0.2)
        limits = Limiter(
            {"team-a": CallerLimits(tokens_per_minute=1000)},
            store=store,
            key_prefix="t:",
            fail_mode=fail_mode,
            store_timeout_seconds=0.2,
        )
        first = limits.admit("team-a", 10)
        first = await asyncio.wait_for(first, 5)  # type: ignore[arg-type]  # never a hang
        second = limits.admit("team-a", 10)  # within the back-off: decided without the store
        if not isinstance(second, Reservation | Refusal):
            second = await asyncio.wait_for(second, 5)
        await store.close()
        return first, second, limits

    first, second, limits = asyncio.run(scenario())
    assert limits.store_errors == 1
    for decision in (first, second):
        if fail_mode == FAIL_OPEN:
            assert isinstance(decision, Reservation)
        else:
            assert isinstance(decision, Refusal) and (decision.status, decision.limit) == (503, "store")
    assert limits.admitted_store_down == (2 if fail_mode == FAIL_OPEN else 0)


# ----- the settings -----


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{", "must be a JSON object"),
        ('{"team a": {"tokensPerDay": 5}}', "caller id 'team a'"),
        ('{"team-a": {"tokensPerWeek": 5}}', "must be an object with some of"),
        ('{"team-a": {"tokensPerDay": 0}}', "team-a.tokensPerDay must be a whole number"),
        ('{"team-a": {"tokensPerDay": "5"}}', "team-a.tokensPerDay must be a whole number"),
    ],
)
def test_malformed_limits_are_refused_at_start_with_what_is_wrong(value: str, problem: str) -> None:
    env = {"UPSTREAM_URL": "http://127.0.0.1:1", "CAPTURE_S3_URI": "s3://b/p/", "CALLER_LIMITS": value}
    with pytest.raises(SettingsError) as error:
        load_settings({**env, "LIMITS_STORE_URL": "http://x", "LIMITS_STORE_FAILURE": "maybe"})
    message = str(error.value)
    assert problem in message
    assert "LIMITS_STORE_URL" in message and "LIMITS_STORE_FAILURE" in message


# ----- end to end: replicas of the sidecar, the store, the stand-in -----


def keys_file(tmp_path: Path) -> str:
    path = tmp_path / "api-keys"
    path.write_text(f"team-a:{TEAM_A_KEY}\nteam-b:{TEAM_B_KEY}\n")
    return str(path)


def bearer(key: str) -> dict[str, str]:
    return {**JSON, "Authorization": f"Bearer {key}"}


def chat(words: int, max_tokens: int, *, stream: bool = True) -> bytes:
    content = " ".join(["word"] * words)
    request = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "stream": stream}
    return json.dumps(request).encode()


def limited_env(tmp_path: Path, store: str, limits: dict[str, dict[str, int]], **more: str) -> dict[str, str]:
    return {
        "USAGE_PATHS": CHAT,
        "API_KEYS_FILE": keys_file(tmp_path),
        "CALLER_LIMITS": json.dumps(limits),
        "LIMITS_STORE_URL": store,
        "LIMITS_KEY_PREFIX": f"test-{tmp_path.name}:",
        "LIMITS_STORE_TIMEOUT_SECONDS": SIDECAR_STORE_SAFETY_TIMEOUT,  # (a test of the store down sets its own)
        **more,
    }


def test_over_the_budget_the_caller_gets_429_retry_after_an_openai_error_and_a_record(
    start_sidecar, s3, tmp_path, store_url
) -> None:
    body = chat(10, 20)
    estimate = estimate_tokens(body, bytes_per_token=2, default_output_tokens=1024)
    sidecar = start_sidecar(**limited_env(tmp_path, store_url, {"team-a": {"tokensPerDay": 3 * estimate}}))

    statuses = [sidecar.call("POST", CHAT, body, bearer(TEAM_A_KEY)).status for _ in range(3)]
    # Three estimates were reserved, each settled to its real count (13 + 20): the budget now has room for more.
    assert statuses == [200, 200, 200]
    results = [sidecar.call("POST", CHAT, body, bearer(TEAM_A_KEY)) for _ in range(6)]
    refused = [result for result in results if result.status == 429]
    assert refused, [result.status for result in results]
    answer = refused[0]
    assert 0 < int(answer.header("Retry-After") or "0") <= 86400
    assert answer.header("Content-Type") == "application/json"
    error = json.loads(answer.body)["error"]
    assert (error["type"], error["code"], error["param"]) == ("insufficient_quota", "insufficient_quota", None)
    assert "tokensPerDay" in error["message"]
    assert sidecar.call("POST", CHAT, body, bearer(TEAM_B_KEY)).status == 200  # another caller: no limit

    served = 3 + len(results) - len(refused) + 1
    records = read_records(s3, sidecar.prefix, expected=served + len(refused))
    refusals = [record for record in records if "refusedBy" in record["eventMetadata"]]
    assert len(refusals) == len(refused)
    metadata = refusals[0]["eventMetadata"]
    assert (metadata["refusedBy"], metadata["responseStatus"], metadata["callerId"]) == (
        "tokensPerDay",
        429,
        "team-a",
    )
    assert "endpointOutput" not in refusals[0]["captureData"]  # nothing was generated
    used = sum(
        record["eventMetadata"].get("inputTokens", 0) + record["eventMetadata"].get("outputTokens", 0)
        for record in records
        if record["eventMetadata"].get("callerId") == "team-a"
    )
    assert used <= 3 * estimate
    assert sidecar.metrics()['capture_sidecar_requests_refused_total{limit="tokensPerDay"}'] == len(refused)


def read_all(s3, prefixes: list[str], expected: int, timeout: float = 15.0) -> list[dict]:
    """The records under every prefix, once there are at least ``expected`` of them (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        records = [record for prefix in prefixes for record in read_records(s3, prefix, expected=0)]
        if len(records) >= expected or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def test_concurrent_streams_across_three_replicas_stay_within_the_budget(
    start_sidecar, s3, tmp_path, store_url
) -> None:
    budget = 6_000
    env = limited_env(
        tmp_path, store_url, {"team-a": {"tokensPerDay": budget}}, SAMPLING_PERCENTAGE="0", USAGE_RECORDS="all"
    )
    replicas = [start_sidecar(**env) for _ in range(3)]
    bodies = [chat(5 + index % 40, 10 + index % 50) for index in range(90)]

    def call(index: int):
        replica = replicas[index % 3]
        return replica.call("POST", CHAT + "?delay_ms=5", bodies[index], bearer(TEAM_A_KEY))

    with ThreadPoolExecutor(max_workers=30) as pool:
        results = list(pool.map(call, range(len(bodies))))
    statuses = [result.status for result in results]
    assert set(statuses) <= {200, 429} and 429 in statuses and 200 in statuses
    records = read_all(s3, [replica.prefix for replica in replicas], expected=len(bodies))
    served = [record["eventMetadata"] for record in records if record["eventMetadata"]["responseStatus"] == 200]
    assert len(served) == statuses.count(200)
    assert sum(meta["inputTokens"] + meta["outputTokens"] for meta in served) <= budget
    for result in results:
        if result.status == 200:
            assert result.body.endswith(b"data: [DONE]\n\n") and b'"usage"' not in result.body


@pytest.mark.parametrize("fail_mode", [FAIL_OPEN, FAIL_CLOSED])
def test_the_store_down_end_to_end_fails_as_configured_and_never_hangs(start_sidecar, tmp_path, fail_mode) -> None:
    env = limited_env(
        tmp_path,
        unreachable_store_url(),
        {"team-a": {"tokensPerMinute": 100_000}},
        LIMITS_STORE_FAILURE=fail_mode,
        LIMITS_STORE_TIMEOUT_SECONDS="0.2",
    )
    sidecar = start_sidecar(**env)
    results = [sidecar.call("POST", CHAT, chat(3, 4), bearer(TEAM_A_KEY)) for _ in range(3)]
    metrics = sidecar.metrics()
    assert metrics["capture_sidecar_limits_store_errors_total"] >= 1
    if fail_mode == FAIL_OPEN:
        assert [result.status for result in results] == [200, 200, 200]
        assert metrics["capture_sidecar_limits_admitted_store_down_total"] == 3
    else:
        assert [result.status for result in results] == [503, 503, 503]
        assert results[0].header("Retry-After") == "1"
        assert json.loads(results[0].body)["error"]["code"] == "budget_store_unavailable"
        assert metrics['capture_sidecar_requests_refused_total{limit="store"}'] == 3
    assert sidecar.call("POST", CHAT, chat(3, 4), bearer(TEAM_B_KEY)).status == 200  # no limits: no store


def test_the_tests_safety_timeout_for_a_sidecar_s_store_is_the_setting_s_maximum() -> None:
    """The sidecar's tests that reach a store set LIMITS_STORE_TIMEOUT_SECONDS to its maximum (a loaded machine's
    loopback call can take seconds); a lowered maximum must move that value with it, or those sidecars refuse it."""
    assert float(SIDECAR_STORE_SAFETY_TIMEOUT) == MAX_STORE_TIMEOUT_SECONDS
    assert load_settings({"LIMITS_STORE_TIMEOUT_SECONDS": SIDECAR_STORE_SAFETY_TIMEOUT,
                          "LIMITS_STORE_URL": "redis://127.0.0.1:6379", "UPSTREAM_URL": "http://127.0.0.1:8000",
                          "CAPTURE_S3_URI": "s3://b/captures/pod/"}).usage.store_timeout_seconds == 5.0


def test_more_calls_in_flight_than_the_pool_holds_wait_for_a_connection_and_none_fails(store_url: str) -> None:
    """Past ``STORE_CONNECTIONS`` calls at once on one replica (many callers needing a slice at the same moment), a
    call waits for a connection within the store timeout; redis-py's default pool failed them at once
    (``MaxConnectionsError``), which the limiter read as the store unreachable."""
    calls = STORE_CONNECTIONS * 3

    async def many() -> list[int]:
        store = RedisTokenStore(store_url, 30.0)  # (a safety bound, far above what the calls take)
        try:
            results = await asyncio.gather(*(store.take(f"budget:test/pool:{{caller-{i}}}:tokensPerDay:d1", 10, 100, 60)
                                              for i in range(calls)))
            return [grant for grant, _ in results]
        finally:
            await store.close()

    assert asyncio.run(many()) == [10] * calls

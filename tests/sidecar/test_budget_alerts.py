"""Alarms before a budget runs out (docs/usage-and-budgets.md#3-alarms-before-a-budget-runs-out): a caller's crossing of
80 % and 100 % of a day or month budget is reported exactly once across replicas (the marker is set inside the store's
grant script), by a counter without a caller label, a gauge that names the caller for a while and one log event; the
store down means no report and no wait. Real redis-server on loopback; no timing is asserted."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from capture_sidecar.limits import (
    BUDGET_CROSSED_EVENT,
    FAIL_CLOSED,
    FAIL_OPEN,
    RECENT_CROSSINGS_SECONDS,
    CallerLimits,
    Crossing,
    Limiter,
    RedisTokenStore,
    Refusal,
    Reservation,
)
from capture_sidecar.metrics import SidecarMetrics
from capture_sidecar.settings import SettingsError, load_settings
from tests.support.redis_server import redis_server
from tests.support.s3server import free_loopback_port
from tests.support.waiting import STORE_SAFETY_TIMEOUT

from .test_budgets import CHAT, MONDAY_NOON, TEAM_A_KEY, TEAM_B_KEY, bearer, chat, limited_env

ALERTS = "capture_sidecar_budget_alerts_total"
CROSSED = "capture_sidecar_budget_threshold_crossed"


@pytest.fixture(scope="module")
def store_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def replicas_on(url: str, limits: dict[str, CallerLimits], count: int, prefix: str, **options) -> tuple[
    list[Limiter], list[Crossing]
]:
    reported: list[Crossing] = []
    replicas = [
        Limiter(
            limits,
            store=RedisTokenStore(url, STORE_SAFETY_TIMEOUT),
            key_prefix=prefix,
            fail_mode=FAIL_CLOSED,
            store_timeout_seconds=STORE_SAFETY_TIMEOUT,
            on_crossing=reported.append,
            **options,
        )
        for _ in range(count)
    ]
    return replicas, reported


async def decide(replica: Limiter, caller: str, estimate: int) -> Reservation | Refusal:
    decision = replica.admit(caller, estimate)
    if not isinstance(decision, Reservation | Refusal):
        decision = await asyncio.wait_for(decision, 10)  # a safety timeout: never a hang
    return decision


async def close(replicas: list[Limiter]) -> None:
    for replica in replicas:
        await replica.close()


def test_two_replicas_report_80_then_100_percent_once_each(store_url: str) -> None:
    async def scenario() -> tuple[list[Crossing], list[Limiter], list[int]]:
        replicas, reported = replicas_on(
            store_url, {"team-a": CallerLimits(tokens_per_day=1_000, tokens_per_minute=50_000)}, 2, "two:"
        )
        levels_seen_at: list[int] = []  # requests admitted when each report arrived
        admitted = 0
        for index in range(300):
            decision = await decide(replicas[index % 2], "team-a", 7)
            if isinstance(decision, Refusal) and decision.limit == "tokensPerDay":
                break
            if isinstance(decision, Reservation):
                admitted += 1
                replicas[index % 2].settle(decision, 7)
            while len(levels_seen_at) < len(reported):
                levels_seen_at.append(admitted)
        await close(replicas)
        return reported, replicas, levels_seen_at

    reported, replicas, seen_at = asyncio.run(scenario())
    assert [(crossing.caller, crossing.limit, crossing.percent, crossing.budget) for crossing in reported] == [
        ("team-a", "tokensPerDay", 80, 1_000),
        ("team-a", "tokensPerDay", 100, 1_000),
    ]
    assert reported[0].window.startswith("d") and reported[0].window == reported[1].window
    # 80 % is the tokens handed out to the replicas' leases: at most a slice (2 %) per replica ahead of the use.
    assert 800 - 2 * 20 <= seen_at[0] * 7 <= 800
    # Each replica counts only what it reported; together: one per level, and none for the minute's budget.
    totals = Counter[tuple[str, int]]()
    for replica in replicas:
        totals.update(replica.alerts)
    assert dict(totals) == {("tokensPerDay", 80): 1, ("tokensPerDay", 100): 1, ("tokensPerMonth", 80): 0,
                            ("tokensPerMonth", 100): 0}


def test_concurrent_requests_of_many_callers_across_three_replicas_give_one_report_per_caller_and_level(
    store_url: str,
) -> None:
    callers = [f"team-{index}" for index in range(20)]

    async def scenario() -> list[Crossing]:
        replicas, reported = replicas_on(
            store_url, {"*": CallerLimits(tokens_per_month=2_000)}, 3, "many:", alert_percents=(50, 80, 100)
        )

        async def one(index: int) -> None:
            replica = replicas[index % 3]
            decision = await decide(replica, callers[index % len(callers)], 9)
            if isinstance(decision, Reservation):
                await asyncio.sleep(0)
                replica.settle(decision, 9)

        await asyncio.gather(*(one(index) for index in range(20 * 300)))
        await close(replicas)
        return reported

    reported = asyncio.run(scenario())
    per_caller = Counter((crossing.caller, crossing.limit, crossing.percent) for crossing in reported)
    assert set(per_caller.values()) == {1}
    assert sorted(per_caller) == sorted(
        (caller, "tokensPerMonth", percent) for caller in callers for percent in (50, 80, 100)
    )


def test_the_grant_script_reports_a_level_once_even_after_tokens_go_back(store_url: str) -> None:
    async def scenario() -> list[tuple[int, list[int]]]:
        store = RedisTokenStore(store_url, STORE_SAFETY_TIMEOUT)
        key = "script:{team-a}:tokensPerDay:d20261207"
        alerts = [(f"{key}:alert80", 80), (f"{key}:alert100", 100)]
        replies = [await store.take(key, 79, 100, 60, alerts), await store.take(key, 1, 100, 60, alerts)]
        await store.give_back(key, 5)  # under 80 % handed out again
        replies += [await store.take(key, 10, 100, 60, alerts), await store.take(key, 50, 100, 60, alerts),
                    await store.take(key, 1, 100, 60, alerts)]
        await store.close()
        return replies

    assert asyncio.run(scenario()) == [(79, []), (1, [80]), (10, []), (15, [100]), (0, [])]


def test_a_budget_raised_within_the_window_is_reported_again_at_its_own_levels(store_url: str) -> None:
    limits = {"team-a": CallerLimits(tokens_per_day=1_000)}

    async def scenario() -> list[Crossing]:
        replicas, reported = replicas_on(store_url, limits, 1, "raised:", clock=lambda: MONDAY_NOON)
        assert isinstance(await decide(replicas[0], "team-a", 1_000), Reservation)  # 80 and 100 of 1,000
        limits["team-a"] = CallerLimits(tokens_per_day=2_000)  # the config raised it (a restart reads it)
        assert isinstance(await decide(replicas[0], "team-a", 700), Reservation)  # 1,700 of 2,000: 80 %
        await close(replicas)
        return reported

    reported = asyncio.run(scenario())
    assert [(crossing.percent, crossing.budget) for crossing in reported] == [(80, 1_000), (100, 1_000), (80, 2_000)]


def test_a_new_window_is_a_new_budget_and_reports_again(store_url: str) -> None:
    now = [MONDAY_NOON]

    async def scenario() -> list[Crossing]:
        replicas, reported = replicas_on(
            store_url, {"team-a": CallerLimits(tokens_per_day=1_000)}, 1, "window:", clock=lambda: now[0]
        )
        assert isinstance(await decide(replicas[0], "team-a", 850), Reservation)
        now[0] += 86_400  # the next day
        assert isinstance(await decide(replicas[0], "team-a", 850), Reservation)
        await close(replicas)
        return reported

    reported = asyncio.run(scenario())
    assert [(crossing.percent, crossing.window) for crossing in reported] == [(80, "d20261207"), (80, "d20261208")]


def unreachable_store_url() -> str:
    return f"redis://127.0.0.1:{free_loopback_port()}/0"


@pytest.mark.parametrize("fail_mode", [FAIL_OPEN, FAIL_CLOSED])
def test_the_store_down_reports_nothing_and_decides_at_once(fail_mode: str) -> None:
    async def scenario() -> tuple[list[Crossing], list[Reservation | Refusal], Limiter]:
        reported: list[Crossing] = []
        replica = Limiter(
            {"team-a": CallerLimits(tokens_per_day=100)},
            store=RedisTokenStore(unreachable_store_url(), 0.2),
            key_prefix="down:",
            fail_mode=fail_mode,
            store_timeout_seconds=0.2,
            on_crossing=reported.append,
        )
        decisions = [await decide(replica, "team-a", 30) for _ in range(10)]  # 300 tokens of a 100 budget
        await replica.close()
        return reported, decisions, replica

    reported, decisions, replica = asyncio.run(scenario())
    assert reported == [] and sum(replica.alerts.values()) == 0  # no storm: nothing known, nothing reported
    assert replica.store_errors == 1  # the back-off: the store is not asked per request
    expected = Reservation if fail_mode == FAIL_OPEN else Refusal
    assert all(isinstance(decision, expected) for decision in decisions)


def test_a_failing_report_never_fails_the_grant(store_url: str) -> None:
    def broken(_: Crossing) -> None:
        raise RuntimeError("the log is gone")

    async def scenario() -> Limiter:
        replica = Limiter(
            {"team-a": CallerLimits(tokens_per_day=10)},
            store=RedisTokenStore(store_url, STORE_SAFETY_TIMEOUT),
            key_prefix="broken:",
            fail_mode=FAIL_CLOSED,
            store_timeout_seconds=STORE_SAFETY_TIMEOUT,
            on_crossing=broken,
        )
        assert isinstance(await decide(replica, "team-a", 10), Reservation)
        await replica.close()
        return replica

    replica = asyncio.run(scenario())
    assert replica.alerts[("tokensPerDay", 100)] == 1


# ----- what /metrics shows -----


def test_metrics_show_every_level_from_the_start_and_the_recent_crossings_with_the_caller() -> None:
    now = [MONDAY_NOON]
    replica = Limiter({"*": CallerLimits(tokens_per_day=10)}, store=None, key_prefix="m:", fail_mode=FAIL_OPEN,
                      store_timeout_seconds=0.1, clock=lambda: now[0], on_crossing=lambda _: None)
    metrics = SidecarMetrics()
    metrics.limits = lambda: replica
    text = metrics.render()
    assert f'{ALERTS}{{limit="tokensPerDay",percent="80"}} 0' in text
    assert f'{ALERTS}{{limit="tokensPerMonth",percent="100"}} 0' in text
    assert f"# TYPE {CROSSED} gauge" in text and f"\n{CROSSED}{{" not in text

    replica._crossed(Crossing('team "x"\n', "tokensPerDay", "d20261207", 80, 10, now[0]))
    text = metrics.render()
    assert f'{ALERTS}{{limit="tokensPerDay",percent="80"}} 1' in text
    assert (f'{CROSSED}{{caller_id="team \\"x\\"\\n",limit="tokensPerDay",percent="80",window="d20261207"}} 1'
            in text)
    now[0] += RECENT_CROSSINGS_SECONDS + 1  # shown for a while only (the counter stays)
    text = metrics.render()
    assert f"\n{CROSSED}{{" not in text and f'{ALERTS}{{limit="tokensPerDay",percent="80"}} 1' in text


# ----- the settings -----


BASE = {"UPSTREAM_URL": "http://127.0.0.1:1", "CAPTURE_S3_URI": "s3://b/p/"}


@pytest.mark.parametrize(("value", "expected"), [(None, (80, 100)), ("100, 50", (50, 100)), ("", ())])
def test_the_alert_levels_are_read_from_budget_alert_percents(value: str | None, expected: tuple[int, ...]) -> None:
    env = dict(BASE) if value is None else {**BASE, "BUDGET_ALERT_PERCENTS": value}
    assert load_settings(env).usage.alert_percents == expected


@pytest.mark.parametrize("value", ["0", "101", "80,80", "eighty", "1,2,3,4,5,6", "\uff18\uff10", "-5"])
def test_malformed_alert_levels_are_refused_at_start(value: str) -> None:
    with pytest.raises(SettingsError, match="BUDGET_ALERT_PERCENTS"):
        load_settings({**BASE, "BUDGET_ALERT_PERCENTS": value})


# ----- end to end: two sidecar replicas, the store, the stand-in -----


def events_in(log: str) -> list[dict]:
    return [json.loads(match) for match in re.findall(r"(\{\"event\":\"" + BUDGET_CROSSED_EVENT + r"\".*\})$", log,
                                                       re.MULTILINE)]


def test_two_sidecars_with_a_low_budget_emit_exactly_one_event_per_level(
    start_sidecar, tmp_path: Path, store_url: str
) -> None:
    env = limited_env(tmp_path, store_url, {"team-a": {"tokensPerDay": 3_000}})
    replicas = [start_sidecar(**env) for _ in range(2)]
    body = chat(10, 20)

    def call(index: int) -> int:
        return replicas[index % 2].call("POST", CHAT, body, bearer(TEAM_A_KEY)).status

    statuses: list[int] = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(20):  # rounds until the budget is used (a safety bound, not a figure)
            statuses += list(pool.map(call, range(8)))
            if 429 in statuses:
                break
    assert 429 in statuses and 200 in statuses
    assert replicas[0].call("POST", CHAT, body, bearer(TEAM_B_KEY)).status == 200  # no budget: no report

    metrics = [replica.metrics() for replica in replicas]
    for percent in (80, 100):
        series = f'{ALERTS}{{limit="tokensPerDay",percent="{percent}"}}'
        assert sum(sample[series] for sample in metrics) == 1, series
        assert sum(sample[f'{ALERTS}{{limit="tokensPerMonth",percent="{percent}"}}'] for sample in metrics) == 0
    shown = [name for sample in metrics for name in sample if name.startswith(CROSSED + "{")]
    assert len(shown) == 2 and all('caller_id="team-a",limit="tokensPerDay"' in name for name in shown)

    events = [event for replica in replicas for event in events_in(replica.log())]
    assert sorted(event["percent"] for event in events) == [80, 100]
    for event in events:
        assert set(event) == {"event", "callerId", "limit", "window", "percent", "budget"}
        assert (event["callerId"], event["limit"], event["budget"]) == ("team-a", "tokensPerDay", 3_000)

"""The grant script runs under the platform store's user (UsageStore's ACCESS_STRING, the access string the ElastiCache
user gets): every command it calls is one that user may run, a budget alert level included. Until the script marked a
level with INCRBY, it used SET NX, which that user is refused: every grant that crossed a level failed as a store error
(found by tests/rehearsal/test_gateway_entry_budgets.py). Against a real redis-server on loopback with that ACL."""

from __future__ import annotations

import asyncio

import redis

from capture_sidecar.limits import RedisTokenStore
from hyperpod_inference_iac.serving.usage_store import ACCESS_STRING
from tests.support.redis_server import redis_server
from tests.support.waiting import STORE_SAFETY_TIMEOUT

USER, PASSWORD = "demo-usage-sidecar", "sidecar-password-0123456789"
ADMIN, ADMIN_PASSWORD = "admin", "admin-password-0123456789"
KEY = "budget:ns/server:{team-a}:tokensPerDay:d20261206"


def test_a_grant_that_crosses_alert_levels_runs_under_the_stores_access_string_and_reports_each_once() -> None:
    users = ["default off", f"{USER} {ACCESS_STRING} >{PASSWORD}", f"{ADMIN} on >{ADMIN_PASSWORD} ~* +@all"]
    with redis_server(users=users) as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        alerts = [(f"{KEY}:alert80:1000", 80), (f"{KEY}:alert100:1000", 100)]

        async def grants() -> list[tuple[int, list[int]]]:
            store = RedisTokenStore(f"redis://{USER}:{PASSWORD}@127.0.0.1:{port}/0", STORE_SAFETY_TIMEOUT)
            try:
                return [await store.take(KEY, want, 1000, 3600, alerts) for want in (500, 400, 100, 50)]
            finally:
                await store.close()

        # 500 (50 %), 900 (crosses 80 %), 1000 (crosses 100 %), then nothing is left; each level reported once.
        assert asyncio.run(grants()) == [(500, []), (400, [80]), (100, [100]), (0, [])]
        admin = redis.Redis(host="127.0.0.1", port=int(port), username=ADMIN, password=ADMIN_PASSWORD)
        try:
            assert admin.acl_log() == []  # nothing the script called was refused
            assert {key.decode() for key in admin.keys("*")} == {KEY, *(marker for marker, _ in alerts)}
            assert all(0 < admin.ttl(marker) <= 3600 for marker, _ in alerts)  # they expire with the counter
        finally:
            admin.close()

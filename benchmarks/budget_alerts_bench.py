"""Budget alerts across replicas: store round trips and crossings reported (docs/usage-and-budgets.md, section 3).

    .venv/bin/python benchmarks/budget_alerts_bench.py [--callers 1000] [--replicas 3] [--requests-per-caller 40]

Three in-process limiters (replicas) share one redis-server on 127.0.0.1 (Debian's; valkey-server if installed);
``--callers`` callers of a "*" day budget each send requests of random sizes round robin over the replicas until
their budget refuses them, once with the alerts at 80 % and 100 % and once without any. Prints, for both: requests
admitted, store round trips (the client's count), crossings reported per caller and level (expected exactly 1), and
the store's CPU per grant call (redis INFO commandstats, usec_per_call of evalsha). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "sidecar"))
from capture_sidecar.limits import (  # noqa: E402
    FAIL_CLOSED,
    CallerLimits,
    Crossing,
    Limiter,
    RedisTokenStore,
    Refusal,
    Reservation,
)
from tests.support.redis_server import redis_server  # noqa: E402


async def run(url: str, *, callers: int, replicas: int, per_caller: int, percents: tuple[int, ...],
              prefix: str) -> dict[str, float]:
    reported: list[Crossing] = []
    stores = [RedisTokenStore(url, 2.0) for _ in range(replicas)]
    limiters = [Limiter({"*": CallerLimits(tokens_per_day=100 * per_caller)}, store=store, key_prefix=prefix,
                        fail_mode=FAIL_CLOSED, store_timeout_seconds=2.0, alert_percents=percents,
                        on_crossing=reported.append) for store in stores]
    await stores[0].client.config_resetstat()
    rng = random.Random(7)
    admitted = 0

    async def one(index: int) -> None:
        nonlocal admitted
        replica = limiters[index % replicas]
        decision = replica.admit(f"caller-{index % callers}", rng.randint(50, 250))
        if not isinstance(decision, Reservation | Refusal):
            decision = await decision
        if isinstance(decision, Reservation):
            admitted += 1
            await asyncio.sleep(0)
            replica.settle(decision, decision.tokens)

    total = callers * per_caller * 2  # twice what the budgets admit: every caller reaches 100 %
    for start in range(0, total, 200):  # 200 at a time: the client's connection pool holds each waiting call
        await asyncio.gather(*(one(index) for index in range(start, min(total, start + 200))))
    stats = await stores[0].client.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    per_level = Counter((crossing.caller, crossing.percent) for crossing in reported)
    result = {
        "admitted": admitted,
        "round_trips": sum(store.round_trips for store in stores),
        "crossings": len(reported),
        "callers_x_levels": callers * len(percents),
        "max_reports_per_caller_level": max(per_level.values(), default=0),
        "evalsha_usec_per_call": float(evalsha.get("usec_per_call", 0.0)),
    }
    for store in stores:
        await store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--callers", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--requests-per-caller", type=int, default=40)
    args = parser.parse_args()
    with redis_server() as url:
        for label, percents in (("alerts 80,100", (80, 100)), ("no alerts", ())):
            figures = asyncio.run(run(url, callers=args.callers, replicas=args.replicas,
                                      per_caller=args.requests_per_caller, percents=percents,
                                      prefix=f"bench-{len(percents)}:"))
            print(f"{label:14s} " + "  ".join(f"{key}={value:g}" for key, value in figures.items()))


if __name__ == "__main__":
    main()

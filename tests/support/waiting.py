"""Waiting in tests: a condition polled up to a generous safety timeout. The timeout bounds the wait (so a broken
process fails the test instead of hanging it); it is never an expectation of how fast anything is."""

from __future__ import annotations

import time
from collections.abc import Callable

# A reachable budget store's calls, bounded generously: on a machine whose cores are busy elsewhere a loopback call can
# take seconds, and a test that meant "the store answers" must not turn into "the store is down". (The sidecar's own
# setting, LIMITS_STORE_TIMEOUT_SECONDS, is at most 5 s: its tests that reach a store set that maximum.)
STORE_SAFETY_TIMEOUT = 30.0
SIDECAR_STORE_SAFETY_TIMEOUT = "5"  # capture_sidecar.settings.MAX_STORE_TIMEOUT_SECONDS (tests/sidecar/test_budgets.py)


def eventually(condition: Callable[[], bool], safety_timeout: float = 60.0, interval: float = 0.05) -> bool:
    """Whether ``condition`` holds within the safety timeout."""
    deadline = time.monotonic() + safety_timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True

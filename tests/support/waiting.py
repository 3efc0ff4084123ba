"""Waiting in tests: a condition polled up to a generous safety timeout. The timeout bounds the wait (so a broken
process fails the test instead of hanging it); it is never an expectation of how fast anything is."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(condition: Callable[[], bool], safety_timeout: float = 60.0, interval: float = 0.05) -> bool:
    """Whether ``condition`` holds within the safety timeout."""
    deadline = time.monotonic() + safety_timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True

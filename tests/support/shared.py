"""Expensive set-ups built once per test run, whichever xdist worker needs them first.

A session fixture runs once per worker; under ``pytest -n 2`` that is twice. What every worker may read (the
default platform's synth, the examples' wheel and venv) is built instead into the run's own base temp folder,
which all workers of one run share (each worker's base temp is a folder inside it), under a file lock: the first
worker to ask builds it, any other waits for it and reuses it. A build that failed is not retried by the next
worker: it fails with the first one's error.

The folder is new for every run (pytest's numbered ``pytest-N`` folder), so nothing is reused across runs.

Under xdist the controller (which runs no test) starts these builds as soon as a worker has collected a test
that needs one (``prefetch``, from tests/conftest.py), while the workers run the tests that need none.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest


def run_folder(factory: pytest.TempPathFactory) -> Path:
    """The base temp folder of this run, shared by its xdist workers (each worker's own is a folder inside it)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``run_folder/name``, made by ``build(folder)`` in the first worker that asks; the others wait for it.

    ``build`` gets an empty folder and fills it; it raises to fail (then every worker that asks fails with its
    error). The seconds it took are in ``name.seconds`` beside it."""
    root = run_folder(factory)
    folder, done, failed = root / name, root / f"{name}.done", root / f"{name}.failed"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.exists():
            pytest.fail(f"{name}: the build failed in another worker of this run:\n{failed.read_text()}",
                        pytrace=False)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            started = time.monotonic()
            try:
                build(folder)
            except BaseException:
                failed.write_text(traceback.format_exc()[-20000:])
                raise
            (root / f"{name}.seconds").write_text(f"{time.monotonic() - started:.1f}\n")
            done.touch()
    return folder


# ------------------------------------------------------------------------------------------------ prefetch

_started: dict[str, threading.Thread] = {}


def prefetch(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> None:
    """Start ``built_once(factory, name, build)`` in a thread of this process (the xdist controller, otherwise
    idle), so that the workers find it built, or being built, when their first test needs it. A failure is left
    for the workers to report (``name.failed``)."""
    if name in _started:
        return

    def run() -> None:
        with contextlib.suppress(BaseException):
            built_once(factory, name, build)

    _started[name] = thread = threading.Thread(target=run, name=f"prefetch {name}", daemon=True)
    thread.start()


def join_prefetches() -> None:
    """Wait for the prefetch threads (their subprocesses would otherwise outlive the run)."""
    for thread in _started.values():
        thread.join()

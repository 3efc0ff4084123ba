"""API_KEYS_FILE, re-read while the sidecar runs: a rotated key is accepted and a dropped one refused without a
restart.

The portable chart mounts the synced Secret as a directory; the kubelet rewrites it in place when the Secret
changes (a new directory behind the ``..data`` symlink, swapped atomically), so the file the sidecar names is
always whole. Every ``API_KEYS_RELOAD_SECONDS`` the file is looked at (``os.stat``, following the symlinks: a new
version has another inode, modification time or size); when it changed it is read and checked as at start-up,
and the new set of keys replaces the old one for every request that follows, on every connection (each request
is checked on its own). A file that cannot be read or is not valid keeps the keys in force, is logged (by line
number, never a key) and counted (``api_keys_reloads_total{result="failed"}``): a broken update never opens the
proxy and never locks out the callers it had.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from .metrics import SidecarMetrics
from .settings import ApiKey, Settings, read_api_keys_file, unique_api_keys

log = logging.getLogger("capture_sidecar.key_reload")

_Signature = tuple[int, int, int, int]
_UNREADABLE: _Signature = (-1, -1, -1, -1)


class ApiKeysReloader:
    """Watches ``settings.api_keys_file`` and hands each valid new set of keys to ``apply``."""

    def __init__(self, settings: Settings, apply: Callable[[tuple[ApiKey, ...]], None],
                 metrics: SidecarMetrics) -> None:
        assert settings.api_keys_file is not None
        self.path = settings.api_keys_file
        self.interval = settings.api_keys_reload_seconds
        # API_KEY (from the environment) stays accepted whatever the file says; the file's keys come after it.
        self.fixed = settings.api_keys[:1] if settings.api_key is not None else ()
        self.apply = apply
        self.metrics = metrics
        self.keys = settings.api_keys
        # Unknown at first: the first look reads the file again (it may have changed since start-up) and applies
        # it only if the keys differ.
        self.signature: _Signature | None = None

    def start(self) -> asyncio.Task[None] | None:
        if self.interval <= 0:
            return None
        return asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()

    def check(self) -> bool:
        """Look at the file once; True when a new set of keys took effect."""
        try:
            stat = os.stat(self.path)
        except OSError as error:
            return self._failed(_UNREADABLE, [f"API_KEYS_FILE={self.path!r}: cannot be read "
                                              f"({error.strerror or type(error).__name__})"])
        signature = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if signature == self.signature:
            return False
        file_keys, problems = read_api_keys_file(self.path)
        keys, duplicates = unique_api_keys([*self.fixed, *file_keys])
        if problems or duplicates:
            return self._failed(signature, problems + duplicates)
        self.signature = signature
        if keys == self.keys:
            return False
        before = {entry.caller_id for entry in self.keys}
        self.keys = keys
        self.apply(keys)
        self.metrics.api_keys_reloads["ok"] += 1
        log.info("API_KEYS_FILE changed: %d keys of %d callers accepted now (callers added: %s, gone: %s)",
                 len(keys), len({entry.caller_id for entry in keys}),
                 sorted({entry.caller_id for entry in keys} - before) or "none",
                 sorted(before - {entry.caller_id for entry in keys}) or "none")
        return True

    def _failed(self, signature: _Signature, problems: list[str]) -> bool:
        """Keep the keys in force; say so once per version of the file (or once while it cannot be read)."""
        if signature != self.signature:
            self.signature = signature
            self.metrics.api_keys_reloads["failed"] += 1
            log.error("API_KEYS_FILE not re-read, the %d keys in force stay: %s", len(self.keys), "; ".join(problems))
        return False

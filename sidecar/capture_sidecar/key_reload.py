"""API_KEYS_FILE, re-read while the sidecar runs: a rotated key is accepted and a dropped one refused without a
restart.

The portable chart mounts the synced Secret as a directory; the kubelet rewrites it in place when the Secret
changes (a new directory behind the ``..data`` symlink, swapped atomically), so the file the sidecar names is
always whole. Every ``API_KEYS_RELOAD_SECONDS`` the file is looked at (``os.stat``, following the symlinks: a new
version has another inode, modification time or size); when it changed it is read line by line, and the new set
of keys replaces the old one for every request that follows, on every connection (each request is checked on its
own).

Revocation fails closed: a key that is no longer in the file is refused from the next request on, whatever else
the file holds. A line that is not valid (``parse_api_keys_file``) is refused on its own, logged (by line number,
never a key) and counted (``api_keys_lines_refused_total``, and the reload as ``result="partial"``); if it holds a
key in force, that key stays in force under the caller id it had, so a line broken by mistake locks nobody out
and a refused line never adds a key. A file without any key refuses every request (authentication stays on). Only
a file that cannot be opened at all (the volume is gone: nothing is known of it) keeps the keys in force, counted
as ``result="failed"``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from .metrics import SidecarMetrics
from .settings import ApiKey, Settings, parse_api_keys_file, unique_api_keys

log = logging.getLogger("capture_sidecar.key_reload")

_Signature = tuple[int, int, int, int]
_UNREADABLE: _Signature = (-1, -1, -1, -1)


class ApiKeysReloader:
    """Watches ``settings.api_keys_file`` and hands each new set of keys to ``apply`` (see the module's docstring)."""

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
        parsed = parse_api_keys_file(self.path)
        if not parsed.readable:
            return self._failed(_UNREADABLE, parsed.problems)
        self.signature = signature
        kept = [entry for entry in self.keys if entry not in self.fixed and _held_by(entry.key, parsed.refused)]
        keys, duplicates = unique_api_keys([*self.fixed, *parsed.keys, *kept])
        problems = parsed.problems + duplicates
        if problems:
            self.metrics.api_keys_reloads["partial"] += 1
            self.metrics.api_keys_lines_refused += len(parsed.refused)
            log.error("API_KEYS_FILE: %d lines refused, %d keys of them still in force as they were; keys no "
                      "longer in the file are refused: %s", len(parsed.refused), len(kept), "; ".join(problems))
        if keys == self.keys:
            return False
        before = {entry.caller_id for entry in self.keys}
        self.keys = keys
        self.apply(keys)
        if not problems:
            self.metrics.api_keys_reloads["ok"] += 1
        log.info("API_KEYS_FILE changed: %d keys of %d callers accepted now (callers added: %s, gone: %s)",
                 len(keys), len({entry.caller_id for entry in keys}),
                 sorted({entry.caller_id for entry in keys} - before) or "none",
                 sorted(before - {entry.caller_id for entry in keys}) or "none")
        return True

    def _failed(self, signature: _Signature, problems: list[str]) -> bool:
        """The file cannot be opened: keep the keys in force; say so once while it cannot be."""
        if signature != self.signature:
            self.signature = signature
            self.metrics.api_keys_reloads["failed"] += 1
            log.error("API_KEYS_FILE not re-read, the %d keys in force stay: %s", len(self.keys), "; ".join(problems))
        return False


def _held_by(key: str, refused: list[str]) -> bool:
    """Whether one of the refused lines holds ``key``: as the part after the first ':' (a line whose caller id was
    refused) or as the whole line (one without a caller id)."""
    return any(line == key or line.partition(":")[2].strip() == key for line in refused)

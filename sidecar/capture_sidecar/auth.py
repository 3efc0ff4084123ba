"""Who sent a request: the bearer key it carries, mapped to the caller id the keys file names for it.

The one entry point for everything keyed on a caller (records' ``callerId``, per-caller limits and usage):
:func:`authenticate` takes a request's headers and the :class:`KeySet` in force and yields a :data:`CallerId`, or
None for a request that must be answered ``401``. A caller id is stable across rotations: every key of a caller
(current, pending, previous) maps to the same id, so counters kept by caller id carry on when a key changes.

A :class:`KeySet` is immutable and replaced whole when ``API_KEYS_FILE`` changes (:mod:`.key_reload`): each
request is checked against the set in force when its head is read. Once authentication is on it stays on: a set
that lost every key refuses every request instead of opening the proxy (``required``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import NewType

from .settings import ApiKey

#: A caller's id as the keys file names it (``caller_id:key`` lines; ``API_KEY_ID`` for ``API_KEY``).
CallerId = NewType("CallerId", str)
#: Hex characters of a key's fingerprint (:func:`key_label`): 48 bits, enough to tell a handful of keys apart.
FINGERPRINT_HEX = 12
_FINGERPRINT_CONTEXT = b"capture-sidecar api key fingerprint v1\0"


def key_label(key: str) -> str:
    """A short fingerprint of an accepted key, safe to show (the ``fingerprint`` label of
    ``capture_sidecar_api_key_accepted``; the rotation function computes the same of the pending key): 48 bits of a
    SHA-256 of the key in a context of its own, so it is neither the key's caller id fingerprint nor the digest the
    lookup uses. It reveals nothing usable of a generated key (48 random letters and digits, ~285 bits); a short,
    human-chosen ``API_KEY`` could be guessed from it offline, as from its caller id (``key-...``)."""
    return hashlib.sha256(_FINGERPRINT_CONTEXT + key.encode()).hexdigest()[:FINGERPRINT_HEX]


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


class KeySet:
    """The accepted keys and their callers. ``required``: requests must carry one of them (even when there are
    none left: then every request is refused)."""

    __slots__ = ("_by_digest", "entries", "required")

    def __init__(self, keys: Iterable[ApiKey], *, required: bool | None = None) -> None:
        self.entries: tuple[ApiKey, ...] = tuple(keys)
        self._by_digest = {_digest(entry.key.encode()): (entry.key.encode(), CallerId(entry.caller_id))
                           for entry in self.entries}
        self.required = bool(self.entries) if required is None else required

    def __len__(self) -> int:
        return len(self._by_digest)

    def callers(self) -> frozenset[CallerId]:
        return frozenset(caller for _, caller in self._by_digest.values())

    def fingerprints(self) -> dict[str, CallerId]:
        """Each accepted key's :func:`key_label`, with its caller."""
        return {key_label(entry.key): CallerId(entry.caller_id) for entry in self.entries}

    def caller_of(self, authorization: bytes | None) -> CallerId | None:
        """The caller id of ``Authorization: Bearer <key>`` (the scheme in any case, RFC 9110), or None.

        Only this header decides: neither the path nor the Host header plays a part. The key is found by its
        SHA-256 (a lookup whose timing tells nothing usable about any key, and costs the same for one key or a
        thousand), then compared with it in constant time (hmac.compare_digest)."""
        if authorization is None:
            return None
        scheme, _, token = authorization.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        token = token.strip()
        entry = self._by_digest.get(_digest(token))
        if entry is None or not hmac.compare_digest(token, entry[0]):
            return None
        return entry[1]


def authenticate(headers: Iterable[tuple[bytes, bytes]], keys: KeySet) -> CallerId | None:
    """The caller of a request with these headers, or None: refused (``401``) when ``keys.required``, anonymous
    otherwise. Several ``Authorization`` headers are refused: which one a server behind would read is not ours to
    guess."""
    authorization: bytes | None = None
    for name, value in headers:
        if name.lower() == b"authorization":
            if authorization is not None:
                return None
            authorization = value
    return keys.caller_of(authorization)

"""Who sent a request, by its bearer JWT: the token the Inference Gateway verifies, verified here the same way, and
the configured claim (``sub`` by default) as the records' ``callerId``.

The sidecar's JWT mode (``JWT_ISSUER`` set) puts it in front of a JWT-authenticated gateway: the platform's own
capture point on the gateway path (docs/capture-processor.md, "Caller attribution per path"). A request is forwarded
unchanged, ``Authorization`` included, so the gateway verifies the token again and stays the one that decides; what
this module adds is a caller that the capture can trust, because the sidecar checked the signature itself.

What a token must be, all checked by PyJWT (``jwt.decode``) against keys this module fetched:

* signed with one of ``JWT_ALGORITHMS`` (asymmetric only: ``none`` and the HMAC family are refused at start-up and per
  token, so a token "signed" with the public key as an HMAC secret is refused), by the key of the JWKS its ``kid``
  names; a JWK that names its own ``alg`` must name the token's;
* ``iss`` equal to ``JWT_ISSUER``; ``aud`` one of ``JWT_AUDIENCES`` when they are set; ``exp`` present and not past,
  ``nbf`` and ``iat`` not in the future, each within ``JWT_LEEWAY_SECONDS`` (at most 5 minutes);
* every ``JWT_REQUIRED_CLAIMS`` entry satisfied (the gateway's ``requiredClaims``: a ``String`` claim equal to one of
  the values, a ``StringArray`` claim, a list or an OAuth-style space-separated string, holding one of them);
* the caller claim present, a string of 1 to 256 characters from :data:`CALLER_CLAIM_VALUE`.

The keys: fetched from ``JWT_JWKS_URI`` at start-up and every ``JWT_JWKS_REFRESH_SECONDS``, and again (at most once
every :data:`MIN_REFRESH_INTERVAL_SECONDS`) when a token names a ``kid`` the set lacks. Verification never waits on
the network: a request is decided with the keys in force when its head is read, so an unreachable JWKS costs no
request a hang. Until a key set was fetched once, every request is answered ``503``; a failed refresh keeps the last
good set (the issuer's keys change rarely, and a rotated-out key stops being accepted at the next good refresh).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt

from .auth import CallerId
from .jwt_settings import CALLER_CLAIM_VALUE, JwtSettings

log = logging.getLogger("capture_sidecar.jwt")

#: An unknown ``kid`` asks for a refresh at most this often (a stream of forged kids costs one fetch per interval).
MIN_REFRESH_INTERVAL_SECONDS = 10.0
#: The JWK key type (``kty``) each signature family needs (by the algorithm's name less its digits).
KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "EdDSA": "OKP"}
#: A JWKS document larger than this is refused (an issuer publishes a handful of keys: a few KiB).
MAX_JWKS_BYTES = 256 * 1024


@dataclass(frozen=True)
class _Key:
    """One signing key of the JWKS: its ``kid``, the ``alg`` it declares (if any) and the key."""

    kid: str | None
    algorithm: str | None
    key_type: str  # kty
    jwk: jwt.PyJWK


class Refused(Exception):
    """A request the verifier refuses: ``status`` (401: the token; 503: no keys to check it with yet) and a reason
    safe to answer with (it never quotes the token)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class JwtVerifier:
    """The keys in force and the rules of :class:`JwtSettings`; :meth:`caller_of` decides one request."""

    def __init__(self, settings: JwtSettings) -> None:
        self.settings = settings
        self.keys: tuple[_Key, ...] | None = None
        self.keys_loaded_at: float | None = None  # time.monotonic() of the last good fetch
        self.fetch_failures = 0
        self._wake = asyncio.Event()
        self._last_fetch = -MIN_REFRESH_INTERVAL_SECONDS
        self._options: dict[str, Any] = {
            "require": ["exp", "iss"],
            "verify_aud": bool(settings.audiences),
        }

    # -- deciding a request ---------------------------------------------------------------------------
    def caller_of(self, authorization: bytes | None) -> CallerId:
        """The caller of ``Authorization: Bearer <jwt>``, or :class:`Refused`."""
        if authorization is None:
            raise Refused(401, "missing bearer token")
        scheme, _, token_bytes = authorization.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not token_bytes.strip():
            raise Refused(401, "missing bearer token")
        try:
            token = token_bytes.strip().decode("ascii")
        except UnicodeDecodeError:
            raise Refused(401, "invalid token") from None
        if self.keys is None:
            self.request_refresh()
            raise Refused(503, "the token issuer's keys are not available yet")
        settings = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Refused(401, "invalid token") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in settings.algorithms:
            raise Refused(401, "token algorithm not accepted")
        key = self._key(kid)
        if key is None:
            self.request_refresh()  # the issuer may have published a new key: fetched for the next request
            raise Refused(401, "token signed by an unknown key")
        if key.algorithm not in (None, algorithm) or KEY_TYPES[algorithm.rstrip("0123456789")] != key.key_type:
            raise Refused(401, "token algorithm does not match its key")
        try:
            claims = jwt.decode(
                token,
                key.jwk.key,
                algorithms=[algorithm],
                audience=list(settings.audiences) or None,
                issuer=settings.issuer,
                leeway=settings.leeway_seconds,
                options=self._options,  # type: ignore[arg-type]
            )
        except jwt.ExpiredSignatureError:
            raise Refused(401, "token expired") from None
        except (jwt.PyJWTError, TypeError, ValueError):  # (a key the algorithm cannot use raises TypeError)
            raise Refused(401, "invalid token") from None
        for rule in settings.required_claims:
            if not rule.satisfied_by(claims):
                raise Refused(401, "token lacks a required claim")
        caller = claims.get(settings.caller_claim)
        if not isinstance(caller, str) or not CALLER_CLAIM_VALUE.fullmatch(caller):
            raise Refused(401, f"token has no usable {settings.caller_claim} claim")
        return CallerId(caller)

    def _key(self, kid: object) -> _Key | None:
        assert self.keys is not None
        if kid is None:  # a token without kid: only an issuer with one key can be meant
            return self.keys[0] if len(self.keys) == 1 else None
        return next((key for key in self.keys if key.kid == kid), None)

    # -- the keys ---------------------------------------------------------------------------------------
    def request_refresh(self) -> None:
        """Ask the refresher for a fetch now (rate limited to one per :data:`MIN_REFRESH_INTERVAL_SECONDS`)."""
        self._wake.set()

    def load(self, document: bytes) -> None:
        """A JWKS document as fetched: replaces the keys in force, or raises ValueError (the old ones stay)."""
        if len(document) > MAX_JWKS_BYTES:
            raise ValueError(f"over {MAX_JWKS_BYTES // 1024} KiB")
        try:
            data = json.loads(document)
        except ValueError:
            raise ValueError("not JSON") from None
        entries = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise ValueError("not a JWKS (no keys list)")
        usable: list[_Key] = []
        for entry in entries:
            if (not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or "d" in entry
                    or entry.get("kty") not in KEY_TYPES.values()):
                continue  # an encryption key, a symmetric one, or a private one published by mistake: never used
            try:
                key = jwt.PyJWK.from_dict(entry)
            except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
                continue  # a key type or curve this library does not know: skipped, as RFC 7517 5 asks
            declared = entry.get("alg")
            usable.append(_Key(key.key_id, declared if isinstance(declared, str) else None, str(entry["kty"]), key))
        if not usable:
            raise ValueError("holds no usable signing key")
        self.keys = tuple(usable)
        self.keys_loaded_at = time.monotonic()

    async def fetch(self, session: aiohttp.ClientSession) -> None:
        """One fetch of ``JWT_JWKS_URI``, within ``JWT_JWKS_TIMEOUT_SECONDS``; a failure is logged and counted."""
        self._last_fetch = time.monotonic()
        try:
            async with session.get(self.settings.jwks_uri, allow_redirects=False) as response:
                if response.status != 200:
                    raise ValueError(f"answered {response.status}")
                document = await response.content.read(MAX_JWKS_BYTES + 1)
            self.load(document)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            self.fetch_failures += 1
            log.warning("JWKS %s not refreshed (%s): %s", self.settings.jwks_uri,
                        "keeping the last good keys" if self.keys is not None else "every request is refused",
                        str(error) or type(error).__name__)

    async def run(self) -> None:
        """Fetch now, then every ``JWT_JWKS_REFRESH_SECONDS`` or when asked (an unknown kid), until cancelled."""
        timeout = aiohttp.ClientTimeout(total=self.settings.jwks_timeout_seconds)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                self._wake.clear()
                await self.fetch(session)
                # before the first good fetch, retry at the rate limit; after, on the refresh period
                period = self.settings.jwks_refresh_seconds if self.keys is not None else MIN_REFRESH_INTERVAL_SECONDS
                try:
                    await asyncio.wait_for(self._wake.wait(), period)
                except TimeoutError:
                    continue
                wait = self._last_fetch + MIN_REFRESH_INTERVAL_SECONDS - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)

    def start(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self.run())

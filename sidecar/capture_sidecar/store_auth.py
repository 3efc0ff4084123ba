"""IAM authentication to the budget store (ElastiCache for Valkey): the sidecar's role signs a short-lived token
that the connection sends as its password (``AUTH <user> <token>``), so no password is stored, synced or rotated.

The token is AWS's documented form: a SigV4 query-signed ``GET http://<cache name>/?Action=connect&User=<user id>``
(``&ResourceType=ServerlessCache`` for a serverless cache), service ``elasticache``, valid 900 s, without its
``http://``. botocore (already in the image for the capture writer's credentials) resolves the credentials (the
sidecar's own IRSA token) and signs: a few lines, no new dependency. ElastiCache checks the token when a connection
authenticates, and closes an IAM-authenticated connection after 12 hours; the next one signs again.

A token is reused for ``TOKEN_REUSE_SECONDS`` (well inside its 900 s), so a burst of new connections signs once. A
token is signed in a worker thread (botocore may refresh the role's credentials from STS, a blocking call), and
kept even when the connection that asked gave up waiting, so the next attempt finds it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

TOKEN_EXPIRES_SECONDS = 900
TOKEN_REUSE_SECONDS = 600


class ElastiCacheIamAuth:
    """Credentials for redis-py (its ``CredentialProvider`` protocol: ``get_credentials`` and the async form)."""

    def __init__(
        self,
        user_id: str,
        cache_name: str,
        *,
        serverless: bool = True,
        session: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import botocore.session  # only with IAM authentication configured

        self.user_id = user_id
        self.cache_name = cache_name
        self.serverless = serverless
        self._session = session or botocore.session.get_session()
        # The cache's region (the pod's AWS_REGION, which the chart sets with the role; botocore reads only
        # AWS_DEFAULT_REGION and its config).
        self._region = os.environ.get("AWS_REGION") or self._session.get_config_variable("region") or "us-east-1"
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._signed_at = 0.0
        self.tokens_signed = 0

    def token(self) -> str:
        """A valid token (a new one when the last is older than ``TOKEN_REUSE_SECONDS``)."""
        with self._lock:
            if self._token is not None and self._clock() - self._signed_at < TOKEN_REUSE_SECONDS:
                return self._token
            self._token, self._signed_at = self._sign(), self._clock()
            self.tokens_signed += 1
            return self._token

    def _sign(self) -> str:
        from botocore.model import ServiceId
        from botocore.signers import RequestSigner

        credentials = self._session.get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials to sign the budget store's IAM token with")
        signer = RequestSigner(ServiceId("elasticache"), self._region, "elasticache", "v4", credentials,
                               self._session.get_component("event_emitter"))
        query = {"Action": "connect", "User": self.user_id}
        if self.serverless:
            query["ResourceType"] = "ServerlessCache"
        request = {"method": "GET", "url": f"http://{self.cache_name}/?{urlencode(query)}", "body": {},
                   "headers": {}, "context": {}}
        signed: str = signer.generate_presigned_url(request, operation_name="connect",
                                                    expires_in=TOKEN_EXPIRES_SECONDS)
        return signed.removeprefix("http://")

    def get_credentials(self) -> tuple[str, str]:
        return self.user_id, self.token()

    async def get_credentials_async(self) -> tuple[str, str]:
        with self._lock:
            fresh = self._token is not None and self._clock() - self._signed_at < TOKEN_REUSE_SECONDS
            token = self._token
        if fresh and token is not None:
            return self.user_id, token
        return await asyncio.to_thread(self.get_credentials)


def store_ca_file() -> str | None:
    """The CA bundle a ``rediss://`` store is verified against: ``AWS_CA_BUNDLE`` when set (as for S3), else
    botocore's (the one the capture writer trusts), else the system's (None)."""
    bundle = os.environ.get("AWS_CA_BUNDLE")
    if bundle:
        return bundle
    try:
        from botocore.httpsession import get_cert_path
    except ImportError:
        return None
    path: str | None = get_cert_path(True)
    return path

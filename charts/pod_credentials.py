"""AWS credentials for one container of a pod, never for the whole pod.

IRSA as EKS sets it up (the ``eks.amazonaws.com/role-arn`` annotation on the service account) gives every
container of the pod the role: the webhook injects the token and the role into each of them. A model server
that shares a pod with an NVMe weights loader and a capture sidecar would then hold both their rights, though it
needs none (it reads its weights from a read-only volume and answers on loopback).

So the platform does what the webhook does, by hand, for the one container that needs a role: a projected
service account token with an audience of that container's own (``hyperpod-inference-iac/weights-loader``,
``hyperpod-inference-iac/capture-sidecar``), mounted into that container only, and the SDK's web identity
variables (``AWS_ROLE_ARN``, ``AWS_WEB_IDENTITY_TOKEN_FILE``) in its environment only. Each role trusts the
service account *and* its audience (``<issuer>:aud``), so one container's token cannot assume another
container's role, and a container without the mount has no token at all. The cluster's OIDC provider must list
the audiences as client IDs (:func:`hyperpod_inference_iac.serving.inference_workloads.register_token_audiences`).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

STS_AUDIENCE = "sts.amazonaws.com"  # the audience the EKS webhook uses: the whole pod's identity
AUDIENCE_PREFIX = "hyperpod-inference-iac"
TOKEN_ROOT = "/var/run/secrets/hyperpod-inference-iac"
# The kubelet renews a projected token at 80% of its life; the SDKs re-read the file on every refresh.
TOKEN_EXPIRATION_SECONDS = 86400


class CredentialScope(enum.StrEnum):
    """Who in a pod uses one identity's credentials."""

    POD = "pod"  # every container: the service account's IRSA annotation (operator models that read S3 themselves)
    WEIGHTS_LOADER = "weights-loader"  # the NVMe weights loader init container only
    CAPTURE_SIDECAR = "capture-sidecar"  # the capture sidecar only

    @property
    def audience(self) -> str:
        """The token audience of this scope: STS's for the pod, one of the platform's own per container."""
        return STS_AUDIENCE if self is CredentialScope.POD else f"{AUDIENCE_PREFIX}/{self.value}"


# Every audience a container-scoped identity may use: the OIDC provider lists them as client IDs.
CONTAINER_AUDIENCES: tuple[str, ...] = tuple(scope.audience for scope in CredentialScope
                                             if scope is not CredentialScope.POD)


@dataclasses.dataclass(frozen=True)
class ContainerCredentials:
    """The web identity of one container: its role, its token's audience, and the region its SDK calls STS in.

    ``volume()`` goes into the pod's volumes; ``mount()`` and ``env()`` into that one container.
    """

    role_arn: str
    scope: CredentialScope
    region: str | None = None

    @property
    def volume_name(self) -> str:
        return f"aws-token-{self.scope.value}"

    @property
    def token_path(self) -> str:
        return f"{TOKEN_ROOT}/{self.scope.value}"

    def volume(self) -> dict[str, Any]:
        token = {"audience": self.scope.audience, "expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}
        return {"name": self.volume_name, "projected": {"sources": [{"serviceAccountToken": token}]}}

    def mount(self) -> dict[str, Any]:
        return {"name": self.volume_name, "mountPath": self.token_path, "readOnly": True}

    def env(self) -> list[dict[str, str]]:
        env = [{"name": "AWS_ROLE_ARN", "value": self.role_arn},
               {"name": "AWS_WEB_IDENTITY_TOKEN_FILE", "value": f"{self.token_path}/token"},
               {"name": "AWS_STS_REGIONAL_ENDPOINTS", "value": "regional"}]
        if self.region:
            env += [{"name": "AWS_REGION", "value": self.region}, {"name": "AWS_DEFAULT_REGION", "value": self.region}]
        return env

    def add_to(self, pod: dict[str, Any], container: dict[str, Any]) -> None:
        """Give ``container`` (a container of ``pod``) these credentials, and no other container."""
        pod.setdefault("volumes", []).append(self.volume())
        container.setdefault("volumeMounts", []).append(self.mount())
        container.setdefault("env", []).extend(self.env())

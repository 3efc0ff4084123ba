"""Who may hold a platform identity: an admission policy on the service account tokens of the platform's audiences.

Each container-scoped role (:mod:`charts.pod_credentials`) trusts ``system:serviceaccount:<namespace>:<account>``
with the token audience of its container (``hyperpod-inference-iac/weights-loader``,
``hyperpod-inference-iac/capture-sidecar``). The kubelet issues such a token to any pod of that service account that
asks for it in a projected volume, so without more, anyone who may create pods in the namespace could run a pod under
the account with a token of the ``capture-sidecar`` audience and become the capture writer (forging records under any
caller id), or read the weights as the loader.

:data:`TOKEN_AUDIENCE_POLICY` admits a pod that projects a token of a platform audience only if it is the planned
pod: in the planned namespace, under the planned service account, and every container that mounts the token is the
planned holder, field by field (image, command, arguments, environment, mounts, security context: a holder with an
``AWS_ENDPOINT_URL_STS`` of the attacker's would send the token away). It is bound to every namespace (a pod
elsewhere cannot assume the roles, whose trust names the namespace, but needs no token of ours either).

The policy carries its holders in the annotation :data:`HOLDERS_ANNOTATION` (JSON, :func:`holders_annotation`), written
from the same holders as the expression, so a review (``make review``, ``tools/review/k8s.py``) reads a change of the
policy as holders added, removed or following their workload's container, after checking that the expression is the
one :func:`token_audience_policy` makes of them.

What it does not stop: someone allowed ``create`` on ``serviceaccounts/token`` (the TokenRequest API) in the
namespace asks for a token directly; that right is not a pod creator's, and docs/security.md lists who holds it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hyperpod_inference_iac.charts.pod_credentials import CONTAINER_AUDIENCES
from hyperpod_inference_iac.charts.pod_security import cel_literal, exactly_planned, pod_policy

TOKEN_AUDIENCE_POLICY = "hyperpod-inference-iac-token-audiences"
# The policy's holders, machine-readable (JSON list of {namespace, serviceAccount, audience, container, workload}).
HOLDERS_ANNOTATION = "hyperpod-inference-iac/holders"


@dataclass(frozen=True)
class TokenHolder:
    """One planned container that mounts a token of a platform audience: where, under which service account, and
    the container exactly (core/v1 Container as JSON, keys sorted); ``workload``: the name of the object that plans
    the pod (a Deployment, an InferenceEndpointConfig), for a reader only (the expression does not use it)."""

    namespace: str
    service_account: str
    audience: str
    container_json: str
    workload: str = ""

    @classmethod
    def of(cls, *, namespace: str, service_account: str | None, audience: str,
           container: Mapping[str, Any], workload: str = "") -> TokenHolder:
        return cls(namespace, service_account or "default", audience, json.dumps(container, sort_keys=True), workload)

    @property
    def sort_key(self) -> tuple[str, str, str, str, str]:
        return (self.namespace, self.service_account, self.audience, self.container_json, self.workload)

    def to_json(self) -> dict[str, Any]:
        """The holder as an entry of :data:`HOLDERS_ANNOTATION`."""
        entry: dict[str, Any] = {"namespace": self.namespace, "serviceAccount": self.service_account,
                                 "audience": self.audience, "container": self.container}
        if self.workload:
            entry["workload"] = self.workload
        return entry

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> TokenHolder:
        """An entry of :data:`HOLDERS_ANNOTATION` (``KeyError``/``TypeError`` when it is not one)."""
        if not isinstance(entry.get("container"), Mapping):
            raise TypeError("container is not an object")
        return cls.of(namespace=str(entry["namespace"]), service_account=str(entry["serviceAccount"]),
                      audience=str(entry["audience"]), container=entry["container"],
                      workload=str(entry.get("workload", "")))

    @property
    def container(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.container_json)
        return loaded


def _token_audiences(volume: Mapping[str, Any]) -> list[str]:
    sources = (volume.get("projected") or {}).get("sources") or []
    return [s["serviceAccountToken"].get("audience", "") for s in sources if "serviceAccountToken" in s]


def holders_of_pod(namespace: str, pod: Mapping[str, Any], workload: str = "") -> list[TokenHolder]:
    """The holders of a planned pod (``spec`` of a pod template) of ``workload``: each container that mounts a
    projected token of a platform audience."""
    volumes = {v["name"]: _token_audiences(v) for v in pod.get("volumes", [])}
    holders = []
    for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        for mount in container.get("volumeMounts", []):
            for audience in volumes.get(mount["name"], []):
                if audience in CONTAINER_AUDIENCES:
                    holders.append(TokenHolder.of(namespace=namespace, service_account=pod.get("serviceAccountName"),
                                                  audience=audience, container=container, workload=workload))
    return holders


def _holder_term(holder: TokenHolder) -> str:
    """Token source ``s`` of volume ``v``: it is ``holder``'s audience in its namespace and service account, and
    every container mounting ``v`` is ``holder`` exactly."""
    container = " && ".join(exactly_planned("c", holder.container))
    mounts_it = "!has(c.volumeMounts) || !c.volumeMounts.exists(m, m.name == v.name)"
    return (f"(s.serviceAccountToken.audience == {cel_literal(holder.audience)} && "
            f"request.namespace == {cel_literal(holder.namespace)} && "
            f"variables.serviceAccount == {cel_literal(holder.service_account)} && "
            f"variables.containers.all(c, {mounts_it} || ({container})) && "
            f"variables.ephemeral.all(c, {mounts_it}))")


def holders_annotation(holders: Sequence[TokenHolder]) -> str:
    """The value of :data:`HOLDERS_ANNOTATION`: each holder once, sorted, as compact JSON."""
    ordered = sorted(set(holders), key=lambda h: h.sort_key)
    return json.dumps([h.to_json() for h in ordered], sort_keys=True, separators=(",", ":"))


def holders_of_annotation(value: str) -> list[TokenHolder]:
    """The holders an annotation value names (``ValueError``, ``KeyError`` or ``TypeError`` when it names none)."""
    entries = json.loads(value)
    if not isinstance(entries, list):
        raise TypeError("not a list of holders")
    return [TokenHolder.from_json(entry) for entry in entries]


def token_audience_policy(holders: Sequence[TokenHolder]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Deny, every namespace) for ``holders``, the planned holders
    of every platform audience (none: no pod may project one). The policy names them in :data:`HOLDERS_ANNOTATION`
    (the same holders, in the same order, as its expression)."""
    audiences = cel_literal(list(CONTAINER_AUDIENCES))
    ours = f"has(s.serviceAccountToken) && has(s.serviceAccountToken.audience) && " \
           f"s.serviceAccountToken.audience in {audiences}"
    ordered = sorted(set(holders), key=lambda h: h.sort_key)
    # One term per distinct holder: the same container planned by two workloads is one term.
    allowed = " || ".join(dict.fromkeys(_holder_term(h) for h in ordered)) or "false"
    message = (f"a token of a platform audience ({', '.join(CONTAINER_AUDIENCES)}) is projected only into its "
               "planned container (namespace, service account, image, command, environment and mounts exactly)")
    policy = pod_policy(TOKEN_AUDIENCE_POLICY, [], [(
        "object.spec.volumes.all(v, !has(v.projected) || !has(v.projected.sources) || "
        f"v.projected.sources.all(s, !({ours}) || {allowed}))", message)],
        # Only pods that ask for a token of ours are evaluated further.
        match_conditions=[{"name": "projects-a-platform-audience",
                           "expression": "has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.projected) "
                                         f"&& has(v.projected.sources) && v.projected.sources.exists(s, {ours}))"}])
    policy["metadata"]["annotations"] = {HOLDERS_ANNOTATION: holders_annotation(ordered)}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"{TOKEN_AUDIENCE_POLICY}-deny"},
        "spec": {"policyName": TOKEN_AUDIENCE_POLICY, "validationActions": ["Deny"]},
    }
    return [policy, binding]
